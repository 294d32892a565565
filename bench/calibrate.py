"""Calibrate onlinesm's bounds: how close do correct kernels come, how far are the bugs?

Runs correct softmax and attention kernels over every strategy family, dtype and seed, and
records the worst *bound use* (error / allowed bound; above 1 fails) per kernel, dtype and
family; then runs the precision bugs of the gallery and records the *smallest* bound use each
reaches on the inputs that target it (a bug must stay above 1 on every seed).

    python bench/calibrate.py                 # 20 seeds, writes reports/calibration.{md,json}
    python bench/calibrate.py --seeds 2 --out /tmp/cal

Correct kernels: the references (float32 and float64 accumulation, offline, online scalar,
online tiled), torch.softmax (declared fully_masked="nan"), a float32 numpy softmax, a
simulation of Triton's tl.exp (exp2 of the fp32-rounded z·log2e); attention: the reference
(FlashAttention recurrence), torch SDPA's math backend, the float64 answer rounded once.
A bound use near 1 on bf16/fp16 outputs is expected: the bound there is half an ulp of the
output plus the fp32 terms, and a correctly rounded result can sit just below half an ulp.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from onlinesm import oracle, reference
from onlinesm.oracle import visible_keys
from onlinesm.tolerance import Numerics, attention_bound, compare, softmax_bound

try:
    from onlinesm.strategies import SOFTMAX_FAMILIES, generate_row
except ImportError:
    from onlinesm.strategies.families import SOFTMAX_FAMILIES, generate_row
from onlinesm.strategies import (ATTENTION_FAMILIES, default_domain, family_excluded, family_shape,
                                 generate_attention)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from numpy_kernels import (  # noqa: E402  (shared with tests/test_tolerance.py)
    BF16, _finite_max, attention_sdpa_math, bug_bf16_exp, bug_bf16_sum, bug_off_by_one, bug_rough_exp, bug_sentinel,
    softmax_fast_exp, softmax_np32,
)

DTYPES = ("float32", "bfloat16", "float16")
LENGTHS = (1, 7, 64, 129, 1000, 4096)
LONG = 65536
SKIPPED: list[str] = []  # inputs the generators failed to make (reported, not hidden)


# ---------------------------------------------------------------------------------------------
# kernels


def softmax_torch(x: np.ndarray) -> np.ndarray:
    import torch

    from onlinesm.dtypes import to_numpy, to_torch

    y = to_numpy(torch.softmax(to_torch(x), dim=-1))
    # declared fully_masked="nan": a NaN row where no entry is finite is the convention
    masked = ~np.isfinite(x.astype(np.float64)).any(axis=-1, keepdims=True)
    return np.where(masked & np.isnan(y.astype(np.float64)), 0, y).astype(y.dtype)


SOFTMAX_KERNELS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int]] = {
    # name: (function, longest row it runs on)
    "reference.offline": (reference.softmax_offline, LONG),
    "reference.offline(acc=f64)": (lambda x: reference.softmax_offline(x, accumulate="float64"),
                                   LONG),
    "reference.online_scalar": (reference.softmax_online_scalar, 4096),
    "reference.online_tiled": (lambda x: reference.softmax_online_tiled(x, tile=128), LONG),
    "numpy float32": (softmax_np32, LONG),
    "fast-exp simulation": (softmax_fast_exp, LONG),
    "torch.softmax": (softmax_torch, LONG),
}


ATTENTION_KERNELS: dict[str, Callable[[Any], np.ndarray]] = {
    "reference.attention_online": lambda c: reference.attention_online(
        c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale, tile=64)[0],
    "torch SDPA math": attention_sdpa_math,
    "float64 rounded once": lambda c: oracle.attention(
        c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale)[0].astype(c.q.dtype),
}


# --- bugs -------------------------------------------------------------------------------------


def bug_attention_bf16_pv(c: Any) -> np.ndarray:
    q, k, v = c.q, c.k, c.v
    b, h, sq, d = q.shape
    g = h // k.shape[1]
    kf = np.repeat(k, g, axis=1).astype(np.float32)
    vf = np.repeat(v, g, axis=1).astype(np.float32)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float32), kf) * np.float32(1 / np.sqrt(d))
    s = np.where(visible_keys(s.shape, mask=c.mask, causal=c.causal), s, -np.inf)
    p = np.exp(s - _finite_max(s))
    ell = p.sum(axis=-1, keepdims=True, dtype=np.float32)
    o = np.zeros((b, h, sq, d), dtype=BF16)
    for j in range(s.shape[-1]):  # P·V accumulated in bf16, key by key
        o = (o.astype(np.float32) + p[..., j : j + 1] * vf[:, :, j : j + 1, :]).astype(BF16)
    return (o.astype(np.float32) / ell).astype(q.dtype)


# (name, function, family, dtype, length, generate_row scale)
SOFTMAX_BUGS = [
    ("denominator accumulated in bf16", bug_bf16_sum, "gaussian", "bfloat16", 2048, 2.0),
    ("denominator accumulated in bf16", bug_bf16_sum, "huge_spread", "bfloat16", 4096, None),
    ("exp evaluated in bf16", bug_bf16_exp, "gaussian", "float32", 1000, 2.0),
    ("exp evaluated in bf16", bug_bf16_exp, "gaussian", "bfloat16", 1000, 2.0),
    ("exp good to 1e-3", bug_rough_exp, "gaussian", "float32", 1000, 2.0),
    ("exp good to 1e-3", bug_rough_exp, "gaussian", "float16", 1000, 2.0),
    ("exp good to 1e-4", lambda x: bug_rough_exp(x, 1e-4), "gaussian", "float32", 1000, 2.0),
    ("running max from -1e30", bug_sentinel, "below_sentinel", "float32", 300, None),
    ("running max from -1e30", bug_sentinel, "below_sentinel", "bfloat16", 300, None),
    ("normalised without the last element", bug_off_by_one, "gaussian", "float32", 1000, 2.0),
]
ATTENTION_BUGS = [
    ("P·V accumulated in bf16", bug_attention_bf16_pv, "gaussian", "bfloat16", 2048),
    ("P·V accumulated in bf16", bug_attention_bf16_pv, "decode", "bfloat16", 2048),
    ("P·V accumulated in bf16", bug_attention_bf16_pv, "outliers", "float16", 2048),
    ("P·V accumulated in bf16", bug_attention_bf16_pv, "huge_v_cancel", "bfloat16", 2048),
]


# ---------------------------------------------------------------------------------------------
# runs


def _record(table: dict, key: tuple, comp: Any) -> None:
    cur = table.get(key)
    if cur is None or comp.max_bound_use > cur["bound_use"]:
        table[key] = {"bound_use": comp.max_bound_use, "max_ulp": comp.max_ulp,
                      "worst_terms": {k: v for k, v in comp.terms_at_worst.items() if v > 0},
                      "failed": comp.n_failed, "checked": comp.n_checked}


#: The calibration's attention domains: Sq < 80, Sk < 300, the head dims real kernels use,
#: B = 2, H = 4; decode is calibrated at long keys (500 <= Sk < 4096). The families' shape rules
#: (decode Sq = 1, one_key Sk = 1, ...) live in onlinesm.strategies (family_shape).
CALIBRATION_DOMAIN = default_domain(head_dims=(16, 24, 40, 64, 80, 96, 128, 256), max_batch=2,
                                    max_heads=4, max_seq_q=79, max_seq_k=299, allow_gqa=True)
LONG_KEYS_DOMAIN = default_domain(**{**CALIBRATION_DOMAIN.__dict__, "min_seq_k": 500,
                                     "max_seq_k": 4095})


def _attention_shape(family: str, rng: np.random.Generator) -> dict[str, int]:
    domain = LONG_KEYS_DOMAIN if family == "decode" else CALIBRATION_DOMAIN
    shape = family_shape(family, domain, rng)
    assert shape is not None, family_excluded(family, domain)
    return shape


def run_correct(seeds: int, log: Callable[[str], None],
                numerics: Numerics = Numerics()) -> tuple[dict, dict]:
    soft: dict = {}
    attn: dict = {}
    families = [f for f in SOFTMAX_FAMILIES if f != "nonfinite"]
    for seed in range(seeds):
        t0 = time.time()
        for dtype in DTYPES:
            rng = np.random.default_rng(seed)
            for family in families:
                batches = []
                for n, count in [(n, 3) for n in LENGTHS] + [(LONG, 1)]:
                    try:
                        batches.append(np.stack([generate_row(family, n, dtype, rng)
                                                 for _ in range(count)]))
                    except AssertionError as exc:  # a generator bug: note it, go on
                        SKIPPED.append(f"seed {seed}, {dtype}, {family}, n={n}: {exc}")
                for x in batches:
                    b = softmax_bound(x, numerics=numerics)
                    for name, (fn, longest) in SOFTMAX_KERNELS.items():
                        if x.shape[-1] > longest:
                            continue
                        with np.errstate(all="ignore"):
                            comp = compare(fn(x), b.exact, b)
                        _record(soft, (name, dtype, family), comp)
            for family in ATTENTION_FAMILIES:
                case = generate_attention(family, dtype, rng, **_attention_shape(family, rng))
                bo, _ = attention_bound(case.q, case.k, case.v, mask=case.mask,
                                        causal=case.causal, scale=case.scale, numerics=numerics)
                for name, fn in ATTENTION_KERNELS.items():
                    o = fn(case)
                    if name == "torch SDPA math":  # declared: no visible key gives NaN
                        o = np.where(np.isnan(o.astype(np.float64)) & (bo.abs == 0), 0,
                                     o).astype(o.dtype)
                    _record(attn, (name, dtype, family), compare(o, bo.exact, bo))
        log(f"seed {seed}: {time.time() - t0:.1f} s")
    return soft, attn


def run_bugs(seeds: int, numerics: Numerics = Numerics()) -> list[dict]:
    out = []
    for name, fn, family, dtype, n, scale in SOFTMAX_BUGS:
        uses = []
        for seed in range(seeds):
            rng = np.random.default_rng(1000 + seed)
            x = np.stack([generate_row(family, n, dtype, rng, scale=scale) for _ in range(4)])
            b = softmax_bound(x, numerics=numerics)
            with np.errstate(all="ignore"):
                uses.append(compare(fn(x), b.exact, b).max_bound_use)
        out.append(dict(bug=name, op="softmax", family=family, dtype=dtype, length=n,
                        scale=scale, min_bound_use=float(min(uses)),
                        caught=int(sum(u > 1 for u in uses)), seeds=seeds))
    for name, fn, family, dtype, sk in ATTENTION_BUGS:
        uses = []
        for seed in range(seeds):
            rng = np.random.default_rng(2000 + seed)
            case = generate_attention(family, dtype, rng, batch=1, heads=2,
                                      seq_q=1 if family == "decode" else 8, seq_k=sk,
                                      head_dim=64, masked=False)
            bo, _ = attention_bound(case.q, case.k, case.v, numerics=numerics)
            uses.append(compare(fn(case), bo.exact, bo).max_bound_use)
        out.append(dict(bug=name, op="attention", family=family, dtype=dtype, length=sk,
                        scale=None, min_bound_use=float(min(uses)),
                        caught=int(sum(u > 1 for u in uses)), seeds=seeds))
    return out


# ---------------------------------------------------------------------------------------------
# report


def _machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    return (f"{platform.system()} {platform.machine()} ({cpu}, {os.cpu_count()} CPUs), "
            f"Python {platform.python_version()}, numpy {np.__version__}, "
            f"torch {torch.__version__}")


def _fmt(u: float) -> str:
    return "inf" if not np.isfinite(u) else f"{u:.3g}"


def write_report(out: Path, soft: dict, attn: dict, bugs: list[dict], seeds: int,
                 command: str, seconds: float, numerics: Numerics = Numerics()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = _machine()
    lines = [
        "# Calibration of onlinesm's bounds",
        "",
        f"- date: {now}",
        f"- machine: {machine}",
        f"- command: `{command}` ({seeds} seeds, {seconds:.0f} s)",
        f"- numerics assumed: {numerics.describe()}",
        "",
        "Bound use = error / allowed bound, the worst element over every seed and input; a value",
        "above 1 is a failure. Correct kernels must stay below 1; bugs must stay above 1.",
        "On bf16/fp16 outputs the bound is half an ulp of the output plus the fp32 terms, so a",
        "correctly rounded result can come within a hair of 1 (max ulp ~0.5 in that case); the",
        "fp32 rows show the headroom of the fp32 terms (fast exp, sum, division).",
        "",
    ]
    for title, table in (("Softmax: correct kernels", soft), ("Attention: correct kernels", attn)):
        kernels = list(dict.fromkeys(k[0] for k in table))
        lines += [f"## {title}: worst bound use per kernel and dtype (max ulp in brackets)", "",
                  "| kernel | " + " | ".join(DTYPES) + " |",
                  "|---|" + "---|" * len(DTYPES)]
        for kern in kernels:
            cells = []
            for dt in DTYPES:
                rows = [v for (k, d, _), v in table.items() if k == kern and d == dt]
                if not rows:
                    cells.append("-")
                    continue
                w = max(rows, key=lambda r: r["bound_use"])
                cells.append(f"{_fmt(w['bound_use'])} ({w['max_ulp']:.3g})")
            lines.append(f"| {kern} | " + " | ".join(cells) + " |")
        fams = list(dict.fromkeys(k[2] for k in table))
        lines += ["", f"### {title}: worst bound use per family (over kernels) and dtype", "",
                  "| family | " + " | ".join(DTYPES) + " |", "|---|" + "---|" * len(DTYPES)]
        for fam in fams:
            cells = []
            for dt in DTYPES:
                rows = [v["bound_use"] for (_, d, f), v in table.items() if f == fam and d == dt]
                cells.append(_fmt(max(rows)) if rows else "-")
            lines.append(f"| {fam} | " + " | ".join(cells) + " |")
        failed = [(k, v) for k, v in table.items() if v["bound_use"] > 1]
        lines += ["", f"False alarms: {len(failed)}" + (
            "" if not failed else " — " + ", ".join(f"{k}: {_fmt(v['bound_use'])}"
                                                    for k, v in failed)), ""]
    if SKIPPED:
        lines += [f"Inputs skipped because the row generator raised ({len(SKIPPED)}):", ""]
        lines += [f"- {s[:300]}" for s in SKIPPED] + [""]
    lines += ["## Bugs: smallest bound use over the seeds (must be > 1)", "",
              "| bug | op | family | dtype | length | min bound use | caught |",
              "|---|---|---|---|---|---|---|"]
    for b in bugs:
        lines.append(f"| {b['bug']} | {b['op']} | {b['family']} | {b['dtype']} | {b['length']} "
                     f"| {_fmt(b['min_bound_use'])} | {b['caught']}/{b['seeds']} |")
    lines.append("")
    stem = "calibration" if numerics.tier == "worst-case" else f"calibration_{numerics.tier}"
    (out / f"{stem}.md").write_text("\n".join(lines))

    def _table(t: dict) -> list[dict]:
        return [dict(kernel=k, dtype=d, family=f, **v) for (k, d, f), v in t.items()]

    payload = dict(schema="onlinesm.calibration/1", date=now, machine=machine, command=command,
                   seeds=seeds, seconds=seconds, numerics=numerics.describe(), tier=numerics.tier_name(),
                   softmax=_table(soft), attention=_table(attn), bugs=bugs, skipped=SKIPPED)
    text = json.dumps(payload, indent=1, default=lambda o: None if o is None else float(o))
    (out / f"{stem}.json").write_text(text.replace("Infinity", '"inf"'))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds per family and dtype [20]")
    ap.add_argument("--out", type=Path, default=Path("reports"), help="output folder [reports]")
    ap.add_argument("--tier", default="worst-case", choices=("worst-case", "probabilistic"),
                    help="the bounds' tier; probabilistic writes calibration_probabilistic.md")
    ap.add_argument("--delta", type=float, default=1e-6, help="with --tier probabilistic [1e-6]")
    args = ap.parse_args(argv)
    numerics = Numerics(tier=args.tier, delta=args.delta)
    command = "python bench/calibrate.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    t0 = time.time()
    soft, attn = run_correct(args.seeds, lambda s: print(s, flush=True), numerics)
    bugs = run_bugs(args.seeds, numerics)
    write_report(args.out, soft, attn, bugs, args.seeds, command, time.time() - t0, numerics)
    worst_soft = max(v["bound_use"] for v in soft.values())
    worst_attn = max(v["bound_use"] for v in attn.values())
    least_bug = min(b["min_bound_use"] for b in bugs)
    print(f"worst correct softmax {worst_soft:.3g}, attention {worst_attn:.3g}; "
          f"least bug {least_bug:.3g}; wrote {args.out}")
    return 0 if max(worst_soft, worst_attn) <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
