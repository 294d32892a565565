"""Medians over runs of bench/softmax.py: each candidate's % of copy bandwidth, per dtype and N.

What: reads the ``softmax.json`` that each run of ``bench/softmax.py`` (with or without
``--tune``) wrote under its own $OUT, and prints one row per (dtype, N, candidate): the median
% of copy bandwidth over the runs, its range, and the candidate's median against the shipped
launch (``ours``) of the same runs.

Why: peers and candidates move by a few percent from run to run, so a launch is compared by
medians of 3 runs (the protocol of reports/h200/bench_softmax.md), and doing it by hand from
three logs is where mistakes come in. ``bash bench/gpu_run.sh tune3`` runs the tune three
times and ends with this table.

    python bench/medians.py out/tune_run*/softmax.json
    python bench/medians.py --only "split,chip tail" out/tune_run*/softmax.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table  # noqa: E402

__all__ = ["medians", "main"]

#: keys of a softmax.json row that are not a candidate's GB/s
_NOT_CANDIDATES = ("dtype", "N", "M", "bytes", "copy", "plan")


def medians(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One dict per (dtype, N, candidate) seen in ``runs`` (each run: softmax.json's rows):
    ``{"dtype", "N", "candidate", "pct" (median % of copy), "lo", "hi", "runs", "vs_ours"
    (median over runs of candidate / ours, None where ours is missing), "plan"}``.

    >>> row = lambda ours, alt: dict(dtype="bfloat16", N=100, copy=100.0, ours=ours, alt=alt)
    >>> [(m["candidate"], m["pct"], m["vs_ours"]) for m in medians([[row(90.0, 99.0)],
    ...     [row(80.0, 88.0)], [row(85.0, 85.0)]])]
    [('ours', 85.0, 1.0), ('alt', 88.0, 1.1)]
    """
    pcts: dict[tuple[str, int, str], list[float]] = {}
    ratios: dict[tuple[str, int, str], list[float]] = {}
    plans: dict[tuple[str, int], str] = {}
    for rows in runs:
        for r in rows:
            plans.setdefault((r["dtype"], r["N"]), r.get("plan", ""))
            for k, v in r.items():
                if k in _NOT_CANDIDATES or k.endswith("_err") or not isinstance(v, float):
                    continue
                key = (r["dtype"], r["N"], k)
                pcts.setdefault(key, []).append(100 * v / r["copy"])
                if isinstance(r.get("ours"), float):
                    ratios.setdefault(key, []).append(v / r["ours"])
    return [dict(dtype=d, N=n, candidate=k, pct=statistics.median(v), lo=min(v), hi=max(v),
                 runs=len(v), plan=plans[(d, n)],
                 vs_ours=statistics.median(ratios[(d, n, k)]) if (d, n, k) in ratios else None)
            for (d, n, k), v in pcts.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="softmax.json of each run")
    ap.add_argument("--only", default="", help="only candidates whose name contains one of "
                    "these comma-separated words (ours is always shown)")
    args = ap.parse_args()
    runs = []
    for f in args.files:
        try:
            runs.append(json.loads(Path(f).read_text())["rows"])
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"bench/medians.py: cannot read the rows of {f}: {e} (pass the softmax.json "
                     "that bench/softmax.py wrote under $OUT)")
    words = [w for w in args.only.split(",") if w]
    table = [[m["dtype"], m["N"], m["candidate"], f"{m['pct']:.1f}",
              f"{m['lo']:.1f}-{m['hi']:.1f}", m["runs"],
              f"{m['vs_ours']:.3f}" if m["vs_ours"] is not None else None, m["plan"]]
             for m in medians(runs)
             if not words or m["candidate"] == "ours" or any(w in m["candidate"] for w in words)]
    print(markdown_table(["dtype", "N", "candidate", "% of copy (median)", "range", "runs",
                          "vs ours", "shipped plan"], table))


if __name__ == "__main__":
    main()
