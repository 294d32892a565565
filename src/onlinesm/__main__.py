"""``python -m onlinesm``: the same command line as ``onlinesm`` (check, report, replay).

    python -m onlinesm check mypkg.kernels:softmax --op softmax
"""

from __future__ import annotations

from onlinesm.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
