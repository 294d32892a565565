"""Benchmark onlinesm's Triton softmax against torch.softmax, Liger-Kernel and the copy ceiling.

GB/s counts one read and one write of x (2 * M * N * element size bytes) for every kernel, so
the numbers compare directly with the device-to-device copy. All in one run, on the same
tensors, timed with triton.testing.do_bench (median). Before timing, each kernel's output is
checked against torch.softmax in float64 on a slice of rows (a quick guard, not the test suite):
a launch whose error only a broken kernel shows is reported WRONG and left out of the timings.

    python bench/softmax.py                    # bf16 and fp32, N in 1k..256k, ~1.5 GB tensors
    python bench/softmax.py --tune             # also time launch variants (for TUNING)
    python bench/softmax.py --random 40        # 40 lengths drawn at random from 1k..64k
    OUT=dir python bench/softmax.py            # + softmax.json / softmax.md in dir

Needs a CUDA device. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import copy_gbps, gbps, markdown_table, time_ms, write_outputs  # noqa: E402

from onlinesm.kernels.softmax_plan import (  # noqa: E402
    _CHIP_WINDOWS_ONE_WARP, _SPLIT_16_SMALL_LOOSE, _chunking)

NS = [1000, 1024, 3000, 4096, 12288, 32768, 49152, 65536, 131072, 262144]


def liger_softmax() -> Callable[[Any], Any] | None:
    """Liger-Kernel's Triton softmax, or None when it is not installed."""
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(f"# liger-kernel unavailable: {e!r}")
        return None
    return LigerSoftmaxFunction.apply


def variants(n: int, itemsize: int) -> list[tuple[str, dict[str, Any]]]:
    """Launch variants timed with --tune (names are what the table prints).

    * ``chip chunks``: the on-chip kernel with the row held as 3 power-of-two chunks
      (12288 = 3 x 4096, 3000 = 3 x 1024, 49152 = 3 x 16384) instead of padded to a power of
      two, where that covers fewer columns. The default for fp32 rows of 32k-48k (94% of copy
      at 49,152 on an H200). It loses in bf16 (63% at 12,288 against 81%), with one exp per
      element as with two.
    * ``chip eptE``: 16-bit rows of 2k-64k on chip with E elements per thread (fewer threads
      per row, more rows in flight per SM); ``chip chunks eptE`` with the row held as 3
      chunks (less padding), ``... stS`` with S pipelined stages. The shipped plan
      (PLAN_TABLE): 3 chunks at 128 per thread where they pad less (16k-24k with 3 stages),
      64 per thread elsewhere in (4096, 32768].
    * ``chip rows1``: short rows of odd length one per program (16-bit ones then take the
      aligned windows, which packed rows do not: bf16 1001 ran at 66% of copy packed).
      ``chip windows mE``: several odd 16-bit rows per program as windows, E elements per
      program; ``chip mE``: E elements per program, element by element. The shipped plan
      (PLAN_TABLE): 512-2048 elements per program for odd rows by length, windows for 16-bit
      rows up to 65.
    * ``split cC wW xP``: long rows split across cooperating programs, chunks of C elements,
      W warps, P programs per SM (P > 1: one program's loads overlap another's reductions and
      wait). Without ``packed`` the chunks exchange (m, d) through two words and a counter;
      ``... packed``: as one 64-bit word that is its own ready flag, one store and one read
      per poll instead of a fence, a count, a poll and a read: shipped for long rows in
      chunks of 8192 in 4 warps (c8192 w4 x5 for 16-bit rows, x4 for fp32). The shipped
      plan compiles the split kernel with a register cap that lets its programs per SM fit
      and sizes the grid by the registers it got; ``split uncapped``: without the cap (fp32
      windows in chunks of 16,384 take 152 registers, one program per SM where the plan wants
      two). ``... asm``: the wait as one PTX loop per thread (no barrier per poll), polling
      with atomics, or with relaxed loads for ``loads``; ``... st2`` / ``st3``: with that
      poll, the row loop software-pipelined in 2 / 3 stages (the next row's chunk copied into
      shared memory while this row reduces, waits and stores); ``split poll l32``: the
      Triton-level poll, unpipelined, with the merge in 32 lanes (the default now; fewer
      lanes spill under the register cap). Shipped (the plan column says which): fp32 rows
      past 49,152 ``st2 loads``, 16-bit rows ``st3 loads`` (their windows of 36k-49k and
      past 131k in ``c8192 w4 x5 ... st3 loads``, of 49k-131k in ``c4096 w2 x10``, of
      32k-36k in ``c4096 w4 x8``), all in 32 lanes at least. 16-bit rows of 8k-49k:
      ``split c4096 w2 x10 packed st3 loads`` (shipped for rows of 16,385-23,552 and
      windows of 8k-32k), ``... w4 x8 ...``, ``c2048 w2 x16``.
    * ``chip windows r1 w1``: odd 16-bit rows up to 2048 as windows, one per program in one
      warp (``chip_warps=1``; shipped for windows of 1537-2048 columns, lost below 513).
      ``chip windows r1 w1 tail``: the same as a block and a tail where that pads less
      (shipped for windows of 513-1536: 601 as 512 + 256, 1300 as 1024 + 512; 78 registers
      against 100 in bf16 at 1300, triton 3.9 offline).
    * ``chip cap128``: the shipped plan with the on-chip kernel compiled under a cap of 128
      registers (``chip_maxnreg``), for 16-bit rows of 1025-4096 (shipped for odd rows of
      2042-3065, windows of 3 x 1024 in one warp). ``chip cap40/48/56``, ``chip cap72/80``:
      tighter caps for aligned 16-bit rows of 1025-1536 and 8193-16,384, for more warps an SM;
      ``chip cap40/48`` for fp32 windows of 6145-8192, ``chip cap64/72`` for aligned fp32 rows
      of 18,433-24,576 (the caps ``bench/plan_map.py --occupancy`` names); ``chip tail ept64
      cap80``: aligned 16-bit rows of 16,385-18,432 as 16,384 and a tail of 2048 in 8 warps,
      three an SM.
    * ``chip chunks tail eptE``: on chip as 3 power-of-two chunks and a smaller tail past
      them (an odd 16-bit row of 12,289 is a window of 12,296: 3 x 4096 and a tail).
    * ``chip tail eptE [stS]``: on chip as a power-of-two block and a smaller power-of-two
      tail past it (17,000 = 16,384 + a tail; 1200 = 1024 + 256, shipped at 32 per thread for
      aligned 16-bit rows of 1025-1536) with E elements per thread, past 16,384 with S
      pipelined stages or none; ``... cap64``: registers capped at 64 (two 16-warp programs
      per SM).
    * ``split loose16 c4096 w2 x10``: 16-bit windows of 8185-9216 split as the wider ones
      (the shipped launch of windows of 12,289-16,384; of 8449-9216 in the twenty-fourth and
      twenty-fifth rounds).
    * ``chip chunks ept128 cap128``: odd 16-bit rows of 8185-24,576 on chip as one window of 3
      chunks at 128 per thread under a cap of 128 registers (shipped for windows of
      8241-12,288: 4 programs per SM where uncapped they take 137-140 registers and fit 3;
      lost to the block and tail at 8,191-8,233 and to the split windows at 16k-24k).
    * ``split unbalanced``: the shipped plan, a split row's programs owning whole chunks and
      a shorter last one rather than equal parts (``split_balanced``).
    * ``split win16``: the shipped plan with split rows windowed only where they start off a
      16-byte vector (``split_window_bytes=16``), not off 128 bytes.
    * ``split loose16``: the shipped plan with split windows' whole vectors of 16 bytes, not of
      the window (``split_loose_vectors``: at most 2 x 7 loose elements a row in 16-bit, not
      2 x 63, so chunk 0 reduces them inside a warp; shipped for 16-bit windows of 9k-16k and
      36k-49k and rows off a sector of 20k-41k).
    * ``split st4``: the shipped plan with split rows pipelined in 4 stages (three rows'
      chunks in flight during a row's wait, not two).
    * ``split ahead cC wW xP``: split in chunks of C, W warps, P programs per SM, with the
      exchange a row ahead (``split_exchange_ahead``: row r + 1's part read and its (m, d)
      published before row r's wait); ``split ahead win16 ...``: the same with windows of 16
      bytes (``split_window_bytes=16``: rows off a sector read unwindowed); ``split ahead
      loose16 ...``: with 128-byte windows whose whole vectors are 16 bytes
      (``split_loose_vectors``).
    """
    out: list[tuple[str, dict[str, Any]]] = []
    if n % (16 // itemsize) and n <= 4096:  # odd short rows: one per program, as a window
        out.append(("chip rows1", dict(path="on_chip", tuning=dict(min_elems_per_program=1))))
        if itemsize == 2 and n <= 2048:  # ... or several per program, as windows
            for per_program in (4096, 16384):
                out.append((f"chip windows m{per_program}", dict(path="on_chip", tuning=dict(
                    chip_windows_packed=True, min_elems_per_program=per_program))))
            # ... or one per program in one warp (at most 32 programs share an SM: as many
            # rows in flight per SM at any width)
            out.append(("chip windows r1 w1", dict(path="on_chip", tuning=dict(
                _CHIP_WINDOWS_ONE_WARP))))
            if 512 < n <= 1536:  # ... as a block and a tail (1300: 1024 + 512, not 2048)
                out.append(("chip windows r1 w1 tail", dict(path="on_chip", tuning=dict(
                    _CHIP_WINDOWS_ONE_WARP, chip_tail=True))))
    if n % (16 // itemsize) and n <= 128:  # tiny odd rows: smaller programs, or windows
        for per_program in (256, 512):
            out.append((f"chip m{per_program}", dict(path="on_chip", tuning=dict(
                min_elems_per_program=per_program))))
        for per_program in (1024,) if itemsize == 2 else (1024, 4096):  # 16-bit: above
            out.append((f"chip windows m{per_program}", dict(path="on_chip", tuning=dict(
                chip_windows_packed=True, min_elems_per_program=per_program))))
    if n % (16 // itemsize) and 512 < n <= 2048:  # odd rows, fewer threads per row
        out.append(("chip m2048 ept32", dict(path="on_chip", tuning=dict(
            min_elems_per_program=2048, elems_per_thread=32))))
        if itemsize == 2:  # ... as windows (16-byte vectors), the shipped shape from 810
            # (m2048 ept32) and around it: a row per warp, 4 warps, 4 rows per program
            for per_program, ept in ((2048, 32), (1024, 32), (2048, 16), (4096, 32),
                                     (4096, 64)):
                out.append((f"chip windows m{per_program} ept{ept}", dict(
                    path="on_chip", tuning=dict(
                        chip_windows_packed=True, min_elems_per_program=per_program,
                        elems_per_thread=ept, unaligned_elems_per_program=0))))
        out.append(("chip m4096 ept32", dict(path="on_chip", tuning=dict(
            min_elems_per_program=4096, elems_per_thread=32, unaligned_elems_per_program=0))))
    if n <= 2048:  # short rows: how many elements a program takes, and per thread
        for per_program in (1024, 2048, 8192, 16384):
            out.append((f"chip m{per_program}", dict(path="on_chip", tuning=dict(
                min_elems_per_program=per_program))))
        for ept in (4, 8, 32):
            out.append((f"chip ept{ept}", dict(path="on_chip", tuning=dict(
                elems_per_thread=ept, chip_chunked=False))))
    pad = 1 << (n - 1).bit_length()  # the padded power-of-two width of the shipped plan
    three = 3 * (1 << (-(-n // 3) - 1).bit_length())  # ... and as 3 power-of-two chunks
    fewer = three < pad
    if fewer and n <= (65536 if itemsize == 2 else 49152):  # chunks cover fewer columns
        out.append(("chip chunks", dict(path="on_chip", tuning=dict(
            chip_chunked=True, elems_per_thread=16, chunk_elems_per_thread=0))))
        if itemsize == 4 and n <= 32768:
            for ept in (32, 64):
                out.append((f"chip chunks ept{ept}", dict(path="on_chip", tuning=dict(
                    chip_chunked=True, chunk_elems_per_thread=ept))))
    if itemsize == 2 and 1024 < n <= 4096:
        # the shipped launch under a cap of 128 registers: bf16 windows of 2049-3072 (3 x
        # 1024 in one warp) take 163 where fp16 takes 128 (its conversions in place), so an SM
        # holds 12 such warps, not 16 (bf16 2047 at 90.5% of copy, fp16 99.6%)
        out.append(("chip cap128", dict(path="auto", tuning=dict(chip_maxnreg=128))))
    # the shipped launch under tighter caps, for more warps per SM (on-chip launches are
    # latency-bound); each range as `bench/plan_map.py --occupancy` names it (triton 3.6)
    caps: tuple[int, ...] = ()
    if itemsize == 2 and not n % 8 and (1024 < n <= 1536 or 8192 < n <= 16384):
        # aligned bf16 1,064-1,136 (1024 + 256, two rows a program in 2 warps) take 60
        # registers, 32 warps an SM (fp16, 56: 36 warps, at 99% of copy against bf16's
        # 88-90%); 12,640 (16,384 in 8 warps) 128, two programs an SM
        caps = (40, 48, 56) if n <= 1536 else (72, 80)
    elif itemsize == 4 and ((n % 4 and 6144 < n <= 8192) or (not n % 4 and 18432 < n <= 24576)):
        # fp32 windows of 6145-8192 as 8192 in 16 warps at 56 registers, two programs an SM
        # (40: three, no spill; 6,242 at 89.9% of copy); aligned rows of 18,433-24,576 as
        # 16,384 + a tail in 16 warps at 79-90, one program (64: two, no spill)
        caps = (40, 48) if n % 4 else (64, 72)
    for cap in caps:
        out.append((f"chip cap{cap}", dict(path="auto", tuning=dict(chip_maxnreg=cap))))
    if itemsize == 2 and 2048 < n <= 65536:  # latency-bound rows: fewer threads per row
        epts = (32, 64, 128) if n <= 32768 else (128,)
        for ept in epts:
            out.append((f"chip ept{ept}", dict(path="on_chip", tuning=dict(
                elems_per_thread=ept, chip_chunked=False))))
        if fewer:  # and without the padding of the power-of-two width
            for ept in epts:
                out.append((f"chip chunks ept{ept}", dict(path="on_chip", tuning=dict(
                    chip_chunked=True, chunk_elems_per_thread=ept))))
            if n > 16384:  # rows this long: with and without the pipelined persistent grid
                for st in (1, 2, 3):
                    out.append((f"chip chunks ept128 st{st}", dict(path="on_chip", tuning=dict(
                        chip_chunked=True, chunk_elems_per_thread=128, chip_stages=st,
                        chip_pipelined_block_16bit=1 << 30))))
    if itemsize == 2 and n % 8 and 8184 < n <= 24576:
        # an odd row's window as 3 chunks under a cap of 128 registers: its masks take
        # 137-140 where the aligned row's 3 x 4096 take 128 (triton 3.6, offline), so an SM
        # holds 3 such programs, not the aligned rows' 4 (3 x 8192: 1 program of 8 warps,
        # not 2); shipped for windows of 8241-12,288
        out.append(("chip chunks ept128 cap128", dict(path="on_chip", tuning=dict(
            chip_chunked=True, chunk_elems_per_thread=128, chip_maxnreg=128))))
    # (an odd 16-bit row on chip is one window, up to 7 columns wider: 8191 is 8192 + a tail)
    vec = 16 // itemsize
    width = n + vec - 1 if n % vec and itemsize == 2 else n
    _, _, tail = _chunking(width, chunks=False, tail=True)
    _, chunks3, tail3 = _chunking(width, chunks=True, chunks_tail=True)
    if chunks3 == 3 and tail3 and 4096 < n <= 65536:  # 3 chunks and a tail (12,289's window)
        for ept in (64, 128) if itemsize == 2 else (32, 64):
            out.append((f"chip chunks tail ept{ept}", dict(path="on_chip", tuning=dict(
                chip_chunked=True, chip_chunks_tail=True, chunk_elems_per_thread=ept))))
    if tail and 1024 < n <= 4096:  # ... short rows too (1200 = 1024 + a tail, not 2048)
        for ept in (16, 32):
            out.append((f"chip tail ept{ept}", dict(path="on_chip", tuning=dict(
                chip_tail=True, chip_chunked=False, elems_per_thread=ept))))
    if tail and 4096 < n <= 65536:  # a power-of-two block and a smaller tail past it
        epts = (32, 64) if itemsize == 2 else (16, 32)
        for ept in epts:
            out.append((f"chip tail ept{ept}", dict(path="on_chip", tuning=dict(
                chip_tail=True, chip_chunked=False, elems_per_thread=ept))))
        if itemsize == 2 and 8184 < n <= 9216 and n % 8:
            # ... or a window (odd N) of 8k-9k split as the wider windows are (chunks of 4096
            # in 2 warps, ten per SM, whole vectors of 16 bytes): shipped for windows of
            # 8449-9216 until the capped chunks below beat it (bf16 9,001 at 88% of copy
            # against 86% on chip as 8192 and a tail; 8,191 at 85% against 96%). Parts of 8192
            # in 4 warps five per SM, of 4096 in 4 warps eight per SM, or of 2048 in 2 warps
            # sixteen per SM lost at 8k-14k.
            out.append(("split loose16 c4096 w2 x10", dict(
                path="split", tuning=dict(_SPLIT_16_SMALL_LOOSE))))
        if itemsize == 2 and not n % 8 and 16384 < n <= 18432:
            # ... in 8 warps (a tail of 2048) capped at 80: three programs an SM, not two of 16
            # warps (102 registers uncapped, 28 bytes spilled capped, triton 3.6 offline; the
            # odd rows' windows spill 180); for 16,472 at 89.7% of copy
            out.append(("chip tail ept64 cap80", dict(path="on_chip", tuning=dict(
                chip_tail=True, chip_chunked=False, elems_per_thread=64, chip_maxnreg=80))))
        if itemsize == 2 and 20480 < n <= 24576:  # 16 warps capped to let two share an SM
            out.append(("chip tail ept32 cap64", dict(path="on_chip", tuning=dict(
                chip_tail=True, chip_chunked=False, elems_per_thread=32, chip_maxnreg=64))))
        if n > 16384:  # with and without the pipelined persistent grid
            for st in (1, 3):
                out.append((f"chip tail ept{epts[-1]} st{st}", dict(path="on_chip", tuning=dict(
                    chip_tail=True, chip_chunked=False, elems_per_thread=epts[-1],
                    chip_stages=st, chip_pipelined_block_16bit=1 << 30))))
    # split in small chunks instead of on chip: 16-bit rows, fp32 odd rows and aligned ones
    # past 16,384 (past 32,768 the long-row shapes below have them)
    if 4096 < n <= (49152 if itemsize == 2 else 32768) and (itemsize == 2 or n % 4
                                                              or n > 16384):
        shapes = (((4096, 2, 10), (4096, 4, 8), (2048, 2, 16)) if itemsize == 2
                  else ((4096, 2, 8), (4096, 4, 6), (2048, 2, 12)))
        for chunk, warps, per_sm in shapes:
            out.append((f"split c{chunk} w{warps} x{per_sm} packed st3 loads", dict(
                path="split", tuning=dict(split_chunk=chunk, split_warps=warps,
                                          split_programs_per_sm=per_sm, split_packed=True,
                                          split_stages=3, split_poll_loads=True))))
    if n > 8192:
        # the shipped plan with a split row's programs owning whole chunks and a shorter last
        # one instead of equal parts (the same as "ours" where the plan does not split)
        out.append(("split unbalanced", dict(path="auto", tuning=dict(split_balanced=False))))
        out.append(("split win16", dict(path="auto", tuning=dict(split_window_bytes=16))))
        # rows off a sector as 32-byte windows everywhere, or as 128-byte ones everywhere
        # (the plan takes 32 bytes only where that cuts the row into fewer parts)
        out.append(("split win32", dict(path="auto", tuning=dict(split_window_bytes=32))))
        out.append(("split win128", dict(path="auto", tuning=dict(
            split_fewer_parts_window_bytes=0))))
        out.append(("split loose16", dict(path="auto", tuning=dict(split_loose_vectors=True))))
        out.append(("split st4", dict(path="auto", tuning=dict(split_stages=4))))
        # the exchange a row ahead (split_exchange_ahead): two parts live across the wait, so
        # in shapes of half the shipped part per thread (spill-free: bench/split_ptxas.py)
        for chunk, warps, per_sm in ((4096, 4, 5), (4096, 8, 4), (2048, 2, 10), (8192, 8, 2)):
            out.append((f"split ahead c{chunk} w{warps} x{per_sm}", dict(path="split", tuning=dict(
                split_exchange_ahead=True, split_chunk=chunk, split_warps=warps,
                split_programs_per_sm=per_sm, split_packed=True, split_stages=3,
                split_poll_loads=True))))
        # ... with 16-byte windows (odd N) or none (rows off a sector): it lost on 128-byte
        # windows, whose loose elements are 8x as many (a block-wide reduction per row)
        for chunk, warps, per_sm in ((4096, 4, 5), (2048, 2, 10)):
            out.append((f"split ahead win16 c{chunk} w{warps} x{per_sm}", dict(
                path="split", tuning=dict(
                    split_exchange_ahead=True, split_chunk=chunk, split_warps=warps,
                    split_programs_per_sm=per_sm, split_packed=True, split_stages=3,
                    split_poll_loads=True, split_window_bytes=16))))
        # ... with 128-byte windows whose whole vectors are 16 bytes (split_loose_vectors):
        # as few loose elements as 16-byte windows, and every warp's loads on sectors
        for chunk, warps, per_sm in ((4096, 4, 5), (2048, 2, 10)):
            out.append((f"split ahead loose16 c{chunk} w{warps} x{per_sm}", dict(
                path="split", tuning=dict(
                    split_exchange_ahead=True, split_chunk=chunk, split_warps=warps,
                    split_programs_per_sm=per_sm, split_packed=True, split_stages=3,
                    split_poll_loads=True, split_loose_vectors=True))))
    if n > 32768:
        # the shipped plan without its register cap; pipelined (the next row's chunk copied
        # into shared memory while this row waits), polling with atomics or with loads
        out.append(("split uncapped", dict(path="auto", tuning=dict(split_cap_registers=False))))
        out.append(("split st3", dict(path="auto", tuning=dict(split_stages=3))))
        out.append(("split st3 loads", dict(path="auto", tuning=dict(
            split_stages=3, split_poll_loads=True))))
        out.append(("split st2 loads", dict(path="auto", tuning=dict(
            split_stages=2, split_poll_loads=True))))
        # the PTX poll without the pipelining (no barrier per poll)
        out.append(("split asm", dict(path="auto", tuning=dict(split_poll_asm=True))))
        out.append(("split asm loads", dict(path="auto", tuning=dict(
            split_poll_asm=True, split_poll_loads=True))))
        # the Triton-level poll (atomic reads, a block-wide sum per try), unpipelined, in 32
        # lanes: what 16-bit windows ran before they moved to the PTX poll (fp16 odd rows)
        out.append(("split poll l32", dict(path="auto", tuning=dict(
            split_stages=1, split_poll_asm=False, split_min_lanes=32))))
        # with the PTX poll of loads, in 1-3 stages; the ones past (8192, 4, *) were screened
        # for spills offline (bench/split_ptxas.py) and timed in the seventh and eighth rounds
        # (reports/h200/bench_softmax.md: c4096 w4 x8 st3 now runs 16-bit windows)
        shapes = ((8192, 4, 5), (8192, 4, 4)) + (
            ((4096, 2, 10), (4096, 4, 8), (16384, 4, 3)) if itemsize == 2
            else ((4096, 2, 8), (4096, 4, 6)))
        for chunk, warps, per_sm in shapes:
            for stages in (1, 2, 3):
                name = f"split c{chunk} w{warps} x{per_sm} packed " + (
                    f"st{stages} loads" if stages > 1 else "asm loads")
                out.append((name, dict(path="split", tuning=dict(
                    split_chunk=chunk, split_warps=warps, split_programs_per_sm=per_sm,
                    split_packed=True, split_stages=stages, split_poll_asm=True,
                    split_poll_loads=True))))
        for chunk, warps, per_sm in ((8192, 8, 4), (8192, 16, 4), (4096, 4, 8), (4096, 8, 8)):
            out.append((f"split c{chunk} w{warps} x{per_sm}", dict(path="split", tuning=dict(
                split_chunk=chunk, split_warps=warps, split_programs_per_sm=per_sm))))
        out.append(("split c16384 w8 x2", dict(path="split", tuning=dict(
            split_chunk=16384, split_warps=8, split_programs_per_sm=2))))
        for chunk, warps, per_sm in ((8192, 8, 4), (4096, 4, 8), (16384, 8, 2), (16384, 16, 2),
                                     (8192, 4, 4), (8192, 4, 5)):
            out.append((f"split c{chunk} w{warps} x{per_sm} packed", dict(
                path="split", tuning=dict(split_chunk=chunk, split_warps=warps,
                                          split_programs_per_sm=per_sm, split_packed=True))))
        if itemsize == 2:  # 16-bit long rows stream (two reads) by default
            for tile, warps in ((4096, 8), (4096, 16), (2048, 8)):
                out.append((f"stream t{tile} w{warps}", dict(path="stream", tuning=dict(
                    stream_tile=tile, stream_warps=warps))))
    return out


#: The largest error against float64 a kernel may show on the bench's rows (gaussian, scale 4,
#: outputs at most 1) before its timing is left out as that of a wrong launch: ten times and
#: more what correct kernels show (16-bit: rounding to the output, 2**-9 of at most 1; fp32: a
#: few ulps), far below what a broken one does (a lost rescale, a wrong max: 1e-1 and up).
WRONG_ABOVE = {2: 3e-2, 4: 1e-4}


def plausible(abs_err: float, itemsize: int) -> bool:
    """Whether a max abs error against float64 (``max_errors``) is one a correct kernel shows
    in this element size; NaN or inf never is.

    >>> plausible(2e-3, 2), plausible(0.2, 2), plausible(float("nan"), 4), plausible(1e-6, 4)
    (True, False, False, True)
    """
    return abs_err <= WRONG_ABOVE[itemsize]  # (False for NaN)


#: The kinds of length a random sweep draws in turn, as (modulus, residue): N % modulus ==
#: residue. Each plans differently: odd (rows off the vector in every dtype: windows), an odd
#: multiple of 8 (16-bit rows every other one 16 bytes off a 32-byte sector), an odd multiple
#: of 4 (the same in fp32), 2 mod 4 (off the vector in 16-bit and fp32), a multiple of 16.
RANDOM_KINDS = ((2, 1), (16, 8), (8, 4), (4, 2), (16, 0))


def random_lengths(count: int, seed: int = 0, low: int = 1000, high: int = 65536) -> list[int]:
    """``count`` distinct row lengths in [low, high], log-uniform, the kinds of RANDOM_KINDS
    in turn, sorted: a sweep for the lengths nobody chose (a grid of round numbers missed bf16
    41,800, 81% of copy where its neighbours ran at 91-92%).

    >>> random_lengths(5, seed=1)  # one of each kind
    [1755, 2906, 7936, 24396, 34616]
    """
    import math
    import random

    rng = random.Random(seed)
    found: set[int] = set()
    while len(found) < count:
        modulus, residue = RANDOM_KINDS[len(found) % len(RANDOM_KINDS)]
        n = int(math.exp(rng.uniform(math.log(low), math.log(high))))
        n = n - n % modulus + residue
        if low <= n <= high:
            found.add(n)
    return sorted(found)


def max_errors(y: Any, x: Any) -> tuple[float, float]:
    """(max abs error, max rel error where exact is a normal number of y's dtype) of y vs
    float64 softmax of x (below that, fp16 flushes to subnormals or 0: relative error 1)."""
    import torch

    exact = torch.softmax(x.double(), dim=-1)
    err = (y.double() - exact).abs()
    big = exact > torch.finfo(y.dtype).tiny
    rel = (err[big] / exact[big]).max().item() if big.any() else 0.0
    return err.max().item(), rel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--ns", default=",".join(str(n) for n in NS))
    ap.add_argument("--gb", type=float, default=1.5, help="size of x in GB (M = gb / N / size)")
    ap.add_argument("--tune", action="store_true", help="also time launch variants")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop tuning after this long")
    ap.add_argument("--only", default="", help="with --tune: only the variants whose name "
                    "contains one of these comma-separated words (e.g. 'static,packed')")
    ap.add_argument("--check-rows", type=int, default=16)
    ap.add_argument("--random", type=int, default=0, metavar="K",
                    help="instead of --ns: K lengths drawn at random from 1000-65,536 "
                    "(random_lengths), printed first")
    ap.add_argument("--seed", type=int, default=0, help="with --random: the draw's seed")
    args = ap.parse_args()
    if args.random:
        args.ns = ",".join(str(n) for n in random_lengths(args.random, args.seed))
        print(f"# --random {args.random} --seed {args.seed}: --ns {args.ns}")

    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("bench/softmax.py needs a CUDA device (torch.cuda.is_available() is False)")
    from onlinesm import kernels

    kernels.use_interpreter(False)
    sm = importlib.import_module("onlinesm.kernels.softmax")
    liger = liger_softmax()
    t0 = time.time()
    dev = torch.cuda.get_device_name()
    print(f"# {dev}, torch {torch.__version__}, triton {triton.__version__}, EXP={sm.EXP}")

    results: list[dict[str, Any]] = []
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in (int(v) for v in args.ns.split(",")):
            itemsize = torch.empty(0, dtype=dtype).element_size()
            m = max(1, int(args.gb * 1e9) // (n * itemsize))
            x = torch.randn(m, n, device="cuda", dtype=dtype) * 4
            nbytes = 2 * m * n * itemsize
            row: dict[str, Any] = dict(dtype=dname, N=n, M=m, bytes=nbytes)
            _, row["copy"] = copy_gbps(x)
            xs = x[: args.check_rows]

            cands: list[tuple[str, Callable[[], Any]]] = [
                ("torch", lambda: torch.softmax(x, dim=-1)),
                ("ours", lambda: sm.softmax(x)),
            ]
            if liger is not None:
                cands.append(("liger", lambda: liger(x)))
            if args.tune and time.time() - t0 < args.budget_s:
                only = [w for w in args.only.split(",") if w]
                for name, kw in variants(n, itemsize):
                    if only and not any(w in name for w in only):
                        continue
                    cands.append((name, (lambda kw=kw: sm.softmax(x, **kw))))
            for name, fn in cands:
                try:
                    if name in ("torch", "liger"):
                        y = torch.softmax(xs, -1) if name == "torch" else liger(xs.contiguous())
                    else:
                        kw = dict(next((k for v, k in variants(n, itemsize) if v == name), {}))
                        y = sm.softmax(xs, **kw)
                    abs_err, rel_err = max_errors(y, xs)
                    if not plausible(abs_err, itemsize):
                        print(f"# {dname} N={n} {name}: WRONG: max abs error {abs_err:.3g} "
                              f"against float64 (a correct kernel: <= {WRONG_ABOVE[itemsize]:g}); "
                              "left out of the timings")
                        continue
                    ms = time_ms(fn)
                except Exception as e:  # noqa: BLE001 - a peer refusing a size is a result
                    print(f"# {dname} N={n} {name}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                row[name] = gbps(nbytes, ms)
                row[f"{name}_err"] = (abs_err, rel_err)
            # The launch softmax(x) makes (rows off the vector boundary plan differently).
            plan, knobs, _, shift = sm._launch_plan(x, x, "auto", None, None, None)
            row["plan"] = (f"{plan.path} b{plan.block}" + (f"x{plan.chunks}" if plan.chunks > 1 else "")
                           + (f"+t{plan.tail}" if plan.tail else "")
                           + f" r{plan.rows_per_program} s{plan.split} w{plan.num_warps}"
                           + (f" {sm.split_exchange(knobs, plan.split)}"
                              if plan.path == "split" else f" st{plan.stages}")
                           + (f" win{shift}" if shift > 1 else ""))
            if plan.path == "split" and sm._launch(x, x, "auto", None, None, None,
                                                   False).options.get("REACH"):
                row["plan"] += " reach"  # loads bounded by x's memory (the last row's reach)
            results.append(row)
            del x
            torch.cuda.empty_cache()
            best = max((k for k in row if k not in ("dtype", "N", "M", "bytes", "copy", "plan")
                        and not k.endswith("_err")), key=lambda k: row[k], default=None)
            print(f"{dname:9s} N={n:7d} M={m:7d} copy {row['copy']:6.0f}  "
                  + "  ".join(f"{k} {row[k]:.0f}" for k in row
                              if isinstance(row[k], float) and k != "copy")
                  + f"  | best {best} | ours err {row.get('ours_err')} | {row['plan']}"
                  + f"  [{time.time() - t0:.0f}s]", flush=True)

    header = ["dtype", "N", "M", "copy GB/s", "ours GB/s", "ours/copy", "torch GB/s",
              "ours/torch", "liger GB/s", "ours/liger", "ours max rel err", "plan"]
    table = []
    for r in results:
        ours, torch_, lig = r.get("ours"), r.get("torch"), r.get("liger")
        table.append([
            r["dtype"], r["N"], r["M"], r["copy"], ours,
            f"{ours / r['copy']:.0%}" if ours else None, torch_,
            f"{ours / torch_:.2f}x" if ours and torch_ else None, lig if lig else "refused",
            f"{ours / lig:.2f}x" if ours and lig else None,
            f"{r['ours_err'][1]:.2e}" if "ours_err" in r else None, r["plan"],
        ])
    md = markdown_table(header, table)
    print(md)
    short = [f"{r['dtype']} {r['N']} {r['ours'] / r['copy']:.1%}" for r in results
             if r.get("ours") and r["ours"] < 0.9 * r["copy"]]
    print(f"# below 90% of copy: {', '.join(short) or 'none'}")
    if args.tune:
        tune_rows = []
        for r in results:
            for k, v in r.items():
                if isinstance(v, float) and k not in ("copy",):
                    err = r.get(f"{k}_err")
                    tune_rows.append([r["dtype"], r["N"], k, v, f"{v / r['copy']:.0%}",
                                      f"{err[1]:.2e}" if err else None])
        tmd = markdown_table(["dtype", "N", "kernel", "GB/s", "of copy", "max rel err"], tune_rows)
        print(tmd)
        md += "\n\n" + tmd
    write_outputs("softmax", dict(device=dev, torch=torch.__version__,
                                  triton=triton.__version__, exp=sm.EXP, rows=results), md)


if __name__ == "__main__":
    main()
