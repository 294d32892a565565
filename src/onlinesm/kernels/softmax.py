"""Online softmax in Triton: one read of x when a row fits on chip, two when it does not.

What it computes: ``softmax(x)`` over the last dim, for float32, bfloat16 and float16 inputs,
output in the input's dtype, every operation in float32. Any number of rows (leading dims are
flattened), any row length, any row stride, -inf masks, fully masked rows.

Why three kernels (the launcher picks one per call):

* ``_softmax_on_chip_kernel`` -- the row (or several short rows) fits in registers: load it once,
  max, exp, sum, normalise, store. One read + one write of x: the memory-bandwidth ideal.
* ``_softmax_stream_kernel`` -- any length: stream the row in tiles keeping the online (m, d) pair
  of online softmax (Milakov & Gimelshein 2018), then stream it again to write exp(x - m) / d. Two
  reads + one write, never a third pass. Pass 2 walks the tiles backwards so that the tiles read
  last in pass 1 -- the ones most likely still in L2 -- are read first.
* ``_softmax_split_kernel`` -- compiled GPU only, for rows too long for one program: a row is cut
  into chunks held in registers (as exp(x - m_chunk)) by cooperating programs, which swap their
  partial (m, d) through global memory, merge them, rescale their chunk by one factor, and
  write. One read + one write again, one exp per element. A chunk's (m, d) travels as one
  64-bit word that is its own ready flag (one store, and one read per poll; the shipped plan)
  or through two words and a counter. Programs wait for each other,
  so the grid is persistent (never more programs than fit on the GPU at once) and the wait is
  bounded: a wait that times out writes NaN instead of hanging. The interpreter runs programs one
  after another, so it never takes this path.

Numerics, in the order they bite (the strategy families of docs/conventions.md catch each):

* The running max starts at -inf, never at a finite sentinel: rows whose values all lie below
  -1e30 are ordinary rows. ``exp(-inf - -inf)`` would be NaN, so wherever the max can still be
  -inf (nothing finite seen yet) the kernels subtract a *reference* of 0 instead: every
  ``exp(-inf - 0)`` is an exact 0 and the row stays clean.
* exp is ``exp2((x - m) * log2(e))``: ``x - m`` first (exact when x is near m, and never
  overflowing, while ``x * log2(e)`` overflows for x near the fp32 max), then the scale. That is
  what ``tl.exp`` does internally too, so its accuracy is Triton's fast-exp class: error about
  ``0.73 |x - m|`` ulp plus ~2 ulp of ``ex2.approx``. :data:`EXP` says so for the tolerance model.
* Normalising multiplies by ``1 / d`` (one division per row instead of one per element): one more
  rounding, so the componentwise bound is that of Blanchard, Higham & Higham plus ``u32``.
* A fully masked row has d = 0: it gives zeros (``fully_masked="zeros"``, lse would be -inf) or
  NaN (``fully_masked="nan"``, like ``torch.softmax``).
* A row holding NaN or +inf gives NaN, like the oracle.

Rows that do not start on a 16-byte vector (odd lengths) are handled as aligned windows:
whole vectors in the middle, the few loose elements at both ends apart (constexpr ``SHIFT``,
see ``_shift``), so they still load and store in vectors. Windows are used where they measured
faster (``_launch_plan``): streamed and split rows, one 16-bit row per program on chip, and
16-bit rows up to 65 several per program; other short odd rows go element by element, in
smaller programs. Which kernel runs a row, and how, is decided in ``softmax_plan.py``
(``TUNING``, ``PLAN_TABLE``, ``plan()``), each choice measured on an H200.

Compilations: the on-chip and split kernels declare row counts, lengths and strides in
``do_not_specialize`` (``SOFTMAX_DO_NOT_SPECIALIZE``), with their divisibility by one 16-byte
vector passed back as one constexpr ``ALIGN`` (or ``SHIFT``), so a check over many shapes
compiles once per dtype x block size x alignment class (at most three), not per shape. The
streaming kernel (rows past the on-chip limit) stays specialised: it measured faster so, and
ordinary check lengths never reach it.

Example:
    >>> from onlinesm import kernels
    >>> kernels.use_interpreter(True)        # CPU tensors (False: compiled, CUDA tensors)
    True
    >>> from onlinesm.kernels import softmax
    >>> softmax(torch.tensor([[1.0, 3.0, 2.0, float("-inf")]]))
    tensor([[0.0900, 0.6652, 0.2447, 0.0000]])
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from typing import Any

import torch
import triton
import triton.language as tl

from onlinesm.kernels import softmax_plan as _plan_module
from onlinesm.kernels.launching import cdiv
from onlinesm.kernels.launching import device_properties as _device_properties
from onlinesm.kernels.launching import launch_kernel, on_device
from onlinesm.kernels.launching import sm_count as _sm_count
from onlinesm.kernels.pinning import configs_pinned
from onlinesm.kernels.softmax_plan import (
    PATHS,
    Plan,
    _programs_that_fit,
    _register_cap,
    _tuning,
    plan,
    split_columns,
    split_exchange,
)

from onlinesm.kernels import KernelModule, interpreting

__all__ = [
    "softmax",
    "EXP",
    "ACCUMULATE",
    "INTERPRETED",
    "SUPPORTED_DTYPES",
    "FULLY_MASKED",
    "PATHS",
    "plan",
    "Plan",
    "SOFTMAX_DO_NOT_SPECIALIZE",
]

#: The exp's accuracy class, for the tolerance model: ``"fast"`` is Triton's fast GPU exp
#: (``exp2(x * log2 e)`` through ``ex2.approx``), the class of ``tl.exp``. Under the interpreter
#: numpy's exp2 is used instead, which is more accurate, so "fast" is an honest upper bound.
EXP = "fast"
#: Every addition, max, exp and division happens in float32.
ACCUMULATE = "float32"
#: Whether this module's kernels were decorated under ``TRITON_INTERPRET=1`` (CPU tensors).
INTERPRETED: bool = interpreting()
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FULLY_MASKED = ("zeros", "nan")

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(t) == exp2(t * log2(e))
#: The running max's starting value: -inf, "nothing seen yet" (never a finite sentinel).
NEG_INF = tl.constexpr(float("-inf"))
#: Whether bf16 is widened to fp32 on its bits (see _widen): on the GPU, not under the
#: interpreter, which has no PTX to run.
WIDEN_BF16_BITS = tl.constexpr(not INTERPRETED)


#: The integer arguments of the on-chip and split kernels that Triton must not specialise on (``== 1`` or
#: ``% 16 == 0``): row counts, row lengths and row strides change with every shape, and each
#: specialisation value would be one more compilation. The divisibility the vectorised loads
#: need comes back through the constexpr ``ALIGN`` (two variants at most per block size).
SOFTMAX_DO_NOT_SPECIALIZE: tuple[str, ...] = ("n_rows", "n_cols", "stride_xm", "stride_ym")
#: ... and for the split kernel, the memory x owns (a window's bound, rounded in the kernel).
SPLIT_DO_NOT_SPECIALIZE: tuple[str, ...] = (*SOFTMAX_DO_NOT_SPECIALIZE, "x_reach")


def _alignment(itemsize: int, n_cols: int, *strides: int) -> int:
    """The kernels' ALIGN: elements per 16-byte vector (8 in bf16/fp16, 4 in fp32) when the row
    length and every row stride are multiples of it, else 1.

    One vector, not 16 elements: Triton's own specialisation only tells the compiler about
    divisibility by 16, which a bf16 row of 1000 or 3000 lacks; its loads then went out as
    2-byte scalars (77% of copy bandwidth at N = 1000 on an H200, against 98% in fp32).

    >>> _alignment(2, 1000, 1000, 1000), _alignment(4, 1000, 1000, 1000), _alignment(2, 1001, 1001)
    (8, 4, 1)
    """
    vec = 16 // itemsize
    return vec if n_cols % vec == 0 and all(s % vec == 0 for s in strides) else 1


def _shift(itemsize: int, align: int, x: torch.Tensor, y: torch.Tensor,
           window_bytes: int = 16) -> int:
    """The kernels' SHIFT: elements per window of ``window_bytes`` (16: one vector) when rows
    that do not start on such a window (a row length of 50,257, say, or with 128 bytes, a bf16
    row of 21,000: every other one starts 16 bytes past a 32-byte boundary) can still be read
    and written from windows that do, else 1.

    That needs x and y to start on a window boundary and their row strides to differ by whole
    windows, so that row r starts at the same offset ``first`` within a window in both: each
    row is then handled as an aligned window, whole vectors in the middle and at most
    2 (window - 1) loose elements at its two ends (see ``_row_window``). Rows that all start on
    a vector (``align > 1``) and on a 32-byte sector need none of it. Without it, every load and
    store of an odd-length row was a 2- or 4-byte scalar (bf16 rows of 50,257 at 37% of copy
    bandwidth on an H200, 0.66x torch). A wider window that cannot be taken falls back to 16.

    >>> x = torch.empty(4, 1001, dtype=torch.bfloat16)
    >>> _shift(2, 1, x, torch.empty_like(x)), _shift(2, 1, x[:, 1:], torch.empty(4, 1000))
    (8, 1)
    """
    vec = 16 // itemsize
    window = max(vec, window_bytes // itemsize)
    if x.shape[0] == 0:
        return 1
    starts = x.data_ptr() % (window * itemsize) == 0 and y.data_ptr() % (window * itemsize) == 0
    if align > 1:
        # Every row starts on a vector: a wider window only where a row starts off a 32-byte
        # sector (as windows, rows on sectors lost up to 4% on the H200: bf16 21,008 / 36,000 /
        # 38,000 / 52,000, rows 32, 64 or 96 bytes off 128, 2.1 / 3.6 / 2.7 / 2.4 points).
        sector = max(vec, 32 // itemsize)
        on_sectors = x.shape[0] == 1 or (x.stride(0) % sector == 0 and y.stride(0) % sector == 0)
        if window == vec or (on_sectors and x.data_ptr() % 32 == 0 and y.data_ptr() % 32 == 0):
            return 1
    same_offsets = x.shape[0] == 1 or (x.stride(0) - y.stride(0)) % window == 0
    if same_offsets and starts:
        return window
    return _shift(itemsize, align, x, y) if window > vec else 1


# --------------------------------------------------------------------------------------------
# Widening the input to fp32, rounding to the output dtype
# --------------------------------------------------------------------------------------------
@triton.jit
def _widen(x):
    """x in fp32. A bf16 is the top half of the fp32 of the same value, so on the GPU its bits
    are shifted into place, two elements (one 32-bit register) per two instructions: the first
    shifted up by 16, the second with the first's bits cleared. Exact for every bit pattern,
    NaN payloads included, and fewer instructions than the per-element conversion the compiler
    emits (with _load_part: bf16 rows of 65,536 split in chunks of 2048, 1,112 SASS
    instructions, 968 with this)."""
    if WIDEN_BF16_BITS and x.dtype == tl.bfloat16:
        y = tl.inline_asm_elementwise(
            "{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }", "=r,=r,r", [x],
            dtype=tl.float32, is_pure=True, pack=2)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _to_output(y, out_ptr, ROUND_BF16: tl.constexpr):
    """fp32 -> the output dtype, rounding to nearest even.

    The GPU's conversion already rounds to nearest even. Triton's interpreter truncates
    fp32 -> bf16 (round toward zero, up to 1 ulp off), so under it the launcher sets ROUND_BF16
    and the rounding is done on the bits: add 0x7FFF plus the lowest kept bit (the tie goes to
    the even neighbour), then clear the 16 dropped bits, leaving a value bf16 holds exactly.
    """
    if ROUND_BF16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        y = bits.to(tl.float32, bitcast=True)
    return y.to(out_ptr.dtype.element_ty)


# --------------------------------------------------------------------------------------------
# Rows that do not start on a 16-byte vector (SHIFT > 1)
# --------------------------------------------------------------------------------------------
@triton.jit
def _row_window(rows64, stride_xm, stride_ym, n_cols, SHIFT: tl.constexpr,
                GRAIN: tl.constexpr = 0):
    """Where each row lies: (x_base, y_base, first, v_lo, v_hi), offsets in elements.

    The row's elements are columns [first, first + n_cols) of a window that starts at x_base (and
    y_base in y), rounded down to a whole vector, so the window's vectors are 16-byte aligned.
    [v_lo, v_hi) are the columns in whole vectors inside the row: they are loaded and stored as
    vectors. Rounding by (v // SHIFT) * SHIFT is what tells the compiler they are multiples of
    SHIFT. With SHIFT = 1 the window is the row itself (first = v_lo = 0, v_hi = n_cols).
    GRAIN > 0 (split rows, split_loose_vectors): whole vectors of GRAIN elements (one 16-byte
    vector), not of SHIFT, inside a window that still starts on SHIFT: fewer loose elements.
    """
    start_x = rows64 * stride_xm
    if SHIFT > 1:
        x_base = start_x // SHIFT * SHIFT
        y_base = rows64 * stride_ym // SHIFT * SHIFT  # the same first in y (launcher checked)
        # Offsets within the window in 32 bits: first < SHIFT and v_hi < first + n_cols, so
        # they fit, and every mask built from them is one 32-bit comparison per vector, not
        # a 64-bit one (two instructions) as with the row's 64-bit start.
        first = (start_x - x_base).to(tl.int32)
        VEC: tl.constexpr = GRAIN if GRAIN > 0 else SHIFT  # the whole vectors' width
        v_lo = (first + VEC - 1) // VEC * VEC  # the head's loose elements end here
        v_hi = (first + n_cols) // VEC * VEC  # the tail's loose elements start here
    else:
        x_base = start_x
        y_base = rows64 * stride_ym
        first = 0
        v_lo = 0
        v_hi = n_cols  # a scalar: the column mask stays one comparison with the row length
    return x_base, y_base, first, v_lo, v_hi


@triton.jit
def _loose_columns(j, first, v_lo, v_hi, end, SHIFT: tl.constexpr, head_start=None):
    """The window columns of a row's loose elements, outside whole vectors, and their mask.

    j runs over 2 * SHIFT slots: slots j < SHIFT are the head (columns first .. v_lo - 1), the
    others the tail (columns from max(v_hi, v_lo) up to end = first + n_cols). A row shorter than
    a vector has only a head or only a tail; no column is in two slots. Broadcasts: j [1, 2S]
    against per-row [ROWS, 1] bounds, or j [2S] against scalars. ``head_start``: the column
    of the first head slot, where whole vectors are finer than the window (SHIFT is then the
    vector's width, and the head lies in [v_lo - SHIFT, v_lo), not in the window's first
    SHIFT columns).
    """
    head = j < SHIFT
    tail_start = tl.maximum(v_hi, v_lo)
    if head_start is None:
        k = tl.where(head, j, tail_start + j - SHIFT)
    else:
        k = tl.where(head, head_start + j, tail_start + j - SHIFT)
    ok = tl.where(head, (k >= first) & (k < v_lo), k >= tail_start) & (k < end)
    return k, ok


# --------------------------------------------------------------------------------------------
# Kernel 1: rows that fit on chip. One read, one write.
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=SOFTMAX_DO_NOT_SPECIALIZE)
def _softmax_on_chip_kernel(
    x_ptr, y_ptr, n_rows, n_cols, stride_xm, stride_ym,
    BLOCK_N: tl.constexpr,  # power of two; CHUNKS * BLOCK_N >= n_cols: one program sees whole rows
    ROWS: tl.constexpr,  # rows per program (short rows are packed so a program has enough work)
    NAN_IF_EMPTY: tl.constexpr,  # fully masked row -> NaN (True) or zeros (False)
    ROUND_BF16: tl.constexpr,  # interpreter only: see _to_output
    STAGES: tl.constexpr,  # > 1: persistent grid, the next rows' loads overlap this row's math
    ALIGN: tl.constexpr,  # n_cols and both row strides are multiples of ALIGN (see _alignment)
    CHUNKS: tl.constexpr = 1,  # 1..3 pieces of BLOCK_N per row: 12288 = 3 x 4096, not 16384
    SHIFT: tl.constexpr = 1,  # > 1: rows as aligned windows (see _shift); CHUNKS * BLOCK_N
    # then covers n_cols + SHIFT - 1
    TAIL: tl.constexpr = 0,  # power of two < BLOCK_N: columns past the chunks (bf16 17,000 =
    # 16,384 + 4096 in 16 warps), or 0
):
    if ALIGN > 1:
        # The launcher checked that sizes and strides are multiples of ALIGN (one 16-byte
        # vector), and (v // ALIGN) * ALIGN (== v) tells the compiler so: rows start 16-byte
        # aligned and the column masks are constant over whole vectors, so loads vectorise.
        n_cols = n_cols // ALIGN * ALIGN
        stride_xm = stride_xm // ALIGN * ALIGN
        stride_ym = stride_ym // ALIGN * ALIGN
    # Program p takes row blocks p, p + n_programs, ... With one program per block the loop runs
    # once; with a persistent grid (a few programs per SM) and STAGES > 1, Triton's pipeliner
    # issues the loads of the next block into shared memory while this one is reduced, which
    # keeps memory busy even when a single program fills an SM's registers.
    n_blocks = tl.cdiv(n_rows, ROWS)
    cols = tl.arange(0, BLOCK_N)  # [BLOCK_N] unit column stride (the launcher made it so)
    if STAGES == 1:
        _softmax_rows(x_ptr, y_ptr, tl.program_id(0), n_rows, n_cols, stride_xm, stride_ym, cols,
                      ROWS, NAN_IF_EMPTY, ROUND_BF16, BLOCK_N, CHUNKS, SHIFT, TAIL)
    else:
        for blk in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0), num_stages=STAGES):
            _softmax_rows(x_ptr, y_ptr, blk, n_rows, n_cols, stride_xm, stride_ym, cols,
                          ROWS, NAN_IF_EMPTY, ROUND_BF16, BLOCK_N, CHUNKS, SHIFT, TAIL, True)


@triton.jit
def _in_vectors(c, v_lo, v_hi, SHIFT: tl.constexpr):
    """The mask of window columns c in the row's whole vectors, [v_lo, v_hi): with SHIFT = 1,
    the row itself ([0, n_cols), one comparison)."""
    # (if/else, not an early return: Triton would still compile the code after a constexpr-if's
    # return, and with per-row bounds that code does not broadcast.)
    if SHIFT > 1:
        ok = (c >= v_lo) & (c < v_hi)
    else:
        ok = c < v_hi
    return ok


@triton.jit
def _whole_vectors(row_ok, c, v_lo, v_hi, SHIFT: tl.constexpr):
    """``_in_vectors`` for a block of rows: per-row bounds with SHIFT > 1, and rows past the
    tensor masked out."""
    if SHIFT > 1:
        ok = _in_vectors(c, v_lo[:, None], v_hi[:, None], SHIFT)
    else:
        ok = _in_vectors(c, v_lo, v_hi, SHIFT)
    return row_ok[:, None] & ok


@triton.jit
def _load_chunk(x_ptr, x_base, row_ok, v_lo, v_hi, cols, k: tl.constexpr,
                BLOCK_N: tl.constexpr, SHIFT: tl.constexpr, PIPELINED: tl.constexpr):
    """Chunk k (window columns k * BLOCK_N + cols; the tail: cols shorter than BLOCK_N) of
    the rows, -inf outside the row's whole vectors, widened to fp32.

    Padding lanes read -inf: exp(-inf) = 0, so they add nothing to d and cannot raise the max.
    In a pipelined row loop (PIPELINED) bf16 is filled with -inf after widening, not by the
    load (see _load_part): 1,528 SASS instructions for bf16 24,000 in 3 stages, 1,480 so.
    Without the pipeline the fill in the load is the cheaper one (bf16 12,288: 1,008
    instructions, 1,096 filled after), so it stays there.
    """
    c = (k * BLOCK_N + cols)[None, :]
    mask = _whole_vectors(row_ok, c, v_lo, v_hi, SHIFT)
    if PIPELINED:
        x = _load_part(x_ptr + x_base[:, None] + c, mask, mask, False, "").to(tl.float32)
    else:
        x = _widen(tl.load(x_ptr + x_base[:, None] + c, mask=mask, other=NEG_INF))
    return x


@triton.jit
def _chunk_exp(x, m_ref):
    """exp(x - m) for the chunk as exp2((x - m) * log2 e): subtract first (exact near the max, no
    overflow), then scale. It replaces x in registers: x is not needed once e is known."""
    return tl.exp2((x - m_ref[:, None]) * 1.4426950408889634)  # log2(e)


@triton.jit
def _store_chunk(y_ptr, y_base, row_ok, v_lo, v_hi, cols, e, inv,
                 k: tl.constexpr, BLOCK_N: tl.constexpr, ROUND_BF16: tl.constexpr,
                 SHIFT: tl.constexpr):
    """y = e * (1 / d) for chunk k."""
    c = (k * BLOCK_N + cols)[None, :]
    mask = _whole_vectors(row_ok, c, v_lo, v_hi, SHIFT)
    tl.store(y_ptr + y_base[:, None] + c, _to_output(e * inv[:, None], y_ptr, ROUND_BF16),
             mask=mask)


@triton.jit
def _softmax_rows(x_ptr, y_ptr, blk, n_rows, n_cols, stride_xm, stride_ym, cols,
                  ROWS: tl.constexpr, NAN_IF_EMPTY: tl.constexpr, ROUND_BF16: tl.constexpr,
                  BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr, SHIFT: tl.constexpr,
                  TAIL: tl.constexpr, PIPELINED: tl.constexpr = False):
    """Softmax of rows blk * ROWS ... blk * ROWS + ROWS - 1, each held whole in registers.

    A row is CHUNKS tensors of BLOCK_N columns (x0 .. x2) and, with TAIL > 0, one of TAIL
    columns past them (xt), so a length that is not a power of two is covered by a few
    power-of-two pieces instead of padding to the next power of two (12288 = 3 x 4096: no
    idle quarter; 17,000 = 16,384 + 4096). Every chunk is loaded before any reduction: all
    of the row's bytes are in flight at once. With SHIFT > 1 the chunks hold the row's whole
    vectors and a small tensor xe its loose elements at both ends (see _row_window).
    """
    rows = blk * ROWS + tl.arange(0, ROWS)  # [ROWS] the rows of this block
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)  # row * stride can pass 2**31 on big tensors
    x_base, y_base, first, v_lo, v_hi = _row_window(rows64, stride_xm, stride_ym, n_cols, SHIFT)
    # Load every chunk first, so the whole row is in flight together.
    x0 = _load_chunk(x_ptr, x_base, row_ok, v_lo, v_hi, cols, 0, BLOCK_N, SHIFT,
                     PIPELINED)
    if CHUNKS > 1:
        x1 = _load_chunk(x_ptr, x_base, row_ok, v_lo, v_hi, cols, 1, BLOCK_N, SHIFT,
                         PIPELINED)
    if CHUNKS > 2:
        x2 = _load_chunk(x_ptr, x_base, row_ok, v_lo, v_hi, cols, 2, BLOCK_N, SHIFT,
                         PIPELINED)
    if TAIL > 0:
        tail_cols = tl.arange(0, TAIL)
        xt = _load_chunk(x_ptr, x_base, row_ok, v_lo, v_hi, tail_cols, CHUNKS, BLOCK_N, SHIFT,
                         PIPELINED)
    if SHIFT > 1:
        # The loose elements at the row's two ends: at most 2 (SHIFT - 1) scalars per row.
        ke, oke = _loose_columns(tl.arange(0, 2 * SHIFT)[None, :], first[:, None], v_lo[:, None],
                                 v_hi[:, None], (first + n_cols)[:, None], SHIFT)
        oke = oke & row_ok[:, None]
        xe = tl.load(x_ptr + x_base[:, None] + ke, mask=oke, other=NEG_INF).to(tl.float32)
    # m: the row max, the shift that keeps every exp <= 1 (no overflow, safe softmax): the max
    # over the chunks' maxima (a NaN that tl.maximum drops still reaches d through its exp).
    m = tl.max(x0, axis=1)
    if CHUNKS > 1:
        m = tl.maximum(m, tl.max(x1, axis=1))
    if CHUNKS > 2:
        m = tl.maximum(m, tl.max(x2, axis=1))
    if TAIL > 0:
        m = tl.maximum(m, tl.max(xt, axis=1))
    if SHIFT > 1:
        m = tl.maximum(m, tl.max(xe, axis=1))
    # A fully masked row has m = -inf, and x - m would be -inf - -inf = NaN. Shift by 0
    # instead: exp(-inf - 0) = 0 exactly, so the row's d is 0 and the convention below decides.
    m_ref = tl.where(m == NEG_INF, 0.0, m)
    # e: each chunk's exp(x - m), all against the one row max (no rescaling), computed once and
    # kept in x's registers (x is not needed again): no second exp at the store.
    # d: the denominator, >= 1 for any row with a finite entry (its max gives exp(0) = 1).
    x0 = _chunk_exp(x0, m_ref)
    d = tl.sum(x0, axis=1)
    if CHUNKS > 1:
        x1 = _chunk_exp(x1, m_ref)
        d += tl.sum(x1, axis=1)
    if CHUNKS > 2:
        x2 = _chunk_exp(x2, m_ref)
        d += tl.sum(x2, axis=1)
    if TAIL > 0:
        xt = _chunk_exp(xt, m_ref)
        d += tl.sum(xt, axis=1)
    if SHIFT > 1:
        xe = _chunk_exp(xe, m_ref)
        d += tl.sum(xe, axis=1)
    inv = _inverse(d, NAN_IF_EMPTY)
    # y = e / d, chunk by chunk.
    _store_chunk(y_ptr, y_base, row_ok, v_lo, v_hi, cols, x0, inv, 0, BLOCK_N, ROUND_BF16, SHIFT)
    if CHUNKS > 1:
        _store_chunk(y_ptr, y_base, row_ok, v_lo, v_hi, cols, x1, inv, 1, BLOCK_N, ROUND_BF16,
                     SHIFT)
    if CHUNKS > 2:
        _store_chunk(y_ptr, y_base, row_ok, v_lo, v_hi, cols, x2, inv, 2, BLOCK_N, ROUND_BF16,
                     SHIFT)
    if TAIL > 0:
        _store_chunk(y_ptr, y_base, row_ok, v_lo, v_hi, tail_cols, xt, inv, CHUNKS, BLOCK_N,
                     ROUND_BF16, SHIFT)
    if SHIFT > 1:
        tl.store(y_ptr + y_base[:, None] + ke,
                 _to_output(xe * inv[:, None], y_ptr, ROUND_BF16), mask=oke)


@triton.jit
def _inverse(d, NAN_IF_EMPTY: tl.constexpr):
    """1 / d, and the fully-masked convention where d == 0.

    One division per row, then multiplies: one extra rounding (u32), far cheaper than N divs.
    d == 0 only for a fully masked row; a NaN d (NaN or +inf in the row) must stay NaN, so test
    d == 0, not d > 0.
    """
    d_safe = tl.where(d == 0.0, 1.0, d)  # no 1/0 computed, even in the untaken branch
    if NAN_IF_EMPTY:
        inv = tl.where(d == 0.0, float("nan"), 1.0 / d_safe)
    else:
        inv = tl.where(d == 0.0, 0.0, 1.0 / d_safe)
    return inv


# --------------------------------------------------------------------------------------------
# Kernel 2: rows of any length. Pass 1 reads tiles and keeps (m, d); pass 2 reads again, writes.
# --------------------------------------------------------------------------------------------
# Specialised on its sizes and strides, unlike the other two: measured on the H200, the
# unspecialised form ran 28% slower (bf16, N = 65536), and only rows longer than the on-chip
# limit (32768) take this path, so checks of ordinary lengths never compile it.
@triton.jit
def _softmax_stream_kernel(
    x_ptr, y_ptr, n_cols, stride_xm, stride_ym,
    TILE: tl.constexpr,  # elements per tile (power of two)
    NAN_IF_EMPTY: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    SHIFT: tl.constexpr = 1,  # > 1: the row as an aligned window (see _row_window)
):
    row = tl.program_id(0).to(tl.int64)  # one program per row
    # The tiles walk window columns [0, end): the row itself, or with SHIFT > 1 its aligned
    # window (see _row_window). Pass 1 reads the window's whole vectors, the row's few
    # neighbouring elements they bring masked to -inf (the launcher checked they are inside the
    # memory x owns: _window_fits); pass 2 writes the whole vectors inside the row, and the
    # loose elements at its two ends are written last, from a small tensor of their own.
    x_base, y_base, first, v_lo, v_hi = _row_window(row, stride_xm, stride_ym, n_cols, SHIFT)
    x_row = x_ptr + x_base
    y_row = y_ptr + y_base
    end = first + n_cols
    cols = tl.arange(0, TILE)

    # Pass 1: the online recurrence, run independently in every lane of the tile, so the loop has
    # no cross-thread reduction at all. Lane j sees elements j, j + TILE, j + 2 TILE, ... and keeps
    #   m_j = max of what it has seen            (starts at -inf: nothing seen, no sentinel)
    #   d_j = sum of exp(x - m_j) over the same   (starts at 0)
    m_lane = tl.full([TILE], NEG_INF, tl.float32)
    d_lane = tl.zeros([TILE], tl.float32)
    for start in range(0, end, TILE):
        idx = start + cols
        # evict_last: keep these lines in L2, pass 2 is about to read them again.
        if SHIFT > 1:
            # Whole vectors of the window (up to SHIFT - 1 of the neighbouring rows' elements
            # come with them), then everything outside the row set to -inf.
            x = tl.load(x_row + idx, mask=idx < (end + SHIFT - 1) // SHIFT * SHIFT,
                        other=NEG_INF, eviction_policy="evict_last")
            x = tl.where((idx >= first) & (idx < end), x, NEG_INF)
        else:
            x = tl.load(x_row + idx, mask=idx < n_cols, other=NEG_INF,
                        eviction_policy="evict_last")
        x = x.to(tl.float32)
        # The recurrence m' = max(m, x), d' = d * exp(m - m') + exp(x - m') needs one exp, not
        # two: one of the two exponents is 0. With hi = max(m, x), lo = min(m, x), t = exp(lo - hi):
        #   x > m  (the max grows):  d' = d * t + 1   (old terms rescaled, new term exp(0) = 1)
        #   x <= m (max unchanged):  d' = d + t       (new term exp(x - m), old terms untouched)
        # (propagate_nan: a NaN in the row must reach d; the default max/min would drop it.)
        hi = tl.maximum(m_lane, x, propagate_nan=tl.PropagateNan.ALL)
        lo = tl.minimum(m_lane, x, propagate_nan=tl.PropagateNan.ALL)
        # While the lane has seen only -inf, hi = lo = -inf and lo - hi would be NaN: use
        # lo - hi = -inf - 0 there, so t = 0 and d stays exactly 0.
        empty = hi == NEG_INF
        t = tl.exp2((lo - tl.where(empty, 0.0, hi)) * 1.4426950408889634)  # log2(e)
        d_lane = tl.where(x > m_lane, d_lane * t + 1.0, d_lane + t)
        m_lane = hi

    # Merge the TILE lane states into the row's (m, d): the tile form of the recurrence,
    #   m = max_j m_j,   d = sum_j d_j * exp(m_j - m)   (each lane re-referenced to the row max).
    m = tl.max(m_lane, axis=0)
    m_ref = tl.where(m == NEG_INF, 0.0, m)  # fully masked row: shift by 0, see kernel 1
    d = tl.sum(d_lane * tl.exp2((m_lane - m_ref) * 1.4426950408889634), axis=0)  # log2(e)
    inv = _inverse(d, NAN_IF_EMPTY)

    # Pass 2: y = exp(x - m) / d, tile by tile, walking backwards: the last tiles of pass 1 are
    # the likeliest to be in L2 still. (A third pass would re-read x to compute d; the online
    # recurrence is exactly what saved it.)
    n_tiles = tl.cdiv(end, TILE)
    for k in range(0, n_tiles):
        idx = (n_tiles - 1 - k) * TILE + cols
        ok = _in_vectors(idx, v_lo, v_hi, SHIFT)
        x = tl.load(x_row + idx, mask=ok, other=NEG_INF, eviction_policy="evict_first")
        e = tl.exp2((x.to(tl.float32) - m_ref) * 1.4426950408889634)  # log2(e)
        tl.store(y_row + idx, _to_output(e * inv, y_ptr, ROUND_BF16), mask=ok)
    if SHIFT > 1:  # the loose elements at the row's two ends, read again (a few scalars)
        ke, oke = _loose_columns(tl.arange(0, 2 * SHIFT), first, v_lo, v_hi, end, SHIFT)
        xe = tl.load(x_row + ke, mask=oke, other=NEG_INF).to(tl.float32)
        ee = tl.exp2((xe - m_ref) * 1.4426950408889634)  # log2(e)
        tl.store(y_row + ke, _to_output(ee * inv, y_ptr, ROUND_BF16), mask=oke)


# --------------------------------------------------------------------------------------------
# Kernel 3 (compiled GPU only): a long row split across SPLIT cooperating programs.
# --------------------------------------------------------------------------------------------
@triton.jit
def _exchange_counted(part_ptr, count_ptr, row64, chunk, m_c, d_c, lanes, lane_ok,
                      SPLIT: tl.constexpr, MAX_SPIN: tl.constexpr):
    """Publish this chunk's (m_c, d_c) and wait for the row's SPLIT states, through a counter:
    (ms, ds) over lanes, and how many chunks were seen (SPLIT unless the wait timed out)."""
    # Publish (m_c, d_c), then count this chunk in. The release orders the two writes before
    # the count: whoever sees the count also sees the values.
    slot = part_ptr + (row64 * SPLIT + chunk) * 2
    tl.atomic_xchg(slot, m_c, sem="relaxed")
    tl.atomic_xchg(slot + 1, d_c, sem="relaxed")
    tl.atomic_add(count_ptr + row64, 1, sem="release")
    # Wait until all SPLIT chunks of this row are in (acquire: their writes become visible).
    seen = tl.atomic_add(count_ptr + row64, 0, sem="acquire")
    spins = 0
    while (seen < SPLIT) & (spins < MAX_SPIN):
        seen = tl.atomic_add(count_ptr + row64, 0, sem="acquire")
        spins += 1
    # Read all partial states (atomic reads: served by L2, where the writes went).
    ms = tl.atomic_add(part_ptr + (row64 * SPLIT + lanes) * 2, 0.0, mask=lane_ok, sem="acquire")
    ds = tl.atomic_add(part_ptr + (row64 * SPLIT + lanes) * 2 + 1, 0.0, mask=lane_ok,
                       sem="acquire")
    return ms, ds, seen


#: One thread's wait for a chunk's word (see _exchange_packed): read it until it is not -1 or
#: MAX_SPIN reads were made ($0: the word, $1: its address, $2: MAX_SPIN). READ is an atomic
#: read (what the Triton-level poll does) or a relaxed load (a warp's reads of the same words
#: coalesce into one request, where each thread's atomic is its own).
_WAIT_PTX = """{
    .reg .pred %p_wait, %p_more;
    .reg .b32 %n_spin;
    mov.b32 %n_spin, 0;
    WAIT${:uid}:
    READ
    setp.eq.s64 %p_wait, $0, -1;
    add.u32 %n_spin, %n_spin, 1;
    setp.lt.u32 %p_more, %n_spin, $2;
    and.pred %p_wait, %p_wait, %p_more;
    @%p_wait bra WAIT${:uid};
}"""
_WAIT_ATOMIC = tl.constexpr(_WAIT_PTX.replace("READ", "atom.global.gpu.relaxed.add.u64 $0, [$1], 0;"))
_WAIT_LOADS = tl.constexpr(_WAIT_PTX.replace("READ", "ld.relaxed.gpu.global.b64 $0, [$1];"))


@triton.jit
def _exchange_packed(part_ptr, row64, chunk, m_c, d_c, lanes, lane_ok,
                     SPLIT: tl.constexpr, MAX_SPIN: tl.constexpr,
                     POLL_IN_ASM: tl.constexpr = False, POLL_LOADS: tl.constexpr = False):
    """As _exchange_counted, with (m_c, d_c) as one 64-bit word (m_c's bits high, d_c's low)
    that is its own ready flag: the slots start at -1 (all bits set), a pattern no (m, d)
    has (a NaN the hardware makes is positive: 0x7fffffff), so a poll that sees every slot
    != -1 already holds the row's states. One word is written whole, so no fence is needed:
    one store and one read per poll, where the counter costs a write fence, a count, a poll
    and then a read of the states."""
    _publish_packed(part_ptr, row64, chunk, m_c, d_c, SPLIT)
    return _wait_packed(part_ptr, row64, lanes, lane_ok, SPLIT, MAX_SPIN, POLL_IN_ASM,
                        POLL_LOADS)


@triton.jit
def _publish_packed(part_ptr, row64, chunk, m_c, d_c, SPLIT: tl.constexpr, ok=None):
    """Write this chunk's (m_c, d_c) into its slot of row ``row64`` as one word (see
    _exchange_packed); nothing where ``ok`` (if given) is false: a row past the tensor."""
    m_bits = m_c.to(tl.int32, bitcast=True).to(tl.int64)
    d_bits = d_c.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.atomic_xchg(part_ptr + row64 * SPLIT + chunk, (m_bits << 32) | d_bits, mask=ok,
                   sem="relaxed")


@triton.jit
def _wait_packed(part_ptr, row64, lanes, lane_ok, SPLIT: tl.constexpr, MAX_SPIN: tl.constexpr,
                 POLL_IN_ASM: tl.constexpr = False, POLL_LOADS: tl.constexpr = False):
    """Wait for the SPLIT words of row ``row64`` (see _exchange_packed): (ms, ds, seen)."""
    if POLL_IN_ASM:
        # Each thread spins on its lane's word inside one PTX loop: no loop in Triton's IR,
        # so the row loop around this stays one the pipeliner can take apart (loads of the
        # next row issued before this wait), and no block-wide sum and barrier per poll.
        # Lanes past SPLIT poll the last chunk's word. With relaxed loads (POLL_LOADS) this
        # is what the shipped plan runs; on the H200 it also holds up past 32 chunks a row
        # (bf16 1,048,576 in 128 chunks: 78% of copy), where the Triton-level poll below
        # contends (bf16 262,144 in 64 chunks: 47%).
        slots = part_ptr + row64 * SPLIT + tl.minimum(lanes, SPLIT - 1)
        words = tl.inline_asm_elementwise(
            _WAIT_LOADS if POLL_LOADS else _WAIT_ATOMIC, "=l,l,r",
            [slots, tl.full(slots.shape, MAX_SPIN, tl.int32)], dtype=tl.int64, is_pure=False,
            pack=1)
        seen = tl.sum(((words != -1) & lane_ok).to(tl.int32), axis=0)
    else:
        # Poll with atomic reads (served by L2, where the words went), summing the lanes that
        # are ready after each round. Triton-level volatile loads instead were slower on the
        # H200 (bf16 65,536: 80% of copy against 86%).
        slots = part_ptr + row64 * SPLIT + lanes
        words = tl.atomic_add(slots, 0, mask=lane_ok, sem="relaxed")
        seen = tl.sum(((words != -1) & lane_ok).to(tl.int32), axis=0)
        spins = 0
        while (seen < SPLIT) & (spins < MAX_SPIN):
            words = tl.atomic_add(slots, 0, mask=lane_ok, sem="relaxed")
            seen = tl.sum(((words != -1) & lane_ok).to(tl.int32), axis=0)
            spins += 1
    ms = (words >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    ds = words.to(tl.int32).to(tl.float32, bitcast=True)
    return ms, ds, seen


@triton.jit(do_not_specialize=SPLIT_DO_NOT_SPECIALIZE)
def _softmax_split_kernel(
    x_ptr, y_ptr, part_ptr, count_ptr, n_rows, n_cols, stride_xm, stride_ym,
    chunk_cols,  # the columns each program owns: <= CHUNK, a multiple of 16 and of SHIFT
    # (split_columns)
    x_reach,  # the elements of memory x owns from x_ptr on (_readable), whole vectors: REACH
    CHUNK: tl.constexpr,  # elements each program keeps in registers (power of two)
    SPLIT: tl.constexpr,  # programs per row: SPLIT * CHUNK >= n_cols (any count, not padded
    # to a power of two: 151,936 = 19 chunks of 8192, not 32)
    LANES: tl.constexpr,  # a power of two >= SPLIT: the merge's tl.arange
    NAN_IF_EMPTY: tl.constexpr,
    MAX_SPIN: tl.constexpr,  # bound on the wait for the other chunks (then NaN, never a hang)
    ALIGN: tl.constexpr,  # n_cols and both row strides are multiples of ALIGN (see _alignment)
    SHIFT: tl.constexpr = 1,  # > 1: rows as aligned windows (see _row_window); SPLIT * CHUNK
    # then covers the rows' span (_window_span), and chunk 0 also owns the loose elements at
    # both ends
    PACKED: tl.constexpr = False,  # (m_c, d_c) published as one 64-bit word that is its own
    # ready flag (part_ptr: int64, filled with -1; count_ptr unused): see _exchange_packed
    STAGES: tl.constexpr = 1,  # > 1 (with PACKED): the poll runs inside one PTX loop, and the
    # row loop is software-pipelined: the next row's chunk loads while this row waits
    POLL_IN_ASM: tl.constexpr = False,  # (with PACKED) that PTX poll, also when STAGES == 1
    POLL_LOADS: tl.constexpr = False,  # that PTX poll reads with loads, not atomics
    AHEAD: tl.constexpr = False,  # (with PACKED and the PTX poll) row r + 1's part read and
    # published before row r's wait (split_exchange_ahead)
    LOOSE: tl.constexpr = 0,  # > 0 (with SHIFT > 1): the row's whole vectors are LOOSE elements
    # (16 bytes), not SHIFT: 2 LOOSE loose-element slots, not 2 SHIFT (split_loose_vectors)
    REACH: tl.constexpr = False,  # (with SHIFT > 1) loads stop at x_reach: the last row's
    # furthest whole vectors would pass the memory x owns (see _split_load_ok)
):
    if ALIGN > 1:
        # The launcher checked that sizes and strides are multiples of ALIGN (one 16-byte
        # vector), and (v // ALIGN) * ALIGN (== v) tells the compiler so: rows start 16-byte
        # aligned and the column masks are constant over whole vectors, so loads vectorise.
        n_cols = n_cols // ALIGN * ALIGN
        stride_xm = stride_xm // ALIGN * ALIGN
        stride_ym = stride_ym // ALIGN * ALIGN
    # Program p owns chunk p % SPLIT of the rows group, group + n_groups, ...: the SPLIT programs
    # of a group always work on the same row at the same time. The grid is persistent (at most
    # split_programs_per_sm per SM), so every program a group waits for is running. Where the
    # registers hold fewer (bf16 windows in chunks of 4096: 72 registers, so 7 programs of 128
    # threads per SM, not 8), a group's last programs start only when other programs finish:
    # correct (the waits end; MAX_SPIN is far beyond such a delay) but slower. Handing chunks
    # out by a ticket counter instead, which makes that impossible, measured 25-76% of copy
    # against 58-87% on the H200 (one counter for ~1000 programs), so it was not kept.
    pid = tl.program_id(0)
    chunk = pid % SPLIT
    group = pid // SPLIT
    n_groups = tl.num_programs(0) // SPLIT
    # The row cut into SPLIT equal parts of chunk_cols columns (a multiple of 16 and of SHIFT,
    # so every part starts on a 16-byte vector, and with SHIFT > 1 on a window boundary: a
    # warp's loads then start on 32-byte sectors), held in CHUNK registers' worth: a row
    # waits for its longest part, so SPLIT - 1 whole chunks and a short rest would leave one
    # program idle.
    start = chunk * chunk_cols  # this program's first column
    cols = tl.arange(0, CHUNK)  # ... and the columns from there
    # Whether rows have loose elements outside their whole vectors: with windows, unless those
    # vectors are 16 bytes (LOOSE) and every row starts on one and is whole ones (ALIGN).
    EDGES: tl.constexpr = SHIFT > 1 and (LOOSE == 0 or ALIGN % LOOSE != 0)
    lanes = tl.arange(0, LANES)
    lane_ok = lanes < SPLIT
    if AHEAD:
        _split_rows_ahead(x_ptr, y_ptr, part_ptr, n_rows, n_cols, stride_xm, stride_ym,
                          chunk_cols, x_reach, chunk, group, n_groups, start, cols, lanes, lane_ok,
                          SPLIT, NAN_IF_EMPTY, MAX_SPIN, SHIFT, STAGES, POLL_LOADS, LOOSE,
                          EDGES, REACH)
    else:
        for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
            row64 = row.to(tl.int64)
            e, xe, m_c, d_c, where = _split_part(x_ptr, row64, n_cols, stride_xm, stride_ym,
                                                 chunk, chunk_cols, x_reach, start, cols,
                                                 SHIFT, None, LOOSE, EDGES, REACH)
            if PACKED:
                ms, ds, seen = _exchange_packed(part_ptr, row64, chunk, m_c, d_c, lanes, lane_ok,
                                                SPLIT, MAX_SPIN, POLL_IN_ASM or STAGES > 1,
                                                POLL_LOADS)
            else:
                ms, ds, seen = _exchange_counted(part_ptr, count_ptr, row64, chunk, m_c, d_c,
                                                 lanes, lane_ok, SPLIT, MAX_SPIN)
            _split_finish(y_ptr, start, cols, where, e, xe, m_c, ms, ds, seen, lane_ok, SPLIT,
                          NAN_IF_EMPTY, EDGES)


@triton.jit
def _split_rows_ahead(x_ptr, y_ptr, part_ptr, n_rows, n_cols, stride_xm, stride_ym,
                      chunk_cols, x_reach, chunk, group, n_groups, start, cols, lanes, lane_ok,
                      SPLIT: tl.constexpr, NAN_IF_EMPTY: tl.constexpr, MAX_SPIN: tl.constexpr,
                      SHIFT: tl.constexpr, STAGES: tl.constexpr, POLL_LOADS: tl.constexpr,
                      LOOSE: tl.constexpr, EDGES: tl.constexpr, REACH: tl.constexpr):
    """The split kernel's row loop with the exchange a row ahead (split_exchange_ahead).

    The row loop above reads its part of row r, publishes its (m_c, d_c) and waits for the
    other parts of row r at once: they were published moments earlier or not yet, and the
    wait (latency) bounds split rows. Here the part of row r + n_groups is read, its exps
    computed and its (m_c, d_c) published before row r's wait, so by the time a program
    waits for row r, the others have had a whole part's work to publish theirs. Deadlock
    free as before: publishing never waits, and a group's programs wait for rows in the
    same order. The price: two parts' exps in registers across the wait.
    """
    # The group's first row (nothing past the tensor: a group may own no row at all).
    first64 = group.to(tl.int64)
    e, xe, m_c, d_c, _first = _split_part(x_ptr, first64, n_cols, stride_xm, stride_ym, chunk,
                                          chunk_cols, x_reach, start, cols, SHIFT,
                                          group < n_rows, LOOSE, EDGES, REACH)
    _publish_packed(part_ptr, first64, chunk, m_c, d_c, SPLIT, group < n_rows)
    for row in tl.range(group, n_rows, n_groups, num_stages=STAGES):
        # 1. The next row's part: read, reduced and published (masked past the last row).
        nxt = row + n_groups
        nxt64 = nxt.to(tl.int64)
        e_n, xe_n, m_n, d_n, _next = _split_part(x_ptr, nxt64, n_cols, stride_xm, stride_ym,
                                                 chunk, chunk_cols, x_reach, start, cols, SHIFT,
                                                 nxt < n_rows, LOOSE, EDGES, REACH)
        _publish_packed(part_ptr, nxt64, chunk, m_n, d_n, SPLIT, nxt < n_rows)
        # 2. This row's wait, merge and write; where it goes is worked out again (integer
        # arithmetic) rather than held across the loop (a mask as long as the part).
        row64 = row.to(tl.int64)
        ms, ds, seen = _wait_packed(part_ptr, row64, lanes, lane_ok, SPLIT, MAX_SPIN, True,
                                    POLL_LOADS)
        _x_base, y_base, first, v_lo, v_hi, col_ok = _split_where(
            row64, n_cols, stride_xm, stride_ym, chunk_cols, start, cols, SHIFT, None, LOOSE)
        ke, oke = _split_loose(first, v_lo, v_hi, n_cols, chunk, SHIFT, None, LOOSE, EDGES)
        _split_finish(y_ptr, start, cols, (y_base, col_ok, ke, oke), e, xe, m_c, ms, ds, seen,
                      lane_ok, SPLIT, NAN_IF_EMPTY, EDGES)
        # 3. The next row's part becomes this row's.
        e, xe, m_c = e_n, xe_n, m_n


@triton.jit
def _split_where(row64, n_cols, stride_xm, stride_ym, chunk_cols, start, cols,
                 SHIFT: tl.constexpr, row_ok, LOOSE: tl.constexpr):
    """Where this program's part of split row ``row64`` lies: (x_base, y_base, first, v_lo,
    v_hi) as _row_window gives them (whole vectors of LOOSE elements if LOOSE > 0), and
    col_ok, the mask of the part's columns. ``row_ok`` (None: every row) false masks them
    all: a row past the tensor."""
    x_base, y_base, first, v_lo, v_hi = _row_window(row64, stride_xm, stride_ym, n_cols, SHIFT,
                                                    LOOSE)
    # The part's bounds as one comparison against the arange (with the row's bounds in
    # it): a mask of its own per element costs registers under the cap.
    col_ok = _in_vectors(cols, v_lo - start, tl.minimum(v_hi - start, chunk_cols), SHIFT)
    if row_ok is not None:
        col_ok = col_ok & row_ok
    return x_base, y_base, first, v_lo, v_hi, col_ok


@triton.jit
def _split_loose(first, v_lo, v_hi, n_cols, chunk, SHIFT: tl.constexpr, row_ok,
                 LOOSE: tl.constexpr, EDGES: tl.constexpr):
    """The row's loose elements (EDGES: windows, SHIFT > 1; chunk 0 owns them): their window
    columns ke and mask oke (see _loose_columns), all masked where ``row_ok`` (None: every
    row) is false. Without EDGES there are none: two unused slots, masked. With LOOSE > 0 they are
    the few outside the row's whole 16-byte vectors (2 LOOSE slots), not outside its whole
    windows (2 SHIFT slots: 128 for bf16 128-byte windows, whose max and sum then span the
    warps)."""
    if EDGES:
        if LOOSE > 0:
            ke, oke = _loose_columns(tl.arange(0, 2 * LOOSE), first, v_lo, v_hi,
                                     first + n_cols, LOOSE, v_lo - LOOSE)
        else:
            ke, oke = _loose_columns(tl.arange(0, 2 * SHIFT), first, v_lo, v_hi,
                                     first + n_cols, SHIFT)
        oke = oke & (chunk == 0)
        if row_ok is not None:
            oke = oke & row_ok
    else:
        ke = tl.zeros([2], tl.int64)
        oke = ke > 0
    return ke, oke


@triton.jit
def _split_load_ok(cols, start, chunk_cols, n_cols, SHIFT: tl.constexpr, LOOSE: tl.constexpr,
                   room=None):
    """The mask a split part of windowed rows loads under (SHIFT > 1), the same for every row:
    its columns below the furthest whole vector of any row, ceil(n / SHIFT) windows (v_hi <=
    that); with whole vectors of LOOSE elements a row's v_hi can pass it (first + n rounded
    down to a vector, first up to SHIFT - 1), so then (n + SHIFT - 1) rounded down to LOOSE.

    That bound can pass the last row's end by up to SHIFT - 1 columns, and x's end with it
    (the launcher checks: _split_reach_fits). Where it would, ``room`` (REACH) is the
    columns of memory x owns from the row's window on (x_reach - x_base, whole vectors), and
    the mask stops there too: one bound per row, so the pipelined loop computes the mask
    again for each row (bf16 in chunks of 2048: 1,200 SASS instructions, not 1,120), which
    is why it is not the rule."""
    VEC: tl.constexpr = LOOSE if LOOSE > 0 else SHIFT  # the whole vectors' width
    whole = (n_cols + SHIFT - 1) // VEC * VEC
    if room is not None:
        # Past every row but the last, room > whole. Rounded down to VEC, the bound keeps
        # the mask constant over whole vectors (so the loads stay vectorised).
        whole = tl.minimum(room, whole).to(tl.int32) // VEC * VEC
    return (cols < chunk_cols) & (start + cols < whole)


@triton.jit
def _load_part(ptrs, load_ok, ok, WINDOW: tl.constexpr, EVICT: tl.constexpr):
    """x at ``ptrs`` where ``ok``, -inf elsewhere, read under ``load_ok`` (``ok`` itself, or with
    WINDOW a wider mask that is the same for every row: see _split_part); fp32 for bf16 on the
    GPU, the input's dtype otherwise (widened by the caller).

    bf16 on the GPU is read with no fill, widened on its bits (_widen) and only then given its
    -inf: a fill in the load is one select per 16-bit element before the widening, which in a
    pipelined loop also runs on the copy's registers (bf16 rows of 65,536 split in chunks of
    2048: 1,112 SASS instructions, 968 this way). The lanes past ``load_ok`` hold whatever
    the registers held, and the select drops them (``ok`` implies ``load_ok``). Other dtypes
    keep the fill.
    """
    if WIDEN_BF16_BITS and ptrs.dtype.element_ty == tl.bfloat16:
        x = tl.load(ptrs, mask=load_ok, eviction_policy=EVICT)
        x = tl.where(ok, _widen(x), NEG_INF)
    else:
        x = tl.load(ptrs, mask=load_ok, other=NEG_INF, eviction_policy=EVICT)
        if WINDOW:
            x = tl.where(ok, x, NEG_INF)
    return x


@triton.jit
def _split_part(x_ptr, row64, n_cols, stride_xm, stride_ym, chunk, chunk_cols, x_reach, start,
                cols, SHIFT: tl.constexpr, row_ok, LOOSE: tl.constexpr, EDGES: tl.constexpr,
                REACH: tl.constexpr = False):
    """One program's part of a split row, read once: (e, xe, m_c, d_c, where), its exps
    e = exp(x - m_c) over the part's columns (and xe over the row's loose elements, chunk 0
    only, SHIFT > 1), kept in registers until _split_finish writes them, the part's
    (m_c, d_c) for the exchange, and where they go: (y_base, col_ok, ke, oke). ``row_ok``
    (None: every row) false reads nothing: a row past the tensor. LOOSE, EDGES: see
    _split_loose; REACH: see _split_load_ok."""
    x_base, y_base, first, v_lo, v_hi, col_ok = _split_where(
        row64, n_cols, stride_xm, stride_ym, chunk_cols, start, cols, SHIFT, row_ok, LOOSE)
    # The chunk is read once and stays in registers until it is written.
    if SHIFT > 1:
        # A window's bounds change from row to row, and a load masked by them makes the
        # pipelined row loop carry every vector's mask from the stage that issues the copy
        # to the one that reads it (bf16 windows in chunks of 4096: 1,320 SASS instructions,
        # 1,192 without). So load with a mask that is the same for every row, the part's
        # columns up to the furthest whole vector of any row (_split_load_ok), and apply the
        # row's own bounds after the copy. The few neighbouring columns it also reads lie in
        # memory x owns (the launcher checked), or else (REACH) the mask stops at x_reach.
        if REACH:
            load_ok = _split_load_ok(cols, start, chunk_cols, n_cols, SHIFT, LOOSE,
                                     x_reach - x_base)
        else:
            load_ok = _split_load_ok(cols, start, chunk_cols, n_cols, SHIFT, LOOSE)
        if row_ok is not None:
            load_ok = load_ok & row_ok
        x = _load_part(x_ptr + (x_base + start) + cols, load_ok, col_ok, True, "evict_first")
    else:
        x = _load_part(x_ptr + (x_base + start) + cols, col_ok, col_ok, False, "evict_first")
    ke, oke = _split_loose(first, v_lo, v_hi, n_cols, chunk, SHIFT, row_ok, LOOSE, EDGES)
    if EDGES:
        # The loose elements, loaded with the chunk rather than after its max: chunk 0 is
        # on every row's critical path, and a second round trip there delays all SPLIT.
        # (Loaded a row ahead instead, in registers across the wait, they cost bf16 rows in
        # chunks of 4096 6-12% of copy bandwidth on the H200, and gained nothing elsewhere.)
        xe = tl.load(x_ptr + x_base + ke, mask=oke, other=NEG_INF).to(tl.float32)
    else:
        xe = tl.full([2], NEG_INF, tl.float32)  # no loose elements (unused)
    x = x.to(tl.float32)  # widen once (bf16 on the GPU: done, by _load_part)
    # This chunk's (m_c, d_c), exactly as in kernel 1 (chunk 0 with the loose elements).
    m_c = tl.max(x, axis=0)
    if EDGES:
        m_c = tl.maximum(m_c, tl.max(xe, axis=0))
    m_c_ref = tl.where(m_c == NEG_INF, 0.0, m_c)
    # e_c = exp(x - m_c), kept in x's registers until the store: one exp per element, the
    # chunk rescaled below by one factor once the row's max is known.
    x = tl.exp2((x - m_c_ref) * 1.4426950408889634)  # log2(e)
    d_c = tl.sum(x, axis=0)
    if EDGES:
        xe = tl.exp2((xe - m_c_ref) * 1.4426950408889634)  # log2(e)
        d_c += tl.sum(xe, axis=0)
    return x, xe, m_c, d_c, (y_base, col_ok, ke, oke)


@triton.jit
def _split_finish(y_ptr, start, cols, where, e, xe, m_c, ms, ds, seen, lane_ok,
                  SPLIT: tl.constexpr, NAN_IF_EMPTY: tl.constexpr, EDGES: tl.constexpr):
    """Merge the row's SPLIT states (ms, ds) into its (m, d), and write this program's part:
    y = e * exp(m_c - m) / d (see _split_part), and its loose elements (EDGES)."""
    y_base, col_ok, ke, oke = where
    # Merge:  m = max_c m_c,   d = sum_c d_c * exp(m_c - m).
    ms = tl.where(lane_ok, ms, NEG_INF)  # lanes past SPLIT: no chunk, nothing to merge
    ds = tl.where(lane_ok, ds, 0.0)
    m = tl.max(ms, axis=0)
    m_ref = tl.where(m == NEG_INF, 0.0, m)
    d = tl.sum(ds * tl.exp2((ms - m_ref) * 1.4426950408889634), axis=0)  # log2(e)
    d = tl.where(seen < SPLIT, float("nan"), d)  # timed out: say so loudly, never hang
    inv = _inverse(d, NAN_IF_EMPTY)
    # y = exp(x - m) / d = e_c * (exp(m_c - m) / d): the chunk's exps re-referenced to the
    # row max by one scalar factor (<= 1, no overflow). A chunk with no finite entry has
    # e_c = 0 and m_c = -inf, so its factor is exp(-inf) = 0 and its outputs 0 (NaN where d
    # is NaN: a NaN or +inf elsewhere in the row reaches every output through inv).
    scale = tl.exp2((m_c - m_ref) * 1.4426950408889634) * inv  # log2(e)
    tl.store(y_ptr + (y_base + start) + cols, (e * scale).to(y_ptr.dtype.element_ty),
             mask=col_ok)
    if EDGES:
        tl.store(y_ptr + y_base + ke, (xe * scale).to(y_ptr.dtype.element_ty), mask=oke)


# --------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------
def _launch_plan(x2: torch.Tensor, y2: torch.Tensor, path: str, max_on_chip: int | None,
                 tile: int | None, tuning: dict[str, Any] | None
                 ) -> tuple[Plan, dict[str, Any], int, int]:
    """(plan, its tuning, ALIGN, SHIFT) for the rows of x2 written into y2 (see
    :func:`softmax`)."""
    n_cols, itemsize = x2.shape[1], x2.element_size()
    align = _alignment(itemsize, n_cols, x2.stride(0), y2.stride(0))
    shift = _shift(itemsize, align, x2, y2)
    # A row handled as an aligned window (shift > 1) spans up to shift - 1 more columns, and
    # takes its PLAN_TABLE row's window_overrides.
    p = plan(n_cols + shift - 1, path=path, max_on_chip=max_on_chip, tile=tile, tuning=tuning,
             itemsize=itemsize, interpreted=INTERPRETED, windowed=shift > 1)
    t = _tuning(n_cols + shift - 1, itemsize, path, tuning, windowed=shift > 1)
    one_16_bit_row = p.rows_per_program == 1 and itemsize == 2
    if shift > 1 and p.path == "on_chip" and not (one_16_bit_row or t["chip_windows_packed"]):
        # On chip, windows pay for one 16-bit row per program, and for the tiny 16-bit rows
        # of PLAN_TABLE. Measured on the H200: bf16 rows of 1001, 4 per program, 43% of copy
        # windowed against 66% element by element; fp32 rows of 12,289 66% against 71% (bf16
        # 12,289: 76% against 45%). Such rows keep their PLAN_TABLE row's window_overrides
        # (the odd rows' launch: fp32 rows of 4097-6144 on chip as 4096 and a tail), read
        # element by element.
        shift = 1
        p = plan(n_cols, path=path, max_on_chip=max_on_chip, tile=tile, tuning=tuning,
                 itemsize=itemsize, interpreted=INTERPRETED, windowed=True)
        t = _tuning(n_cols, itemsize, path, tuning, windowed=True)
    width = n_cols + shift - 1
    per_program = int(t["unaligned_elems_per_program"])
    if align == 1 and shift == 1 and p.path == "on_chip" and p.rows_per_program > 1 and per_program:
        # Rows loaded element by element: smaller programs (see PLAN_TABLE).
        t = {**t, "min_elems_per_program": per_program}
        if int(t["unaligned_elems_per_thread"]):
            t["elems_per_thread"] = int(t["unaligned_elems_per_thread"])
        p = plan(n_cols, path=path, max_on_chip=max_on_chip, tile=tile, tuning=t,
                 itemsize=itemsize, interpreted=INTERPRETED)
    if (shift == 1 and p.path == "on_chip" and path == "auto" and not INTERPRETED
            and "max_on_chip" in t["off_sector_overrides"]
            and _shift(itemsize, align, x2, y2, 32) > 1):
        # Rows off a 32-byte sector whose PLAN_TABLE row plans them apart (its
        # off_sector_overrides name their own max_on_chip): on chip, each warp's loads straddle
        # sectors (H200, bf16 23,560 / 24,392 on chip at 81 / 82% of copy, split as windows of
        # 16-byte vectors 91.6 / 92.3%).
        t = {**t, **t["off_sector_overrides"], **(tuning or {})}
        p = plan(n_cols, path=path, max_on_chip=max_on_chip, tile=tile, tuning=t,
                 itemsize=itemsize, interpreted=INTERPRETED)
    if p.path == "split" and path == "auto" and not INTERPRETED:
        if p.split > _sm_count(x2.device) * int(t["split_programs_per_sm"]):
            # More chunks than programs the GPU runs at once: they could not all wait for each
            # other. Stream instead.
            p = plan(width, path="stream", tile=tile, tuning=t, itemsize=itemsize,
                     interpreted=INTERPRETED)
    if p.path == "split":
        # Split rows as windows of split_window_bytes where a row starts off a vector or a
        # 32-byte sector (see _shift), if the plan's parts still cover the wider window.
        wide = _shift(itemsize, align, x2, y2, int(t["split_window_bytes"]))
        t_wide, p_wide = t, p
        if shift == 1 and wide > 1 and t["off_sector_overrides"]:
            # Aligned rows off a 32-byte sector, read as windows: their PLAN_TABLE row's knobs
            # for them (the exchange a row ahead lost on 128-byte windows of the windows'
            # vectors: H200, bf16 33,000 77% of copy against 87%; with 16-byte vectors inside
            # them it wins), then the caller's. Knobs that narrow the windows to 16 bytes read
            # such a row unwindowed, with the aligned rows' launch.
            t_wide = {**t, **t["off_sector_overrides"], **(tuning or {})}
            wide = _shift(itemsize, align, x2, y2, int(t_wide["split_window_bytes"]))
            if wide > shift:
                p_wide = plan(_window_span(x2, wide), path="split", tile=tile, tuning=t_wide,
                              itemsize=itemsize, interpreted=INTERPRETED)
                # Narrower windows where the row then takes fewer parts (they span fewer
                # columns: _window_span), or as many where only the wider windows' loads
                # would need bounding by x's memory (REACH: a mask rebuilt per row); where
                # neither, the wider ones won.
                few = int(t_wide["split_fewer_parts_window_bytes"])
                narrow = _shift(itemsize, align, x2, y2, few) if few else shift
                if shift < narrow < wide:
                    p_narrow = plan(_window_span(x2, narrow), path="split", tile=tile,
                                    tuning=t_wide, itemsize=itemsize, interpreted=INTERPRETED)

                    def reach_fits(s: int) -> bool:
                        return _split_reach_fits(x2, s, _loose_vector(t_wide, s, itemsize))

                    if p_narrow.split < p_wide.split or (
                            p_narrow.split == p_wide.split and not reach_fits(wide)
                            and reach_fits(narrow)):
                        wide, p_wide = narrow, p_narrow
        if wide > shift and p_wide.split * p_wide.block >= _window_span(x2, wide):
            t, p, shift = t_wide, p_wide, wide
        elif shift > 1:
            # Windows (rows off a vector) that the wider windows would take into one more
            # part: windows of split_narrow_window_bytes where the plan's parts cover them,
            # before the 16-byte ones, whose warps' loads straddle sectors.
            narrow = _shift(itemsize, align, x2, y2, min(int(t["split_narrow_window_bytes"]),
                                                         int(t["split_window_bytes"])))
            if narrow > shift and p.split * p.block >= _window_span(x2, narrow):
                shift = narrow
    if shift > 1 and p.path == "stream" and not _window_fits(x2, shift):
        # The last row's end vector could reach past the memory x owns: element by element
        # (with PyTorch's CUDA caching allocator, whose blocks are whole 512 bytes, a window
        # of at most 128 bytes always fits). Split parts keep their windows, and their loads
        # stop at the memory x owns instead (REACH, see _split_reach_fits).
        shift = 1
        t = _tuning(n_cols, itemsize, path, tuning)
        p = plan(n_cols, path="stream", tile=tile, tuning=t, itemsize=itemsize,
                 interpreted=INTERPRETED)
    return p, t, align, shift


def _window_span(x2: torch.Tensor, shift: int) -> int:
    """The columns x2's rows span as windows of ``shift`` elements, up to the end of the row
    that starts furthest into its window: n + shift - g, g = gcd(row stride, shift), since
    x2 starts on a window and row r starts r * stride elements on, at a multiple of g within
    its window (at most shift - g); n for a single row. The split parts need cover no more:
    bf16 rows of 22,520 (16 bytes off a sector every other row) as 32-byte windows span
    22,528 columns, 11 parts of 2048, where n + shift - 1 = 22,535 took 12.

    >>> _window_span(torch.empty(4, 22520, dtype=torch.bfloat16), 16)
    22528
    """
    n_rows, n_cols = x2.shape
    if shift == 1 or n_rows == 1:
        return n_cols
    return n_cols + shift - math.gcd(x2.stride(0), shift)


def _split_reach_fits(x2: torch.Tensor, shift: int, loose: int) -> bool:
    """Whether the split parts of x2's rows as windows of ``shift`` (whole vectors of
    ``loose`` elements, 0: of the window) may load the same columns on every row: up to the
    furthest row's last whole vector, n + shift - 1 columns rounded down to a vector from a
    row's window start (_split_load_ok), which must lie in memory x2 owns for the last row.
    Where not, the launch bounds its loads by that memory (REACH) instead of giving up the
    windows (the bench's bf16 22,776, whose last row's reach passes x's end by 96 bytes, read
    unwindowed: 89.2% of copy on the H200, 89.7% with REACH)."""
    vec = loose or shift
    return shift == 1 or _window_fits(x2, shift, (x2.shape[1] + shift - 1) // vec * vec)


def _window_fits(x2: torch.Tensor, shift: int, reach: int | None = None) -> bool:
    """Whether the whole vectors holding the last row's elements lie in memory x2 owns
    (``reach``: or the ``reach`` elements from the start of the last row's window).

    The streaming kernel's windows read up to shift - 1 elements past a row's end (masked to
    -inf, never used): inside the next row, except after the last one. PyTorch's CUDA caching
    allocator hands out blocks in whole multiples of 512 bytes, so a storage owns its size
    rounded up to 512 there; with any other allocator (the CPU,
    ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, cudaMallocAsync) only its exact size counts, and a
    tensor whose last vector would reach past it streams element by element instead.
    """
    last_start = (x2.shape[0] - 1) * x2.stride(0)  # elements from x2's start
    readable = _readable(x2)
    if reach is not None:
        return last_start // shift * shift + reach <= readable
    return -(-(last_start + x2.shape[1]) // shift) * shift <= readable


def _readable(x2: torch.Tensor) -> int:
    """The elements of memory x2 owns from its first one on: its storage's size (with
    PyTorch's CUDA caching allocator, rounded up to its 512-byte blocks) past x2's start."""
    owned = x2.untyped_storage().nbytes()
    if _caching_allocator(x2.device):
        owned = -(-owned // 512) * 512
    return owned // x2.element_size() - x2.storage_offset()


@functools.lru_cache(maxsize=None)  # torch reads the variable once, when CUDA starts
def _caching_allocator(device: torch.device) -> bool:
    """Whether CUDA tensors come from PyTorch's native caching allocator (512-byte blocks)."""
    if device.type != "cuda" or os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") == "1":
        return False
    try:
        return torch.cuda.get_allocator_backend() == "native"
    except (AttributeError, RuntimeError):
        return False


def _check(x: Any, fully_masked: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"x must be a torch.Tensor, got {type(x).__name__}; wrap arrays with torch.as_tensor"
        )
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"x.dtype={x.dtype} is not supported; use float32, bfloat16 or float16 "
            f"(e.g. x.to(torch.float32))"
        )
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(
            f"x.shape={tuple(x.shape)} has no last dim to take softmax over; pass at least one "
            f"element per row"
        )
    if fully_masked not in FULLY_MASKED:
        raise ValueError(
            f"fully_masked={fully_masked!r} is not one of {FULLY_MASKED}; use 'zeros' (SDPA math "
            f"backend) or 'nan' (torch.softmax)"
        )
    want = "cpu" if INTERPRETED else "cuda"
    if x.device.type != want:
        how = (
            "move it with x.cpu(), or import the kernels in a process without "
            "TRITON_INTERPRET=1 to run on the GPU"
            if INTERPRETED
            else "move it with x.cuda(), or call onlinesm.kernels.use_interpreter(True) "
            "before importing the kernels to run on the CPU"
        )
        mode = "interpreter" if INTERPRETED else "compiled GPU"
        raise ValueError(f"x.device={x.device} but the kernels run in {mode} mode; {how}")


@dataclasses.dataclass(frozen=True)
class _Launch:
    """One planned launch of the softmax kernels, without its tensors: the kernel, its grid
    (on chip and streamed), its constexprs, warps and register cap (``options``), and for
    split rows the chunks' columns, the programs per SM it asks for and the key of
    ``_SPLIT_FIT`` that resizes it by what its compiled kernel's registers let an SM hold;
    and that compiled kernel once launched (``launch_kernel``: later calls skip the JIT)."""

    path: str
    kernel: Any
    grid: tuple[int, ...]
    options: dict[str, Any]
    columns: Any = None
    per_sm: int = 0
    fit_key: tuple[Any, ...] | None = None
    compiled: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False)

    def ints(self, x2: torch.Tensor, y2: torch.Tensor) -> tuple[int, ...]:
        """The integer arguments of the on-chip and streaming kernels, after x and y."""
        if self.path == "stream":
            return x2.shape[1], x2.stride(0), y2.stride(0)
        return x2.shape[0], x2.shape[1], x2.stride(0), y2.stride(0)


#: Launches already planned, by everything planning reads (see _launch): planning is about
#: 50 µs of Python, longer than the kernel runs on a small input, and a model calls softmax
#: on the same shapes again and again. Bounded: cleared when full.
_LAUNCHES: dict[tuple[Any, ...], tuple[Any, Any, _Launch]] = {}
_LAUNCHES_MAX = 4096


def _launch(x2: torch.Tensor, y2: torch.Tensor, path: str, max_on_chip: int | None,
            tile: int | None, tuning: dict[str, Any] | None, nan_if_empty: bool) -> _Launch:
    """The launch :func:`softmax` makes for the rows of x2 written into y2, planned once per
    key (a caller's ``tuning`` is planned every time). The key holds what the plan reads:
    shape, row strides, where x and y start within 1 KB (the windows' alignment), the memory
    x owns from its start (_readable: whether a window's last vector fits), dtype, device, the
    arguments and whether configs are pinned; an entry stands while ``PLAN_TABLE`` and
    ``TUNING`` are the objects it was planned with."""
    key = None
    if tuning is None:
        key = (x2.dtype, x2.device, *x2.shape, x2.stride(0), y2.stride(0),
               x2.data_ptr() % 1024, y2.data_ptr() % 1024, _readable(x2),
               path, max_on_chip, tile, nan_if_empty, INTERPRETED, configs_pinned())
        hit = _LAUNCHES.get(key)
        if hit is not None and hit[0] is _plan_module.PLAN_TABLE and hit[1] is _plan_module.TUNING:
            return hit[2]
    launch = _plan_launch(x2, y2, path, max_on_chip, tile, tuning, nan_if_empty)
    if key is not None:
        if len(_LAUNCHES) >= _LAUNCHES_MAX:
            _LAUNCHES.clear()
        _LAUNCHES[key] = (_plan_module.PLAN_TABLE, _plan_module.TUNING, launch)
    return launch


def _plan_launch(x2: torch.Tensor, y2: torch.Tensor, path: str, max_on_chip: int | None,
                 tile: int | None, tuning: dict[str, Any] | None,
                 nan_if_empty: bool) -> _Launch:
    """Plan :func:`_launch`'s launch (no memo)."""
    n_rows, n_cols = x2.shape
    p, t, align, shift = _launch_plan(x2, y2, path, max_on_chip, tile, tuning)
    round_bf16 = INTERPRETED and x2.dtype == torch.bfloat16
    if p.path == "on_chip":
        grid = (cdiv(n_rows, p.rows_per_program),)
        if p.stages > 1 and not INTERPRETED:
            grid = (min(grid[0], _sm_count(x2.device) * int(t["chip_programs_per_sm"])),)
        return _Launch("on_chip", _variant(_softmax_on_chip_kernel, _softmax_on_chip_specialised),
                       grid, _on_chip_options(p, t, align, shift, nan_if_empty, round_bf16))
    if p.path == "stream":
        return _Launch("stream", _softmax_stream_kernel, (n_rows,), dict(
            TILE=p.block, NAN_IF_EMPTY=nan_if_empty, ROUND_BF16=round_bf16, SHIFT=shift,
            num_warps=p.num_warps))
    if INTERPRETED:
        raise ValueError(
            "path='split' needs programs running concurrently on a GPU; the interpreter runs "
            "them one at a time. Use path='stream' (or 'auto') under TRITON_INTERPRET=1"
        )
    options = _split_options(p, t, align, shift, nan_if_empty, x2.element_size())
    options["REACH"] = not _split_reach_fits(x2, shift, options["LOOSE"])  # x's end is near
    fit_key = None
    if t["split_fit_registers"]:
        fit_key = (x2.device, x2.dtype, configs_pinned(), *sorted(options.items()))
    columns = split_columns(_window_span(x2, shift), p.split, p.block,
                            bool(t["split_balanced"]), granule=shift)
    return _Launch("split", _variant(_softmax_split_kernel, _softmax_split_specialised), (),
                   options, columns, int(t["split_programs_per_sm"]), fit_key)


def softmax(
    x: torch.Tensor,
    *,
    fully_masked: str = "zeros",
    path: str = "auto",
    max_on_chip: int | None = None,
    tile: int | None = None,
    tuning: dict[str, Any] | None = None,
) -> torch.Tensor:
    """Softmax over the last dim of ``x`` (any leading shape), in x's dtype, float32 inside.

    ``fully_masked``: what a row with no finite entry gives, ``"zeros"`` or ``"nan"`` (as
    ``torch.softmax``). ``path``, ``max_on_chip``, ``tile`` and ``tuning`` choose the kernel and
    its launch (tests use them to reach the streaming path with short rows); leave them alone
    otherwise. A last dim with stride != 1 is copied to contiguous first; rows may have any stride.

    >>> softmax(torch.tensor([[0.0, float("-inf")]]))
    tensor([[1., 0.]])
    """
    _check(x, fully_masked)
    n_cols = x.shape[-1]
    if x.stride(-1) != 1 and n_cols > 1:
        x = x.contiguous()  # unit column stride: coalesced, vectorised loads in every kernel
    x2 = x.reshape(-1, n_cols)  # a view whenever the leading dims allow it
    n_rows = x2.shape[0]
    y2 = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0:
        return y2.reshape(x.shape)
    launch = _launch(x2, y2, path, max_on_chip, tile, tuning, fully_masked == "nan")
    with on_device(x.device):  # Triton launches on the current device
        _run(launch, x2, y2)
    return y2.reshape(x.shape)


def _run(launch: _Launch, x2: torch.Tensor, y2: torch.Tensor) -> None:
    """Launch ``launch`` on the rows of x2, written into y2: through Triton's JIT the first
    time, then its compiled kernel directly (``launch_kernel``; the key of ``_LAUNCHES``
    fixes everything the JIT specialises on: shape, strides, x's and y's alignment)."""
    if launch.path != "split":
        launch_kernel(launch.kernel, launch.grid, (x2, y2, *launch.ints(x2, y2)), launch.options,
                      launch.compiled)
        return
    n_rows, n_cols = x2.shape
    vector = 16 // x2.element_size()
    # Split rows: as many groups of SPLIT programs as the GPU holds at once (they wait for
    # each other), from what the last such launch's registers and shared memory let an SM hold.
    per_sm = _SPLIT_FIT.get(launch.fit_key, launch.per_sm) if launch.fit_key else launch.per_sm
    split = launch.options["SPLIT"]
    groups = min(n_rows, max(1, _sm_count(x2.device) * per_sm // split))
    if launch.options["PACKED"]:  # one word per chunk, -1 until written (see _exchange_packed)
        part = torch.full((n_rows * split,), -1, dtype=torch.int64, device=x2.device)
        count = part  # unused
    else:
        part = torch.empty(n_rows * split * 2, dtype=torch.float32, device=x2.device)
        count = torch.zeros(n_rows, dtype=torch.int32, device=x2.device)
    fresh = None not in launch.compiled  # its first launch: it compiles, then it is sized
    compiled = launch_kernel(
        launch.kernel, (groups * split,),
        (x2, y2, part, count, n_rows, n_cols, x2.stride(0), y2.stride(0), launch.columns,
         _readable(x2) // vector * vector),
        launch.options, launch.compiled)
    if launch.fit_key and fresh:
        props = _device_properties(x2.device)
        _SPLIT_FIT[launch.fit_key] = _programs_that_fit(
            launch.per_sm, int(getattr(compiled, "n_regs", 0) or 0),
            launch.options["num_warps"],
            int(getattr(props, "regs_per_multiprocessor", 65536)),
            int(getattr(props, "max_threads_per_multi_processor", 2048)) // 32,
            int(getattr(getattr(compiled, "metadata", None), "shared", 0) or 0),
            int(getattr(props, "shared_memory_per_multiprocessor", 233472)))


def _on_chip_options(p: Plan, t: dict[str, Any], align: int, shift: int, nan_if_empty: bool,
                     round_bf16: bool = False) -> dict[str, Any]:
    """The on-chip kernel's constexprs, num_warps and register cap (maxnreg, on the GPU only)
    for plan ``p`` under the knobs ``t``: what the launcher passes, and what
    bench/split_ptxas.py compiles offline."""
    cap = int(t["chip_maxnreg"])
    return dict(
        BLOCK_N=p.block, ROWS=p.rows_per_program, NAN_IF_EMPTY=nan_if_empty,
        ROUND_BF16=round_bf16, STAGES=p.stages, ALIGN=align, CHUNKS=p.chunks, SHIFT=shift,
        TAIL=p.tail, num_warps=p.num_warps,
        **({"maxnreg": cap} if cap and not INTERPRETED else {}))


def _loose_vector(t: dict[str, Any], shift: int, itemsize: int) -> int:
    """The whole vectors (elements) a split window of ``shift`` is read in under the knobs
    ``t``: 16 bytes with split_loose_vectors where the window is wider, else 0 (the window's
    own): the kernel's LOOSE."""
    vector = 16 // itemsize
    return vector if t["split_loose_vectors"] and shift > vector else 0


def _split_options(p: Plan, t: dict[str, Any], align: int, shift: int,
                   nan_if_empty: bool, itemsize: int) -> dict[str, Any]:
    """The split kernel's constexprs, num_warps and register cap (maxnreg) for plan ``p`` under
    the knobs ``t`` on rows of ``itemsize``-byte elements: what the launcher passes, and what
    bench/split_ptxas.py compiles offline."""
    ex = split_exchange(t, p.split)
    per_sm = int(t["split_programs_per_sm"])
    loose = _loose_vector(t, shift, itemsize)
    return dict(
        CHUNK=p.block, SPLIT=p.split, LANES=ex.lanes, NAN_IF_EMPTY=nan_if_empty,
        MAX_SPIN=int(t["max_spin"]), ALIGN=align, SHIFT=shift, PACKED=ex.packed, STAGES=ex.stages,
        POLL_IN_ASM=ex.poll_in_asm, POLL_LOADS=ex.poll_loads, AHEAD=ex.ahead,
        LOOSE=loose, REACH=False, num_warps=p.num_warps,
        **({"maxnreg": _register_cap(per_sm, p.num_warps)} if t["split_cap_registers"] else {}))


#: Programs per SM for split launches, by launch (device, dtype, check mode and the launch's
#: options: constexprs, warps, register cap), from the registers and shared memory of the
#: kernel such a launch compiled (with TUNING["split_fit_registers"]), read at a planned
#: launch's first call (its later calls launch the same compiled kernel).
_SPLIT_FIT: dict[tuple[Any, ...], int] = {}


#: The same on-chip and split kernels with every integer specialised (Triton's default): the
#: fastest code for each shape, at one compilation per shape. Benchmarks and normal use launch
#: these; under ``onlinesm check`` (configs pinned) the kernels above compile once per dtype and
#: block size instead (see SOFTMAX_DO_NOT_SPECIALIZE).
_softmax_on_chip_specialised = triton.jit(_softmax_on_chip_kernel.fn)
_softmax_split_specialised = triton.jit(_softmax_split_kernel.fn)


def _variant(bounded: Any, specialised: Any) -> Any:
    """The kernel to launch: few compilations under a check, the fastest code otherwise."""
    return bounded if (INTERPRETED or configs_pinned()) else specialised


# the module calls softmax() too: see KernelModule
sys.modules[__name__].__class__ = KernelModule
