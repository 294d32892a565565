"""Where a GPU ``onlinesm check`` spends its time: compilations, autotuning, and kernel speed.

What (needs a CUDA device; each mode prints one JSON line last):

    python bench/compile_time.py check softmax     # default check, inside compiles.counting()
    python bench/compile_time.py check attention   # (set ONLINESM_PIN_CONFIGS=1 to pin tiles)
    python bench/compile_time.py speed             # a few softmax / attention timings
    python bench/compile_time.py autotune          # one attention shape, autotuned: its cost

Why: the compile count, the compile seconds and the wall time of the default check, from a
cold or warm Triton cache (``TRITON_CACHE_DIR``), are the numbers that say whether a check is
fast on a GPU; ``speed`` shows what removing integer specialisation costs the kernels.
An interrupted ``check`` (SIGINT, e.g. ``timeout -s INT``) still prints what it counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

__all__ = ["main"]


def _check(op: str, seed: int) -> dict[str, Any]:
    from onlinesm import cli
    from onlinesm.compiles import counting

    t0 = time.perf_counter()
    rc: Any = "interrupted"
    with counting() as c:
        try:
            rc = cli.main(["check", f"onlinesm.kernels:{op}", "--op", op, "--seed", str(seed), "-q"])
        except KeyboardInterrupt:
            pass
        wall = time.perf_counter() - t0
    print(c.summary(), file=sys.stderr)
    return {"mode": "check", "op": op, "rc": rc, "wall_s": round(wall, 1), "compiles": c.count,
            "compile_s": round(c.seconds, 1), "by_kernel": c.by_kernel,
            "autotune_runs": c.autotune_runs, "autotune_s": round(c.autotune_seconds, 1),
            "pinned": os.environ.get("ONLINESM_PIN_CONFIGS", ""), "note": c.note}


def _speed() -> dict[str, Any]:
    import torch
    import triton

    from onlinesm.kernels import attention, softmax

    out: dict[str, Any] = {"mode": "speed"}
    torch.manual_seed(0)
    for dtype, n in (("bfloat16", 1024), ("bfloat16", 4096), ("bfloat16", 12288),
                     ("bfloat16", 65536), ("float32", 4096), ("float32", 131072),
                     ("bfloat16", 1000), ("bfloat16", 1024), ("bfloat16", 65536)):
        dt = getattr(torch, dtype)
        m = max(1, int(0.5e9 / (n * dt.itemsize)))
        x = torch.randn(m, n, device="cuda", dtype=dt)
        ms = triton.testing.do_bench(lambda: softmax(x), warmup=25, rep=100)
        out[f"softmax {dtype} N={n} GB/s" + ("" if f"softmax {dtype} N={n} GB/s" not in out
                                             else " (again)")] = round(2 * x.numel() * x.element_size() / ms / 1e6)
    os.environ.setdefault("ONLINESM_ATTENTION_CONFIG", "128,64,3,8")
    for dtype, d, s, causal in (("bfloat16", 128, 4096, False), ("bfloat16", 128, 4096, True),
                                ("float16", 64, 4096, False), ("bfloat16", 128, 1000, False),
                                ("bfloat16", 128, 4096, False)):
        dt = getattr(torch, dtype)
        q, k, v = (torch.randn(2, 16, s, d, device="cuda", dtype=dt) for _ in range(3))
        ms = triton.testing.do_bench(lambda: attention(q, k, v, causal=causal), warmup=25, rep=100)
        flops = 4 * 2 * 16 * s * s * d / (2 if causal else 1)
        name = f"attention {dtype} D={d} S={s} causal={causal} TFLOP/s"
        out[name + (" (again)" if name in out else "")] = round(flops / ms / 1e9)
    return out


def _autotune() -> dict[str, Any]:
    import torch

    from onlinesm.compiles import counting
    from onlinesm.kernels import attention

    os.environ.pop("ONLINESM_ATTENTION_CONFIG", None)
    os.environ.pop("ONLINESM_PIN_CONFIGS", None)
    q, k, v = (torch.randn(2, 4, 200, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    t0 = time.perf_counter()
    with counting() as c:
        attention(q, k, v)
        torch.cuda.synchronize()
    return {"mode": "autotune", "wall_s": round(time.perf_counter() - t0, 1), "compiles": c.count,
            "compile_s": round(c.seconds, 1), "autotune_runs": c.autotune_runs,
            "autotune_s": round(c.autotune_seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["check", "speed", "autotune"])
    ap.add_argument("op", nargs="?", default="softmax", choices=["softmax", "attention"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="")
    a = ap.parse_args(argv)
    result = _check(a.op, a.seed) if a.mode == "check" else (_speed() if a.mode == "speed"
                                                              else _autotune())
    result["label"] = a.label
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
