"""Kernels that are less accurate than they should be, yet within the worst-case bound.

Each is a plausible numpy kernel with a realistic tile (64 or 128 keys / columns) whose error
grows with the row length like a random walk of low-precision roundings: it stays under the
worst-case bound (γ_n = n·u terms, P rounded to bf16) of :mod:`onlinesm.tolerance`, while its
typical error is several times a correct kernel's. They are the targets of the statistical
tier (:mod:`onlinesm.statistical`); tests/test_statistical.py shows both halves, and
bench/statistical_calibration.py measures the detection power.

Signatures are the statistical tier's numpy ones: ``softmax(x) -> y`` and
``attention(q, k, v, mask, causal, scale) -> o``, output in the input dtype.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

from onlinesm.oracle import visible_keys
from onlinesm.reference import merge_states

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.float32


def _guard(m: np.ndarray) -> np.ndarray:
    return np.where(np.isneginf(m), np.zeros_like(m), m)


# ---------------------------------------------------------------------------------------------
# Softmax (fp32 work, online tiled, tile 128)


def _exp_1e4(z: np.ndarray) -> np.ndarray:
    """A float32 exp good to about 1e-4 relative (a short polynomial: smooth, deterministic)."""
    zf = np.where(np.isfinite(z), z, 0.0)
    return (np.exp(z) * (1.0 + 1e-4 * np.sin(37.0 * zf))).astype(F32)


def _softmax_tiled(x: np.ndarray, *, tile: int = 128, exp: Callable[[np.ndarray], np.ndarray]
                   = np.exp, partial: np.dtype | None = None) -> np.ndarray:
    """Online tiled softmax in float32; ``partial``: each tile's sum stored in that dtype."""
    xf = np.asarray(x).astype(F32)
    rows = xf.shape[:-1] + (1,)
    m = np.full(rows, -np.inf, F32)
    d = np.zeros(rows, F32)
    with np.errstate(invalid="ignore", divide="ignore"):
        for s in range(0, xf.shape[-1], tile):
            t = xf[..., s : s + tile]
            m_t = t.max(axis=-1, keepdims=True)
            d_t = exp(t - _guard(m_t)).astype(F32).sum(axis=-1, keepdims=True, dtype=F32)
            if partial is not None:
                d_t = d_t.astype(partial).astype(F32)
            m_new = np.maximum(m, m_t)
            ref = _guard(m_new)
            d = (d * exp(m - ref) + d_t * exp(m_t - ref)).astype(F32)
            m = m_new
        e = exp(xf - _guard(m)).astype(F32)
        y = np.where(d > 0, e / d, F32(0)).astype(F32)
    return y.astype(np.asarray(x).dtype)


def softmax_correct(x: np.ndarray) -> np.ndarray:
    """Correct: online tiled softmax, tile 128, float32 state, np.exp."""
    return _softmax_tiled(x)


def softmax_exp_1e4(x: np.ndarray) -> np.ndarray:
    """A cheap exp accurate to ~1e-4 relative, 100x beyond the fast-exp class: on rows of
    4096 the worst-case bound's γ_{n-1} (2.4e-4) absorbs it in float32."""
    return _softmax_tiled(x, exp=_exp_1e4)


def softmax_bf16_partial_sums(x: np.ndarray) -> np.ndarray:
    """Each tile's partial sum is written to a bf16 workspace before the (fp32) combine, as a
    split-row kernel that keeps its partials in the input dtype."""
    return _softmax_tiled(x, partial=BF16)


# ---------------------------------------------------------------------------------------------
# Attention (FlashAttention-2 forward, scores and state in fp32, P rounded to the input dtype)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any, causal: bool,
               scale: float | None, *, tile: int = 64, o_dtype: Any = None,
               d_dtype: Any = None, pv_dtype: Any = None, exp: Callable[..., Any] = np.exp,
               ) -> tuple[np.ndarray, np.ndarray]:
    """FlashAttention-2's loop. ``o_dtype`` / ``d_dtype``: the running o / denominator stored in
    that dtype between tiles ("input" = q's); ``pv_dtype``: each tile's P·V product rounded to
    it before it is added. Returns (o in q's dtype, lse in float32)."""
    lowp = np.asarray(q).dtype
    pick = lambda t: None if t is None else (lowp if t == "input" else np.dtype(t))  # noqa: E731
    o_dt, d_dt, pv_dt = pick(o_dtype), pick(d_dtype), pick(pv_dtype)
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kx = np.repeat(k, h // hkv, axis=1).astype(F32)
    vx = np.repeat(v, h // hkv, axis=1).astype(F32)
    vis = visible_keys((b, h, sq, sk), mask=mask, causal=causal)
    sc = F32(1.0 / np.sqrt(dim) if scale is None else scale)
    qx = q.astype(F32)
    m = np.full((b, h, sq, 1), -np.inf, F32)
    d = np.zeros((b, h, sq, 1), F32)
    o = np.zeros((b, h, sq, dim), F32)
    for s in range(0, sk, tile):
        st = np.where(vis[..., s : s + tile],
                      np.einsum("bhqd,bhkd->bhqk", qx, kx[:, :, s : s + tile]) * sc, -np.inf)
        m_new = np.maximum(m, st.max(axis=-1, keepdims=True))
        ref = _guard(m_new)
        alpha = exp((m - ref).astype(F32)).astype(F32)
        p = exp((st - ref).astype(F32)).astype(F32)
        d = (d * alpha + p.sum(axis=-1, keepdims=True, dtype=F32)).astype(F32)
        pv = np.einsum("bhqk,bhkd->bhqd", p.astype(lowp).astype(F32), vx[:, :, s : s + tile])
        if pv_dt is not None:
            pv = pv.astype(pv_dt).astype(F32)
        o = (o * alpha + pv).astype(F32)
        if o_dt is not None:
            o = o.astype(o_dt).astype(F32)
        if d_dt is not None:
            d = d.astype(d_dt).astype(F32)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(d > 0, o / d, F32(0)).astype(F32)
        lse = np.where(d > 0, m + np.log(np.where(d > 0, d, 1)), -np.inf)[..., 0]
    return out.astype(lowp), lse.astype(F32)


def attention_correct(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """Correct: FlashAttention-2 forward, tile 64, fp32 state, P rounded to the input dtype."""
    return _attention(q, k, v, mask, causal, scale)[0]


def attention_o_lowp(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """The running output accumulator o is kept in the input dtype (bf16/fp16) between KV tiles
    (a kernel that saves registers, or stores o to shared memory in the input dtype)."""
    return _attention(q, k, v, mask, causal, scale, o_dtype="input")[0]


def attention_denominator_lowp(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """The running denominator l is kept in the input dtype (bf16/fp16) between KV tiles."""
    return _attention(q, k, v, mask, causal, scale, d_dtype="input")[0]


def attention_pv_bf16(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """Each tile's P·V product is rounded to bf16 before it is added to the fp32 accumulator
    (tl.dot(p, v, out_dtype=bf16), or a bf16 MMA result)."""
    return _attention(q, k, v, mask, causal, scale, pv_dtype=BF16)[0]


def attention_exp_1e4(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """A cheap exp accurate to ~1e-4 relative in place of the fast exp."""
    return _attention(q, k, v, mask, causal, scale, exp=_exp_1e4)[0]


def attention_split_kv_bf16_partials(q, k, v, mask=None, causal=False, scale=None,  # type: ignore[no-untyped-def]
                                     splits: int = 8):
    """Split-KV (FlashDecoding): each of ``splits`` chunks of keys is reduced on its own, and
    its partial output is written to a workspace in bf16 before the fp32 merge."""
    sk = k.shape[2]
    bounds = np.linspace(0, sk, splits + 1).astype(int)
    o_acc = lse_acc = None
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        m = None if mask is None else np.broadcast_to(
            mask, mask.shape[:-1] + (sk,))[..., lo:hi]
        if causal:  # fold the causal rule into the chunk's mask (top-left alignment)
            cm = visible_keys((1, 1, q.shape[2], sk), causal=True)[..., lo:hi]
            m = cm if m is None else (m & cm)
        o_p, lse_p = _attention(q, k[:, :, lo:hi], v[:, :, lo:hi], m, False, scale)
        o_p = o_p.astype(F32).astype(BF16).astype(F32)  # the bf16 workspace
        if o_acc is None:
            o_acc, lse_acc = o_p, lse_p
        else:
            o_acc, lse_acc = merge_states(o_acc, lse_acc, o_p, lse_p)
    return o_acc.astype(q.dtype)


#: name -> (kernel, {dtype: a family of the statistical sample on which the kernel passes
#: today's worst-case check}); measured in tests/test_statistical.py and
#: bench/statistical_calibration.py. (A softmax whose tile sums go through bf16 is not here:
#: the worst-case check already fails it, by 9-97x in float32 and 1.5-2x in bf16. With bf16
#: inputs, rounding a P·V tile or a split-KV partial to bf16 costs only ~1.2x in RMSE: below
#: the 1.5x minimum effect, not listed for bf16.)
SOFTMAX_BUGS: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
    "exp accurate to 1e-4": (softmax_exp_1e4, {"float32": "gaussian"}),
}
ATTENTION_BUGS: dict[str, tuple[Callable[..., Any], dict[str, str]]] = {
    "o accumulator in input dtype": (attention_o_lowp,
                                     {"bfloat16": "gaussian", "float16": "gaussian"}),
    "denominator in input dtype": (attention_denominator_lowp,
                                   {"bfloat16": "gaussian", "float16": "gaussian"}),
    "P·V tile product rounded to bf16": (attention_pv_bf16, {"float16": "gaussian"}),
    "exp accurate to 1e-4": (attention_exp_1e4, {"float32": "gaussian"}),
    "split-KV partials in bf16": (attention_split_kv_bf16_partials, {"float16": "gaussian"}),
}
