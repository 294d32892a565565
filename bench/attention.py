"""Benchmark onlinesm's Triton attention forward against torch SDPA's backends, in one run.

What: TFLOP/s of ``onlinesm.kernels.attention`` and of ``torch.nn.functional.
scaled_dot_product_attention`` pinned to each backend (flash = FlashAttention 2, cuDNN,
efficient = xformers-style memory-efficient) with ``torch.nn.attention.sdpa_kernel``, for
bf16 and fp16, B*S = 16k tokens, H*D = 2048, D in {64, 128}, S in {1k .. 16k}, causal and not.
FLOPs are the two matmuls, 4*B*H*Sq*Sk*D, halved under causal. Times are medians of
``triton.testing.do_bench``. Before timing, a quick correctness check against SDPA's math
backend in float32 on the same inputs (max |error| of ours and of SDPA flash).

Why: the issue's targets (H200, bf16): at least SDPA flash in every configuration; stretch
80 % of cuDNN at D = 128, S >= 4k. Peers are measured in the same process, on the same inputs.

Run (GPU)::

    python bench/attention.py                    # the full table
    python bench/attention.py --quick            # D=128, S in {1k, 4k}, bf16
    OUT=/tmp/res python bench/attention.py       # also writes bench_attention.{json,md}
    python bench/attention.py --tiles "64,64,3,4;128,64,2,8,128"   # also each pinned config
    python bench/attention.py --medians out/run*/bench_attention.json  # x cuDNN, medians
    python bench/attention.py --sass 64,64,3,4 --dims 64     # no GPU: each tile's SASS by opcode

``--tiles`` times each listed configuration (BLOCK_M,BLOCK_N,stages,warps[,maxnreg], the
``ONLINESM_ATTENTION_CONFIG`` format) beside the autotuned kernel, and reports the best: how
candidates outside the autotuning list are measured before they join it.

JSON and Markdown go into ``$OUT`` when set (bench/_common.py's ``write_outputs``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, time_ms, write_outputs  # noqa: E402

__all__ = ["main", "run_bench", "flops", "medians_vs_cudnn", "tile_sass"]

TOKENS = 16 * 1024  # B * S
MODEL_DIM = 2048  # H * D
BACKENDS = ("flash", "cudnn", "efficient")


def flops(b: int, h: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """FLOPs of the forward: two matmuls of 2*Sq*Sk*D each per head, halved under causal."""
    f = 4.0 * b * h * sq * sk * d
    return f / 2 if causal else f


def _sdpa(backend: str) -> Callable[..., Any]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[backend]

    def call(q: Any, k: Any, v: Any, causal: bool) -> Any:
        with sdpa_kernel(which):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return call


def _errors_vs_math(o: Any, q: Any, k: Any, v: Any, causal: bool) -> dict[str, float]:
    """Max |o - SDPA math in float32| for our output o and for SDPA flash on the same q, k, v
    (flash NaN where it has no backend: the CPU, fp32)."""
    ref = _sdpa("math")(q.float(), k.float(), v.float(), causal)
    out = {"onlinesm": float((o.float() - ref).abs().max())}
    try:
        out["flash"] = float((_sdpa("flash")(q, k, v, causal).float() - ref).abs().max())
    except RuntimeError:
        out["flash"] = math.nan
    return out


def _correctness(dtype: Any, d: int, causal: bool) -> dict[str, float]:
    """:func:`_errors_vs_math` on a 2 x 8 x 1000 problem (S not a tile multiple, so the ragged
    tail is checked too)."""
    import torch

    from onlinesm.kernels.attention import attention

    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 8, 1000, d)
    q, k, v = (torch.randn(shape, device="cuda", generator=g, dtype=dtype) for _ in range(3))
    return _errors_vs_math(attention(q, k, v, causal=causal), q, k, v, causal)


def _timed_call_error(o: Any, q: Any, k: Any, v: Any, causal: bool) -> dict[str, float]:
    """:func:`_errors_vs_math` on the first batch's first head of a timed call (``error``,
    ``flash_error``): the launch that was timed is the one checked (at S >= 256 the Gluon
    kernel, which the 2 x 8 x 1000 check never runs). One head keeps the float32 reference
    small (1 GB of scores at S = 16k)."""
    import torch

    e = _errors_vs_math(o[:1, :1], q[:1, :1], k[:1, :1], v[:1, :1], causal)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"error": e["onlinesm"], "flash_error": e["flash"]}


def _time_pinned(tiles: list[str], call: Callable[[], Any]) -> tuple[float, str]:
    """The fastest of ``tiles`` (each pinned through ONLINESM_ATTENTION_CONFIG): (ms, tiles)."""
    from onlinesm.kernels.attention import CONFIG_ENV

    best = (math.inf, "")
    for t in tiles:
        os.environ[CONFIG_ENV] = t
        try:
            call()
            best = min(best, (time_ms(call), t))
        except Exception as e:  # out of resources for this head dim: not a candidate here
            print(f"  tiles {t}: {type(e).__name__}: {str(e).splitlines()[0][:100]}", flush=True)
        finally:
            os.environ.pop(CONFIG_ENV, None)
    return best


def run_bench(
    dtypes: list[str], dims: list[int], seqs: list[int], causals: list[bool],
    tiles: list[str] | None = None,
) -> dict[str, Any]:
    """Time every configuration; return the rows and the run's metadata."""
    import torch
    import triton

    from onlinesm import kernels

    kernels.use_interpreter(False)
    from onlinesm.kernels import attention as attn_fn

    mod = sys.modules["onlinesm.kernels.attention"]
    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for dname in dtypes:
        dtype = getattr(torch, dname)
        for d in dims:
            for causal in causals:
                for s in seqs:
                    b, h = TOKENS // s, MODEL_DIM // d
                    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype)
                               for _ in range(3))
                    f = flops(b, h, s, s, d, causal)
                    row: dict[str, Any] = {"dtype": dname, "D": d, "S": s, "B": b, "H": h,
                                           "causal": causal}
                    ms = time_ms(lambda: attn_fn(q, k, v, causal=causal))
                    row["onlinesm"] = f / ms * 1e-9
                    row.update(_timed_call_error(attn_fn(q, k, v, causal=causal), q, k, v,
                                                 causal))
                    cfg = getattr(mod._attn_fwd_tuned, "best_config", None)
                    if mod.gluon_takes(q, k, v, causal=causal):  # not the Triton kernel
                        row["config"] = "Gluon ws"
                    elif cfg is None:
                        row["config"] = ""
                    else:
                        row["config"] = (f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} "
                                         f"s{cfg.num_stages} w{cfg.num_warps}")
                    if tiles:
                        ms, best = _time_pinned(tiles, lambda: attn_fn(q, k, v, causal=causal))
                        row["pinned"], row["pinned_tiles"] = f / ms * 1e-9, best
                    for backend in BACKENDS:
                        fn = _sdpa(backend)
                        try:
                            fn(q, k, v, causal)
                            ms = time_ms(lambda: fn(q, k, v, causal))
                            row[backend] = f / ms * 1e-9
                        except RuntimeError as e:  # backend not available for this input
                            row[backend] = math.nan
                            row[f"{backend}_error"] = str(e).splitlines()[0][:120]
                    rows.append(row)
                    print(_fmt_row(row), flush=True)
                    del q, k, v
                # After the timings, so this small problem never picks the tiles they use.
                c = _correctness(dtype, d, causal)
                checks.append({"dtype": dname, "D": d, "causal": causal, **c})
                print(f"check {dname} D={d} causal={causal}: max|o - math fp32| "
                      f"onlinesm {c['onlinesm']:.3g}  flash {c['flash']:.3g}", flush=True)
    return {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "flops": "4*B*H*Sq*Sk*D, halved for causal; median of triton.testing.do_bench",
        "rows": rows,
        "checks": checks,
        "tiles": tiles or [],
    }


HEADER = ["dtype", "D", "S", "causal", "onlinesm", "flash", "cudnn", "efficient",
          "vs flash", "vs cuDNN", "tiles"]
#: The extra columns under ``--tiles``: the best pinned configuration.
PINNED_HEADER = ["best pinned", "pinned vs cuDNN", "pinned tiles"]


def _cells(r: dict[str, Any]) -> list[Any]:
    def ratio(a: float, b: float) -> str:
        return "n/a" if (a != a or b != b or b == 0) else f"{a / b:.2f}"

    def num(x: float) -> str:
        return "n/a" if x != x else f"{x:.0f}"

    return [r["dtype"], r["D"], r["S"], "yes" if r["causal"] else "no",
            num(r["onlinesm"]), num(r["flash"]), num(r["cudnn"]), num(r["efficient"]),
            ratio(r["onlinesm"], r["flash"]), ratio(r["onlinesm"], r["cudnn"]), r["config"]] + (
        [num(r["pinned"]), ratio(r["pinned"], r["cudnn"]), r["pinned_tiles"]] if "pinned" in r
        else [])


def _fmt_row(r: dict[str, Any]) -> str:
    return "| " + " | ".join(str(c) for c in _cells(r)) + " |"


def to_markdown(result: dict[str, Any]) -> str:
    """The table (TFLOP/s) and the correctness checks as Markdown."""
    checks = [[c["dtype"], c["D"], c["causal"], f"{c['onlinesm']:.3g}", f"{c['flash']:.3g}"]
              for c in result["checks"]]
    timed = [[r["dtype"], r["D"], r["S"], r["causal"], f"{r.get('error', math.nan):.3g}",
              f"{r.get('flash_error', math.nan):.3g}"] for r in result["rows"]]
    return "\n".join([
        f"# attention forward, TFLOP/s ({result['device']}, {result['date']})",
        "",
        f"torch {result['torch']}, triton {result['triton']}, cuDNN {result['cudnn']}, "
        f"python {result['python']}; `{result['command']}`; {result['flops']}.",
        "",
        markdown_table(HEADER + (PINNED_HEADER if result.get("tiles") else []),
                       [_cells(r) for r in result["rows"]]),
        "",
        "Correctness: max |o - SDPA math in float32| on 2 x 8 x 1000 x D:",
        "",
        markdown_table(["dtype", "D", "causal", "onlinesm", "SDPA flash"], checks),
        "",
        "Each timed call, its first head: max |o - SDPA math in float32|:",
        "",
        markdown_table(["dtype", "D", "S", "causal", "onlinesm", "SDPA flash"], timed),
        "",
    ])


def medians_vs_cudnn(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """Per (dtype, D, S, causal) of several runs' JSON (``run_bench``'s results): onlinesm's
    median x cuDNN over the runs, and each run's, in order; peers move by a few percent from
    run to run, so a kernel change is judged by medians (``bash bench/gpu_run.sh
    attention_ab`` times a change beside the code before it, interleaved).

    >>> run = dict(rows=[dict(dtype="bfloat16", D=64, S=1024, causal=True, onlinesm=90.0,
    ...                       cudnn=100.0)])
    >>> medians_vs_cudnn([run, run])
    [['bfloat16', 64, 1024, 'yes', '0.90', '0.90 / 0.90']]
    """
    import statistics

    ratios: dict[tuple[Any, ...], list[float]] = {}
    for run in runs:
        for r in run["rows"]:
            key = (r["dtype"], r["D"], r["S"], "yes" if r["causal"] else "no")
            ratios.setdefault(key, []).append(r["onlinesm"] / r["cudnn"])
    return [[*key, f"{statistics.median(v):.2f}", " / ".join(f"{x:.2f}" for x in v)]
            for key, v in ratios.items()]


def tile_sass(d: int, causal: bool, config: str = "64,64,3,4") -> dict[str, Any]:
    """The Triton kernel compiled for sm_90a without a GPU (bf16, D = d, 16-byte aligned, a
    ``BLOCK_M,BLOCK_N,stages,warps`` config): ``{"registers", "spill_bytes", "tiles"}``, tiles
    the SASS of each key tile's loop body (``_common.sass_softmax_blocks``: instructions per
    thread and tile by opcode; the unmasked tiles' loop, then the masked one's: the causal
    diagonal and the tail past the last whole tile)."""
    import importlib

    import triton
    from _common import ptxas_sm90
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    bm, bn, stages, warps = (int(x) for x in config.split(","))
    fn = importlib.import_module("onlinesm.kernels.attention")._attn_fwd_specialised
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=d, CAUSAL=causal, HAS_MASK=False, EVEN_D=True,
                 SCALE_POSITIVE=True, ALIGNED=True, INTERPRET=False, DOT_PRECISION="tf32")
    names = list(fn.arg_names)
    types = dict(Q="*bf16", K="*bf16", V="*bf16", Out="*bf16", Mask="*i8", Lse="*fp32",
                 qk_scale="fp32", return_lse="i1")
    signature = {n: "constexpr" if n in const else types.get(n, "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in ("Q", "K", "V", "Mask", "Out", "Lse")}
    compiled = triton.compile(ASTSource(fn, signature, constexprs=const, attrs=attrs),
                              target=GPUTarget("cuda", 90, 128),
                              options=dict(num_warps=warps, num_stages=stages))
    r = ptxas_sm90(compiled, sass=True)
    return dict(registers=r["registers"], spill_bytes=r["spill_bytes"],
                tiles=r["softmax_blocks"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="no,yes", help="no, yes or no,yes")
    ap.add_argument("--quick", action="store_true", help="bf16, D=128, S in {1k, 4k}")
    ap.add_argument("--tiles", default="", help="also time these pinned configs, ';'-separated "
                    "BLOCK_M,BLOCK_N,stages,warps[,maxnreg] (e.g. '64,64,3,4;128,64,2,8,128')")
    ap.add_argument("--medians", nargs="+", metavar="JSON", help="print onlinesm's median x "
                    "cuDNN over these runs' bench_attention.json, and exit (no GPU needed)")
    ap.add_argument("--sass", metavar="CONFIG", help="compile the Triton kernel for sm_90a in "
                    "this BLOCK_M,BLOCK_N,stages,warps config (bf16, each of --dims, causal or "
                    "not), print each key tile's SASS by opcode, and exit (no GPU needed)")
    ap.add_argument("--json", action="store_true", help="with --sass: one JSON line each")
    a = ap.parse_args(argv)
    if a.sass:
        for d in (int(x) for x in a.dims.split(",")):
            for causal in (False, True):
                r = tile_sass(d, causal, a.sass)
                if a.json:
                    print(json.dumps(dict(r, head_d=d, causal=causal)), flush=True)
                    continue
                print(f"D = {d}, causal {causal}: {r['registers']} registers, "
                      f"{r['spill_bytes']} bytes spilled")
                for t in r["tiles"]:
                    print(f"  tile {t['label']}: {t['instructions']} SASS instructions per "
                          f"thread, {t['ops']}")
        return 0
    if a.medians:
        runs = [json.loads(Path(f).read_text()) for f in a.medians]
        print(markdown_table(["dtype", "D", "S", "causal", "x cuDNN (median)", "each run"],
                             medians_vs_cudnn(runs)))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench/attention.py needs a CUDA device (SDPA's GPU backends are the peers)")
        return 2
    if a.quick:
        a.dtypes, a.dims, a.seqs = "bfloat16", "128", "1024,4096"
    tiles = [t.strip() for t in a.tiles.split(";") if t.strip()]
    print("| " + " | ".join(HEADER + (PINNED_HEADER if tiles else [])) + " |", flush=True)
    os.environ.pop("ONLINESM_ATTENTION_CONFIG", None)  # autotune
    result = run_bench(
        a.dtypes.split(","),
        [int(x) for x in a.dims.split(",")],
        [int(x) for x in a.seqs.split(",")],
        [x.strip() == "yes" for x in a.causal.split(",")],
        tiles,
    )
    md = to_markdown(result)
    print(md)
    write_outputs("bench_attention", result, md)  # into $OUT when set
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
