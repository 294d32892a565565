"""onlinesm: property testing for softmax and attention kernels, with an exact oracle.

Run the property suites on a kernel::

    import onlinesm
    onlinesm.check_softmax(my_softmax)                 # raises AssertionError on a bug
    onlinesm.check_attention(my_attention, causal_align="bottom-right")

Import the adversarial strategies into your own Hypothesis tests (no torch needed)::

    from onlinesm.strategies import softmax_rows

This module is deliberately light: torch, triton and mpmath are imported only when a
function that needs them is called.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["check_softmax", "check_attention", "__version__"]

__version__ = "0.1.0"

_LAZY = {"check_softmax": "onlinesm.check", "check_attention": "onlinesm.check"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onlinesm' has no attribute {name!r}")
