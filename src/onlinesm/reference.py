"""Reference implementations of softmax and attention: readable numpy, one per algorithm.

Each function mirrors one published algorithm (three-pass softmax, Milakov & Gimelshein's
online softmax, scalar and tiled, FlashAttention's (m, d, o) state and its merge), vectorised
over rows, and takes the accumulation dtype as a parameter so that the low-precision pitfalls can be shown, not only
described: ``softmax_offline(x, accumulate="bfloat16")`` rounds after *every* addition, as a
kernel summing in bf16 would (numpy's and torch's own float16/bf16 sums accumulate in float32
internally, which would hide the bug).

Conventions, shared with :mod:`onlinesm.oracle`:

- ``accumulate`` defaults to float32 (float64 for float64 inputs); every arithmetic step is
  rounded to it; outputs are in the input's dtype;
- ``-inf`` entries give exactly 0 and never a NaN: a running max that is still ``-inf`` is
  replaced by 0 before it is subtracted, so ``exp(-inf - -inf)`` is never evaluated;
- a fully masked row (no finite entry) gives zeros, and lse ``-inf``;
- a row holding NaN or ``+inf`` gives NaN.

Example:
    >>> import numpy as np
    >>> from onlinesm.reference import softmax_online_tiled
    >>> softmax_online_tiled(np.array([[1.0, 3.0, 2.0, -np.inf]], np.float32), tile=2).round(4)
    array([[0.09  , 0.6652, 0.2447, 0.    ]], dtype=float32)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from onlinesm.dtypes import resolve
from onlinesm.oracle import visible_keys

__all__ = [
    "softmax_offline",
    "softmax_online_scalar",
    "softmax_online_tiled",
    "attention_online",
    "merge_states",
]


# ---------------------------------------------------------------------------------------------
# Small helpers: the accumulation dtype, and the -inf guard every recurrence needs.


def _acc_type(x: np.ndarray, accumulate: Any) -> np.dtype:
    """The accumulation numpy dtype: the one asked for, else float32 (float64 for float64)."""
    if accumulate is not None:
        return resolve(accumulate).numpy
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


def _check_rows(x: Any) -> np.ndarray:
    x = np.asarray(x)
    resolve(x.dtype)  # raises a clear error for ints, float128, ...
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"softmax needs rows of at least one element, got shape {x.shape}")
    return x


def _safe_max(m: np.ndarray) -> np.ndarray:
    """The running max with ``-inf`` replaced by 0: subtracting it never makes -inf - -inf.

    A row whose max is still ``-inf`` has only ``-inf`` entries so far, so every exp(x - 0) is
    exactly 0 and its running sum stays 0: the replacement changes no result.
    """
    return np.where(np.isneginf(m), np.zeros_like(m), m)


def _sum(e: np.ndarray, acc: np.dtype) -> np.ndarray:
    """Sum over the last axis with every addition rounded to ``acc`` (keepdims).

    float32/float64 use numpy's (pairwise) sum in that dtype. For bf16 and fp16 numpy would
    accumulate in float32, so the columns are added one by one, each sum rounded to ``acc``.
    """
    if acc.itemsize >= 4:
        return np.sum(e.astype(acc), axis=-1, keepdims=True, dtype=acc)
    total = np.zeros(e.shape[:-1] + (1,), dtype=acc)
    for j in range(e.shape[-1]):
        total = (total + e[..., j : j + 1]).astype(acc)
    return total


def _divide(e: np.ndarray, d: np.ndarray) -> np.ndarray:
    """e / d, with a zero denominator (fully masked row) giving 0 instead of NaN.

    A NaN denominator (the row held NaN or +inf) still gives NaN.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d == 0, np.zeros_like(e), e / np.where(d == 0, np.ones_like(d), d))


# ---------------------------------------------------------------------------------------------
# Softmax


def softmax_offline(x: Any, *, accumulate: Any = None) -> np.ndarray:
    """The 3-pass safe softmax over the last axis: max, then sum of exps, then normalise.

    Pass 1 finds m = max(x); pass 2 sums d = Σ exp(x - m); pass 3 writes exp(x - m) / d.
    Subtracting the max keeps every exp in (0, 1], so nothing overflows.

    >>> softmax_offline(np.array([[0.0, 0.0]], np.float16))
    array([[0.5, 0.5]], dtype=float16)
    """
    x = _check_rows(x)
    acc = _acc_type(x, accumulate)
    xa = x.astype(acc)
    m = _safe_max(xa.max(axis=-1, keepdims=True))  # pass 1
    e = np.exp((xa - m).astype(acc)).astype(acc)  # exp(-inf) = 0 for masked entries
    d = _sum(e, acc)  # pass 2
    return _divide(e, d).astype(acc).astype(x.dtype)  # pass 3


def softmax_online_scalar(x: Any, *, accumulate: Any = None) -> np.ndarray:
    """Milakov & Gimelshein's online softmax: one element at a time, state (m, d) per row.

    m_k = max(m_{k-1}, x_k);  d_k = d_{k-1}·exp(m_{k-1} - m_k) + exp(x_k - m_k).
    The max is updated *before* the rescale factor is computed, and starts at -inf (a finite
    sentinel such as -1e30 is wrong for rows whose values all lie below it).

    >>> softmax_online_scalar(np.array([[1.0, 3.0, 2.0]])).round(4)
    array([[0.09  , 0.6652, 0.2447]])
    """
    x = _check_rows(x)
    acc = _acc_type(x, accumulate)
    xa = x.astype(acc)
    rows = xa.shape[:-1] + (1,)
    m = np.full(rows, -np.inf, dtype=acc)  # the running max: -inf, never a finite sentinel
    d = np.zeros(rows, dtype=acc)  # the running sum, referenced to m
    for k in range(xa.shape[-1]):
        xk = xa[..., k : k + 1]
        m_new = np.maximum(m, xk)  # update the max first ...
        ref = _safe_max(m_new)  # ... and guard it, so -inf - -inf never happens
        alpha = np.exp((m - ref).astype(acc)).astype(acc)  # rescale of the old sum, in (0, 1]
        d = (d * alpha).astype(acc)
        d = (d + np.exp((xk - ref).astype(acc)).astype(acc)).astype(acc)
        m = m_new
    e = np.exp((xa - _safe_max(m)).astype(acc)).astype(acc)
    return _divide(e, d).astype(acc).astype(x.dtype)


def softmax_online_tiled(x: Any, tile: int = 128, *, accumulate: Any = None) -> np.ndarray:
    """The tile form of the online recurrence, as a GPU kernel streams a long row.

    For each tile T: local max m_T and local sum d_T = Σ_T exp(x - m_T), then
    m = max(m, m_T);  d = d·exp(m_old - m) + d_T·exp(m_T - m).
    A fully masked tile has m_T = -inf and d_T = 0: its rescale is guarded like the state's.
    Any tile size works; the last tile may be short.

    >>> softmax_online_tiled(np.array([[1.0, 3.0, 2.0]]), tile=2).round(4)
    array([[0.09  , 0.6652, 0.2447]])
    """
    x = _check_rows(x)
    if not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile={tile!r} must be a positive integer, e.g. tile=128")
    acc = _acc_type(x, accumulate)
    return tiled_recurrence(x.astype(acc), acc, tile,
                            lambda z: np.exp(z.astype(acc)).astype(acc)).astype(x.dtype)


def tiled_recurrence(xa: np.ndarray, acc: np.dtype, tile: int,
                     exp: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The online softmax of rows ``xa`` (already in ``acc``), tile by tile, every step in ``acc``.

    ``exp(z)`` returns exp of an ``acc`` array rounded to ``acc``: the references pass numpy's,
    :mod:`onlinesm.simulate` a perturbed one. Returns the normalised rows, in ``acc``.
    """
    rows = xa.shape[:-1] + (1,)
    m = np.full(rows, -np.inf, dtype=acc)
    d = np.zeros(rows, dtype=acc)
    for start in range(0, xa.shape[-1], tile):
        xt = xa[..., start : start + tile]
        m_t = xt.max(axis=-1, keepdims=True)  # the tile's own max (may be -inf)
        d_t = _sum(exp((xt - _safe_max(m_t)).astype(acc)), acc)
        m_new = np.maximum(m, m_t)  # the max first, then both rescale factors
        ref = _safe_max(m_new)
        d_old = (d * exp((m - ref).astype(acc))).astype(acc)
        d_new = (d_t * exp((m_t - ref).astype(acc))).astype(acc)
        d = (d_old + d_new).astype(acc)
        m = m_new
    e = exp((xa - _safe_max(m)).astype(acc))  # second read: normalise
    return _divide(e, d).astype(acc)


# ---------------------------------------------------------------------------------------------
# Attention


def _lse_type(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


def attention_online(
    q: Any,
    k: Any,
    v: Any,
    *,
    mask: Any = None,
    causal: bool = False,
    scale: float | None = None,
    causal_align: str = "top-left",
    tile: int = 64,
    accumulate: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """FlashAttention's forward pass over KV tiles with the (m, d, o) state per query row.

    For each KV tile: s = scale·q kᵀ (masked keys -> -inf), m_new = max(m, max s),
    alpha = exp(m - m_new), p = exp(s - m_new), d = d·alpha + Σ p, o = o·alpha + p v.
    At the end o / d, and lse = m + log d. q is [B, H, Sq, D], k and v [B, Hkv, Sk, D] with
    Hkv dividing H. The dot products are taken in float32 (float64 for float64 accumulation);
    the state m, d, o is rounded to ``accumulate`` at every step. A query with no visible
    key gives o = 0 and lse = -inf. Returns (o in q's dtype, lse in float32/float64).

    >>> q = np.zeros((1, 1, 1, 2), np.float32); kv = np.ones((1, 1, 3, 2), np.float32)
    >>> attention_online(q, kv, kv, tile=2)[0].ravel()
    array([1., 1.], dtype=float32)
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {t.shape}")
    if not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile={tile!r} must be a positive integer, e.g. tile=64")
    acc = _acc_type(q, accumulate)
    dot = np.dtype(np.float64) if acc == np.float64 else np.dtype(np.float32)
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"k has {hkv} heads, which does not divide q's {h} heads")
    kx = np.repeat(k, h // hkv, axis=1).astype(dot)  # grouped-query: share each KV head
    vx = np.repeat(v, h // hkv, axis=1).astype(dot)
    visible = visible_keys((b, h, sq, sk), mask=mask, causal=causal, causal_align=causal_align)
    sc = dot.type(1.0 / np.sqrt(dim) if scale is None else scale)

    m = np.full((b, h, sq, 1), -np.inf, dtype=acc)  # running max of the scores
    d = np.zeros((b, h, sq, 1), dtype=acc)  # running Σ exp(s - m)
    o = np.zeros((b, h, sq, dim), dtype=acc)  # running Σ exp(s - m)·v
    qx = q.astype(dot)
    for start in range(0, sk, tile):
        kt, vt = kx[:, :, start : start + tile], vx[:, :, start : start + tile]
        s = (np.einsum("bhqd,bhkd->bhqk", qx, kt) * sc).astype(acc)
        s = np.where(visible[..., start : start + tile], s, acc.type(-np.inf))
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # max first ...
        ref = _safe_max(m_new)  # ... guarded: a fully masked tile keeps m = -inf
        alpha = np.exp((m - ref).astype(acc)).astype(acc)  # rescale the old state
        p = np.exp((s - ref).astype(acc)).astype(acc)  # this tile's unnormalised weights
        d = ((d * alpha).astype(acc) + _sum(p, acc)).astype(acc)
        pv = np.einsum("bhqk,bhkd->bhqd", p.astype(dot), vt).astype(acc)
        o = ((o * alpha).astype(acc) + pv).astype(acc)
        m = m_new
    out = _divide(o, d).astype(acc).astype(q.dtype)
    with np.errstate(divide="ignore"):
        lse = np.where(d > 0, m.astype(np.float64) + np.log(np.where(d > 0, d, 1).astype(np.float64)),
                       -np.inf)
    return out, lse[..., 0].astype(_lse_type(q))


def merge_states(o1: Any, lse1: Any, o2: Any, lse2: Any) -> tuple[np.ndarray, np.ndarray]:
    """Combine two partial attention results over disjoint key sets (split-KV, FlashDecoding).

    With lse = log(e^lse1 + e^lse2), the merged output is o1·e^(lse1 - lse) + o2·e^(lse2 - lse).
    Exact when one side is empty (lse = -inf): the other is returned unchanged; both empty
    gives o = 0 and lse = -inf. Computed in float32 (float64 for float64 o1); o keeps o1's dtype.

    >>> o, lse = merge_states(np.ones(2), np.log(1.0), np.zeros(2), np.log(3.0))
    >>> o.tolist(), round(float(np.exp(lse)), 6)
    ([0.25, 0.25], 4.0)
    """
    o1, o2 = np.asarray(o1), np.asarray(o2)
    work = _lse_type(o1)
    l1 = np.asarray(lse1).astype(work)
    l2 = np.asarray(lse2).astype(work)
    top = np.maximum(l1, l2)
    ref = _safe_max(top)  # both sides empty: no -inf - -inf
    w1 = np.exp((l1 - ref).astype(work)).astype(work)
    w2 = np.exp((l2 - ref).astype(work)).astype(work)
    total = (w1 + w2).astype(work)
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, ref + np.log(np.where(total > 0, total, 1)), -np.inf).astype(work)
    a1 = _divide(w1, total)[..., None]
    a2 = _divide(w2, total)[..., None]
    o = (o1.astype(work) * a1 + o2.astype(work) * a2).astype(work)
    return o.astype(o1.dtype), lse
