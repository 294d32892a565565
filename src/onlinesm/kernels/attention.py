"""FlashAttention-style forward kernel in Triton: the (m, d, o) online-softmax recurrence.

What: ``attention(q, k, v, *, mask=None, causal=False, scale=None, causal_align="top-left",
return_lse=False)`` computes ``softmax(q @ k^T * scale + mask) @ v`` one query tile at a time,
streaming over key/value tiles and never writing the [Sq, Sk] score matrix to memory.

Why: it is onlinesm's own attention kernel, the one the property suite and the report run on,
so it follows docs/conventions.md to the letter: q ``[B, H, Sq, D]``, k and v ``[B, Hkv, Sk, D]``
(grouped-query: Hkv divides H, query head h reads kv head ``h // (H // Hkv)``), bf16 / fp16 /
fp32, head dims 16..256 (non-powers of two are padded in-kernel with masked loads), any Sq and
Sk, causal top-left (SDPA: key j visible to query i iff ``j <= i``) or bottom-right
(``j <= i + Sk - Sq``), an optional bool mask broadcastable to ``[B, H, Sq, Sk]`` (True = may
attend), fully masked query rows give ``o = 0`` and ``lse = -inf``. m, d and o accumulate in
float32. lse is float32, natural-log base.

Numerics the tolerance model needs to know (module constants, read by the checker/report):
``EXP = "fast"`` (``tl.math.exp2`` with log2(e) folded into the scale: a fast hardware exp2,
a few ulp of float32), ``P_DTYPE = "input"`` (the probabilities P are rounded to the input
dtype before the P @ V matrix product, as FlashAttention does: one extra rounding of relative
size u_in per probability), ``ACCUMULATE = "float32"``, ``ALLOW_TF32 = False`` (fp32 inputs
use IEEE fp32 dots).

Compiled vs interpreted: on the GPU the dots take bf16/fp16 operands on the tensor cores
(float32 accumulate). Triton's CPU interpreter (``TRITON_INTERPRET=1``) does no bf16
arithmetic, not even inside ``tl.dot``, so the interpreted path (constexpr ``INTERPRET``)
casts q, k, v to float32 right after loading, and rounds P to the input dtype and back to
float32 before P @ V, so both paths round P the same way. The interpreter's own float32 -> bf16
cast truncates, so ``_round_rn`` rounds to nearest-even by hand there, as the GPU's cast does.
The two paths then differ only in summation order and rounding inside the float32 dots (numpy
vs tensor cores), both inside the same error bound.

Speed (compiled): exp2 with log2(e) folded into the scale, causal tiles past the diagonal
skipped by the loop bounds, an unmasked hot loop (masking only on the diagonal / ragged tail),
cp.async-pipelined K/V tiles feeding wgmma, autotuned tiles (``ONLINESM_ATTENTION_CONFIG=
"BLOCK_M,BLOCK_N,stages,warps"`` pins one; ``onlinesm.kernels.pinned_configs()`` uses the
``PINNED_CONFIGS`` tables instead, as property checks do).

Compilations: each distinct constexpr combination is one compilation, and the per-shape
integers (sizes, strides) are declared in ``do_not_specialize`` (``ATTN_DO_NOT_SPECIALIZE``),
so a check over many shapes compiles once per dtype x head dim x causal x mask case, not once
per shape. No TMA or warp specialisation (see the H200 report).

Example:
    >>> import torch
    >>> from onlinesm.kernels.attention import attention
    >>> dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: under the interpreter
    >>> q = torch.randn(1, 2, 100, 40, device=dev, dtype=torch.bfloat16)
    >>> k = v = torch.randn(1, 2, 130, 40, device=dev, dtype=torch.bfloat16)
    >>> o, lse = attention(q, k, v, causal=True, causal_align="bottom-right", return_lse=True)
    >>> o.shape, lse.dtype
    (torch.Size([1, 2, 100, 40]), torch.float32)
"""

from __future__ import annotations

import math
import os
import sys
import threading
import warnings
from typing import Any

import torch
import triton
import triton.language as tl

from onlinesm.kernels import KernelModule
from onlinesm.kernels.launching import (SMEM_BYTES, argument_key, cdiv, launch_kernel, next_pow2,
                                        on_device)
from onlinesm.kernels.pinning import configs_pinned

__all__ = [
    "attention",
    "EXP",
    "P_DTYPE",
    "ACCUMULATE",
    "ALLOW_TF32",
    "LSE_BASE",
    "FULLY_MASKED",
    "SUPPORTED_DTYPES",
    "MIN_HEAD_DIM",
    "MAX_HEAD_DIM",
    "CAUSAL_ALIGNS",
    "INTERPRET_CONFIG",
    "INTERPRET_LONG_KEYS",
    "interpret_config",
    "INTERPRETED",
    "CONFIG_ENV",
    "PINNED_CONFIGS",
    "PINNED_CONFIGS_FP32",
    "ATTN_DO_NOT_SPECIALIZE",
    "launch_config",
    "GLUON_ENV",
    "use_gluon",
    "gluon_takes",
]

#: The exp's accuracy class: ``tl.math.exp2`` (hardware ex2.approx on the GPU).
EXP = "fast"
#: P is rounded to the input dtype before the P @ V dot (FlashAttention does the same).
P_DTYPE = "input"
#: m, d (the row sum) and o accumulate in float32.
ACCUMULATE = "float32"
#: fp32 inputs use IEEE fp32 dots, not TF32.
ALLOW_TF32 = False
#: lse is returned in natural-log base.
LSE_BASE = "e"
#: A query row with no visible key gives o = 0 and lse = -inf.
FULLY_MASKED = "zeros"
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MIN_HEAD_DIM = 16
MAX_HEAD_DIM = 256
CAUSAL_ALIGNS = ("top-left", "bottom-right")

LOG2E = 1.44269504  # log2(e): exp(x) = exp2(x * log2(e)), folded into the scale
LN2 = tl.constexpr(0.6931471805599453)  # ln(2): turns the base-2 lse back into natural log

#: The one tile configuration used under the interpreter: small tiles, so tiny test shapes
#: still cross several KV tiles, ragged tails and the causal diagonal.
INTERPRET_CONFIG: dict[str, int] = {"BLOCK_M": 16, "BLOCK_N": 16}

#: Under the interpreter, key sequences longer than this take 64-key tiles: the interpreter's
#: cost is per operation, not per element, so a 2048-key sweep in 16-key tiles spent 4x the
#: loop steps for nothing (the check's statistical sample has Sk = 2048). Short sequences keep
#: the 16-key tiles above, so tiny test shapes still cross several tiles.
INTERPRET_LONG_KEYS = 256


def interpret_config(seq_k: int) -> dict[str, int]:
    """The tiles used under the interpreter for ``seq_k`` keys.

    >>> interpret_config(300)["BLOCK_N"], interpret_config(256)["BLOCK_N"]
    (64, 16)
    """
    if seq_k > INTERPRET_LONG_KEYS:
        return {**INTERPRET_CONFIG, "BLOCK_N": 64}
    return INTERPRET_CONFIG


def _interpreting() -> bool:
    """True when TRITON_INTERPRET asks for Triton's CPU interpreter (read, never set, here)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


#: Calls the Gluon kernel covers (attention_gluon.fits: 16-bit, Sq == Sk, no GQA, no mask,
#: S % 128 == 0, D 64 or 128, no lse, an sm_90 GPU) where it is faster (attention_gluon.pays:
#: from S = 256, causal or not) run it, the rest this
#: module's kernel. On by default; ``ONLINESM_ATTENTION_GLUON=0`` (or ``use_gluon(False)``)
#: runs every call on this module's.
GLUON_ENV = "ONLINESM_ATTENTION_GLUON"
_gluon_on = os.environ.get(GLUON_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def use_gluon(on: bool = True) -> bool:
    """Route the calls the Gluon kernel (``attention_gluon``) covers to it, or stop; returns
    whether it is on. Where this triton has no Gluon for Hopper it stays off.

    >>> use_gluon(False)
    False
    """
    global _gluon_on
    _gluon_on = bool(on) and _gluon_module() is not None
    return _gluon_on


def _gluon_module() -> Any:
    """onlinesm.kernels.attention_gluon, or None where this triton cannot import it."""
    try:
        from onlinesm.kernels import attention_gluon
    except ImportError:
        return None
    return attention_gluon


def gluon_takes(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                return_lse: bool = False, scale: float | None = None) -> bool:
    """Whether :func:`attention` runs this call on the Gluon kernel: it is on, the compiled
    path runs (not the interpreter), no Triton tile config is pinned, and the kernel covers
    the call (``attention_gluon.fits``) and is the faster one there (``attention_gluon.pays``).

    >>> gluon_takes(q, k, v, causal=True)  # doctest: +SKIP
    True
    """
    if not _gluon_on or INTERPRETED or os.environ.get(CONFIG_ENV, "").strip():
        return False
    gluon = _gluon_module()
    return (gluon is not None and gluon.pays(q, causal)
            and gluon.fits(q, k, v, mask=mask, return_lse=return_lse, scale=scale) is None)


def _gluon_forward(q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any:
    """The Gluon kernel's o for a call :func:`gluon_takes`, or None: Gluon is an experimental
    dialect, and should a triton fail to compile or launch the kernel, this warns once, with
    the error and how to silence it, turns the Gluon kernel off for the process and leaves the
    call to this module's kernel, so nothing is lost. Out of memory is the caller's to see."""
    global _gluon_on
    try:
        return _gluon_module().forward_fitted(q, k, v, causal, scale)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001: any failure of the dialect; the Triton kernel runs
        _gluon_on = False
        first = (str(e).strip().splitlines() or [""])[0][:200]
        warnings.warn(
            f"the Gluon attention kernel failed ({type(e).__name__}: {first}) under triton "
            f"{triton.__version__}; running the Triton kernel for this and later calls "
            f"(set {GLUON_ENV}=0 to skip the Gluon kernel and this warning)",
            RuntimeWarning, stacklevel=3)
        return None


#: The mode this module's kernels were decorated in. Triton decides it once, when ``@triton.jit``
#: runs at import, so the launcher's constexpr ``INTERPRET`` follows this, not a later change of
#: the variable (``onlinesm.kernels.use_interpreter`` reads it to refuse a mode switch).
INTERPRETED: bool = _interpreting()


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------


@triton.jit
def _round_rn(x, dtype: tl.constexpr):
    """x (float32) rounded to ``dtype`` with round-to-nearest-even, returned as float32.

    Interpreter only: there, a float32 -> bf16 cast truncates (round toward zero, error up to
    2u) while the GPU's cvt.rn rounds to nearest (error u). Rounding the bits by hand keeps the
    interpreted kernel inside the same error bound as the compiled one. fp16 casts are already
    round-to-nearest there (numpy).
    """
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        # Add 0x7FFF plus the lowest kept bit (ties to even), then drop the low 16 bits.
        bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))  # NaN stays NaN
    else:
        return x.to(dtype).to(tl.float32)


@triton.jit
def _kv_loop(
    acc, l_i, m_i, q,
    k_base, v_base, mask_base,
    offs_m, offs_d, start, end,
    Sq, Sk, D, causal_offset,
    stride_kn, stride_vn, stride_mm, stride_mn,
    qk_scale,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # this phase needs bounds + causal masking (the diagonal / tail)
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    EVEN_D: tl.constexpr,
    SCALE_POSITIVE: tl.constexpr,
    INTERPRET: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Fold KV tiles [start, end) into the running state (m_i, l_i, acc) of one query tile.

    m_i: running row max of the scores, in log2 units (scores already times log2(e)).
    l_i: running row sum of exp2(score - m_i)  (the softmax denominator d).
    acc: running sum of exp2(score - m_i) * v   (the unnormalised output o).
    """
    in_dtype = v_base.dtype.element_ty
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + offs_n0
        k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :]
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :]
        # Loads. The unmasked phase only visits tiles wholly inside [0, Sk), so its loads need
        # no bounds check at all (unless D was padded up to a power of two).
        if MASKED:
            # Only the rows past Sk are masked where D fills the tile (EVEN_D): a mask that
            # is constant along D keeps each row's loads 16-byte vectors (a per-element mask
            # split them into 2-byte loads).
            kv_ok = offs_n[:, None] < Sk
            if not EVEN_D:
                kv_ok = kv_ok & (offs_d[None, :] < D)
            k = tl.load(k_ptrs, mask=kv_ok, other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=offs_d[None, :] < D, other=0.0)
        if INTERPRET:
            k = k.to(tl.float32)

        # 1. Scores for this tile: S = q @ k^T, float32 accumulate.
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)

        # 2. New running max, taken over the old max and this tile: it must be known before
        #    alpha, because both the old state and this tile's p are re-referenced to it.
        if MASKED or HAS_MASK:
            # Invisible keys get score -inf, so exp2 makes their p exactly 0.
            s = qk * qk_scale
            # Each row's last visible column of this tile, a per-row scalar, so that each
            # score costs one compare (a 2-D compare of key n against query m had the
            # compiler pack its bits through integer registers).
            if CAUSAL:
                last = tl.minimum(offs_m + causal_offset, Sk - 1) - start_n
            else:
                last = tl.zeros_like(offs_m) + (Sk - 1 - start_n)
            visible = offs_n0[None, :] <= last[:, None]
            if HAS_MASK:
                m_ptrs = mask_base + offs_m[:, None] * stride_mm + offs_n[None, :] * stride_mn
                m_ok = (offs_m[:, None] < Sq) & (offs_n[None, :] < Sk)
                visible = visible & (tl.load(m_ptrs, mask=m_ok, other=0) != 0)
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
        else:
            # Hot loop: no masking. max(qk) * c == max(qk * c) exactly for c > 0 (rounding is
            # monotone), so the scale is applied once per row here and fused (FMA) below.
            if SCALE_POSITIVE:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            else:
                m_new = tl.maximum(m_i, tl.min(qk, 1) * qk_scale)
        # 3. Guard: a row that has seen only invisible keys so far still has m_new = -inf, and
        #    exp2(-inf - (-inf)) would be NaN. Referencing such a row to 0 instead gives
        #    p = exp2(-inf) = 0 and alpha = exp2(-inf) = 0: the state stays (0, 0) as it must.
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)

        # 4. p = exp2(score - m): every visible p is in (0, 1], so nothing overflows.
        if MASKED or HAS_MASK:
            p = tl.math.exp2(s - m_ref[:, None])
        else:
            p = tl.math.exp2(qk * qk_scale - m_ref[:, None])

        # 5. alpha = exp2(m_old - m_new) in (0, 1]: the old sums were referenced to m_old,
        #    multiplying them by alpha re-references every stored term to m_new at once.
        alpha = tl.math.exp2(m_i - m_ref)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]

        # 6. o += p @ v. P is rounded to the input dtype first (tensor-core operands, as in
        #    FlashAttention; P_DTYPE = "input"); the product accumulates in float32.
        if MASKED:
            v = tl.load(v_ptrs, mask=kv_ok, other=0.0)
        elif EVEN_D:
            v = tl.load(v_ptrs)
        else:
            v = tl.load(v_ptrs, mask=offs_d[None, :] < D, other=0.0)
        if INTERPRET:
            # Same rounding of P as the compiled path, then float32 arithmetic.
            acc = tl.dot(_round_rn(p, in_dtype), v.to(tl.float32), acc,
                         input_precision=DOT_PRECISION)
        else:
            acc = tl.dot(p.to(in_dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


#: The integer arguments of ``_attn_fwd`` that Triton must not specialise on (``== 1`` or
#: ``% 16 == 0``). Each specialisation value is a separate compilation, and these change with
#: every shape (sizes, batch/head/row strides, the autotuning buckets), so a property check
#: feeding many shapes would compile once per combination. The divisibility of the Q/K/V/O
#: strides, which the vectorised 16-byte loads and stores need, comes back through the one
#: constexpr ``ALIGNED`` instead (two variants at most, not one per combination). ``D`` (one
#: value per head dim, and it bounds the vectorised axis) and ``stride_mn`` (0 or 1: whether
#: the mask loads are contiguous) stay specialised.
ATTN_DO_NOT_SPECIALIZE: tuple[str, ...] = (
    "stride_qb", "stride_qh", "stride_qm",
    "stride_kb", "stride_kh", "stride_kn",
    "stride_vb", "stride_vh", "stride_vn",
    "stride_mb", "stride_mh", "stride_mm",
    "stride_ob", "stride_oh", "stride_om",
    "H", "GROUP", "Sq", "Sk", "causal_offset",
    "SEQ_BUCKET", "BH_BUCKET",
)


@triton.jit(do_not_specialize=ATTN_DO_NOT_SPECIALIZE)
def _attn_fwd(
    Q, K, V, Mask, Out, Lse,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_mb, stride_mh, stride_mm, stride_mn,
    stride_ob, stride_oh, stride_om,
    H, GROUP, Sq, Sk, D, causal_offset,
    qk_scale,
    return_lse,  # runtime flag, not a constexpr: one compilation serves both answers
    SEQ_BUCKET,  # autotuning key only: the next power of two of max(Sq, Sk)
    BH_BUCKET,  # autotuning key only: the next power of two of B * H (how many programs)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    EVEN_D: tl.constexpr,
    SCALE_POSITIVE: tl.constexpr,
    ALIGNED: tl.constexpr,  # every Q/K/V/O stride is a multiple of 16 elements
    INTERPRET: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program = one tile of BLOCK_M query rows of one (batch, head)."""
    if ALIGNED:
        # The strides are not specialised (ATTN_DO_NOT_SPECIALIZE), so the compiler no longer
        # knows they are multiples of 16. Rebuild them as (s // 16) * 16 (equal to s, since the
        # launcher checked s % 16 == 0): the product by 16 carries that divisibility into the
        # pointer arithmetic, so tile rows stay 16-byte aligned and loads/stores vectorise.
        stride_qb = stride_qb // 16 * 16
        stride_qh = stride_qh // 16 * 16
        stride_qm = stride_qm // 16 * 16
        stride_kb = stride_kb // 16 * 16
        stride_kh = stride_kh // 16 * 16
        stride_kn = stride_kn // 16 * 16
        stride_vb = stride_vb // 16 * 16
        stride_vh = stride_vh // 16 * 16
        stride_vn = stride_vn // 16 * 16
        stride_ob = stride_ob // 16 * 16
        stride_oh = stride_oh // 16 * 16
        stride_om = stride_om // 16 * 16
    pid_m = tl.program_id(0)
    if CAUSAL:
        # Under causal the last query tiles see the most keys: launch them first, so the
        # cheap tiles fill the final wave instead of the expensive ones.
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    h_kv = h // GROUP  # grouped-query attention: GROUP query heads share one kv head

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + h_kv.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + h_kv.to(tl.int64) * stride_vh
    mask_base = Mask + b.to(tl.int64) * stride_mb + h.to(tl.int64) * stride_mh

    # The query tile stays in registers/shared memory for the whole KV sweep.
    q_ok = (offs_m[:, None] < Sq) & (offs_d[None, :] < D)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=q_ok, other=0.0)
    if INTERPRET:
        q = q.to(tl.float32)

    # Running state: m = -inf (no key seen yet), d = 0, o = 0, all float32.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Which KV tiles to visit. Key j is visible to query i iff j <= i + causal_offset
    # (0 for top-left, Sk - Sq for bottom-right).
    #  - end: past the last key any row of this tile can see; tiles beyond are skipped.
    #  - full_end: the tiles before it are in bounds and (under causal) visible to every row
    #    of the tile, so the hot loop runs them with no masking at all.
    full_tiles_end = (Sk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        end = tl.minimum(Sk, tl.maximum(pid_m * BLOCK_M + BLOCK_M + causal_offset, 0))
        full_end = tl.maximum(pid_m * BLOCK_M + causal_offset + 1, 0) // BLOCK_N * BLOCK_N
        full_end = tl.minimum(full_end, full_tiles_end)
    else:
        end = Sk
        full_end = full_tiles_end

    # Phase 1: off-diagonal tiles, no masking (the user mask, when given, still applies).
    acc, l_i, m_i = _kv_loop(
        acc, l_i, m_i, q, k_base, v_base, mask_base, offs_m, offs_d, 0, full_end,
        Sq, Sk, D, causal_offset, stride_kn, stride_vn, stride_mm, stride_mn, qk_scale,
        BLOCK_N, False, CAUSAL, HAS_MASK, EVEN_D, SCALE_POSITIVE, INTERPRET, DOT_PRECISION,
    )
    # Phase 2: the causal diagonal and the ragged tail past the last full tile, masked.
    acc, l_i, m_i = _kv_loop(
        acc, l_i, m_i, q, k_base, v_base, mask_base, offs_m, offs_d, full_end, end,
        Sq, Sk, D, causal_offset, stride_kn, stride_vn, stride_mm, stride_mn, qk_scale,
        BLOCK_N, True, CAUSAL, HAS_MASK, EVEN_D, SCALE_POSITIVE, INTERPRET, DOT_PRECISION,
    )

    # Epilogue: o = acc / d. A row that saw no visible key has d = 0 (and acc = 0): divide
    # by 1 instead, which gives the declared o = 0, and report lse = -inf.
    empty = l_i == 0.0
    l_div = tl.where(empty, 1.0, l_i)
    o = acc / l_div[:, None]
    if INTERPRET:
        o = _round_rn(o, Out.dtype.element_ty)  # round to nearest, as the GPU's cast does
    o_ptrs = Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    o_ptrs = o_ptrs + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=q_ok)
    if return_lse:
        # lse = ln(sum exp(s)) = (m2 + log2(d)) * ln 2, with m2 the max in log2 units.
        lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_div)) * LN2)
        tl.store(Lse + pid_bh.to(tl.int64) * Sq + offs_m, lse, mask=offs_m < Sq)


# --------------------------------------------------------------------------------------------
# Tile configurations (compiled path)
# --------------------------------------------------------------------------------------------

# (BLOCK_M, BLOCK_N, num_stages, num_warps). BLOCK_M 128 with 8 warps (two warpgroups of
# 64 rows, one wgmma each) is what FA2 and the Triton tutorial use on Hopper; 128 x 128 x 3
# stages at D = 128 just fits the 227 KiB of shared memory; the 64-row configs serve D = 256,
# fp32 and short sequences. Measured on the H200 (reports/h200/bench_attention.md): 64x64 s3 w4
# and 128x64 s3/s4 w8 win most shapes.
_CONFIGS = [
    (128, 64, 3, 8),
    (128, 64, 4, 8),
    (128, 128, 2, 8),
    (128, 128, 3, 8),
    (128, 128, 4, 8),
    (128, 64, 3, 4),
    (64, 64, 3, 4),
    (64, 64, 4, 4),
    (64, 32, 3, 4),
    (64, 32, 2, 4),
]

def _fits(block_m: int, block_n: int, stages: int, block_d: int, elem_bytes: int) -> bool:
    """Whether the Q tile plus ``stages`` pipelined K and V tiles fit in shared memory (the
    H100/H200 per-block limit, SMEM_BYTES), and the float32 accumulator (BLOCK_M x BLOCK_D
    per program) in registers. A config that still runs out (compiler scratch) is dropped by
    the autotuner (OutOfResources), never chosen."""
    smem = (block_m * block_d + 2 * stages * block_n * block_d) * elem_bytes
    return smem <= SMEM_BYTES and (block_m * block_d <= 128 * 128 or block_m <= 64)


def _prune_configs(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """Keep the autotuning candidates that fit this head dim and dtype (see ``_fits``)."""
    block_d = kwargs.get("BLOCK_D", named_args.get("BLOCK_D"))
    elem = named_args["Q"].element_size()

    def fits(c: Any) -> bool:
        return _fits(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages, block_d, elem)

    kept = [c for c in configs if fits(c)]
    # Nothing fits (never for D <= 256 with the list above): the smallest footprint.
    return kept or [min(configs, key=lambda c: (c.kwargs["BLOCK_M"] + 2 * c.num_stages
                                                 * c.kwargs["BLOCK_N"]))]


def _bench_quickly(fn: Any, quantiles: Any = None) -> Any:
    """Autotuning timer: fewer repetitions than the default, so a new shape tunes in ~0.5 s."""
    return triton.testing.do_bench(fn, warmup=5, rep=40, quantiles=quantiles)


#: The same kernel with every integer specialised (Triton's default): the fastest code for each
#: shape, at one compilation per shape and config. The autotuned path (benchmarks and normal use)
#: launches it; under ``onlinesm check`` (configs pinned) ``_attn_fwd`` compiles a bounded
#: number of variants instead (see ATTN_DO_NOT_SPECIALIZE).
_attn_fwd_specialised = triton.jit(_attn_fwd.fn)

#: The config the autotuner picked, by its key and the other constexprs (see attention()),
#: and a lock around its runs: it keeps a call's arguments and its pick (``best_config``) on
#: itself, so two threads tuning at once could read each other's.
_TUNED: dict[tuple[Any, ...], Any] = {}
_TUNE_LOCK = threading.Lock()

#: The compiled kernels of the launches made with a known config (pinned, or the autotuner's
#: pick), by config, constexprs, device and the arguments (``argument_key``): later calls
#: launch them directly (``launch_kernel``). Bounded: cleared when full.
_COMPILED: dict[tuple[Any, ...], Any] = {}
_COMPILED_MAX = 4096

_attn_fwd_tuned = triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
        for bm, bn, s, w in _CONFIGS
    ],
    key=["SEQ_BUCKET", "BH_BUCKET", "BLOCK_D", "CAUSAL", "HAS_MASK", "EVEN_D", "ALIGNED"],
    prune_configs_by={"early_config_prune": _prune_configs},
    do_bench=_bench_quickly,
)(_attn_fwd_specialised)


# --------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------


#: Environment variable pinning one tile config instead of autotuning (compiled path):
#: "BLOCK_M,BLOCK_N,num_stages,num_warps", e.g. "128,64,3,8". Tests use it to skip tuning.
CONFIG_ENV = "ONLINESM_ATTENTION_CONFIG"


#: The tile configuration per BLOCK_D used instead of autotuning while configs are pinned
#: (``onlinesm.kernels.pinned_configs()``, set during property checks): (BLOCK_M, BLOCK_N,
#: num_stages, num_warps). Small tiles: check shapes are small, so they still cross several KV
#: tiles, ragged tails and the causal diagonal; two stages keep the cp.async pipeline in the
#: tested code; and one configuration per case means one compilation, not one per candidate.
#: Each entry fits every dtype (``_fits``; 64 x 64 x 2 stages at D = 256 fp32 would not).
PINNED_CONFIGS: dict[int, tuple[int, int, int, int]] = {
    16: (64, 32, 2, 4),
    32: (64, 32, 2, 4),
    64: (64, 32, 2, 4),
    128: (64, 32, 2, 4),
    256: (64, 32, 2, 4),
}

#: The same for float32 inputs, whose dots run in IEEE float32 on the CUDA cores: Triton
#: unrolls each dot into one FMA per product a thread owns, so a 64 x 32 tile at D = 128 is
#: 2 x 2048 FMAs per thread, and compiled for sm_90 in 8-9 s on the H200's host against
#: 1.2-1.5 s for 16 x 16 (bench/compile_time.py tiles). Most of a default check's compile
#: time went there.
PINNED_CONFIGS_FP32: dict[int, tuple[int, int, int, int]] = dict.fromkeys(
    PINNED_CONFIGS, (16, 16, 2, 4))


def _fixed_config() -> tuple[int, ...] | None:
    """The tile config pinned through ``ONLINESM_ATTENTION_CONFIG``, if any: four integers,
    or five with a register cap per thread (``maxnreg``) last."""
    text = os.environ.get(CONFIG_ENV, "").strip()
    if not text:
        return None
    try:
        numbers = tuple(int(x) for x in text.split(","))
    except ValueError:
        numbers = ()
    if len(numbers) not in (4, 5):
        raise ValueError(
            f"{CONFIG_ENV}={text!r} is not 'BLOCK_M,BLOCK_N,num_stages,num_warps[,maxnreg]'; "
            f"use e.g. 128,64,3,8, or unset it to autotune"
        )
    return numbers


def launch_config(block_d: int, *, fp32: bool = False,
                  interpret: bool = INTERPRETED) -> tuple[int, ...] | None:
    """The (BLOCK_M, BLOCK_N, num_stages, num_warps[, maxnreg]) the launcher uses, or None to
    autotune.

    In order: the interpreter's ``INTERPRET_CONFIG`` (stages and warps do not matter there);
    ``ONLINESM_ATTENTION_CONFIG`` when set; ``PINNED_CONFIGS[block_d]`` while configs are
    pinned (``onlinesm.kernels.pinned_configs()``), ``PINNED_CONFIGS_FP32`` for float32
    inputs (``fp32``); otherwise None: the autotuner picks.
    """
    if interpret:
        return INTERPRET_CONFIG["BLOCK_M"], INTERPRET_CONFIG["BLOCK_N"], 1, 4
    fixed = _fixed_config()
    if fixed is not None:
        return fixed
    if configs_pinned():
        return (PINNED_CONFIGS_FP32 if fp32 else PINNED_CONFIGS)[block_d]
    return None


def _check_inputs(
    q: Any, k: Any, v: Any, mask: Any, causal_align: str, interpret: bool
) -> None:
    """Raise a one-line ValueError / TypeError naming the bad value and the fix."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}; pass a torch.Tensor")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name}.dtype={t.dtype} is not supported; use torch.bfloat16, torch.float16 "
                f"or torch.float32 (e.g. {name}.to(torch.bfloat16))"
            )
        if t.dim() != 4:
            raise ValueError(
                f"{name}.shape={tuple(t.shape)} has {t.dim()} dims; pass [B, H, S, D] "
                f"(unsqueeze missing batch/head dims)"
            )
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(
            f"mismatched dtypes q={q.dtype}, k={k.dtype}, v={v.dtype}; cast all three to one"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k, v are on {q.device}, {k.device}, {v.device}; move them to one device"
        )
    if not interpret and q.device.type != "cuda":
        raise ValueError(
            f"q is on {q.device}, but the compiled kernel needs CUDA tensors; move them with "
            f".cuda(), or call onlinesm.kernels.use_interpreter(True) before importing the kernel"
        )
    B, H, Sq, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k.shape={tuple(k.shape)} != v.shape={tuple(v.shape)}; they must match")
    Bk, Hkv, Sk, Dk = k.shape
    if Bk != B or Dk != D:
        raise ValueError(
            f"k/v shape {tuple(k.shape)} does not fit q shape {tuple(q.shape)}: batch and head "
            f"dim must match ([B, Hkv, Sk, D] with q [B, H, Sq, D])"
        )
    if Hkv == 0 or H % Hkv != 0:
        raise ValueError(
            f"k/v have Hkv={Hkv} heads, which does not divide q's H={H}; use Hkv = H, or a "
            f"divisor of H for grouped-query attention"
        )
    if not MIN_HEAD_DIM <= D <= MAX_HEAD_DIM:
        raise ValueError(
            f"head dim D={D} is outside [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]; pad or split the "
            f"heads to a supported size"
        )
    if causal_align not in CAUSAL_ALIGNS:
        raise ValueError(
            f"causal_align={causal_align!r} is not one of {CAUSAL_ALIGNS}; use 'top-left' "
            f"(SDPA) or 'bottom-right' (FlashAttention 2+, decode)"
        )
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            what = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(
                f"mask has dtype {what}; pass a torch.bool tensor (True = may attend), e.g. "
                f"mask = additive_mask == 0"
            )
        if mask.device != q.device:
            raise ValueError(f"mask is on {mask.device} but q on {q.device}; move it with .to()")
        try:
            ok = mask.dim() <= 4 and torch.broadcast_shapes(
                tuple(mask.shape), (B, H, Sq, Sk)) == (B, H, Sq, Sk)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"mask.shape={tuple(mask.shape)} does not broadcast to [B, H, Sq, Sk]="
                f"{[B, H, Sq, Sk]}; use size 1 or the full size in each dim"
            )


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    causal_align: str = "top-left",
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, forward, with the online-softmax recurrence.

    Args:
        q: ``[B, H, Sq, D]``, bf16 / fp16 / fp32, D in [16, 256].
        k, v: ``[B, Hkv, Sk, D]`` with Hkv dividing H (grouped-query), q's dtype and device.
        mask: optional bool tensor broadcastable to ``[B, H, Sq, Sk]``; True = may attend.
        causal: hide keys after the query's position (see ``causal_align``).
        scale: score scale; default ``1 / sqrt(D)``.
        causal_align: ``"top-left"`` (SDPA: ``j <= i``) or ``"bottom-right"``
            (``j <= i + Sk - Sq``).
        return_lse: also return the float32 natural-log logsumexp ``[B, H, Sq]``.

    Returns:
        ``o`` ``[B, H, Sq, D]`` in q's dtype, or ``(o, lse)``. Rows with no visible key give
        ``o = 0`` and ``lse = -inf``.

    Example:
        >>> o = attention(q, k, v, mask=key_padding[:, None, None, :])  # doctest: +SKIP
    """
    interpret = INTERPRETED
    _check_inputs(q, k, v, mask, causal_align, interpret)
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale={scale} is not finite; pass a finite float (default 1/sqrt(D))")

    # The Gluon kernel where it covers the call and pays, unless a Triton tile config is pinned.
    if gluon_takes(q, k, v, mask=mask, causal=causal, return_lse=return_lse, scale=scale):
        o = _gluon_forward(q, k, v, causal, scale)
        if o is not None:
            return o

    # The kernel indexes the last dim with stride 1; anything else is copied once.
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty((B, H, Sq, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Sq) if return_lse else (1,), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        if return_lse:
            return out, lse
        return out
    if Sk == 0:  # no keys at all: every row is fully masked
        out.zero_()
        if return_lse:
            return out, lse.fill_(float("-inf"))
        return out

    if mask is not None:
        # Broadcast dims get stride 0, so a [B, 1, 1, Sk] key-padding mask is never expanded.
        mask_t = mask.broadcast_to((B, H, Sq, Sk))
        mask_strides = mask_t.stride()
    else:
        mask_t = q  # never read (HAS_MASK=False); any valid pointer
        mask_strides = (0, 0, 0, 0)

    block_d = max(16, next_pow2(D))
    causal_offset = (Sk - Sq) if (causal and causal_align == "bottom-right") else 0
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *mask_strides,
               *out.stride()[:3])
    # The constexprs: each distinct combination is one compilation (see ATTN_DO_NOT_SPECIALIZE).
    common: dict[str, Any] = dict(
        BLOCK_D=block_d,
        CAUSAL=bool(causal),
        HAS_MASK=mask is not None,
        EVEN_D=block_d == D,
        SCALE_POSITIVE=scale >= 0,
        ALIGNED=all(s % 16 == 0 for s in strides[:9] + strides[13:]),  # Q/K/V/O, not the mask
        INTERPRET=interpret,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    args = (
        q, k, v, mask_t, out, lse,
        *strides,
        H, H // Hkv, Sq, Sk, D, causal_offset,
        scale * LOG2E,
        bool(return_lse),
        next_pow2(max(Sq, Sk)),
        next_pow2(B * H),
    )
    config = launch_config(block_d, fp32=q.dtype == torch.float32, interpret=interpret)
    if interpret:
        cfg = interpret_config(Sk)
        grid = (cdiv(Sq, cfg["BLOCK_M"]), B * H)
        _attn_fwd[grid](*args, **cfg, **common)
    elif config is not None:
        bm, bn, stages, warps = config[:4]
        cap = {"maxnreg": config[4]} if len(config) == 5 else {}
        # under a check (configs pinned) the bounded variant; a config fixed by hand otherwise
        # runs the fully specialised kernel, as the autotuned path does
        kernel = _attn_fwd if configs_pinned() else _attn_fwd_specialised
        with on_device(q.device):
            _launch_known(kernel, (cdiv(Sq, bm), B * H), args, dict(
                BLOCK_M=bm, BLOCK_N=bn, num_stages=stages, num_warps=warps, **cap, **common),
                q.device)
    else:
        # The autotuner's key (the buckets, the constexprs, the tensors' dtypes) and more: its
        # pick, once made, is launched directly, which spares each call the autotuner's own
        # 15-30 µs of host time (a short call's whole time on the GPU), and the JIT's.
        key = (q.device, q.dtype, mask_t.dtype, *args[-2:], *common.values())
        config = _TUNED.get(key)
        with on_device(q.device):
            if config is None:
                grid = lambda meta: (cdiv(Sq, meta["BLOCK_M"]), B * H)  # noqa: E731
                with _TUNE_LOCK:  # the autotuner keeps its call's state on itself
                    _attn_fwd_tuned[grid](*args, **common)
                    _TUNED[key] = _attn_fwd_tuned.best_config
            else:
                _launch_known(_attn_fwd_specialised, (cdiv(Sq, config.kwargs["BLOCK_M"]), B * H),
                              args, {**config.all_kwargs(), **common}, q.device)
    if return_lse:
        return out, lse
    return out


def _launch_known(kernel: Any, grid: tuple[int, int], args: tuple[Any, ...],
                  options: dict[str, Any], device: Any) -> None:
    """Launch ``kernel`` with a known config: through Triton's JIT the first time for its
    options, device and arguments (:func:`~onlinesm.kernels.launching.argument_key`: the
    first six, q, k, v, the mask, o and lse, are tensors), then its compiled kernel directly
    (``launch_kernel``)."""
    key = (kernel, device, *argument_key(args, 6), *options.items())
    if len(_COMPILED) >= _COMPILED_MAX and key not in _COMPILED:  # hashed once while not full
        _COMPILED.clear()
    launch_kernel(kernel, grid, args, options, _COMPILED, key)


# the module calls attention() too: see KernelModule
sys.modules[__name__].__class__ = KernelModule
