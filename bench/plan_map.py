"""Which launch the softmax launcher makes for each row length: a map of N ranges, per dtype
and kind of row.

What: for every row length from ``--low`` to ``--high`` of each kind that plans apart
(aligned rows, rows off a 32-byte sector, even rows off the 16-byte vector, odd rows), the
launch a GPU of ``--sms`` SMs gets (path, block or chunk, warps, exchange, window), merged
into ranges of equal launches.

Why: PLAN_TABLE, its overrides and the launcher's rules decide the launch together, and a
length nobody timed can land on a launch timed only elsewhere: bf16 41,800 (off a sector)
ran on chip at 81% of copy where its aligned neighbours ran at 92%. The map shows each
class of rows and its launch at a glance, to choose what a GPU sweep should time
(``bench/softmax.py --random`` draws lengths at random).

    python bench/plan_map.py                                  # 16-bit and fp32, 1k-64k
    python bench/plan_map.py --dtypes bfloat16 --low 20000 --high 50000 --kinds "off a sector"

Needs torch and triton (any machine: no GPU; it plans as for one even where the process runs
kernels under Triton's interpreter).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from split_ptxas import _ITEMSIZES, _launch  # noqa: E402

__all__ = ["KINDS", "describe", "plan_map", "main"]

#: The kinds of row that plan apart, as a test of (N, element size in bytes): aligned rows on
#: 32-byte sectors; rows off a sector on 16-byte vectors (every other row 16 bytes off a
#: sector); rows of even N off the vector (16-bit N = 2, 4 or 6 mod 8, fp32 N = 2 mod 4: read
#: as windows, whose rows start at fewer offsets than odd rows' and span fewer columns);
#: odd N (read as windows).
KINDS: dict[str, Callable[[int, int], bool]] = {
    "aligned": lambda n, size: n * size % 32 == 0,
    "off a sector": lambda n, size: n * size % 32 == 16,
    "off the vector": lambda n, size: n % 2 == 0 and n * size % 16 != 0,
    "odd": lambda n, size: n % 2 == 1,
}


def describe(sm: Any, p: Any, t: dict[str, Any], shift: int, itemsize: int) -> str:
    """A launch of the softmax module ``sm`` in words, without what changes with N inside a
    range (the parts' count).

    >>> from split_ptxas import _launch
    >>> sm, p, t, _, shift = _launch("bfloat16", 41800, None, "auto", 132)
    >>> describe(sm, p, t, shift, 2)
    'split in chunks of 2048, 2 warps, 10 per SM, ahead, windows of 128 B (16-B vectors)'
    """
    window = ""
    if shift > 1:
        loose = sm._loose_vector(t, shift, itemsize) if p.path == "split" else 0
        window = f", windows of {shift * itemsize} B" + (
            f" ({loose * itemsize}-B vectors)" if loose else "")
    if p.path == "split":
        ex = sm.split_exchange(t, p.split)
        return (f"split in chunks of {p.block}, {p.num_warps} warps, "
                f"{int(t['split_programs_per_sm'])} per SM" + (", ahead" if ex.ahead else "")
                + window)
    if p.path == "on_chip":
        block = f"{p.chunks} x {p.block}" if p.chunks > 1 else f"{p.block}"
        return (f"on chip as {block}" + (f" + {p.tail}" if p.tail else "")
                + f", {p.rows_per_program} row{'s' if p.rows_per_program > 1 else ''} a "
                f"program, {p.num_warps} warps" + (f", {p.stages} stages" if p.stages > 1
                                                   else "") + window
                + (f", {int(t['chip_maxnreg'])} registers" if t["chip_maxnreg"] else ""))
    return f"{p.path} in tiles of {p.block}, {p.num_warps} warps" + window


def plan_map(dtype: str, low: int, high: int, kinds: tuple[str, ...] = tuple(KINDS),
             sms: int = 132) -> list[dict[str, Any]]:
    """The launches of ``dtype`` rows of ``low`` to ``high`` (inclusive), one entry per range
    of equal launches: ``{"dtype", "kind", "first", "last", "parts", "launch"}`` (parts:
    the split parts' fewest and most in the range, or None on chip).

    >>> [(r["first"], r["last"]) for r in plan_map("float32", 1000, 1100, ("aligned",))]
    [(1000, 1024), (1032, 1096)]
    """
    size = _ITEMSIZES[dtype]
    out: list[dict[str, Any]] = []
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}: choose from {', '.join(KINDS)}")
        takes = KINDS[kind]
        current: dict[str, Any] | None = None
        for n in range(low, high + 1):
            if not takes(n, size):
                continue
            sm, p, t, _, shift = _launch(dtype, n, None, "auto", sms)
            launch = describe(sm, p, t, shift, size)
            parts = p.split if p.path == "split" else None
            if current is not None and current["launch"] == launch:
                current["last"] = n
                if parts is not None:
                    current["parts"] = (current["parts"][0], parts)
                continue
            current = dict(dtype=dtype, kind=kind, first=n, last=n, launch=launch,
                           parts=None if parts is None else (parts, parts))
            out.append(current)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--low", type=int, default=1000)
    ap.add_argument("--high", type=int, default=65536)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: "
                    + ", ".join(KINDS))
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SMs (an H200's 132)")
    args = ap.parse_args(argv)
    print("| dtype | rows | N | launch | parts |")
    print("|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        if dtype not in _ITEMSIZES:
            sys.exit(f"unknown dtype {dtype!r}: choose from {', '.join(_ITEMSIZES)}")
        for r in plan_map(dtype, args.low, args.high, tuple(args.kinds.split(",")), args.sms):
            parts = "" if r["parts"] is None else (
                f"{r['parts'][0]}" if r["parts"][0] == r["parts"][1]
                else f"{r['parts'][0]}-{r['parts'][1]}")
            print(f"| {dtype} | {r['kind']} | {r['first']:,}-{r['last']:,} | {r['launch']} "
                  f"| {parts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
