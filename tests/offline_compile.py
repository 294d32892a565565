"""Run a bench script that compiles kernels for sm_90a without a GPU (ptxas -v), for tests.

bench/split_ptxas.py and bench/gluon_attention.py --offline print one JSON object per kernel
with ``--json``; they compile for the GPU, so they run in a process without TRITON_INTERPRET
(the tests themselves run under the interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def sm90_json(script: str, *args: str) -> list[dict]:
    """The JSON lines of ``python bench/<script> --json *args`` (asserts it exits 0)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(BENCH / script), "--json", *args],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
