"""Exact answers: softmax, logsumexp and attention, as float64 arrays.

mpmath is the ground truth (``exact=True``): computed from the exact values of the inputs
(a bf16 input is an exact binary rational) with 40 significant digits, then again with more
until two precisions round to the same float64 (Ziv's strategy), so the result is the
correctly rounded float64 of the exact answer. It is slow (a Python loop per element), so the default is
a float64 fast path whose error is tiny next to any kernel's and is bounded by
:func:`fast_path_rel_error`; the test suite checks that bound against mpmath.

Conventions (the same in every function, and in onlinesm's own references):

- a row with no finite entry (all ``-inf``: fully masked) gives zeros, and lse ``-inf``;
- a row holding NaN or ``+inf`` gives NaN (lse NaN, or ``+inf`` when it holds ``+inf`` and no NaN);
- ``-inf`` entries of any other row give exactly 0.

Example:
    >>> import numpy as np
    >>> from onlinesm import oracle
    >>> oracle.softmax(np.array([[1.0, 3.0, 2.0]])).round(4)
    array([[0.09  , 0.6652, 0.2447]])
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = [
    "audit_softmax",
    "audit_attention",
    "AUDIT_TOLERANCE",
    "softmax",
    "logsumexp",
    "softmax_and_logsumexp",
    "attention",
    "visible_keys",
    "fast_path_rel_error",
    "contract",
    "row_blocks",
    "EXACT_DIGITS",
]

#: Significant decimal digits mpmath starts with on the exact path (raised when needed).
EXACT_DIGITS = 40

_U64 = 2.0**-53
# exp(t) underflows to 0 in float64 below this: past it only absolute error matters.
_EXP_UNDERFLOW = 746.0


#: Multiply-adds from which :func:`contract` hands a contraction to BLAS.
BLAS_FROM = 1 << 24
_CONTRACTIONS = {"bhqd,bhkd->bhqk": -2, "bhqk,bhkd->bhqd": -1}  # the axis of b that a lacks


def contract(spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.einsum(spec, a, b)`` for attention's two contractions, q k^T
    (``"bhqd,bhkd->bhqk"``) and p v (``"bhqk,bhkd->bhqd"``).

    Why two ways: einsum sums in one fixed order, so small operands give the same bits on
    every machine (the verdict snapshot compares digests of bounds), but its loops take
    seconds past a few million multiply-adds (S = 4096: 0.6 s a call, most of a check's
    time); from ``BLAS_FROM`` of them, matmul (BLAS, whose order depends on the CPU).
    Either order is within the fast path's error bound (:func:`fast_path_rel_error`).

    >>> q = np.ones((1, 1, 2, 3)); k = np.ones((1, 1, 4, 3))
    >>> contract("bhqd,bhkd->bhqk", q, k).shape
    (1, 1, 2, 4)
    """
    if spec not in _CONTRACTIONS:
        raise ValueError(f"contract() takes one of {sorted(_CONTRACTIONS)}, not {spec!r}")
    if a.size * b.shape[_CONTRACTIONS[spec]] < BLAS_FROM:
        return np.einsum(spec, a, b)
    return a @ (b.swapaxes(-1, -2) if spec.endswith("bhqk") else b)


#: Elements of an Sq x Sk score array worked on at once (32 MB in float64): long sequences go
#: a block of query rows at a time, so memory stays bounded (S = 16k: 2 GB a head at once).
SCORE_BLOCK = 1 << 22


def row_blocks(batch_heads: int, sq: int, sk: int) -> list[slice]:
    """Slices of the Sq query rows, each of about ``SCORE_BLOCK`` scores over ``batch_heads``
    heads and Sk keys; one empty slice when Sq = 0 (shapes still flow through).

    >>> row_blocks(1, 5, 2**21)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    step = max(1, SCORE_BLOCK // max(1, batch_heads * sk))
    return [slice(r0, min(r0 + step, sq)) for r0 in range(0, max(sq, 1), step)]


def fast_path_rel_error(n: int | np.ndarray) -> np.ndarray:
    """Componentwise relative error bound of the float64 fast path for rows of length ``n``.

    Blanchard, Higham & Higham's bound for shifted softmax, (n + 2 + 2·|x - m|)·u, with u the
    float64 unit roundoff, |x - m| capped where exp underflows (beyond it the exact value is
    below 1e-323 and only an absolute error of that size remains), plus slack for exp's own
    ulp and the rounding of x - m. For any kernel in fp32 or below it is ~1e-9 of their bound.
    """
    n = np.asarray(n, dtype=np.float64)
    return (n + 8.0 + 2.0 * _EXP_UNDERFLOW) * _U64


def _as_float64(x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "fV" and str(x.dtype) != "bfloat16":
        raise TypeError(
            f"expected a floating-point array, got dtype={x.dtype}; "
            "convert the input to float32/float16/bfloat16/float64 first"
        )
    return x.astype(np.float64)


def _row_classes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: has NaN, has +inf, and has no finite entry (fully masked)."""
    has_nan = np.isnan(x).any(axis=-1)
    has_posinf = np.isposinf(x).any(axis=-1)
    empty = ~np.isfinite(x).any(axis=-1) & ~has_nan & ~has_posinf
    return has_nan, has_posinf, empty


def _softmax_fast(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 softmax and logsumexp of finite-or--inf rows (others fixed up by the caller)."""
    finite_max = np.where(np.isfinite(x), x, -np.inf).max(axis=-1, keepdims=True)
    shift = np.where(np.isfinite(finite_max), finite_max, 0.0)  # fully masked: no NaN
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - shift)
    d = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(d > 0, e / np.where(d > 0, d, 1.0), 0.0)
        lse = np.where(d[..., 0] > 0, shift[..., 0] + np.log(d[..., 0]), -np.inf)
    return y, lse


def _correctly_rounded(compute: Callable[[int], np.ndarray]) -> np.ndarray:
    """Ziv's strategy: raise mpmath's precision until two precisions round to the same float64.

    ``compute(dps)`` evaluates at ``dps`` decimal digits and rounds to float64. When two
    evaluations 20 digits apart agree bit for bit, the rounding is settled (the error of the
    lower one is far below half an ulp of float64 unless the value sits on a tie, where more
    digits are taken).
    """
    low = compute(EXACT_DIGITS)
    for dps in (EXACT_DIGITS + 20, EXACT_DIGITS + 60, EXACT_DIGITS + 200):
        high = compute(dps)
        if np.array_equal(low, high, equal_nan=True):
            return high
        low = high
    return low


def _softmax_row_exact(row: np.ndarray, dps: int) -> np.ndarray:
    """One row's softmax and lse (appended) at ``dps`` digits, rounded to float64."""
    import mpmath

    out = np.zeros(row.size + 1)
    out[-1] = -np.inf
    with mpmath.workdps(dps):
        finite = [mpmath.mpf(float(v)) for v in row if np.isfinite(v)]
        if not finite:
            return out
        m = max(finite)
        exps = [mpmath.exp(mpmath.mpf(float(v)) - m) if np.isfinite(v) else mpmath.mpf(0) for v in row]
        d = mpmath.fsum(exps)
        out[:-1] = [float(e / d) for e in exps]
        out[-1] = float(m + mpmath.log(d))
    return out


def _softmax_exact(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mpmath softmax and logsumexp, row by row, correctly rounded (slow: keep rows short)."""
    y = np.zeros_like(x)
    lse = np.full(x.shape[:-1], -np.inf)
    for idx in np.ndindex(*x.shape[:-1]):
        both = _correctly_rounded(lambda dps, row=x[idx]: _softmax_row_exact(row, dps))
        y[idx], lse[idx] = both[:-1], both[-1]
    return y, lse


def _softmax_and_lse(x: Any, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    x = _as_float64(x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"softmax needs rows of at least one element, got shape {x.shape}")
    has_nan, has_posinf, _ = _row_classes(x)
    y, lse = _softmax_exact(x) if exact else _softmax_fast(x)
    bad = has_nan | has_posinf
    y[bad] = np.nan
    lse[has_posinf] = np.inf
    lse[has_nan] = np.nan
    return y, lse


def softmax(x: Any, *, exact: bool = False) -> np.ndarray:
    """softmax over the last axis of ``x`` (any float dtype, bf16 included), as float64.

    ``exact=True`` computes with mpmath; the default float64 path is within
    :func:`fast_path_rel_error` of it, componentwise.

    >>> softmax(np.array([[0.0, -np.inf]]))
    array([[1., 0.]])
    """
    return _softmax_and_lse(x, exact)[0]


def softmax_and_logsumexp(x: Any, *, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(softmax, logsumexp) of ``x`` in one pass, as float64: what the bounds are computed at.

    >>> y, lse = softmax_and_logsumexp(np.array([[0.0, 0.0]]))
    >>> y.tolist(), bool(lse[0] == np.log(2.0))
    ([[0.5, 0.5]], True)
    """
    return _softmax_and_lse(x, exact)


def logsumexp(x: Any, *, exact: bool = False) -> np.ndarray:
    """log(sum(exp(x))) over the last axis, as float64; ``-inf`` for a fully masked row.

    >>> float(logsumexp(np.array([0.0, 0.0]))) == float(np.log(2.0))
    True
    """
    return _softmax_and_lse(x, exact)[1]


def visible_keys(
    shape: tuple[int, int, int, int],
    *,
    mask: Any = None,
    causal: bool = False,
    causal_align: str = "top-left",
) -> np.ndarray:
    """Bool array [B, H, Sq, Sk]: may query i attend to key j (mask AND the causal rule)?

    ``causal_align="top-left"`` (torch SDPA): key j is visible to query i when j <= i;
    ``"bottom-right"`` (FlashAttention 2+, decode): when j <= i + Sk - Sq.
    """
    b, h, sq, sk = shape
    visible = np.ones(shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a bool array (True = may attend), got dtype={mask.dtype}")
        try:
            visible = visible & np.broadcast_to(mask, shape)
        except ValueError:
            raise ValueError(
                f"mask of shape {mask.shape} does not broadcast to [B, H, Sq, Sk] = {list(shape)}"
            ) from None
    if causal:
        if causal_align not in ("top-left", "bottom-right"):
            raise ValueError(
                f"causal_align={causal_align!r} is not supported; use 'top-left' or 'bottom-right'"
            )
        offset = 0 if causal_align == "top-left" else sk - sq
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        visible = visible & (j <= i + offset)
    return visible


def _expand_kv_heads(t: np.ndarray, heads: int, name: str) -> np.ndarray:
    hkv = t.shape[1]
    if heads % hkv:
        raise ValueError(
            f"{name} has {hkv} heads, which does not divide q's {heads} heads; "
            "grouped-query attention needs H to be a multiple of Hkv"
        )
    return np.repeat(t, heads // hkv, axis=1)


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    mask: Any = None,
    causal: bool = False,
    scale: float | None = None,
    causal_align: str = "top-left",
    exact: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(scale · q kᵀ, masked) · v and its logsumexp, as float64 (o, lse).

    q is [B, H, Sq, D]; k and v are [B, Hkv, Sk, D] with Hkv dividing H (grouped-query).
    ``scale`` defaults to 1/sqrt(D), taken exactly (to float64). A query with no visible key
    gives o = 0 and lse = -inf.

    >>> q = np.zeros((1, 1, 1, 4)); k = np.zeros((1, 1, 2, 4)); v = np.ones((1, 1, 2, 4))
    >>> attention(q, k, v)[0].ravel()
    array([1., 1., 1., 1.])
    """
    q, k, v = _as_float64(q), _as_float64(k), _as_float64(v)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            f"q, k, v must be 4-D [B, H, S, D]; got shapes {q.shape}, {k.shape}, {v.shape}"
        )
    b, h, sq, d = q.shape
    k = _expand_kv_heads(k, h, "k")
    v = _expand_kv_heads(v, h, "v")
    sk = k.shape[2]
    if scale is None:
        scale = 1.0 / np.sqrt(d) if not exact else None
    visible = visible_keys((b, h, sq, sk), mask=mask, causal=causal, causal_align=causal_align)
    if exact:
        return _attention_exact(q, k, v, visible, scale)
    o, lse = np.empty((b, h, sq, v.shape[-1])), np.empty((b, h, sq))
    for r in row_blocks(b * h, sq, sk):  # the same values as all rows at once
        s = contract("bhqd,bhkd->bhqk", q[:, :, r], k) * scale
        s = np.where(visible[:, :, r], s, -np.inf)
        p, lse[:, :, r] = _softmax_and_lse(s, exact=False)
        o[:, :, r] = contract("bhqk,bhkd->bhqd", p, v)
    return o, lse


def _attention_query_exact(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None,
                           dps: int) -> np.ndarray:
    """One query's o and lse (appended) over its visible keys, at ``dps`` digits."""
    import mpmath

    d = q.shape[-1]
    out = np.zeros(d + 1)
    with mpmath.workdps(dps):
        sc = mpmath.mpf(1) / mpmath.sqrt(d) if scale is None else mpmath.mpf(float(scale))
        qrow = [mpmath.mpf(float(t)) for t in q]
        s = [sc * mpmath.fsum(qa * mpmath.mpf(float(kb)) for qa, kb in zip(qrow, krow)) for krow in k]
        m = max(s)
        e = [mpmath.exp(t - m) for t in s]
        den = mpmath.fsum(e)
        for c in range(d):
            out[c] = float(mpmath.fsum(ej * mpmath.mpf(float(vrow[c])) for ej, vrow in zip(e, v)) / den)
        out[d] = float(m + mpmath.log(den))
    return out


def _attention_exact(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray, scale: float | None
) -> tuple[np.ndarray, np.ndarray]:
    b, h, sq, d = q.shape
    o = np.zeros(q.shape)
    lse = np.full((b, h, sq), -np.inf)
    for bi, hi, qi in np.ndindex(b, h, sq):
        keys = np.flatnonzero(visible[bi, hi, qi])
        if keys.size == 0:
            continue
        both = _correctly_rounded(lambda dps: _attention_query_exact(
            q[bi, hi, qi], k[bi, hi, keys], v[bi, hi, keys], scale, dps))
        o[bi, hi, qi], lse[bi, hi, qi] = both[:d], both[d]
    return o, lse


#: How close the fast path must be to mpmath (issue target): 2**-40, see :func:`audit_softmax`.
AUDIT_TOLERANCE = 2.0**-40


def audit_softmax(x: Any) -> float:
    """The fast path's worst error against mpmath on rows ``x``, in units of the audit metric.

    Relative error for outputs above float32's smallest subnormal; below it, absolute error
    relative to the row's largest output (such outputs round to 0 or a subnormal in any
    kernel's dtype, so only their size next to the row's matters). lse: relative. A result at
    most :data:`AUDIT_TOLERANCE` passes.
    """
    fast, exact = _softmax_and_lse(x, exact=False), _softmax_and_lse(x, exact=True)
    (y, lse), (ye, lsee) = fast, exact
    tiny32 = 1.401298464324817e-45
    row_max = np.max(np.where(np.isnan(ye), 0, ye), axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(ye > tiny32, np.abs(y - ye) / ye,
                       np.abs(y - ye) / np.where(row_max > 0, row_max, 1.0))
        lse_err = np.where(np.isfinite(lsee), np.abs(lse - lsee) / np.maximum(np.abs(lsee), 1e-300), 0.0)
    err = np.where(np.isnan(ye) & np.isnan(y), 0.0, err)
    return float(max(np.nanmax(err, initial=0.0), np.nanmax(lse_err, initial=0.0)))


def audit_attention(q: Any, k: Any, v: Any, **kw: Any) -> float:
    """The fast path's worst error on o against mpmath, relative to Σ p_j |v_j| per query."""
    o, _ = attention(q, k, v, **kw)
    oe, _ = attention(q, k, v, exact=True, **kw)
    qf, kf, vf = _as_float64(q), _as_float64(k), _as_float64(v)
    h = qf.shape[1]
    kf, vf = _expand_kv_heads(kf, h, "k"), _expand_kv_heads(vf, h, "v")
    visible = visible_keys(qf.shape[:3] + (kf.shape[2],), mask=kw.get("mask"),
                           causal=kw.get("causal", False), causal_align=kw.get("causal_align", "top-left"))
    scale = kw.get("scale") or 1.0 / np.sqrt(qf.shape[-1])
    s = np.where(visible, contract("bhqd,bhkd->bhqk", qf, kf) * scale, -np.inf)
    p = _softmax_fast(s)[0]
    magnitude = contract("bhqk,bhkd->bhqd", p, np.abs(vf))
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(magnitude > 0, np.abs(o - oe) / magnitude, np.abs(o - oe))
    return float(np.max(err, initial=0.0))
