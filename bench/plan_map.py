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
    python bench/plan_map.py --dtypes bfloat16 --occupancy    # + registers, programs an SM

``--occupancy`` compiles the first length of each on-chip range for sm_90a (ptxas, offline)
and adds its registers, the programs an SM holds by them, and the register cap that would let
one more program share the SM, with what ptxas spills under it. The on-chip launches are
latency-bound: where registers hold the warps an SM runs, a cap that adds a program without a
spill is a candidate to time (bf16 1,104 at 60 registers, 16 programs of 2 warps: 88% of copy;
capped at 56, 18 programs, 92%). Registers differ by triton version (bf16 12,640: 128 under
triton 3.6, 95 under 3.9): run it with the triton the GPU has.

Needs torch and triton (any machine: no GPU; it plans as for one even where the process runs
kernels under Triton's interpreter).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from split_ptxas import _ITEMSIZES, _launch, compile_launch  # noqa: E402

__all__ = ["KINDS", "describe", "plan_map", "programs_per_sm", "occupancy", "main"]

#: An H200 SM (compute capability 9.0): registers, warps and programs it holds, and the unit
#: a warp's registers are allocated in
_SM_REGISTERS, _SM_WARPS, _SM_PROGRAMS, _REGISTER_UNIT = 65536, 64, 32, 256

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


def programs_per_sm(registers: int, num_warps: int) -> int:
    """Programs of ``num_warps`` warps an SM holds at ``registers`` per thread (registers,
    warps and programs bounding; shared memory aside: the on-chip kernel takes little).

    >>> programs_per_sm(60, 2), programs_per_sm(56, 2), programs_per_sm(128, 8)
    (16, 18, 2)
    """
    per_warp = -(-registers * 32 // _REGISTER_UNIT) * _REGISTER_UNIT
    warps = min(_SM_REGISTERS // per_warp, _SM_WARPS)
    return min(warps // num_warps, _SM_PROGRAMS)


def occupancy(dtype: str, n: int, sms: int = 132) -> dict[str, Any] | None:
    """The on-chip launch of rows of ``n`` compiled for sm_90a: ``{"registers", "programs",
    "cap", "cap_spill"}``, where ``cap`` is the largest register cap (a multiple of 8) that
    lets one more program at least share an SM and ``cap_spill`` what ptxas spills under it
    (bytes; both None where no cap of 24 or more would). None for a launch not on chip."""
    sm, p, t, _, _ = _launch(dtype, n, None, "auto", sms)
    if p.path != "on_chip":
        return None
    base = compile_launch(dtype, n, sms=sms)
    registers, warps = base["registers"], p.num_warps
    programs = programs_per_sm(registers, warps)
    budget = _SM_REGISTERS // ((programs + 1) * warps)  # a warp's registers at one more
    cap = budget // _REGISTER_UNIT * _REGISTER_UNIT // 32 // 8 * 8
    if programs >= min(_SM_PROGRAMS, _SM_WARPS // warps) or cap < 24:
        return dict(registers=registers, programs=programs, cap=None, cap_spill=None)
    capped = compile_launch(dtype, n, dict(chip_maxnreg=cap), sms=sms)
    return dict(registers=registers, programs=programs, cap=cap,
                cap_spill=capped["spill_bytes"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--low", type=int, default=1000)
    ap.add_argument("--high", type=int, default=65536)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: "
                    + ", ".join(KINDS))
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SMs (an H200's 132)")
    ap.add_argument("--occupancy", action="store_true", help="compile each on-chip range's "
                    "first length (ptxas, offline): registers, programs an SM, and the cap "
                    "for one more")
    ap.add_argument("--json", action="store_true", help="one JSON object per range instead "
                    "of the table (the range, and with --occupancy its registers and cap)")
    args = ap.parse_args(argv)
    dtypes = args.dtypes.split(",")
    unknown = [d for d in dtypes if d not in _ITEMSIZES]
    if unknown:
        sys.exit(f"unknown dtype {unknown[0]!r}: choose from {', '.join(_ITEMSIZES)}")
    if not args.json:
        extra = " registers | programs an SM | cap for one more (spill) |" * args.occupancy
        print("| dtype | rows | N | launch | parts |" + extra)
        print("|---|---|---|---|---|" + "---|" * (3 * args.occupancy))
    for dtype in dtypes:
        for r in plan_map(dtype, args.low, args.high, tuple(args.kinds.split(",")), args.sms):
            occ = occupancy(dtype, r["first"], args.sms) if args.occupancy else None
            if args.json:
                print(json.dumps({**r, **(occ or {})}), flush=True)
                continue
            parts = "" if r["parts"] is None else (
                f"{r['parts'][0]}" if r["parts"][0] == r["parts"][1]
                else f"{r['parts'][0]}-{r['parts'][1]}")
            row = (f"| {dtype} | {r['kind']} | {r['first']:,}-{r['last']:,} | {r['launch']} "
                   f"| {parts} |")
            if occ is not None:
                cap = "" if occ["cap"] is None else f"{occ['cap']} ({occ['cap_spill']} B)"
                row += f" {occ['registers']} | {occ['programs']} | {cap} |"
            elif args.occupancy:
                row += " | | |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
