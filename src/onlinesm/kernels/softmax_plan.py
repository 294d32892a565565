"""How the Triton softmax launches: measured defaults, per-range overrides, and the plan.

What: :data:`TUNING` (the launch knobs and their defaults), :data:`PLAN_TABLE` (overrides per
element size and row length, each row measured on an H200: reports/h200/bench_softmax.md),
:class:`Plan` and :func:`plan` (which kernel runs a row of a given length, with which block,
warps and stages), and the split kernel's grid sizing (:func:`_programs_that_fit`,
:func:`_register_cap`). Why apart from the kernels: this is plain Python, read by the
launcher, the tests and ``bench/softmax.py --tune`` alike; it imports neither torch nor
triton, so a plan can be asked for without a GPU or an interpreter.

Example:
    >>> from onlinesm.kernels.softmax_plan import plan
    >>> plan(12288, itemsize=2, interpreted=False)
    Plan(path='on_chip', block=4096, rows_per_program=1, split=1, num_warps=4, stages=1, chunks=3, tail=0)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from onlinesm.errors import did_you_mean
from onlinesm.kernels import interpreting
from onlinesm.kernels.launching import next_pow2 as _pow2

__all__ = ["TUNING", "PLAN_TABLE", "PATHS", "Plan", "plan", "SplitExchange", "split_exchange",
           "split_columns"]

#: The kernels a plan can name; "auto" lets :func:`plan` choose.
PATHS = ("auto", "on_chip", "stream", "split")

#: Launch parameters, measured on the H200 (reports/h200/bench_softmax.md). Tests and the bench
#: override them per call through :func:`softmax`'s keywords or :func:`plan`.
TUNING: dict[str, Any] = {
    "max_on_chip": 32768,  # longest row kept in registers by one program (elements)
    "elems_per_thread": 16,  # on-chip kernel: num_warps = BLOCK_N / (32 * this), in [1, 32]
    "min_elems_per_program": 4096,  # short rows are packed until a program has this much
    "chip_stages": 1,  # > 1: persistent on-chip grid with pipelined loads, for every row size
    "chip_programs_per_sm": 1,
    # 16-bit rows in blocks this large fill an SM's registers alone: pipeline them (measured on
    # the H200 at N = 32768 bf16: 3906 GB/s pipelined, 3424 not; at 12288 it lost, 3107 vs 3555).
    "chip_pipelined_block_16bit": 32768,
    "chip_pipelined_stages": 3,
    "stream_tile": 8192,
    "stream_warps": 16,
    # Long rows on the GPU: fp32 split across programs (1 read); 16-bit rows streamed (2
    # reads) by default, split by PLAN_TABLE (past 49,152, and some rows and windows of 8k-49k).
    "split_itemsizes": (4,),
    # Four programs of 8 warps per SM, 8192 elements each: one program's loads overlap the
    # others' reductions and waits (measured on the H200, fp32, medians of 3 runs: 86/84/81% of
    # copy at 64k/128k/256k against 78/75/68% with one 32-warp program of 32768 per SM).
    "split_chunk": 8192,
    "split_warps": 8,
    "split_programs_per_sm": 4,
    "max_spin": 1 << 20,  # ~1 s of polling: far beyond any real wait, short of a hang
    # Split rows exchange (m_c, d_c) as one 64-bit word that is its own ready flag instead of
    # two words and a counter (one store and one read per poll instead of a fence, a count, a
    # poll and a read; see _exchange_packed). PLAN_TABLE turns it on for long rows.
    "split_packed": False,
    # Size the split grid by what the compiled kernel's registers let an SM hold (known after
    # its first launch) instead of split_programs_per_sm alone: bf16 windows in chunks of 4096
    # take 72 registers, 7 programs per SM where the grid counts 8, and the last groups wait
    # for programs that start late (H200: bf16 50,257 78% of copy against 59%, fp32 100,001
    # 60% against 48%, the rest unchanged).
    "split_fit_registers": True,
    # Compile the split kernel with a register cap that lets split_programs_per_sm programs
    # share an SM: fp32 windows in chunks of 16,384 take 152 registers, one program per SM
    # where the plan wants two; capped at 128 they spill 60 bytes and run two (H200: fp32
    # 65,537 / 100,001 at 77% / 78% of copy against 59% / 60%; aligned rows unchanged).
    "split_cap_registers": True,
    # > 1 software-pipelines the split kernel's row loop (packed exchange only): the next
    # row's chunk is copied into shared memory (cp.async) while this row reduces, waits for its
    # other chunks and stores, so an SM keeps bytes in flight through the wait that bounds
    # split rows (Nsight Compute: latency). 3 = two buffers, the next row's copy in flight
    # during this whole row. PLAN_TABLE sets it for long rows (2 in fp32, 3 in 16-bit).
    "split_stages": 1,
    # The packed exchange's poll as one PTX loop per thread (what split_stages > 1 needs) also
    # without pipelining: no block-wide reduction and barrier per poll, only one after it.
    "split_poll_asm": False,
    "split_poll_loads": False,  # with that PTX poll: relaxed loads, not atomics
    # The merge's lanes (one per chunk) padded to at least this many: with 16 lanes or fewer
    # over 128 threads each lane's values are held 8 or more times over, and ptxas (triton
    # 3.6) spills under the register cap (bf16 chunks of 8192 at 96 registers, pipelined: 36
    # bytes with 8 or 16 lanes, none with 32; bench/split_ptxas.py).
    "split_min_lanes": 32,
    # Each of a split row's programs owns an equal share of it (split_columns), not a whole
    # chunk but the last: a row waits for its longest part, and a short last chunk leaves
    # its program idle while the others load (bf16 33,000 in five chunks of 8192: four full,
    # one of 232; 82.6% of copy in equal parts against 81.7%).
    "split_balanced": True,
    # Split rows as windows that start on this many bytes (and parts of a multiple of them)
    # where a row starts off a vector or a 32-byte sector: a warp's 512-byte load off a
    # sector touches 17 sectors instead of 16, and split rows paid 4-6 points of copy
    # bandwidth for it (H200, bf16 21,000: 84% of copy with every other row 16 bytes off, 88%
    # on 128-byte rows, bench/row_alignment.py; as windows of 128 bytes 2-7% faster than
    # windows of 16 for odd and off-sector rows of 16k-100k in every dtype). 16: one vector,
    # only where a row starts off the vector.
    "split_window_bytes": 128,
    # ... or of this many bytes (0: never) where that cuts the row into fewer parts: a row
    # spans its windows' width less gcd(row stride, width) more columns (_window_span), so
    # bf16 rows of 22,520, 16 bytes off a sector every other row, span 22,576 columns as
    # 128-byte windows (12 parts of 2048) and 22,528 as 32-byte ones (11). H200, medians of 3,
    # bf16 / fp16: 22,520 at 91.4 / 92.2% of copy against 89.4 / 90.0%, 32,760 (16 parts, not
    # 17) at 91.8 / 91.0% against 90.7 / 90.5%; where the parts stay as many, 32-byte windows
    # lost 0.3-0.8 points (21,000, 22,264, 33,000, 36,008), so they are not the rule, but
    # where only the 128-byte windows' loads would pass x's memory (REACH, a mask per row):
    # the bench's 22,776 at 90.2 / 89.2% against 89.9 / 88.9%.
    "split_fewer_parts_window_bytes": 0,
    # Windows (rows off a vector) whose split_window_bytes windows the plan's parts do not
    # cover (they span up to width - 1 more columns: a band just below each multiple of the
    # part), as windows of this many bytes where those fit, not of 16, whose warps' loads
    # straddle sectors (H200, bf16 / fp16, five parts of 4096: 20,449 / 20,452 at 90.0 / 89.7%
    # and 89.7 / 89.2% of copy, medians of 3, against 88 / 86% and 87 / 86% as 16-byte
    # windows in one run; the 32-byte windows screened 90 / 89% and 89 / 90% in that run).
    "split_narrow_window_bytes": 32,
    # Inside such windows, the row's whole vectors of 16 bytes, not of the window: a row then
    # has at most 2 x 7 loose elements (16-bit; 2 x 3 in fp32), not 2 x 63 (2 x 31), and chunk
    # 0's max and sum of them stay inside a warp. Offline (triton 3.6, bf16 12,289 in chunks of
    # 4096): 14 -> 8 barriers, as many as aligned rows, and 1,232 -> 1,192 SASS instructions.
    # PLAN_TABLE turns it on for 16-bit windows of 9k-16k and 36k-49k and rows off a sector of
    # 20k-41k (H200: 0.4-1.3 points of copy bandwidth); elsewhere it was level or behind.
    "split_loose_vectors": False,
    # Each split program reads its part of row r + 1 and publishes that part's (m, d) before
    # it waits for row r's: the wait that bounds split rows (Nsight Compute: latency) then
    # finds the other parts of row r published a whole part earlier. Two parts are live in
    # registers across the wait (packed exchange only), so it runs in half the part per
    # thread. PLAN_TABLE turns it on for aligned 16-bit split rows (20k-23k, 24,577-131k) and
    # fp32 split rows (past 49k; H200, medians of 3: bf16 52,000 91% of copy against 87%, fp32
    # 524,288 94% against 86%); windows lost with it and keep it off.
    "split_exchange_ahead": False,
    # Knobs over the PLAN_TABLE row's for rows handled as aligned windows (odd N, up to 7
    # loose elements at each end): the windowed kernels load and spill differently, so a
    # window can take another path or launch than an aligned row of its length (PLAN_TABLE).
    "window_overrides": {},
    # Knobs over the PLAN_TABLE row's for aligned rows that start off a 32-byte sector (16-bit
    # N an odd multiple of 8, fp32 an odd multiple of 4), which the split kernel reads as
    # windows of split_window_bytes (the launcher: _launch_plan): where a row splits with the
    # exchange a row ahead, which lost on 128-byte windows of the windows' vectors, they take
    # the windows' launch, or the aligned rows' launch as windows of 16-byte vectors
    # (split_loose_vectors), or (split_window_bytes=16) read unwindowed. With a max_on_chip
    # of their own, they also decide whether such rows leave the chip where the aligned rows'
    # plan keeps them there (16-bit 23,553-24,576).
    "off_sector_overrides": {},
    # Candidates for the H200 sweep (off by default until measured; bench/softmax.py --tune):
    "chip_chunked": False,  # cover a row by 3 power-of-two chunks when that pads less
    # cover a row by a power-of-two block and a smaller power-of-two tail when that pads less
    # (17,000 = 16,384 + 1024 columns, not 32,768 or 3 x 8192; plan() widens the tail to one
    # 16-byte vector per thread)
    "chip_tail": False,
    # ... or by 3 power-of-two chunks and a smaller power-of-two tail past them, when that pads
    # less (an odd 16-bit row of 12,289, a window of 12,296 columns: 3 x 4096 + a tail, not
    # 16,384; plan() widens the tail as for chip_tail)
    "chip_chunks_tail": False,
    # elements per thread when the row is held as 3 chunks; 0: the same as elems_per_thread
    "chunk_elems_per_thread": 0,
    "chip_warps": 0,  # on-chip num_warps; 0: BLOCK_N * ROWS / (32 * elems_per_thread)
    # > 0: compile the on-chip kernel with this register cap (maxnreg) on the GPU, so that more
    # programs share an SM (bf16 22,000 as 16,384 + 8192 in 16 warps takes 72 registers, one
    # program per SM; capped at 64 it compiles spill-free and two fit)
    "chip_maxnreg": 0,
    "chip_windows_packed": False,  # 16-bit odd rows as windows on chip with several per program
    # Short rows off the 16-byte vector boundary (loaded element by element) are packed until a
    # program has this many elements instead; 0: min_elems_per_program (PLAN_TABLE sets it).
    "unaligned_elems_per_program": 0,
    "unaligned_elems_per_thread": 0,  # ... and this many per thread; 0: elems_per_thread
}

#: Per-range overrides of :data:`TUNING` that :func:`plan` applies for ``path="auto"``: rows of
#: ``(itemsize, n_min, n_max, overrides)``, the first row with ``itemsize`` equal to the element
#: size and ``n_min < n_cols <= n_max`` wins; a caller's ``tuning=`` still overrides it.
#: Switching a range to a measured winner is one row.
#:
#: Measured on an H200 (reports/h200/bench_softmax.md, 2026-12-01): fp32 rows of 32k-48k on chip
#: as 3 chunks of 16,384 reach 94% of copy bandwidth at N = 49,152, against 65% split across
#: programs (the first row). In bf16 the chunked rows lost to the defaults (63-66% at 12,288
#: against 81%, with 16 warps, two rows per program or a pipelined grid as well; still 63% with
#: one exp per element instead of two, so the exp unit is not what holds it back). Two knobs lost
#: everywhere and were removed: the split kernel loading the next row's chunk before the wait
#: (42-65% of copy against 61-76%), and holding x in its storage dtype (spilled registers at
#: 64k bf16, never faster).
#: 16-bit rows of 4k-32k on chip with 64 elements per thread (a quarter of the threads per
#: row, so an SM holds more rows in flight while each reduces): bf16 12,288 88% of copy against
#: 81%, 16,384 96% against 92%, 24,576 89% against 86%, 6,144 100% against 92%; fp16 the same;
#: 8,192 and 32,768 unchanged (98%, 90%).
#: 16-bit rows past 65,536 split across programs (one read) instead of streamed (two): 68% and
#: 63% of copy at 131,072 and 262,144 in bf16, against 66% and 61% (at 65,536 both 72-73%).
#: 16-bit rows that 3 chunks cover with less padding (3000, 5000, 10-12k, 40-48k) are held as
#: 3 chunks with 128 elements per thread (4 warps per 4096-chunk row: several rows in flight
#: per SM, and no padded third of the registers): bf16 12,288 97% of copy against 87%, 10,000
#: 90% against 77%, 49,152 90% against 74% streamed, 40,000 90% against 74%; fp16 12,288 98%
#: against 88%. Rows of 16-24k (3 x 8192) add the pipelined persistent grid (3 stages): bf16
#: 24,576 93% against 89%, 20,000 82% against 76%; fp16 90% against 90%, 83% against 78%.
#: Short rows off the 16-byte vector boundary (odd N: loaded element by element) run in smaller
#: programs, 512 to 2048 elements by length, and 16-bit rows up to 65 as several windows per
#: program: bf16 33 / 77 / 127 / 255 / 1001 at 45 / 47 / 68 / 75 / 77% of copy against 16 /
#: 18 / 29 / 38 / 66% (1.2-1.8x torch, was 0.45-0.65x below 512); fp32 33 / 77 / 127 at 62 /
#: 95 / 94% against 32 / 35 / 60%. Aligned short rows already ran at 97-98% and keep 4096.
#: Odd 16-bit rows of 513-2048 take 32 elements per thread in programs of 2048 (2 warps for
#: two rows of 1001): bf16 700 / 1001 / 1500 at 75 / 84 / 86% of copy against 74 / 80 / 70%
#: (medians of 3).
#: Long rows split with the one-word (m, d) exchange, in chunks that give at most 32 a row
#: (medians of 3, % of copy): fp32 in chunks of 16,384, two 8-warp programs per SM, 87 / 87 /
#: 86% at 65,536 / 131,072 / 262,144 against 86 / 84 / 82% (chunks of 8192 with the counter);
#: bf16 in chunks of 4096 (4 warps, 8 programs per SM) up to 131,072, 86% at 65,536 (74%
#: streamed) and 81% at 131,072 (69%), in chunks of 8192 up to 262,144, 76% (64%). With 64
#: chunks a row the polls contend (bf16 262,144 in chunks of 4096: 47%), so longer rows keep
#: the counter. 16-bit rows of 49k-256k then moved to chunks of 8192 in 4 warps, five programs
#: per SM with registers capped at 96 (80 KB of loads in flight per SM, against 64 KB with
#: eight chunks of 4096): bf16 65,536 / 131,072 / 151,936 / 262,144 at 87 / 86 / 85 / 83% of
#: copy against 86 / 83 / 79 / 76% (one run; medians in reports/h200/bench_softmax.md);
#: fp32 rows of 49k-256k likewise in 4 warps, four programs of 8192 per SM (registers capped
#: at 128): 65,536 / 100,001 / 131,072 / 262,144 at 88 / 87 / 88 / 88% against 87 / 78 / 87 /
#: 86% in chunks of 16,384 (one run; five programs per SM: 82-83%).
#: Polls that back off (a failed poll sleeping 64-1024 ns before the next, so that ~1000
#: polling programs load L2 less) never won: equal at 64 ns, 1-4 points lower at 256 ns, up
#: to 22 lower at 1024 ns (bf16 and fp32, 50k-262k); not kept.
#: The wait as one PTX loop of relaxed loads per thread, and the row loop pipelined (the next
#: row's chunk copied into shared memory while this row waits), with the merge in 32 lanes at
#: least (fewer spill under the register cap); medians of 3, % of copy: fp32 65,536 /
#: 131,072 / 262,144 / 524,288 at 91 / 92 / 90 / 85% against 87 / 89 / 87 / 80% (2 stages);
#: bf16 65,536 / 131,072 / 151,936 / 262,144 / 524,288 at 89 / 89 / 91 / 90 / 81% against
#: 87 / 86 / 85 / 82 / 57% (3 stages; past 32 chunks the PTX poll does not contend where the
#: Triton-level one did). 16-bit windows (odd N) spill when pipelined in chunks of 8192 five
#: per SM (44 bytes) and stayed in one stage: bf16 50,257 / 100,001 83 / 82%, fp16 71 / 71%.
#: 16-bit rows of 8k-49k split in small chunks (4096 in 2 warps, ten programs per SM, 3
#: stages) where on chip pads or holds windows badly (one run, % of copy, bf16 / fp16):
#: aligned 16,400 / 17,000 / 18,000 / 20,000 at 87 / 84 / 88 / 89% against 71 / 68 / 76 / 82%
#: (fp16 the same within 2 points; at 22,528 and 24,576 on chip keeps 91-93%); windows
#: 10,001 / 12,289 / 20,001 / 30,001 at 87 / 85 / 87 / 88% against 71 / 75 / 57 / 71% (16,001:
#: 86% against 88%). 16-bit windows of 32k-262k pipelined in chunks of 4096, 4 warps, eight
#: per SM (no spill): fp16 40,001 / 50,257 / 70,001 / 100,001 / 150,001 at 85 / 83 / 83 / 82 /
#: 80% against 61 / 71 / 75 / 71 / 71%, bf16 85 / 82 / 82 / 82 / 79% against 59 / 82 / 84 /
#: 82 / 81%.
#: 16-bit rows of 49k-131k in chunks of 8192 four per SM (registers capped at 128) instead of
#: five (medians of 3, % of copy, bf16 / fp16): 65,536 89.9 / 90.3 against 88.7 / 89.5,
#: 131,072 90.5 / 90.5 against 89.8 / 90.1, 98,304 within 0.2; at 262,144 four lost (83.6 /
#: 83.7 against 89.3 / 89.2), so past 131,072 five stay. Aligned rows of 32,769-40,960 split
#: the same way instead of on chip in 3 chunks of 16,384 (which pad them by 20-50%): 36,000
#: 87.9 / 88.0 against 81.7 / 84.4, 40,000 91.1 / 91.0 against 89.1 / 91.8; from 45,056 on
#: chip stays ahead or level (45,056 90.8 / 89.8 against 89.2 / 89.4).
#: 16-bit rows of 32,769-35,840 in chunks of 4096 (2 warps, ten per SM) instead of 8192 four
#: per SM (one run, % of copy, bf16 / fp16): 33,000 84.9 / 85.5 against 82.1 / 82.2, 34,000
#: 88.3 / 89.4 against 85.2 / 86.7, 34,816 91.0 / 90.1 against 88.3 / 87.8; at 36,000 level.
#: The exchange a row ahead (split_exchange_ahead) for split rows the kernel reads unwindowed
#: (medians of 3, % of copy, against the previous plan in the same runs): bf16 36,000 / 40,000
#: / 52,000 / 65,536 in chunks of 2048 (2 warps, ten per SM) 92.0 / 92.2 / 91.1 / 93.2 against
#: 87.9 / 90.9 / 87.1 / 90.9 (chunks of 8192 four per SM); 81,920 / 98,304 / 131,072 in chunks
#: of 4096 (4 warps, five per SM) 91.5 / 92.3 / 90.8 against 89.8 / 90.3 / 90.2; fp16 the same
#: within a point; fp32 196,608 / 262,144 / 393,216 / 524,288 / 1,048,576 in chunks of 4096
#: 92.5 / 92.7 / 92.7 / 94.2 / 90.8 against 91.3 / 89.8 / 87.1 / 85.5 / 82.2, level at 52k-131k.
#: It lost on windows (bf16 33,000 / 36,008 / 100,001: 77 / 75 / 75% against 87 / 89 / 89%)
#: and on bf16 rows past 262,144 but 524,288 (262,144 / 393,216 / 1,048,576: 86 / 80 / 69%
#: against 89 / 87 / 78%). Rows off a 32-byte sector (read as windows) in those ranges take
#: the windows' knobs, chunks of 8192 five per SM: bf16 36,008 / 52,008 at 88.8 / 88.6%
#: against 83.8 / 84.1% with the aligned rows' four per SM. Aligned bf16 rows of
#: 20,481-23,552 and 32,769-35,840 in chunks of 2048 with it instead of 4096 without:
#: 20,992 / 22,016 / 23,040 / 33,024 / 34,816 at 93.0 / 94.0 / 92.2 / 93.7 / 93.3% against
#: 88.4 / 88.5 / 90.3 / 89.8 / 90.0%; rows off a sector there keep chunks of 4096 ten per SM
#: (33,000 / 34,008 at 87.2 / 88.1% against 84.7 / 85.8% in the windows' eight per SM). fp32
#: rows of 52k-131k in chunks of 2048 with it: 52,000 / 65,536 / 98,304 / 131,072 at 92.5 /
#: 90.9 / 93.2 / 92.9% against 90.6 / 90.2 / 92.2 / 91.6%, taken (eighteenth round, as
#: shipped, medians of 3: 93 / 91 / 92 / 92%). Eighteenth round: rows off a sector of 20k-23k
#: and 32k-41k read unwindowed with the aligned rows' launch (the exchange a row ahead in
#: chunks of 2048) rather than as 128-byte windows without it: bf16 21,000 / 33,000 / 36,008
#: at 88.6 / 88.8 / 89.5% against 86.3 / 86.8 / 88.5% (odd N lost with it: 50,257 / 100,001
#: at 77 / 74% against 88 / 89%; chunks of 4096 in 4 warps lost everywhere).
#: Nineteenth round (medians of 3, % of copy): aligned 16-bit rows of 24,577-32,768 split with
#: the exchange a row ahead in chunks of 2048 instead of on chip (32,768 in 16 warps,
#: pipelined): bf16 28,672 / 32,768 at 93.3 / 93.0 against 90.4 / 88.5, fp16 93.7 / 93.2
#: against 90.0 / 90.3 (at 24,576, on chip as 3 x 8192, level in bf16: it stays); fp32 rows of
#: 513-1024 one per program.
#: Twentieth round (medians of 3, % of copy): a window's offsets in 32 bits (one 32-bit
#: comparison per vector in its masks, not a 64-bit one) lifted bf16 odd rows 2-4 points
#: (12,289 / 50,257 / 4,097 at 88.4 / 89.5 / 87.7 against 84.1 / 88.3 / 83.5), and changed
#: two windows' launches: 16-bit windows of 49,153-131,072 in chunks of 4096 (2 warps, ten
#: per SM) instead of 8192 five per SM (bf16 50,257 / 65,537 / 100,001 at 90.7 / 90.4 / 90.2
#: against 89.2 / 89.7 / 89.5; at 36,001-45,001 chunks of 8192 stay ahead or level), and
#: windows wider than 262,144 pipelined in 3 stages like the aligned rows (bf16 262,143 /
#: 300,007 / 524,287 / 1,048,575 at 88.3 / 86.4 / 85.5 / 69.2 against 79.0 / 76.6 / 64.3 /
#: 58.4 in one stage; 128-byte windows compile without the spill that kept 16-byte ones in
#: one stage).
#: Rows just past a power of two on chip as that block and a smaller power-of-two tail (widened
#: to one 16-byte vector per thread), instead of split in small chunks or padded (one run, % of
#: copy): bf16 / fp16 17,000 / 18,000 / 20,000 at 90.0 / 94.0 / 97.6% and 91.2 / 94.8 / 97.8%
#: against 84.1 / 88.4 / 88.8% and 84.8 / 88.5 / 88.4% (16,384 + 4096 in 16 warps); fp32
#: 9,000 98.1% against 96.4% (8192 + 2048), 17,000 / 18,000 / 20,000 98.2 / 98.3 / 92.4%
#: against 89.9 / 90.0 / 91.1% (16,384 + 2048 or 4096), 33,000 94.8% against 90.3% (32,768 +
#: 4096). Level or behind elsewhere: 16-bit 9,000-10,000 and 33,000-40,000, fp32 10,000 and
#: 36,000-40,000. Odd 16-bit rows as windows with a tail ran at 61-74% (17,001, 20,001) before
#: the tail was widened (their loads now compile as the aligned rows'; not re-timed): split.
#: fp32 windows of 32k-49k split as the longer rows (chunks of 8192, four per SM) instead of
#: on chip element by element: 40,001 at 89% of copy against 61% (medians of 3). fp32 aligned
#: rows of 16,385-20,480, which one block of 32,768 pads by 60% or more, in chunks of 2048
#: (2 warps, twelve per SM; one run): 16,400 / 17,000 / 18,000 / 20,000 at 89 / 89 / 89 / 91%
#: against 80 / 81 / 84 / 88% (22,000 stays on chip: 92% against 89%); since replaced by the
#: on-chip block and tail above (97-98% at 17,000-18,000).
#: fp32 rows off the vector (odd N) of 4k-32k, loaded element by element on chip, split as
#: windows in small chunks instead, where the on-chip block pads them most (one run, % of
#: copy): 5,001 in chunks of 4096 (2 warps, eight per SM) 89% against 76% (Liger 79%);
#: 12,289 / 20,001 / 30,001 in chunks of 2048 (2 warps, twelve per SM) 87 / 89 / 88% against
#: 72 / 70 / 80%. 7,001 stays on chip (92% against 86%).
#: Twenty-second round (medians of 3, % of copy, bf16 / fp16, against the previous plan in
#: the same runs): split windows with whole vectors of 16 bytes (split_loose_vectors) at
#: 9k-16k and 36k-49k: 12,289 / 36,001 / 45,001 at 90.2 / 91.7 / 91.7 and 90.1 / 92.1 /
#: 92.8 against 89.0 / 90.6 / 91.2 and 89.1 / 91.4 / 92.4 (level or behind at 20,001,
#: 24,577 and 50,257 in the screen); rows off a sector of 20k-41k as 128-byte windows of
#: 16-byte vectors with the aligned rows' launch: 33,000 at 89.7 / 91.4 against 88.4 / 90.3
#: unwindowed; odd rows of 810-2041 on chip as windows (833 / 1,001 / 1,500 / 1,999 up 1.5-10
#: points; 777 lost 3.6 in bf16 and stays element by element); bf16 windows of 3 x 1024 in
#: one warp capped at 128 registers: 2,047 at 98.0 against 90.1.
#: Twenty-third round (medians of 3, % of copy, bf16 / fp16, against the previous plan in the
#: same runs): odd rows of 506-2041 one window per program in one warp (601 / 777 / 1,300 at
#: 85.8 / 97.2 / 95.5 and 88.4 / 98.9 / 97.8 against 67.3 / 76.9 / 86.6 and 66.2 / 74.8 /
#: 88.9), aligned rows of 1025-1536 as 1024 and a tail (1,200 at 99.7 / 99.9 against 81.0 /
#: 85.5), odd rows of 3066-4089 as 4096 in 2 warps (3,500 at 99.4 / 99.4 against 85.2 / 86.7).
#: Twenty-fourth round (medians of 3, % of copy, bf16 / fp16, against the previous plan in
#: the same runs): windows of 513-1536 as a block and a tail in one warp (531 / 601 / 1,101 /
#: 1,300 at 82.0 / 88.8 / 100.5 / 99.5 and 82.0 / 90.2 / 100.1 / 99.6 against 78.7 / 85.0 /
#: 88.1 / 95.3 and 80.6 / 87.5 / 91.4 / 97.2), windows of 8449-9216 split in chunks of 4096
#: (9,001 / 9,209 at 88.4 / 90.1 and 89.3 / 91.1 against 85.6 / 86.6 and 86.9 / 87.8).
#: Twenty-sixth round (medians of 3, % of copy, bf16 / fp16, against the previous plan in the
#: same runs): windows of 8241-12,288 on chip as 3 x 4096 capped at 128 registers (8,441 /
#: 9,001 / 12,281 at 94.0 / 97.0 / 96.3 and 95.9 / 97.6 / 95.6 against 87.0 / 90.0 / 86.5
#: and 88.4 / 89.0 / 86.5; _WINDOWS_16_CHUNKS_CAPPED).
_SPLIT_FP32_SMALL = dict(split_packed=True, split_stages=3, split_poll_loads=True,
                         split_warps=2)
# fp32 windows of 8k-32k: chunks of 2048 in 2 warps, twelve per SM
_WINDOWS_FP32_SMALL = dict(_SPLIT_FP32_SMALL, split_chunk=2048, split_programs_per_sm=12,
                           max_on_chip=8192)
_SPLIT_FP32_LONG = dict(split_packed=True, split_chunk=8192, split_warps=4,
                        split_programs_per_sm=4, split_stages=2, split_poll_loads=True,
                        split_exchange_ahead=False)
_SPLIT_16_BIT = dict(split_itemsizes=(2, 4), split_packed=True, split_stages=3,
                     split_poll_asm=True, split_poll_loads=True, split_exchange_ahead=False)
# chunks of 4096 in 2 warps, ten programs per SM (registers capped at 96)
_SPLIT_16_SMALL = dict(_SPLIT_16_BIT, split_chunk=4096, split_warps=2, split_programs_per_sm=10)
# chunks of 8192 in 4 warps for long 16-bit rows: four programs per SM (registers capped at
# 128) up to 131,072, five (capped at 96) past it
_SPLIT_16_8K = dict(_SPLIT_16_BIT, split_chunk=8192, split_warps=4)
# ... five per SM (capped at 96) for 16-bit windows of 36k-49k and 131k-262k and rows off a
# sector of 49k-262k: 16-byte windows had spilled 44 bytes in this shape (triton 3.6);
# 128-byte windows compile without a spill (triton 3.9, bench/split_ptxas.py;
# tests/test_kernel_softmax.py checks it) and ran 3-9 points of copy bandwidth ahead of
# chunks of 4096 in 4 warps eight per SM (H200, bf16, medians of 3: 40,001 92% against 87%,
# 100,001 88% against 84%, 262,137 85% against 76%; windows of 49k-131k have since moved to
# chunks of 4096 in 2 warps ten per SM)
_SPLIT_16_8K_WINDOWS = dict(_SPLIT_16_8K, split_programs_per_sm=5)
# The exchange a row ahead (split_exchange_ahead: two parts live across the wait, so half the
# part per thread): aligned 16-bit rows of 20,481-23,552 and 24,577-65,536 in chunks of 2048
# in 2 warps, ten per SM, of 65,537-131,072 in chunks of 4096 in 4 warps, five per SM; fp32
# rows of 49,153-131,072 in the first shape, past 131,072 in the second. Rows the split kernel
# reads as windows lost with it (bf16 33,000: 77% of copy against 87%, 100,001 66-75% against
# 89%): windows (odd N) take the row's window_overrides, and rows off a 32-byte sector its
# off_sector_overrides.
_AHEAD = dict(split_exchange_ahead=True, split_packed=True, split_stages=3,
              split_poll_loads=True)
_SPLIT_16_AHEAD_2K = dict(_SPLIT_16_BIT, **_AHEAD, split_chunk=2048, split_warps=2,
                          split_programs_per_sm=10)
_SPLIT_16_AHEAD_4K = dict(_SPLIT_16_BIT, **_AHEAD, split_chunk=4096, split_warps=4,
                          split_programs_per_sm=5)
_SPLIT_FP32_AHEAD = dict(_SPLIT_FP32_LONG, **_AHEAD, split_chunk=4096, split_programs_per_sm=5,
                         window_overrides=_SPLIT_FP32_LONG, off_sector_overrides=_SPLIT_FP32_LONG)
# ... fp32 rows of 49,153-131,072 in chunks of 2048 in 2 warps, ten per SM (H200, medians of
# 3: 52,000 / 65,536 / 98,304 / 131,072 at 92.5 / 90.9 / 93.2 / 92.9% of copy against
# 90.6 / 90.2 / 92.2 / 91.6% for chunks of 8192 four per SM, which windows keep)
_SPLIT_FP32_AHEAD_2K = dict(_SPLIT_FP32_AHEAD, split_chunk=2048, split_warps=2,
                            split_programs_per_sm=10)
# ... rows off a 32-byte sector of 20k-23k and 24,577-41k with the aligned rows' launch, the
# exchange a row ahead in chunks of 2048, read as 128-byte windows whose whole vectors are 16
# bytes (split_loose_vectors: such a row has no loose element). H200, medians of 3, bf16 /
# fp16: 21,000 / 33,000 / 36,008 at 89.5 / 90.2 / 90.8% and 90.8 / 91.2 / 91.7% of copy
# against 88.3 / 89.0 / 89.4% and 89.6 / 89.9 / 90.1% unwindowed (16-byte windows: each
# warp's loads straddle sectors), which had beaten 128-byte windows of the windows' vectors
# (86.3 / 86.8 / 88.5%, bf16). Where 32-byte windows take fewer parts (or spare REACH), they
# are taken (split_fewer_parts_window_bytes).
_OFF_SECTOR_LOOSE = dict(split_loose_vectors=True, split_fewer_parts_window_bytes=32)
# ... and where the aligned rows stay on chip (23,553-24,576, 3 x 8192 in 3 stages), split as
# those of 20,481-23,552 (H200, medians of 3, bf16 / fp16: 23,560 / 24,008 / 24,392 at 91.6 /
# 92.2 / 92.3% and 91.0 / 91.6 / 92.2% of copy against 81 / 82 / 82% and 83 / 82 / 82% on
# chip in one run, whose loads straddle sectors): the launcher plans them with these knobs
# where the row's own put them on chip (_launch_plan). The same had held for 40,961-49,152
# (41,800 / 45,064 at 91.8 / 91.0% against 81 / 82%) until their aligned rows split too.
_OFF_SECTOR_SPLIT_2K = dict(_SPLIT_16_AHEAD_2K, max_on_chip=16384, **_OFF_SECTOR_LOOSE)
# ... of 49,153-131,072: windows (odd N) in chunks of 4096 (2 warps, ten per SM), rows off a
# sector as 128-byte windows in chunks of 8192 five per SM
_16_AHEAD_SMALL_WINDOWS = dict(window_overrides=_SPLIT_16_SMALL,
                               off_sector_overrides=_SPLIT_16_8K_WINDOWS)
# ... with whole vectors of 16 bytes inside the 128-byte windows (split_loose_vectors: at
# most 2 x 7 loose elements per row, reduced inside a warp) for windows of 9k-16k and 36k-49k
# (H200, medians of 3, bf16 / fp16: 12,289 at 90.6 / 90.8% of copy against 89.0 / 89.4%,
# 36,001 at 91.6 / 91.9% against 90.6 / 91.1%, 45,001 91.7 / 92.8% against 91.2 / 92.4%;
# level or up to 0.6 behind at 20,001, 24,577 and 50,257, which keep the windows' vectors)
_SPLIT_16_SMALL_LOOSE = dict(_SPLIT_16_SMALL, split_loose_vectors=True)
_SPLIT_16_8K_WINDOWS_LOOSE = dict(_SPLIT_16_8K_WINDOWS, split_loose_vectors=True)
# odd 16-bit rows of 506-2041 on chip as windows (chip_windows_packed), one row per program in
# one warp (up to 32 programs per SM: as many rows in flight at any width)
_CHIP_WINDOWS_ONE_WARP = dict(chip_windows_packed=True, min_elems_per_program=1, chip_warps=1,
                              unaligned_elems_per_program=0)
# ... the PLAN_TABLE rows of 513-2048: those windows, and odd rows loaded element by element
# (where windows cannot be taken) 2048 elements per program, 32 per thread
_SHORT_16 = dict(unaligned_elems_per_program=2048, unaligned_elems_per_thread=32,
                 window_overrides=_CHIP_WINDOWS_ONE_WARP)
# ... windows of 513-1536 as a power-of-two block and a smaller tail in that warp where that
# pads less (601's window as 512 + 256 columns, 1,101's as 1024 + 256, not 1024 and 2048)
_SHORT_16_TAIL = dict(_SHORT_16, window_overrides=dict(_CHIP_WINDOWS_ONE_WARP, chip_tail=True))
# ... aligned rows of 1025-1536 as 1024 columns and a tail, 32 per thread
_ALIGNED_16_1K_TAIL = dict(_SHORT_16_TAIL, chip_tail=True, chip_chunked=False, elems_per_thread=32)
# aligned 16-bit rows of 4097-16,384 on chip, 64 elements per thread, as 3 chunks of 128 per
# thread where those pad less than one block (12,288 as 3 x 4096 in 4 warps)
_ALIGNED_16_4K_16K = dict(elems_per_thread=64, chip_chunked=True, chunk_elems_per_thread=128)
# 16-bit windows (odd N) of 8241-12,288 on chip as 3 chunks of 4096 in 4 warps, registers
# capped at 128 (they compile to 128 without a spill under triton 3.6 and 3.9, where uncapped
# they take 137-140: 3 programs per SM, not 4); wider windows split in small chunks. H200,
# medians of 3, % of copy, bf16 / fp16, against block and tail up to 8448 and split past it,
# in one run: 8,241 / 8,251 / 8,441 / 9,001 / 10,001 / 12,001 / 12,281 at 94.0 / 94.2 / 94.0
# / 97.0 / 101.3 / 94.7 / 96.3 and 94.0 / 95.0 / 95.9 / 97.6 / 100.2 / 93.9 / 95.6, against
# 91.8 / 90.1 / 87.0 / 90.0 / 91.7 / 90.2 / 86.5 and 91.7 / 90.4 / 88.4 / 89.0 / 92.6 / 89.1
# / 86.5 (level at 11,001: 90.8 / 92.2 against 90.1 / 90.9). The block and tail keeps
# windows up to 8240: 8,233 at 94.8 / 95.4 against 93.7 / 94.3 in chunks, 8,191 at 98.2
# against 93.3; 8,241 is the first that chunks win (93.0 / 94.0 against 91.3 / 91.8).
# Windows of 12,289-16,384 (3 x 4096 and a tail) spill 64-76 bytes under the cap (triton
# 3.6; none under 3.9), so they stay split.
_WINDOWS_16_CHUNKS_CAPPED = dict(_SPLIT_16_SMALL_LOOSE, max_on_chip=12288, chip_maxnreg=128)
# 16-bit windows of 8k-32k: split in small chunks (the ones up to 8192 stay on chip)
_WINDOWS_16_SMALL = dict(window_overrides=dict(_SPLIT_16_SMALL, max_on_chip=8192))
PLAN_TABLE: list[tuple[int, int, int, dict[str, Any]]] = [
    (4, 0, 96, dict(unaligned_elems_per_program=512)),
    # aligned rows of 513-1024 one per program (2 warps), not four (H200, medians of 3:
    # 1000 / 1024 at 100.9 / 100.1% of copy against 98.7 / 97.0%; level at 2048); the first
    # row that holds a length wins, so the rest of 97-2048 falls to the next one
    (4, 512, 1024, dict(unaligned_elems_per_program=1024, min_elems_per_program=1024)),
    (4, 96, 2048, dict(unaligned_elems_per_program=1024)),
    # odd rows of 4097-6144 on chip as 4096 and a tail (element by element, 8 warps), not
    # padded to 8192 nor split (H200, medians of 3: 4,097 / 5,001 at 98.2 / 98.1% of copy
    # against 85.9 / 91.6% split in chunks of 4096)
    (4, 4096, 6144, dict(window_overrides=dict(chip_tail=True, elems_per_thread=16))),
    # ... windows of 6145-8192 on chip as 8192 in 16 warps with registers capped at 40: they
    # take 56 uncapped (triton 3.6), two programs an SM; capped three, no spill (H200,
    # medians of 3: 6,242 / 7,001 at 97.9 / 95.7% of copy against 89.6 / 92.2%; a cap of 48
    # 97.6 / 95.1%). Aligned rows keep theirs (8,000 at 99.4%).
    (4, 6144, 8192, dict(window_overrides=dict(chip_maxnreg=40))),
    # aligned rows just past a power of two on chip as that block and a tail (8192 + 2048
    # and 16,384 + 2048, 4096 or 8192 in 16 warps, 32,768 + 4096 in 32: fp32 21,000 92% of
    # copy, was 89% padded to 32,768), odd rows too in 8 warps (9,001: 97.1% against 90.2%
    # split in chunks of 2048)
    (4, 8192, 9216, dict(chip_tail=True, window_overrides=dict(elems_per_thread=32))),
    # odd rows of 9217-12,288 on chip as 8192 and a tail too, 16 per thread (H200, medians
    # of 3: 10,039 / 11,001 / 12,001 / 12,251 at 95.8 / 96.7 / 97.5 / 96.3% of copy against
    # 89.8 / 90.8 / 91.6 / 90.9% split in chunks of 2048; 32 per thread 81.1% at 10,039)
    (4, 9216, 12288, dict(window_overrides=dict(chip_tail=True, elems_per_thread=16))),
    (4, 12288, 16384, dict(window_overrides=_WINDOWS_FP32_SMALL)),
    (4, 16384, 18432, dict(chip_tail=True, elems_per_thread=32,
                           window_overrides=_WINDOWS_FP32_SMALL)),
    # ... of 18,433-24,576 (a tail of 4096 or 8192) with registers capped at 64: they take
    # 79-90 uncapped (triton 3.6), one 16-warp program an SM; capped two, no spill (H200,
    # medians of 3: 20,488 / 21,000 / 22,000 / 24,000 at 97.3 / 97.0 / 97.1 / 98.2% of copy
    # against 91.3 / 91.8 / 93.8 / 97.1%; a cap of 72 71-78%). Rows of 16,385-18,432 (64
    # registers, two programs already) keep theirs; windows split.
    (4, 18432, 24576, dict(chip_tail=True, elems_per_thread=32, chip_maxnreg=64,
                           window_overrides=dict(_WINDOWS_FP32_SMALL, chip_maxnreg=0))),
    (4, 24576, 32768, dict(window_overrides=_WINDOWS_FP32_SMALL)),
    # aligned rows on chip as 3 chunks; windows (odd N) split as the longer rows below, which
    # on chip load element by element (fp32 40,001: 61% of copy)
    (4, 32768, 34816, dict(max_on_chip=49152, chip_tail=True,
                           window_overrides=dict(_SPLIT_FP32_LONG, max_on_chip=32768))),
    (4, 34816, 49152, dict(max_on_chip=49152, chip_chunked=True,
                           window_overrides=dict(_SPLIT_FP32_LONG, max_on_chip=32768))),
    # Long rows split across programs exchanging (m, d) as one self-flagging word polled in
    # one PTX loop with relaxed loads, the row loop pipelined: with the exchange a row ahead
    # in chunks of 2048 in 2 warps, ten per SM, up to 131,072, of 4096 in 4 warps, five per
    # SM, past it; windows and rows off a sector in chunks of 8192 in 4 warps, four per SM
    # (registers capped at 128), in 2 stages, not ahead.
    (4, 49152, 131072, _SPLIT_FP32_AHEAD_2K),
    (4, 131072, 1 << 21, _SPLIT_FP32_AHEAD),
    # rows up to 65 (window width n + 7) as windows; in a layout that cannot take them,
    # 512 elements per program (bf16 33 / 63: 33% / 59% of copy against 16% / 30% at 4096)
    (2, 0, 72, dict(chip_windows_packed=True, unaligned_elems_per_program=512)),
    (2, 72, 136, dict(unaligned_elems_per_program=512)),
    (2, 136, 256, dict(unaligned_elems_per_program=1024)),
    (2, 256, 512, dict(unaligned_elems_per_program=2048)),
    # ... odd rows read as windows (n + 7 columns) of 513-2048 on chip as windows, one row per
    # program in one warp (H200, medians of 3, bf16 / fp16: 601 / 777 / 1,300 / 1,500 at
    # 86.1 / 97.8 / 95.4 / 99.8% and 88.3 / 98.8 / 97.5 / 99.7% of copy, against 67.6 / 77.5 /
    # 86.6 / 93.9% and 66.4 / 75.3 / 88.6 / 95.2% element by element below 817 columns and
    # one row per program in 2 warps above; 1,001 / 1,013 at 99.4 / 99.6% and 98.3 / 100.1%,
    # against 87.8 / 88.3% and 88.4 / 90.7% two rows per program in 2 warps); those of
    # 513-1536 as a block and a tail where that pads less (bf16 / fp16 1,101 / 1,151 at 99.4 /
    # 99.3% and 99.5 / 98.4% against 88.0 / 89.7% and 90.3 / 92.0% as one block; level at
    # 1,401 and 1,529). Aligned rows of 1025-1536 on chip as 1024 columns and a tail, 32 per
    # thread (1,200 at 100.0 / 100.2% against 81.5 / 86.0% padded to 2048); those of 1025-1280
    # (a tail of 256) with registers capped at 56: bf16 takes 60 uncapped (triton 3.6), 32
    # warps an SM, fp16 56, 36 (medians of 3, bf16 1,064 / 1,104 / 1,136 / 1,200 at 93.0 /
    # 91.9 / 96.6 / 97.6% of copy capped against 88.3 / 88.4 / 90.7 / 93.0%; fp16 level; a
    # cap of 48 92-93%, of 40 52-53%, spilled). Not with a tail of 512: 1,400 / 1,536 at 73 /
    # 75% capped against 99%. Not the windows' one warp either.
    (2, 512, 1024, _SHORT_16_TAIL),
    (2, 1024, 1280, dict(_ALIGNED_16_1K_TAIL, chip_maxnreg=56, window_overrides=dict(
        _SHORT_16_TAIL["window_overrides"], chip_maxnreg=0))),
    (2, 1280, 1536, _ALIGNED_16_1K_TAIL),
    (2, 1536, 2048, _SHORT_16),
    # ... windows of 2049-3072 on chip as 3 x 1024 in one warp: registers capped at 128, so an
    # SM holds 16 such warps, not 12 (bf16 took 163; H200, medians of 3: bf16 2,047 / 2,501 at
    # 96.9 / 100.1% of copy against 89.3 / 98.3%; fp16 compiles to 128 either way); windows of
    # 3073-4096 as one block of 4096 in 2 warps, not 8 (3,500 at 99.2 / 100.0% against 85.0 /
    # 87.1%)
    (2, 2048, 3072, dict(chip_chunked=True, chunk_elems_per_thread=128,
                         window_overrides=dict(chip_maxnreg=128))),
    (2, 3072, 4096, dict(chip_chunked=True, chunk_elems_per_thread=128,
                         window_overrides=dict(chip_chunked=False, elems_per_thread=64))),
    # ... windows (odd N) of 4097-8240 on chip as one window, where a power-of-two block and
    # a tail cover them with less padding than 3 chunks (H200, medians of 3: bf16 4,097 /
    # 5,001 / 8,191 at 99.4 / 98.5 / 96.5% of copy against 88.4 / 97.0% on chip in 3 chunks
    # and 80.8% split); windows of 8241-12,288 on chip as 3 chunks of 4096 with registers
    # capped at 128 (the tail of 1024 costs more the more of it is live, and uncapped the
    # windows' masks take 137-140 registers where the aligned rows' 3 x 4096 take 128, so an
    # SM holds 3 programs, not 4: see _WINDOWS_16_CHUNKS_CAPPED); wider ones split in small
    # chunks
    (2, 4096, 8240, dict(_ALIGNED_16_4K_16K, window_overrides=dict(
        _SPLIT_16_SMALL_LOOSE, max_on_chip=8240, chip_tail=True))),
    (2, 8240, 12288, dict(_ALIGNED_16_4K_16K, window_overrides=_WINDOWS_16_CHUNKS_CAPPED)),
    # ... aligned rows of 12,289-16,384 on chip as one block of 16,384 in 8 warps, registers
    # capped at 80: uncapped they take 128 (triton 3.6), two programs an SM, capped three
    # (medians of 3, bf16 12,296 / 12,640 / 13,000 / 14,336 / 16,384 at 98.7 / 100.5 / 98.1 /
    # 97.7 / 96.3% of copy against 86.9 / 89.9 / 89.2 / 93.4 / 96.1%, fp16 alike; at 72 84%)
    (2, 12288, 16384, dict(_ALIGNED_16_4K_16K, chip_maxnreg=80,
                           window_overrides=_WINDOWS_16_CHUNKS_CAPPED)),
    # aligned rows of 16,385-20,480 on chip as 16,384 columns and a tail of 4096 in 16 warps;
    # windows (odd N) and rows up to 23,552, which 3 chunks of 8192 on chip would pad by 4% or
    # more, split in small chunks: aligned rows of 20,481-23,552 in chunks of 2048 with the
    # exchange a row ahead, rows off a sector too (as windows of 16-byte vectors), windows in
    # chunks of 4096 ten per SM
    (2, 16384, 20480, dict(chip_tail=True, elems_per_thread=32,
                           window_overrides=dict(_SPLIT_16_SMALL, max_on_chip=16384))),
    (2, 20480, 23552, dict(_SPLIT_16_AHEAD_2K, max_on_chip=16384,
                           window_overrides=_SPLIT_16_SMALL,
                           off_sector_overrides=_OFF_SECTOR_LOOSE)),
    (2, 23552, 24576, dict(chip_chunked=True, chunk_elems_per_thread=128, chip_stages=3,
                           off_sector_overrides=_OFF_SECTOR_SPLIT_2K,
                           **_WINDOWS_16_SMALL)),
    # aligned rows of 24,577-32,768 split with the exchange a row ahead in chunks of 2048,
    # rows off a sector as windows of 16-byte vectors (as from 32,769), windows (odd N) in
    # small chunks
    (2, 24576, 32768, dict(_SPLIT_16_AHEAD_2K, max_on_chip=16384,
                           off_sector_overrides=_OFF_SECTOR_LOOSE, **_WINDOWS_16_SMALL)),
    # Long rows split across programs exchanging (m, d) as one self-flagging word polled in
    # one PTX loop with relaxed loads, the row loop pipelined in 3 stages (the next row's
    # chunk copied into shared memory while this row waits). Up to 131,072 with the exchange
    # a row ahead: chunks of 2048 in 2 warps, ten per SM, up to 65,536, of 4096 in 4 warps,
    # five per SM, past it; then 8192 elements in 4 warps, five per SM. From 32,769 to 49,152
    # too, which 3 chunks of 16,384 on chip pad by 20% or more up to 40,960 and lost beyond
    # (H200, medians of 3, bf16 / fp16: 41,792 / 42,000 / 44,336 / 46,000 / 48,000 / 49,152 at
    # 93.1 / 92.2 / 92.5 / 92.5 / 94.6 / 93.8% and 93.1 / 92.8 / 92.7 / 92.5 / 94.8 / 93.8% of
    # copy against 92.4 / 89.2 / 89.1 / 88.2 / 89.9 / 90.5% and 91.3 / 89.8 / 88.1 / 87.5 /
    # 90.0 / 90.6% on chip as 3 x 16,384 in 3 stages).
    # Windows (odd N) of 35,841-49,152 and 131,073-262,144 in chunks of 8192 five per SM, of
    # 49,153-131,072 in chunks of 4096 ten per SM, past 262,144 as the aligned rows, of
    # 32,769-35,840 in chunks of 4096 ten per SM (five parts of 8192 just past 32,768 leave
    # each program a short part and a whole program group to pay for; H200, one run, bf16
    # 33,748 at 91.0% of copy against 87.1% in 4 warps eight per SM, _SPLIT_16_WINDOWS, which
    # no longer spills in 2: 92 registers). Rows off a 32-byte sector of 32,769-49,152 with
    # the aligned rows' launch as windows of 16-byte vectors, of 49,153-262,144 as the windows.
    (2, 32768, 35840, dict(_SPLIT_16_AHEAD_2K, window_overrides=_SPLIT_16_SMALL,
                           off_sector_overrides=_OFF_SECTOR_LOOSE)),
    (2, 35840, 40960, dict(_SPLIT_16_AHEAD_2K, window_overrides=_SPLIT_16_8K_WINDOWS_LOOSE,
                           off_sector_overrides=_OFF_SECTOR_LOOSE)),
    (2, 40960, 49152, dict(_SPLIT_16_AHEAD_2K, window_overrides=_SPLIT_16_8K_WINDOWS_LOOSE,
                           off_sector_overrides=_OFF_SECTOR_LOOSE)),
    (2, 49152, 65536, dict(_SPLIT_16_AHEAD_2K, **_16_AHEAD_SMALL_WINDOWS)),
    (2, 65536, 131072, dict(_SPLIT_16_AHEAD_4K, **_16_AHEAD_SMALL_WINDOWS)),
    (2, 131072, 262144, dict(_SPLIT_16_8K, split_programs_per_sm=5,
                             window_overrides=_SPLIT_16_8K_WINDOWS)),
    # past 262,144 windows too run the aligned rows' launch (pipelined in 3 stages)
    (2, 262144, 1 << 21, dict(_SPLIT_16_8K, split_programs_per_sm=5)),
]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which kernel runs and with what launch parameters (see :func:`plan`)."""

    path: str  # "on_chip", "stream" or "split"
    block: int  # BLOCK_N, TILE or CHUNK
    rows_per_program: int = 1
    split: int = 1
    num_warps: int = 4
    stages: int = 1  # on_chip: > 1 means a persistent, software-pipelined grid
    chunks: int = 1  # on_chip: the row is chunks x block columns (block a power of two)
    tail: int = 0  # on_chip: and a smaller power-of-two block of columns past them (or none)


def _chunking(n_cols: int, chunks: bool = True, tail: bool = False,
              chunks_tail: bool = False) -> tuple[int, int, int]:
    """(block, chunks, tail): n_cols covered by one power-of-two block, by 3 (``chunks``), by
    one and a smaller power-of-two tail past it (``tail``), or by 3 and a tail smaller than
    one of them (``chunks_tail``), whichever pads least (on a tie the fewer pieces).

    12288 -> (4096, 3, 0), 3000 -> (1024, 3, 0), 1000 -> (1024, 1, 0); with the tail 17,000 ->
    (16384, 1, 1024) (2.4% padded, where 3 x 8192 pads 45% and 32,768 93%); with chunks and
    a tail 12,296 -> (4096, 3, 16). Two or four equal blocks never pad less than one
    (2 * 2**k covers what 2**(k+1) does), so three is the only other count.

    >>> _chunking(12296), _chunking(12296, chunks_tail=True)
    ((16384, 1, 0), (4096, 3, 16))
    """
    covers = [(max(16, _pow2(n_cols)), 1, 0)]
    if chunks:
        covers.append((max(16, _pow2(-(-n_cols // 3))), 3, 0))
    if tail and n_cols > 32:  # (at 32 or less the tail, 16 at least, is the block's width)
        block = _pow2(n_cols) // 2  # the largest power of two below n_cols
        covers.append((block, 1, max(16, _pow2(n_cols - block))))
    if chunks_tail and n_cols > 3 * 32:
        block = _pow2(-(-n_cols // 3)) // 2  # the largest power of two below n_cols / 3
        rest = max(16, _pow2(n_cols - 3 * block))
        if rest < block:  # (else one more block: the 3 chunks of the next power of two)
            covers.append((block, 3, rest))
    return min(covers, key=lambda c: c[0] * c[1] + c[2])


def _tuning(n_cols: int, itemsize: int, path: str, tuning: dict[str, Any] | None,
            windowed: bool = False) -> dict[str, Any]:
    """TUNING, then the PLAN_TABLE row of this size and length (``path="auto"`` only), then
    its ``window_overrides`` for odd rows (``windowed``: N off the vector), then the
    caller's overrides: what both :func:`plan` and the launcher read."""
    given = (set(tuning or {}) | set((tuning or {}).get("window_overrides", {}))
             | set((tuning or {}).get("off_sector_overrides", {})))
    unknown = sorted(given - set(TUNING))
    if unknown:
        raise ValueError(
            f"tuning key {unknown[0]!r} is not a knob of the softmax kernels"
            + did_you_mean(unknown[0], TUNING)
            + " (the knobs: onlinesm.kernels.softmax_plan.TUNING)")
    t = dict(TUNING)
    if path == "auto":
        for size, n_min, n_max, overrides in PLAN_TABLE:
            if size == itemsize and n_min < n_cols <= n_max:
                t.update(overrides)
                break
    if windowed:  # the row's knobs for windows (a caller's window_overrides replace them)
        t.update((tuning or {}).get("window_overrides", t["window_overrides"]))
    t.update(tuning or {})
    return t


def plan(
    n_cols: int,
    *,
    path: str = "auto",
    max_on_chip: int | None = None,
    tile: int | None = None,
    interpreted: bool | None = None,
    tuning: dict[str, Any] | None = None,
    itemsize: int = 4,
    windowed: bool = False,
) -> Plan:
    """The launch :func:`softmax` makes for rows of ``n_cols`` elements.

    ``path="auto"`` keeps rows of at most ``max_on_chip`` elements in registers, and streams
    longer rows (split across programs on the GPU, in tiles of ``tile`` under the interpreter).
    ``interpreted``: plan for Triton's interpreter (None: as ``TRITON_INTERPRET`` says now).
    ``windowed``: odd rows (N off the 16-byte vector), which take their PLAN_TABLE row's
    ``window_overrides``; ``n_cols`` is the window's width where they are read as aligned
    windows, the row's length where the launcher reads them element by element.

    >>> plan(1000, itemsize=2, interpreted=False)  # four bf16 rows of 1000 per program
    Plan(path='on_chip', block=1024, rows_per_program=4, split=1, num_warps=8, stages=1, chunks=1, tail=0)
    >>> plan(131072, itemsize=2, interpreted=False).path
    'split'
    """
    if interpreted is None:
        interpreted = interpreting()
    t = _tuning(n_cols, itemsize, path, tuning, windowed)
    limit = int(max_on_chip if max_on_chip is not None else t["max_on_chip"])
    if path == "auto":
        if n_cols <= limit:
            path = "on_chip"
        elif itemsize in t["split_itemsizes"] and not interpreted and n_cols <= limit * 64:
            path = "split"
        else:
            path = "stream"
    if path == "on_chip":
        chunked, tailed = bool(t["chip_chunked"]), bool(t["chip_tail"])
        p = _on_chip(_chunking(n_cols, chunked, tailed, bool(t["chip_chunks_tail"])), t,
                     itemsize)
        # A tail of less than one 16-byte vector per thread loads in narrow pieces and is laid
        # out again through shared memory (bf16 17,000 in 16 warps with a tail of 1024: 66%
        # of copy against 98% for 20,000 with 4096): widen it to a vector per thread, or
        # cover the row without a tail where the widened tail would be as wide as the block.
        least = 32 * p.num_warps * max(1, 16 // itemsize) // p.rows_per_program
        if 0 < p.tail < least:
            p = (dataclasses.replace(p, tail=least) if least < p.block
                 else _on_chip(_chunking(n_cols, chunked, False), t, itemsize))
        return p
    if path == "stream":
        block = _pow2(tile if tile is not None else t["stream_tile"])
        return Plan("stream", max(16, block), 1, 1, int(t["stream_warps"]))
    if path == "split":
        chunk = _pow2(tile if tile is not None else min(int(t["split_chunk"]), _pow2(n_cols)))
        return Plan("split", chunk, 1, -(-n_cols // chunk), int(t["split_warps"]))
    raise ValueError(f"path={path!r} is not one of {PATHS}; use 'auto' unless testing a kernel")


def _on_chip(cover: tuple[int, int, int], t: dict[str, Any], itemsize: int) -> Plan:
    """The on-chip launch for rows covered by ``cover`` = (block, chunks, tail) columns under
    the knobs ``t``: rows per program, warps (from the block's columns: the tail rides along
    in their threads) and pipelined stages."""
    block, chunks, tail = cover
    width = block * chunks + tail
    rows = max(1, min(64, int(t["min_elems_per_program"]) // width))
    rows = 1 << (rows.bit_length() - 1)  # a power of two (tl.arange), rounded down
    per_thread = int(t["elems_per_thread"])
    if chunks > 1 and int(t["chunk_elems_per_thread"]):
        per_thread = int(t["chunk_elems_per_thread"])
    warps = int(t["chip_warps"]) or block * chunks * rows // (32 * per_thread)
    warps = max(1, min(32, _pow2(max(1, warps))))
    stages = int(t["chip_stages"])
    if stages == 1 and itemsize == 2 and width >= int(t["chip_pipelined_block_16bit"]):
        stages = int(t["chip_pipelined_stages"])
    return Plan("on_chip", block, rows, 1, warps, stages, chunks, tail)


@dataclasses.dataclass(frozen=True)
class SplitExchange:
    """How a split row's programs exchange and wait (see :func:`split_exchange`)."""

    packed: bool  # (m, d) as one self-flagging 64-bit word, not two words and a counter
    stages: int  # > 1: the row loop software-pipelined (packed only)
    poll_in_asm: bool  # the wait as one PTX loop per thread (packed only)
    poll_loads: bool  # that loop reads with relaxed loads, not atomics
    lanes: int  # the merge's lanes: a power of two >= the chunks of a row
    ahead: bool = False  # the next row's part published before this row's wait (packed only)

    def __str__(self) -> str:
        if not self.packed:
            return f"counter l{self.lanes}"
        poll = "poll"  # the Triton-level loop of atomic reads
        if self.poll_in_asm:
            poll = "asm loads" if self.poll_loads else "asm atomics"
        return f"packed st{self.stages} {poll} l{self.lanes}" + (" ahead" if self.ahead else "")


def split_exchange(t: dict[str, Any], split: int) -> SplitExchange:
    """The exchange the split kernel runs for rows of ``split`` chunks under the knobs ``t``,
    one place for the launcher and the bench.

    >>> str(split_exchange(_tuning(262144, 2, "auto", None), 32))
    'packed st3 asm loads l32'
    >>> str(split_exchange(_tuning(131072, 2, "auto", None), 32))
    'packed st3 asm loads l32 ahead'
    >>> str(split_exchange(_tuning(300007, 2, "auto", None, windowed=True), 37))
    'packed st3 asm loads l64'
    """
    packed = bool(t["split_packed"])
    stages = int(t["split_stages"]) if packed else 1  # the pipelined loop needs the PTX poll
    ahead = packed and bool(t["split_exchange_ahead"])  # ... as does the exchange a row ahead
    in_asm = packed and (stages > 1 or ahead or bool(t["split_poll_asm"]))
    if _pow2(int(t["split_min_lanes"])) != int(t["split_min_lanes"]) or stages < 1:
        raise ValueError(f"split_min_lanes={t['split_min_lanes']!r} must be a power of two and "
                         f"split_stages={stages!r} at least 1; e.g. split_min_lanes=32")
    return SplitExchange(packed, stages, in_asm, in_asm and bool(t["split_poll_loads"]),
                         max(_pow2(split), int(t["split_min_lanes"])), ahead)


def split_columns(width: int, split: int, block: int, balanced: bool = True,
                  granule: int = 16) -> int:
    """The columns each of a split row's ``split`` programs owns, a multiple of ``granule``
    elements (at least 16: whole 16-byte vectors in every dtype; the launcher passes its
    window, so that every part starts where the row's window does) and at most ``block``
    (what a program holds): ``width`` cut into equal parts when ``balanced`` and that shortens
    the longest part by a sixteenth or more, else ``block`` (whole chunks and a shorter last
    one). A row waits for its longest part.

    >>> split_columns(33000, 5, 8192), split_columns(33000, 5, 8192, balanced=False)
    (6608, 8192)
    >>> split_columns(151936, 19, 8192)  # 8000 each: too close to 8192 to gain
    8192
    >>> split_columns(21063, 6, 4096, granule=64)  # 6 x 3520 >= 21,063
    3520
    """
    granule = max(16, granule)
    cols = min(block, -(-width // (granule * split)) * granule)
    # Equal parts gain where the last chunk is short (bf16 16,400: 88.0% of copy against
    # 86.5%, fp32 50,257 88.1% against 87.1%); shortening the longest by less than a sixteenth
    # gains nothing measurable and lost a point once (bf16 151,936: 19 parts of 8000 columns,
    # 90.3% against 91.3% in 18 chunks of 8192 and one of 4480), so whole chunks stay there.
    if not balanced or cols > block - block // 16:
        return block
    return cols


def _programs_that_fit(wanted: int, n_regs: int, num_warps: int, regs_per_sm: int = 65536,
                       warps_per_sm: int = 64, shared: int = 0,
                       shared_per_sm: int = 233472) -> int:
    """How many programs of ``num_warps`` warps at ``n_regs`` registers per thread and
    ``shared`` bytes of shared memory an SM holds at once, at most ``wanted`` (``n_regs`` 0,
    unknown: ``wanted``). Registers are allocated per warp in blocks of 256 (8 per thread);
    each program also takes 1 KB of shared memory the driver reserves. Unpipelined split
    kernels use a few KB (the reductions); pipelined ones a buffer per stage.

    >>> _programs_that_fit(8, 72, 4), _programs_that_fit(8, 64, 4), _programs_that_fit(2, 96, 8)
    (7, 8, 2)
    >>> _programs_that_fit(4, 128, 4, shared=65600)  # two fp32 chunks of 8192 in flight
    3
    """
    if n_regs <= 0:
        return wanted
    per_warp = -(-n_regs // 8) * 8 * 32
    fit = min(regs_per_sm // (per_warp * num_warps), warps_per_sm // num_warps, 32)
    if shared > 0:
        fit = min(fit, shared_per_sm // (shared + 1024))
    return max(1, min(wanted, fit))


def _register_cap(programs: int, num_warps: int, regs_per_sm: int = 65536) -> int:
    """The most registers per thread (a multiple of 8, at most 255) that still let ``programs``
    programs of ``num_warps`` warps share an SM: the ``maxnreg`` of a capped split launch.
    A plan asking for more programs than its kernel can nearly fit spills heavily (bf16
    chunks of 8192 in 8 warps at 9 per SM, capped at 24: 29% of copy), so PLAN_TABLE's rows
    pair each chunk with a measured count.

    >>> _register_cap(2, 8), _register_cap(8, 4), _register_cap(1, 4)
    (128, 64, 255)
    """
    return min(255, regs_per_sm // (programs * num_warps * 32) // 8 * 8)
