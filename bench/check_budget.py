"""The property suite's time and catch targets, on this machine (a benchmark, not a test).

(a) wall time of a *default* ``check_softmax`` / ``check_attention`` (only the kernel's declared
    conventions): targets < 60 s and < 120 s on a 2-core CPU;
(b) every gallery mutant (tests/gallery.py) through the default check (all properties, default
    dtypes and sizes): caught or not, by which properties, in what time;
(c) false alarms on the correct kernels over seeds 0..19 (all properties, all dtypes, default
    sizes, a small ``max_examples`` so the loop fits in ~15 min).

    python bench/check_budget.py [--seeds 20] [--fa-examples 4] [--workers 2] [--out reports]
        [--domain legacy|recommended] [--triton]

(a) runs alone (nothing else on the CPU); (b) and (c) run in ``--workers`` processes, so their
per-run times are with the other core busy. Writes ``check_budget.md`` and ``.json`` to --out.

``--domain recommended`` runs every check inside ``onlinesm.strategies.default_domain()`` (the
recommended defaults: rows to 8193, Sk to 300, D to 128): its limits are passed as the check's
keywords and its explicit cases (``explicit_softmax_batches`` / ``explicit_attention_cases``)
replace the check's own, as the check driver will call them. ``--triton`` adds the built-in
Triton kernels (under the interpreter on a CPU) to (a).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

QUIET = dict(raise_on_failure=False, database=False, save_failures=False)
DOMAIN: dict[str, Any] = {}  # the domain keywords of --domain (empty: the check's defaults)


def use_domain(name: str) -> dict[str, Any]:
    """Run the checks inside the named domain: its keywords for check_softmax/check_attention,
    and its explicit cases in place of the check's own (what the check driver will call)."""
    import onlinesm.check as check
    from onlinesm import strategies

    fields = dict(strategies.RECOMMENDED_DOMAIN if name == "recommended" else strategies.LEGACY_DOMAIN)
    spec = strategies.default_domain(**fields)
    if hasattr(check, "_softmax_family_batch"):
        def softmax_batches(dtype, min_len, max_len, families, allow_nonfinite):  # type: ignore[no-untyped-def]
            return strategies.explicit_softmax_batches(dtype, spec)

        def attention_cases(dtype, **_kw):  # type: ignore[no-untyped-def]
            return strategies.explicit_attention_cases(dtype, spec)

        check._softmax_family_batch = softmax_batches
        check._attention_family_cases = attention_cases
    sm = {k: fields[k] for k in ("min_len", "max_len", "max_rows")}
    at = {k: fields[k] for k in ("head_dims", "max_batch", "max_heads", "max_seq_q", "max_seq_k",
                                 "allow_mask", "allow_causal", "allow_gqa", "same_seq")}
    return {"softmax": sm, "attention": at, "name": name}

# (kernel name in the gallery, op, declared conventions): the default check is run with these only
MUTANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("bug_sentinel_max", "softmax", {}),
    ("bug_unguarded_masked_tile", "softmax", {}),
    ("bug_missing_rescale", "softmax", {}),
    ("bug_bf16_accumulation", "softmax", {}),
    ("bug_drops_tail", "softmax", {}),
    ("bug_no_max_subtraction", "softmax", {}),
    ("bug_coarse_exp", "softmax", {}),
    ("bug_fully_masked_nan", "softmax", {}),
    ("bug_batch_max", "softmax", {}),
    ("bug_mutates_input", "softmax", {}),
    ("bug_wrong_dtype", "softmax", {}),
    ("bug_nondeterministic", "softmax", {}),
    ("bug_refuses_long_rows", "softmax", {}),
    ("bug_batch_variant", "softmax", {"batch_invariant": True}),
    ("bug_approx_exp_1e4", "softmax", {}),
    ("bug_pad_zero_tail", "softmax", {}),
    ("bug_inverted_rescale", "softmax", {}),
    ("bug_ignores_strides", "softmax", {}),
    ("bug_attn_unguarded", "attention", {}),
    ("bug_attn_causal_bottom_right", "attention", {}),
    ("bug_attn_scale_1_over_d", "attention", {}),
    ("bug_attn_bf16_pv", "attention", {}),
    ("bug_attn_finite_mask", "attention", {}),
    ("bug_attn_o_not_rescaled", "attention", {}),
    ("bug_attn_causal_off_by_one", "attention", {}),
    ("bug_attn_gqa_modulo", "attention", {"allow_gqa": True}),
    ("bug_attn_gqa_modulo", "attention", {"allow_gqa": True, "max_heads": 4}),
    ("bug_attn_lse_base2", "attention", {}),
    ("bug_attn_mask_first_query", "attention", {}),
]

# correct kernels and their declared conventions: must pass on every seed
CORRECT: list[tuple[str, str, dict[str, Any]]] = [
    ("gallery.correct_online", "softmax", {}),
    ("gallery.torch_softmax", "softmax", {"fully_masked": "nan"}),
    ("reference.softmax_offline", "softmax", {"backend": "numpy", "exp": "accurate"}),
    ("reference.softmax_online_scalar", "softmax", {"backend": "numpy", "exp": "accurate"}),
    ("reference.softmax_online_tiled", "softmax", {"backend": "numpy", "exp": "accurate"}),
    ("gallery.correct_attention", "attention", {}),
    ("gallery.sdpa_math", "attention", {"fully_masked": "any", "exp": "accurate"}),
]


def _resolve(name: str) -> Any:
    import gallery

    from onlinesm import reference

    mod, _, attr = name.rpartition(".")
    if mod == "builtin":
        from onlinesm.report import builtin

        return getattr(builtin, attr)
    return getattr({"gallery": gallery, "reference": reference, "": gallery}[mod], attr)


def triton_defaults() -> list[tuple[str, str, dict[str, Any], int]]:
    """The built-in Triton kernels with their declared conventions, for (a)."""
    import importlib

    from onlinesm.kernels import use_interpreter

    use_interpreter(None)
    sm = importlib.import_module("onlinesm.kernels.softmax")
    at = importlib.import_module("onlinesm.kernels.attention")
    return [("builtin.triton_softmax", "softmax",
             {"accumulate": sm.ACCUMULATE, "exp": sm.EXP}, 60),
            ("builtin.triton_attention", "attention",
             {"fully_masked": at.FULLY_MASKED, "lse_base": at.LSE_BASE, "accumulate": at.ACCUMULATE,
              "exp": at.EXP, "allow_tf32": bool(at.ALLOW_TF32), "p_dtype": at.P_DTYPE}, 120)]


def _check(name: str, op: str, conv: dict[str, Any], **extra: Any) -> dict[str, Any]:
    from onlinesm.check import check_attention, check_softmax

    fn = _resolve(name)
    run = check_softmax if op == "softmax" else check_attention
    start = time.monotonic()
    try:
        domain = {k: v for k, v in DOMAIN.get(op, {}).items() if k not in conv}
        result = run(fn, name=name.rpartition(".")[2], **conv, **QUIET, **domain, **extra)
    except Exception as err:  # a UsageError counts as caught only if it is the mutant's doing
        return {"kernel": name, "op": op, "conventions": conv, **extra, "seconds": time.monotonic() - start,
                "error": f"{type(err).__name__}: {err}", "failed": [], "passed": False}
    failed = sorted({(f.property, f.dtype) for f in result.failures})
    return {
        "kernel": name, "op": op, "conventions": conv, **extra,
        "seconds": round(time.monotonic() - start, 2),
        "passed": result.passed,
        "failed": [f"{p}[{d}]" for p, d in failed],
        "messages": [{"property": f.property, "dtype": f.dtype, "family": f.family,
                      "message": f.message[:1500]} for f in result.failures],
    }


def _job(args: tuple[str, str, dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    name, op, conv, extra = args
    return _check(name, op, conv, **extra)


def versions() -> dict[str, str]:
    import hypothesis
    import numpy
    import torch

    import onlinesm

    return {"python": platform.python_version(), "onlinesm": getattr(onlinesm, "__version__", "?"),
            "torch": torch.__version__, "numpy": numpy.__version__, "hypothesis": hypothesis.__version__}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--fa-examples", type=int, default=4, help="max_examples for the false-alarm loop")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "reports"))
    ap.add_argument("--skip", default="", help="comma list of parts to skip: a,b,c")
    ap.add_argument("--domain", choices=("legacy", "recommended"), default=None,
                    help="run inside this domain with the registry's explicit cases")
    ap.add_argument("--triton", action="store_true", help="add the built-in Triton kernels to (a)")
    ap.add_argument("--only", default="", help="(a): comma list of kernel names to run, e.g. sdpa_math")
    args = ap.parse_args(argv)
    if args.domain:
        DOMAIN.update(use_domain(args.domain))
    skip = set(filter(None, args.skip.split(",")))
    t0 = time.monotonic()
    data: dict[str, Any] = {
        "schema": "onlinesm.check_budget/1", "date": "2026-11-30",
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs (2-core CPU)",
        "versions": versions(), "command": "python bench/check_budget.py " + " ".join(argv or sys.argv[1:]),
        "settings": {"seeds": args.seeds, "fa_max_examples": args.fa_examples, "workers": args.workers,
                     "domain": args.domain or "the check's defaults"},
    }

    # (a) the default checks, alone on the machine, seed 0
    if "a" not in skip:
        data["default"] = []
        runs = [("gallery.torch_softmax", "softmax", {"fully_masked": "nan"}, 60),
                ("gallery.correct_online", "softmax", {}, 60),
                ("gallery.correct_attention", "attention", {}, 120),
                ("gallery.sdpa_math", "attention", {"fully_masked": "any"}, 120)]
        if args.triton:
            runs += triton_defaults()
        only = set(filter(None, args.only.split(",")))
        for name, op, conv, target in runs:
            if only and name.rpartition(".")[2] not in only:
                continue
            r = _check(name, op, conv, seed=0)
            r["target_s"] = target
            data["default"].append(r)
            print(f"(a) {name:<28} {r['seconds']:7.1f} s (target {target} s) passed={r['passed']} {r['failed']}",
                  flush=True)

    with mp.get_context("fork").Pool(args.workers) as pool:
        # (b) the mutants through the default check, seed 0
        if "b" not in skip:
            jobs = [(n, op, conv, {"seed": 0}) for n, op, conv in MUTANTS]
            data["mutants"] = []
            for r in pool.imap(_job, jobs):
                data["mutants"].append(r)
                print(f"(b) {r['kernel']:<28} {json.dumps(r['conventions']):<40} {r['seconds']:6.1f} s "
                      f"caught={not r['passed']} {', '.join(r['failed']) or r.get('error', '')}", flush=True)
        # (c) false alarms over seeds
        if "c" not in skip:
            jobs = [(n, op, conv, {"seed": s, "max_examples": args.fa_examples})
                    for n, op, conv in CORRECT for s in range(args.seeds)]
            data["false_alarms"] = []
            for job, r in zip(jobs, pool.imap(_job, jobs)):
                r["seed"] = job[3]["seed"]
                data["false_alarms"].append(r)
                if not r["passed"]:
                    print(f"(c) FALSE ALARM {r['kernel']} seed {r['seed']}: {r['failed']} {r.get('error', '')}",
                          flush=True)
    data["seconds_total"] = round(time.monotonic() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "check_budget.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "check_budget.md").write_text(markdown(data))
    print(markdown(data))
    return 0


def markdown(data: dict[str, Any]) -> str:
    v = data["versions"]
    lines = [
        "# The default check's time, the gallery, false alarms",
        "",
        f"Date {data['date']}; machine: {data['machine']}; Python {v['python']}, torch {v['torch']}, "
        f"numpy {v['numpy']}, hypothesis {v['hypothesis']}, onlinesm {v['onlinesm']}.",
        f"Command: `{data['command']}` (total {data.get('seconds_total', '?')} s); domain: "
        f"{data['settings'].get('domain', 'the check defaults')}.",
        "",
    ]
    if "default" in data:
        lines += ["## (a) Default check, wall time (seed 0, alone on the machine)", "",
                  "| kernel | op | declared | time (s) | target (s) | verdict |", "|---|---|---|---|---|---|"]
        for r in data["default"]:
            ok = "met" if r["seconds"] < r["target_s"] else f"**missed by {r['seconds'] - r['target_s']:.0f} s**"
            verdict = "pass" if r["passed"] else "FAIL " + ", ".join(r["failed"])
            lines.append(f"| `{r['kernel']}` | {r['op']} | `{json.dumps(r['conventions'])}` | {r['seconds']:.1f} "
                         f"| {r['target_s']} ({ok}) | {verdict} |")
        lines.append("")
    if "mutants" in data:
        caught = sum(not r["passed"] for r in data["mutants"])
        lines += [f"## (b) Gallery mutants through the default check (seed 0): {caught} / {len(data['mutants'])} caught",
                  "", "Two runs in parallel on the 2 cores, so times are with the other core busy.", "",
                  "| mutant | declared | caught | failed properties [dtype] | time (s) |", "|---|---|---|---|---|"]
        for r in data["mutants"]:
            what = ", ".join(r["failed"]) or r.get("error", "")
            lines.append(f"| `{r['kernel']}` | `{json.dumps(r['conventions'])}` | "
                         f"{'yes' if not r['passed'] else '**NO**'} | {what} | {r['seconds']:.1f} |")
        lines.append("")
    if "false_alarms" in data:
        s = data["settings"]
        lines += [f"## (c) False alarms on correct kernels, seeds 0..{s['seeds'] - 1}, max_examples={s['fa_max_examples']}",
                  "", "| kernel | declared | runs | false alarms | mean time (s) |", "|---|---|---|---|---|"]
        by: dict[str, list[dict[str, Any]]] = {}
        for r in data["false_alarms"]:
            by.setdefault(r["kernel"], []).append(r)
        for k, rs in by.items():
            bad = [r for r in rs if not r["passed"]]
            lines.append(f"| `{k}` | `{json.dumps(rs[0]['conventions'])}` | {len(rs)} | "
                         f"{len(bad)}{' (seeds ' + ', '.join(str(r['seed']) for r in bad) + ')' if bad else ''} "
                         f"| {sum(r['seconds'] for r in rs) / len(rs):.1f} |")
        bad = [r for r in data["false_alarms"] if not r["passed"]]
        for r in bad:
            lines += ["", f"### False alarm: `{r['kernel']}` seed {r['seed']}: {', '.join(r['failed'])}", "", "```"]
            for m in r.get("messages", []):
                lines += [f"{m['property']} [{m['dtype']}] family {m['family']}", m["message"], ""]
            if r.get("error"):
                lines.append(r["error"])
            lines.append("```")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
