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
    python bench/attention.py --reduced --variants base,tma,tma_ws   # variants side by side

Variants mode (``--variants``): each named kernel variant (``VARIANTS`` in the kernel module,
chosen through ``ONLINESM_ATTENTION_VARIANT``) is timed at each of a few tile configs
(``VARIANT_CONFIGS``, best kept) next to SDPA flash and cuDNN, its accuracy checked per
(dtype, D, causal), and a summary against the issue's targets printed; a variant that fails to
compile or run is reported as "failed: <one line>" and the run goes on. ``--reduced`` is the
small grid (bf16/fp16, D 128/64, S 1k/4k/16k, causal and not) and ``--budget-s`` bounds it.

JSON and Markdown go into ``$OUT`` when set (bench/_common.py's ``write_outputs``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, time_ms, write_outputs  # noqa: E402

__all__ = ["main", "run_bench", "flops"]

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


def _correctness(dtype: Any, d: int, causal: bool) -> dict[str, float]:
    """Max |o - SDPA math in float32| for ours and for SDPA flash, on a 2 x 8 x 1000 problem
    (S not a tile multiple, so the ragged tail is checked too)."""
    import torch

    from onlinesm.kernels.attention import attention

    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 8, 1000, d)
    q, k, v = (torch.randn(shape, device="cuda", generator=g, dtype=dtype) for _ in range(3))
    ref = _sdpa("math")(q.float(), k.float(), v.float(), causal)
    out: dict[str, float] = {"onlinesm": float((attention(q, k, v, causal=causal).float() - ref)
                                               .abs().max())}
    try:
        out["flash"] = float((_sdpa("flash")(q, k, v, causal).float() - ref).abs().max())
    except RuntimeError:
        out["flash"] = math.nan
    return out


def run_bench(
    dtypes: list[str], dims: list[int], seqs: list[int], causals: list[bool]
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
                    cfg = getattr(mod._attn_fwd_tuned, "best_config", None)
                    row["config"] = "" if cfg is None else (
                        f"{cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} "
                        f"s{cfg.num_stages} w{cfg.num_warps}")
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
    }


HEADER = ["dtype", "D", "S", "causal", "onlinesm", "flash", "cudnn", "efficient",
          "vs flash", "vs cuDNN", "tiles"]


def _cells(r: dict[str, Any]) -> list[Any]:
    def ratio(a: float, b: float) -> str:
        return "n/a" if (a != a or b != b or b == 0) else f"{a / b:.2f}"

    def num(x: float) -> str:
        return "n/a" if x != x else f"{x:.0f}"

    return [r["dtype"], r["D"], r["S"], "yes" if r["causal"] else "no",
            num(r["onlinesm"]), num(r["flash"]), num(r["cudnn"]), num(r["efficient"]),
            ratio(r["onlinesm"], r["flash"]), ratio(r["onlinesm"], r["cudnn"]), r["config"]]


def _fmt_row(r: dict[str, Any]) -> str:
    return "| " + " | ".join(str(c) for c in _cells(r)) + " |"


def to_markdown(result: dict[str, Any]) -> str:
    """The table (TFLOP/s) and the correctness checks as Markdown."""
    checks = [[c["dtype"], c["D"], c["causal"], f"{c['onlinesm']:.3g}", f"{c['flash']:.3g}"]
              for c in result["checks"]]
    return "\n".join([
        f"# attention forward, TFLOP/s ({result['device']}, {result['date']})",
        "",
        f"torch {result['torch']}, triton {result['triton']}, cuDNN {result['cudnn']}, "
        f"python {result['python']}; `{result['command']}`; {result['flops']}.",
        "",
        markdown_table(HEADER, [_cells(r) for r in result["rows"]]),
        "",
        "Correctness: max |o - SDPA math in float32| on 2 x 8 x 1000 x D:",
        "",
        markdown_table(["dtype", "D", "causal", "onlinesm", "SDPA flash"], checks),
        "",
    ])


# --------------------------------------------------------------------------------------------
# Variants mode: the kernel variants (onlinesm.kernels.attention.VARIANTS) side by side
# --------------------------------------------------------------------------------------------

#: Tile candidates per head dim in variants mode, each timed per variant (the best is kept):
#: the configs the autotuner picked on the H200 (reports/h200/bench_attention.md), few, so the
#: run compiles variants x candidates x dtype x D x causal kernels and no more.
VARIANT_CONFIGS: dict[int, list[tuple[int, int, int, int]]] = {
    64: [(128, 64, 3, 8), (128, 128, 3, 8)],
    128: [(128, 64, 3, 8), (64, 64, 3, 4), (128, 128, 3, 8)],
}
#: The reduced grid of ``--variants-grid``: D = 128 first (the target), then D = 64.
REDUCED = dict(dtypes="bfloat16,float16", dims="128,64", seqs="1024,4096,16384",
               causal="no,yes")


class _env:
    """Set environment variables for a block (the launcher reads them at every call)."""

    def __init__(self, **values: str | None) -> None:
        self.values, self.before = values, {}

    def __enter__(self) -> None:
        for k, v in self.values.items():
            self.before[k] = os.environ.get(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _one_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}"[:160]


def run_variants(
    variants: list[str], dtypes: list[str], dims: list[int], seqs: list[int],
    causals: list[bool], *, budget_s: float, warmup: int, rep: int,
) -> dict[str, Any]:
    """Time each variant (best of ``VARIANT_CONFIGS[D]``) and SDPA flash / cuDNN on each row,
    and check each variant's accuracy; a variant that fails to compile or run is recorded as
    failed (one line) and skipped for the rest of its (dtype, D, causal) group."""
    import time

    import torch
    import triton

    from onlinesm import kernels

    kernels.use_interpreter(False)
    from onlinesm.kernels import attention as attn_fn

    mod = sys.modules["onlinesm.kernels.attention"]
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    skipped: list[str] = []
    print(f"variants {variants}; triton {triton.__version__}; tensor descriptors "
          f"{mod.HAS_TENSOR_DESCRIPTORS}, warp_specialize {mod.HAS_WARP_SPECIALIZE}", flush=True)
    for d in dims:
        for dname in dtypes:
            dtype = getattr(torch, dname)
            for causal in causals:
                if time.monotonic() - t0 > budget_s:
                    skipped.append(f"{dname} D={d} causal={causal}")
                    print(f"skipped (time budget): {skipped[-1]}", flush=True)
                    continue
                dead: dict[tuple[str, tuple[int, ...]], str] = {}  # failed (variant, config)
                best_cfg: dict[str, tuple[int, ...]] = {}
                for s in seqs:
                    b, h = TOKENS // s, MODEL_DIM // d
                    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype)
                               for _ in range(3))
                    f = flops(b, h, s, s, d, causal)
                    row: dict[str, Any] = {"dtype": dname, "D": d, "S": s, "B": b, "H": h,
                                           "causal": causal}
                    for backend in ("flash", "cudnn"):
                        fn = _sdpa(backend)
                        try:
                            fn(q, k, v, causal)
                            row[backend] = f / time_ms(lambda: fn(q, k, v, causal),
                                                       warmup=warmup, rep=rep) * 1e-9
                        except RuntimeError as e:
                            row[backend] = math.nan
                            row[f"{backend}_error"] = _one_line(e)
                    for var in variants:
                        ran_as = mod.resolve_variant(var, q, k, v, aligned=True, even_d=True)
                        best, best_c, errors = math.nan, None, []
                        for cfg in VARIANT_CONFIGS[d]:
                            if (var, cfg) in dead:
                                errors.append(dead[(var, cfg)])
                                continue
                            env = _env(ONLINESM_ATTENTION_VARIANT=var,
                                       ONLINESM_ATTENTION_CONFIG=",".join(map(str, cfg)))
                            try:
                                with env:
                                    attn_fn(q, k, v, causal=causal)
                                    torch.cuda.synchronize()
                                    ms = time_ms(lambda: attn_fn(q, k, v, causal=causal),
                                                 warmup=warmup, rep=rep)
                            except Exception as e:  # noqa: BLE001 - fail soft, go on
                                dead[(var, cfg)] = _one_line(e)
                                errors.append(dead[(var, cfg)])
                                print(f"failed: {var} {cfg} {dname} D={d} causal={causal}: "
                                      f"{dead[(var, cfg)]}", flush=True)
                                continue
                            tf = f / ms * 1e-9
                            if not tf <= best:  # also true while best is nan
                                best, best_c = tf, cfg
                        row[var] = best
                        row[f"{var}_config"] = "" if best_c is None else _cfg_text(best_c)
                        if ran_as != var:
                            row[f"{var}_config"] += f" (ran as {ran_as})"
                        if best_c is None:
                            row[f"{var}_error"] = errors[0] if errors else "no config"
                        else:
                            best_cfg.setdefault(var, best_c)
                            if s == max(seqs):
                                best_cfg[var] = best_c
                    rows.append(row)
                    print(_fmt_variant_row(row, variants), flush=True)
                    del q, k, v
                checks.append(_variant_check(attn_fn, dtype, dname, d, causal, variants,
                                             best_cfg))
                print(f"check {dname} D={d} causal={causal}: " + ", ".join(
                    f"{k} {v:.3g}" for k, v in checks[-1].items()
                    if isinstance(v, float)), flush=True)
    return {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "flops": "4*B*H*Sq*Sk*D, halved for causal; median of triton.testing.do_bench",
        "variants": variants,
        "configs": {str(k): v for k, v in VARIANT_CONFIGS.items()},
        "rows": rows,
        "checks": checks,
        "skipped": skipped,
        "seconds": time.monotonic() - t0,
    }


def _cfg_text(cfg: tuple[int, ...]) -> str:
    bm, bn, stages, warps = cfg
    return f"{bm}x{bn} s{stages} w{warps}"


def _variant_check(
    attn_fn: Callable[..., Any], dtype: Any, dname: str, d: int, causal: bool,
    variants: list[str], best_cfg: dict[str, tuple[int, ...]],
) -> dict[str, Any]:
    """Max |o - SDPA math in float32| of each variant (its best config) and of SDPA flash, on
    2 x 16 x 1008 x D: 1008 is a multiple of 16 (the kernels compiled for the timed rows are
    reused, no new specialisation) but not of the KV tile, so ragged query and key tails, and
    the descriptors' zero-filled rows, are checked."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 16, 1008, d)
    q, k, v = (torch.randn(shape, device="cuda", generator=g, dtype=dtype) for _ in range(3))
    ref = _sdpa("math")(q.float(), k.float(), v.float(), causal)
    out: dict[str, Any] = {"dtype": dname, "D": d, "causal": causal}
    for var in variants:
        if var not in best_cfg:
            out[var] = math.nan
            continue
        try:
            with _env(ONLINESM_ATTENTION_VARIANT=var,
                      ONLINESM_ATTENTION_CONFIG=",".join(map(str, best_cfg[var]))):
                o = attn_fn(q, k, v, causal=causal)
            out[var] = float((o.float() - ref).abs().max())
        except Exception as e:  # noqa: BLE001 - fail soft
            out[var] = math.nan
            out[f"{var}_error"] = _one_line(e)
    try:
        out["flash"] = float((_sdpa("flash")(q, k, v, causal).float() - ref).abs().max())
    except RuntimeError:
        out["flash"] = math.nan
    return out


def _fmt_variant_row(r: dict[str, Any], variants: list[str]) -> str:
    return "| " + " | ".join(str(c) for c in _variant_cells(r, variants)) + " |"


def _variant_cells(r: dict[str, Any], variants: list[str]) -> list[Any]:
    def num(x: float) -> str:
        return "n/a" if x != x else f"{x:.0f}"

    def ratio(a: float, b: float) -> str:
        return "n/a" if (a != a or b != b or b == 0) else f"{a / b:.2f}"

    cells = [r["dtype"], r["D"], r["S"], "yes" if r["causal"] else "no",
             num(r["flash"]), num(r["cudnn"])]
    for var in variants:
        cells += [num(r[var]), ratio(r[var], r["cudnn"]), r[f"{var}_config"]]
    return cells


def _variant_header(variants: list[str]) -> list[str]:
    head = ["dtype", "D", "S", "causal", "flash", "cuDNN"]
    for var in variants:
        head += [var, f"{var}/cuDNN", f"{var} tiles"]
    return head


def summarise_variants(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per variant, against cuDNN: the geometric mean and the minimum of (variant / cuDNN) over
    the target rows (D = 128 with S >= 4k; D = 64), how many rows failed, and whether every
    accuracy check is within 1.25x of base's error (+1e-6). The decision rule of the report."""
    variants = result["variants"]
    base_err = {(c["dtype"], c["D"], c["causal"]): c.get("base", math.nan)
                for c in result["checks"]}
    out = []
    for var in variants:
        def ratios(pred: Callable[[dict[str, Any]], bool]) -> list[float]:
            return [r[var] / r["cudnn"] for r in result["rows"]
                    if pred(r) and r[var] == r[var] and r["cudnn"] == r["cudnn"]]

        r128 = ratios(lambda r: r["D"] == 128 and r["S"] >= 4096)
        r64 = ratios(lambda r: r["D"] == 64)
        failed = sum(1 for r in result["rows"] if r[var] != r[var])
        accurate = all(
            c.get(var, math.nan) <= 1.25 * base_err.get((c["dtype"], c["D"], c["causal"]),
                                                        math.inf) + 1e-6
            for c in result["checks"])

        def gmean(xs: list[float]) -> float:
            return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan

        out.append({"variant": var, "D128_S4k+_gmean": gmean(r128),
                    "D128_S4k+_min": min(r128, default=math.nan),
                    "D64_gmean": gmean(r64), "D64_min": min(r64, default=math.nan),
                    "failed_rows": failed, "accurate": accurate})
    return out


def variants_markdown(result: dict[str, Any]) -> str:
    """The variants table, the accuracy checks and the per-variant summary as Markdown."""
    variants = result["variants"]
    summary = summarise_variants(result)
    result["summary"] = summary
    check_rows = [[c["dtype"], c["D"], c["causal"],
                   *(f"{c.get(v, math.nan):.3g}" for v in variants), f"{c['flash']:.3g}"]
                  for c in result["checks"]]
    fmt = lambda x: "n/a" if x != x else f"{x:.3f}"  # noqa: E731
    sum_rows = [[s["variant"], fmt(s["D128_S4k+_gmean"]), fmt(s["D128_S4k+_min"]),
                 fmt(s["D64_gmean"]), fmt(s["D64_min"]), s["failed_rows"],
                 "yes" if s["accurate"] else "NO"] for s in summary]
    return "\n".join([
        f"# attention forward variants, TFLOP/s ({result['device']}, {result['date']})",
        "",
        f"torch {result['torch']}, triton {result['triton']}, cuDNN {result['cudnn']}, "
        f"python {result['python']}; `{result['command']}`; {result['flops']}; "
        f"{result['seconds']:.0f} s. Each variant: best of {result['configs']} (by D).",
        "",
        markdown_table(_variant_header(variants),
                       [_variant_cells(r, variants) for r in result["rows"]]),
        "",
        "Correctness: max |o - SDPA math in float32| on 2 x 16 x 1008 x D (each variant at "
        "its best tiles):",
        "",
        markdown_table(["dtype", "D", "causal", *variants, "SDPA flash"], check_rows),
        "",
        "Summary (variant / cuDNN; targets: D=128 S>=4k >= 0.9, D=64 >= 1.0):",
        "",
        markdown_table(["variant", "D128 S>=4k gmean", "D128 S>=4k min", "D64 gmean",
                        "D64 min", "failed rows", "accurate"], sum_rows),
        "",
        f"Skipped (time budget): {result['skipped'] or 'none'}",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="no,yes", help="no, yes or no,yes")
    ap.add_argument("--quick", action="store_true", help="bf16, D=128, S in {1k, 4k}")
    ap.add_argument("--variants", default="",
                    help="variants mode: time these kernel variants side by side, e.g. "
                         "base,tma,tma_ws (onlinesm.kernels.attention.VARIANTS)")
    ap.add_argument("--reduced", action="store_true",
                    help="the reduced grid: bf16 and fp16, D 128 and 64, S 1k/4k/16k, causal "
                         "and not (overrides --dtypes/--dims/--seqs/--causal)")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="variants mode: skip the remaining groups after this many seconds")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench/attention.py needs a CUDA device (SDPA's GPU backends are the peers)")
        return 2
    if a.quick:
        a.dtypes, a.dims, a.seqs = "bfloat16", "128", "1024,4096"
    if a.reduced:
        a.dtypes, a.dims, a.seqs, a.causal = (REDUCED["dtypes"], REDUCED["dims"],
                                              REDUCED["seqs"], REDUCED["causal"])
    if a.variants:
        variants = [x.strip() for x in a.variants.split(",") if x.strip()]
        dims = [int(x) for x in a.dims.split(",")]
        bad = [d for d in dims if d not in VARIANT_CONFIGS]
        if bad:
            print(f"variants mode has tile candidates for D in {sorted(VARIANT_CONFIGS)}, "
                  f"not {bad}")
            return 2
        result = run_variants(
            variants, a.dtypes.split(","), dims, [int(x) for x in a.seqs.split(",")],
            [x.strip() == "yes" for x in a.causal.split(",")],
            budget_s=a.budget_s, warmup=10, rep=40,
        )
        md = variants_markdown(result)
        print(md)
        write_outputs("bench_attention_variants", result, md)  # into $OUT when set
        return 0
    print("| " + " | ".join(HEADER) + " |", flush=True)
    os.environ.pop("ONLINESM_ATTENTION_CONFIG", None)  # autotune
    result = run_bench(
        a.dtypes.split(","),
        [int(x) for x in a.dims.split(",")],
        [int(x) for x in a.seqs.split(",")],
        [x.strip() == "yes" for x in a.causal.split(",")],
    )
    md = to_markdown(result)
    print(md)
    write_outputs("bench_attention", result, md)  # into $OUT when set
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
