"""Where a kernel's time goes, instruction by instruction: ncu's source page, summed (a bench helper).

What: reads the CSV that ``ncu -i <report> --page source --csv --print-source sass`` writes
(one row per SASS instruction: its warp-state samples, by stall reason, and how often a warp
ran it) and prints the instructions that hold the most samples with their main stall
reasons; the samples summed by how often an instruction ran (a kernel's code run once per
key tile, once per block and once per program falls into classes of its own); and, with
``--regions``, what a warp spends in address ranges of the kernel, in cycles per execution.

Why: ncu's sections say that a launch is latency-bound; this says where. Two kernels of the
same shape can then be compared part by part: a key tile, a block's edges, the load warp
waiting (reports/h200/bench_attention.md, twenty-first round).

A sample is one warp of the SM, picked every ``interval`` cycles (ncu's
``smsp__pcsamp_interval_cycles``, 2048 by default on the H200) among the ``warps`` resident
(ncu's "Achieved Active Warps Per SM"). A region's samples x interval x warps / its
executions (warp-executions of its first instruction) are the cycles a warp spends in it
each time it runs it; a region's executions are the count most of its instructions share
(a loop's body, not its entry).

    ncu ... -o rep python bench/ncu_targets.py attention_gluon_bf16_d64_s1024_causal_2wg
    ncu -i rep.ncu-rep --page source --csv --print-source sass > source.csv
    python bench/ncu_source.py source.csv --warps 12 --regions 3ad0:54d0:tile,76a0:87b0:end
"""

from __future__ import annotations

import argparse
import csv
import gzip
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["Instruction", "read_source", "by_executions", "region", "main"]

#: The CSV's column of every sample at an instruction, issued or not
SAMPLES = "Warp Stall Sampling (All Samples)"
#: ... and of how many times a warp ran it
EXECUTED = "Instructions Executed"


@dataclass
class Instruction:
    """One SASS instruction of the source page: its offset from the kernel's first one."""

    offset: int
    sass: str
    samples: float
    executed: float
    stalls: dict[str, float] = field(default_factory=dict)  # "barrier", "long_sb", ...


def _number(text: str) -> float:
    """ncu's numbers carry thousands separators; an empty cell is 0."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_source(path: str) -> list[Instruction]:
    """The instructions of the CSV at ``path`` (gzip or plain), in address order.

    >>> rows = read_source("source.csv.gz")  # doctest: +SKIP
    """
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            lines = list(csv.reader(f))
    except OSError as e:
        raise SystemExit(f"{path}: cannot read it ({e.strerror or e}); give the CSV of ncu -i "
                         "<report> --page source --csv --print-source sass") from None
    try:
        at = next(i for i, row in enumerate(lines) if row[:2] == ["Address", "Source"])
    except StopIteration:
        raise SystemExit(f"{path}: no 'Address,Source' header; write it with ncu -i <report> "
                         "--page source --csv --print-source sass") from None
    header = lines[at]
    col = {name: i for i, name in enumerate(header)}
    if SAMPLES not in col or EXECUTED not in col:
        raise SystemExit(f"{path}: no {SAMPLES!r} or {EXECUTED!r} column; profile with "
                         "--section WarpStateStats --section SourceCounters (or --set full)")
    stall_cols = {name[len("stall_"):]: i for name, i in col.items()
                  if name.startswith("stall_") and "Not Issued" not in name}
    rows = [r for r in lines[at + 1:] if len(r) == len(header) and r[0].startswith("0x")]
    if not rows:
        raise SystemExit(f"{path}: no instruction rows under the header")
    base = int(rows[0][col["Address"]], 16)
    return [Instruction(offset=int(r[col["Address"]], 16) - base, sass=r[col["Source"]].strip(),
                        samples=_number(r[col[SAMPLES]]), executed=_number(r[col[EXECUTED]]),
                        stalls={k: _number(r[i]) for k, i in stall_cols.items()})
            for r in rows]


def by_executions(rows: Iterable[Instruction]) -> list[tuple[int, int, float]]:
    """(executions, instructions, samples) per execution count, most samples first: code
    run once per key tile, per block or per program sums up by class."""
    classes: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        c = classes[round(r.executed)]
        c[0] += 1
        c[1] += r.samples
    return sorted(((n, int(c[0]), c[1]) for n, c in classes.items()), key=lambda t: -t[2])


def region(rows: list[Instruction], lo: int, hi: int, *, interval: float,
           warps: float) -> dict[str, float]:
    """The instructions at offsets [lo, hi): their samples, their executions (the count most
    of them share) and the cycles a warp spends in them per execution (module docstring)."""
    inside = [r for r in rows if lo <= r.offset < hi]
    samples = sum(r.samples for r in inside)
    counts: dict[float, int] = defaultdict(int)
    for r in inside:
        if r.executed > 0:
            counts[r.executed] += 1
    executed = max(counts, key=lambda n: (counts[n], n)) if counts else 0.0
    cycles = samples * interval * warps / executed if executed else 0.0
    return dict(samples=samples, executions=executed, cycles=cycles,
                instructions=float(len(inside)))


def _top_stalls(r: Instruction, share: float = 0.1) -> str:
    """The stall reasons that hold at least ``share`` of an instruction's samples."""
    return " ".join(f"{k}={v:.0f}" for k, v in sorted(r.stalls.items(), key=lambda kv: -kv[1])
                    if r.samples and v >= share * r.samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu -i <report> --page source --csv --print-source sass")
    ap.add_argument("--top", type=int, default=25, help="instructions with the most samples")
    ap.add_argument("--warps", type=float, default=None,
                    help="warps resident per SM (ncu's Achieved Active Warps Per SM): with "
                         "--regions, turns samples into cycles")
    ap.add_argument("--interval", type=float, default=2048.0,
                    help="cycles between samples (ncu's smsp__pcsamp_interval_cycles)")
    ap.add_argument("--regions", default="",
                    help="hex offsets lo:hi:name, comma-separated (offsets from the kernel's "
                         "first instruction, as the top list prints them)")
    args = ap.parse_args(argv)
    regions = []
    for part in filter(None, args.regions.split(",")):
        try:
            lo, hi, name = part.split(":")
            regions.append((int(lo, 16), int(hi, 16), name))
        except ValueError:
            ap.error(f"--regions {part!r}: give lo:hi:name with hex offsets, e.g. 3ad0:54d0:tile")
    if regions and args.warps is None:
        ap.error("--regions needs --warps (ncu's Achieved Active Warps Per SM)")
    rows = read_source(args.csv)
    total = sum(r.samples for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples, "
          f"{sum(r.executed for r in rows):.0f} warp-instructions executed")
    print("\n| offset | samples | share | executed | instruction | stalls |\n|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r.samples)[:args.top]:
        print(f"| {r.offset:05x} | {r.samples:.0f} | {100 * r.samples / total:.1f}% | "
              f"{r.executed:.0f} | `{r.sass[:60]}` | {_top_stalls(r)} |")
    print("\n| executions | instructions | samples | share |\n|---|---|---|---|")
    for n, count, samples in by_executions(rows)[:12]:
        print(f"| {n} | {count} | {samples:.0f} | {100 * samples / total:.1f}% |")
    if regions:
        print("\n| region | offsets | instructions | samples | executions | cycles per warp "
              "and execution |\n|---|---|---|---|---|---|")
        for lo, hi, name in regions:
            g = region(rows, lo, hi, interval=args.interval, warps=args.warps)
            print(f"| {name} | {lo:05x}-{hi:05x} | {g['instructions']:.0f} | "
                  f"{g['samples']:.0f} | {g['executions']:.0f} | {g['cycles']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
