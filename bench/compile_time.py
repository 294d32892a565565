"""Where a GPU ``onlinesm check`` spends its time: compilations, autotuning, and kernel speed.

What (needs a CUDA device; each mode prints one JSON line last):

    python bench/compile_time.py check softmax     # default check, inside compiles.counting()
    python bench/compile_time.py check attention   # (set ONLINESM_PIN_CONFIGS=1 to pin tiles)
    python bench/compile_time.py speed             # a few softmax / attention timings
    python bench/compile_time.py autotune          # one attention shape, autotuned: its cost
    python bench/compile_time.py tiles             # no GPU: attention's pinned tiles compiled
                                                   # for sm_90, seconds per variant

Why: the compile count, the compile seconds and the wall time of the default check, from a
cold or warm Triton cache (``TRITON_CACHE_DIR``), are the numbers that say whether a check is
fast on a GPU; ``speed`` shows what removing integer specialisation costs the kernels.
``tiles`` compiles the attention kernel's check variants (dtype x head dim x plain, causal,
masked) for sm_90 with ``triton.compile``, in each pinned table's tiles and in ``--tiles``
(e.g. ``64,32,2,4;16,16,2,4``): what a tile choice costs a check in compile seconds.
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


def _compile_attention(dtype: str, block_d: int, causal: bool, mask: bool,
                       tile: tuple[int, ...]) -> float:
    """Wall seconds of ``triton.compile`` of the check path's attention kernel for sm_90
    (fresh cache), as ``attention()`` launches it under pinned configs on aligned inputs."""
    import triton
    from triton.backends.compiler import GPUTarget

    from onlinesm.kernels.attention import _attn_fwd

    bm, bn, stages, warps = tile[:4]
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d, CAUSAL=causal, HAS_MASK=mask,
                 EVEN_D=True, SCALE_POSITIVE=True, ALIGNED=True, INTERPRET=False,
                 DOT_PRECISION="ieee" if dtype == "fp32" else "tf32")
    pointers = {"Q": dtype, "K": dtype, "V": dtype, "Out": dtype,
                "Mask": "i1" if mask else dtype, "Lse": "fp32"}
    names = list(_attn_fwd.arg_names)
    signature = {n: ("constexpr" if n in const else f"*{pointers[n]}" if n in pointers
                     else "fp32" if n == "qk_scale" else "i1" if n == "return_lse" else "i32")
                 for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in pointers}
    t0 = time.perf_counter()
    triton.compile(triton.compiler.ASTSource(_attn_fwd, signature, constexprs=const, attrs=attrs),
                   target=GPUTarget("cuda", 90, 128),
                   options=dict(num_warps=warps, num_stages=stages))
    return time.perf_counter() - t0


def _tiles(extra: str) -> dict[str, Any]:
    import tempfile

    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="onlinesm_tiles_")  # all cold
    from onlinesm.kernels.attention import PINNED_CONFIGS, PINNED_CONFIGS_FP32

    tiles = {"pinned": None}
    tiles.update({t: tuple(int(v) for v in t.split(",")) for t in extra.split(";") if t})
    _compile_attention("bf16", 16, False, False, (32, 16, 1, 4))  # imports, a tile not timed
    rows = []
    print("| dtype | D | tiles | plain s | causal s | masked s |")
    print("|---|---|---|---|---|---|")
    for dtype in ("bf16", "fp32"):
        for block_d in (16, 64, 128):
            pinned = (PINNED_CONFIGS_FP32 if dtype == "fp32" else PINNED_CONFIGS)[block_d]
            for name, tile in tiles.items():
                if tile == pinned:
                    continue  # compiled already (cached): timed as the pinned row
                tile = tile or pinned
                s = [_compile_attention(dtype, block_d, c, m, tile)
                     for c, m in ((False, False), (True, False), (False, True))]
                rows.append(dict(dtype=dtype, block_d=block_d, tile=list(tile), pinned=name ==
                                 "pinned", seconds=[round(x, 2) for x in s]))
                print(f"| {dtype} | {block_d} | {','.join(map(str, tile))}"
                      f"{' (pinned)' if name == 'pinned' else ''} | "
                      + " | ".join(f"{x:.2f}" for x in s) + " |", flush=True)
    return {"mode": "tiles", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["check", "speed", "autotune", "tiles"])
    ap.add_argument("op", nargs="?", default="softmax", choices=["softmax", "attention"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--tiles", default="", help="tiles: more configurations to compile, "
                    "'BLOCK_M,BLOCK_N,stages,warps' separated by ';'")
    a = ap.parse_args(argv)
    modes = {"check": lambda: _check(a.op, a.seed), "speed": _speed, "autotune": _autotune,
             "tiles": lambda: _tiles(a.tiles)}
    result = modes[a.mode]()
    result["label"] = a.label
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
