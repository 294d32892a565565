"""The bounds that decide pass/fail: how far a *correct* kernel may be from the exact answer.

A kernel passes an accuracy property when every element's error is within its bound, and the
bound is derived, term by term, from what the kernel declares (:class:`Numerics`) and from the
input itself, never from a fixed atol/rtol. Each term has a name; the failure message shows
them at the worst element. Notation: ``u`` is the unit roundoff of the working (accumulation)
precision (2^-24 for float32), ``γ_k = k·u / (1 - k·u)``, ``z_i = x_i - m`` with ``m`` the row
max, and ``y`` the exact softmax.

Softmax (Blanchard, Higham & Higham, *Accurate computation of the log-sum-exp and softmax
functions*, IMA J. Numer. Anal. 2021; to first order, componentwise). A relative error ρ_j in
each computed ``exp(z_j)`` becomes a relative error of at most ``ρ_i + Σ_j y_j ρ_j`` in y_i
after normalisation (the y-weighted mean replaces BHH's (x_max - x_min) and is never larger).
The terms, each multiplied by y_i:

- ``arg``: forming z = x - m in working precision, ``u·|z|`` (it grows with the distance from the
  max; ``exp="exp2"`` adds the ``·log2(e)`` product: ``2.25·u·|z|``);
- ``exp``: the exp's own error, by class (measured on an H200, see ``docs/conventions.md``): ``"fast"``,
  Triton's ``tl.exp`` = ex2.approx(x·log2 e), ``(1.25·|z| + 5)·u`` (the rounded product
  x·log2 e perturbs the exponent by u·|z|, log2 e in fp32 adds 0.22·u·|z|, ex2.approx 2.05 ulp;
  measured 62.7 ulp at z = -87, the model allows 87 to 114); ``"exp2"`` 4.2u; ``"accurate"``
  (libm, torch.exp) 4u; ``"exact"`` u; a float f: f ulps = 2f·u;
- ``sum``: the sum of the n_finite exps in the accumulation dtype, γ_{n-1} (worst case for any
  summation order: recursive, pairwise, tiled, online; the online rescales are not counted
  separately: see "limits" below);
- ``div``: the division (2u; 4u for the fast class, whose fp32 division is 2 ulp);
- ``input``: only when the input is wider than the working precision (float64 in, float32 work):
  converting x and m, ``u·(|x_i| + |m|)``, propagated like ``arg``;
- ``oracle``: the float64 oracle's own error (matters only for float64 work);
- ``higher``: second-order slack, ``y·r²/(1 - r)`` for the first-order total r.

Absolute terms: ``out``, the final rounding to the output dtype, half an ulp of the output at
``y·(1 + r)`` (only when the output is narrower than the working precision: otherwise the
division's rounding is the last one); ``floor``, the output dtype's smallest normal (or the
working precision's, if larger) for elements whose exact value is below it: flush-to-zero and
underflow are legitimate. A -inf input must give exactly 0 (bound 0), and a fully masked row
or a row holding NaN/+inf has bound 0: the property engine checks those conventions bitwise.

The row sum: Σ_i ŷ_i - 1 is bounded by the sum of the elementwise bounds (the common sum and
division errors add up to exactly their relative size; the n output roundings add up).
logsumexp: a relative error ρ_j of exp(z_j) moves lse by Σ y_j ρ_j (absolute), the sum's γ_{n-1}
moves it by γ_{n-1}, plus the log (4u·|log s| + 2u), the addition m + log s (2u·(|m| + |log s|),
which covers a base-2 conversion), and the rounding to the lse dtype (float32).

Attention, per query row, with p the exact probabilities and magnitudes Σ_j p_j |v_j|
(computed in float64 from the exact p):

- ``dot``: q·k in fp32 with inputs exact in their dtype: ``γ_D·|scale|·Σ_i |q_i k_ji|``; with
  ``allow_tf32`` and float32 inputs add ``2·2^-11·|scale|·Σ|q k|`` (the operands are rounded to
  tf32); an error δs_j in score j perturbs p_j by the relative δs_j;
- ``scale``: ``3u·|s_j|``: 1/sqrt(D) is irrational, so the scale is rounded, then the product,
  and kernels that fold log2(e) into the scale round once more;
- ``arg``/``exp``: as for softmax, at z_j = s_j - m;
  each of these perturbs o_d by at most ``Σ_j p_j ρ_j |v_jd| + (Σ_j p_j ρ_j)·|o_d|``;
- ``p_round``: P rounded to ``p_dtype`` before P·V (FlashAttention rounds to the input dtype):
  ``u_p·Σ p_j |v_j|`` plus half the subnormal spacing of p_dtype times Σ|v_j|;
- ``pv``: the accumulation of Sk products in the accumulation dtype: ``γ_{Sk}·Σ p_j |v_j|``;
- ``sum``: the denominator's γ_{Sk-1}·|o|; ``div``: the final division, 2u or 4u times |o|;
- ``out``: half an ulp of the output dtype at |o|; ``floor``: its smallest normal where
  |o| is below it, plus Sk·tiny of the working precision for products flushed to zero.

How this compares with torch.testing.assert_close's defaults (rtol, atol): float32 (1.3e-6, 1e-5),
float16 (1e-3, 1e-5), bfloat16 (1.6e-2, 1e-5). For bf16/fp16 outputs the bound here is about
half an ulp (u_out·y = 3.9e-3·y for bf16, 4.9e-4·y for fp16) plus a few fp32 terms: 4x tighter
than assert_close's bf16 rtol and 2x tighter for fp16, with no atol (only the underflow floor),
so an error of 1e-5 on a 1e-7 probability fails here and passes there. For fp32 output the
bound grows with n and |x - m| (γ_{n-1} alone is 6e-5 at n = 1024): looser than rtol=1.3e-6
for long or wide-spread rows, because that is what a correct fp32 kernel with a fast exp can
legitimately do; tighter on the absolute side (no 1e-5 atol on probabilities).

Limits: the bounds are first-order worst-case bounds with second-order slack. The online
rescale factors exp(m_old - m_new) add a few u per rescale, which the worst-case γ_{n-1} covers
in practice (errors are not coherent) but not in the strict worst case; calibration
(bench/calibrate.py, reports/calibration.md) records how close correct kernels come.

Tiers. ``Numerics(tier="worst-case")`` (the default) is everything above. With
``Numerics(tier="probabilistic", delta=δ)`` the terms that sum k rounding errors, γ_k, are
replaced by Higham & Mary's probabilistic constant (*A new approach to probabilistic rounding
error analysis*, SIAM J. Sci. Comput. 2019, Theorem 3.1 for sums and inner products):
``γ̃_k(λ) = exp(λ·sqrt(k)·u + k·u²/(1 - u)) - 1 ≈ λ·sqrt(k)·u``, which bounds the computed
sum/inner product's error with probability at least ``1 - 2k·exp(-λ²(1-u)²/2)`` when the
rounding errors are mean-independent and bounded by u; solving for a failure probability δ
gives ``λ = sqrt(2·ln(2k/δ)) / (1 - u)`` (the single-sum λ = sqrt(2·ln(2/δ)) plus the union over
the k roundings). Each replaced term is the smaller of γ̃_k and γ_k, so the probabilistic bound
is never above the worst-case one. The replaced terms: softmax and logsumexp ``sum``
(γ_{n-1}); attention ``dot`` (γ_D), ``pv`` (γ_Sk), ``sum`` (γ_{Sk-1}), and the lse's
``sum``/``scores``; ``higher`` follows from them. The exp, division, conversion, output
rounding, oracle and floor terms are unchanged. Composition: δ is per summation, not per
check. A softmax row uses one probabilistic statement (its denominator, shared by the row's
elements); an attention query uses Sk + D + 1 (its scores, its D outputs' P·V sums, its
denominator). By the union bound (no independence assumed), a whole check holds with
probability at least 1 - δ·(number of statements), e.g. 1 - 8·1e-6 for 8 softmax rows. The
model's assumption fails for coherent errors (stagnation: adding terms far below half an ulp
of the running sum, every rounding in the same direction), which is the bug the tier exists
to catch sooner; a kernel whose errors are legitimately coherent needs the worst-case tier.

Example:
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0, -np.inf]], np.float32)
    >>> b = softmax_bound(x)
    >>> float(b.abs[0, 2]), sorted(b.terms)[:3]
    (0.0, ['arg', 'div', 'exp'])
    >>> compare(np.array([[0.26894143, 0.7310586, 0.0]], np.float32), b.exact, b).ok
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onlinesm.declarations import EXP_CLASSES, Numerics
from onlinesm.dtypes import FloatFormat, resolve, ulp
from onlinesm import oracle
from onlinesm.oracle import contract, row_blocks, visible_keys
from onlinesm.metrics import (
    Bound,
    Comparison,
    abs_error,
    same_dtype_baseline_check,
    bound_use,
    compare,
    rel_error,
    rmse,
    ulp_error,
)

__all__ = [
    "Numerics",
    "Bound",
    "EXP_CLASSES",
    "softmax_bound",
    "rowsum_bound",
    "logsumexp_bound",
    "attention_bound",
    "relation_bound",
    "gamma",
    "gamma_probabilistic",
    "summation_gamma",
    # Numerics and EXP_CLASSES are re-exported from onlinesm.declarations, Bound and the
    # metrics from onlinesm.metrics
    "Comparison",
    "compare",
    "same_dtype_baseline_check",
    "abs_error",
    "ulp_error",
    "rel_error",
    "rmse",
    "bound_use",
]

_U64 = 2.0**-53
_U_TF32 = 2.0**-11
_EXP_UNDERFLOW = 746.0  # beyond |z| = 746, exp(z) is 0 in float64: the oracle is exact there

def gamma(k: Any, u: float) -> np.ndarray:
    """Higham's γ_k = k·u / (1 - k·u), continued as 2·k·u where k·u >= 1/2 (no guarantee).

    >>> float(gamma(2, 2.0**-24)) > 2 * 2.0**-24
    True
    """
    ku = np.maximum(np.asarray(k, dtype=np.float64), 0.0) * u
    return np.where(ku < 0.5, ku / (1.0 - np.minimum(ku, 0.5)), 2.0 * ku)


def gamma_probabilistic(k: Any, u: float, delta: float = 1e-6) -> np.ndarray:
    """Higham & Mary's γ̃_k(λ) at λ = sqrt(2·ln(2k/δ))/(1 - u), capped at the worst-case γ_k.

    A sum of k+1 terms (k roundings) or an inner product of length k, computed in any order,
    is within γ̃_k·Σ|terms| of the exact value with probability at least 1 - δ when the
    rounding errors are mean-independent (SIAM J. Sci. Comput. 2019, Theorem 3.1).

    >>> u = 2.0**-24
    >>> float(gamma_probabilistic(8191, u)) < float(gamma(8191, u)) / 10
    True
    >>> float(gamma_probabilistic(3, u)) == float(gamma(3, u))  # short sums: γ_k is smaller
    True
    """
    kk = np.maximum(np.asarray(k, dtype=np.float64), 0.0)
    worst = gamma(kk, u)
    kc = np.maximum(kk, 1.0)
    lam = np.sqrt(2.0 * np.log(2.0 * kc / delta)) / (1.0 - u)
    with np.errstate(over="ignore"):
        prob = np.expm1(lam * np.sqrt(kc) * u + kc * u * u / (1.0 - u))
    return np.where(kk > 0, np.minimum(prob, worst), 0.0)


def summation_gamma(numerics: Numerics) -> Any:
    """The constant of k summed roundings under ``numerics.tier``: γ_k or γ̃_k(λ(δ))."""
    if numerics.tier == "probabilistic":
        return lambda k, u: gamma_probabilistic(k, u, numerics.delta)
    return gamma


def _what(text: str, numerics: Numerics) -> str:
    """The bound's description, naming the tier when it is not the default worst case."""
    return text if numerics.tier == "worst-case" else f"{text}; {numerics.tier_name()}"


def _out_format(dtype: Any, default: FloatFormat) -> FloatFormat:
    return default if dtype is None else resolve(dtype)


def _rounding(fmt: FloatFormat, w: FloatFormat) -> bool:
    """Does storing a working-precision value in ``fmt`` round it again?"""
    return fmt.precision < w.precision


def _higher(r: np.ndarray) -> np.ndarray:
    rc = np.minimum(r, 0.5)
    return np.where(r < 0.5, r * r / (1.0 - rc), r)


# ---------------------------------------------------------------------------------------------
# Softmax


def _softmax_rel(x: Any, numerics: Numerics, exact: Any) -> dict[str, Any]:
    """Per-element relative terms of a softmax row, and the per-row quantities."""
    x = np.asarray(x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must have at least one axis of positive length, got shape {x.shape}")
    in_fmt = resolve(x.dtype)
    w = numerics.working
    u = w.u
    a_arg, c_exp, b_exp, div = numerics.exp_model()
    xf = x.astype(np.float64)
    special = (np.isnan(xf) | np.isposinf(xf)).any(axis=-1, keepdims=True)
    live = np.isfinite(xf) & ~special  # the entries whose result is a number to bound
    m = np.where(live, xf, -np.inf).max(axis=-1, keepdims=True)
    m0 = np.where(np.isfinite(m), m, 0.0)
    az = np.where(live, m0 - np.where(live, xf, 0.0), 0.0)  # |z| = m - x >= 0
    if exact is None:  # the exact answer comes from the oracle, whatever the caller passes
        with np.errstate(all="ignore"):
            y_all, lse_all = oracle.softmax_and_logsumexp(x)
        y = np.where(live, y_all, 0.0)
        lse = np.where(live.any(axis=-1, keepdims=True), lse_all[..., None], -np.inf)
    else:
        y = np.where(live, np.asarray(exact, dtype=np.float64), 0.0)
        lse = None
    n_live = live.sum(axis=-1, keepdims=True)
    azc = np.minimum(az, _EXP_UNDERFLOW)
    ybar_z = (y * azc).sum(axis=-1, keepdims=True)  # Σ_j y_j |z_j|
    rel: dict[str, np.ndarray] = {}
    if in_fmt.precision > w.precision:
        conv = np.where(live, np.abs(xf) + np.abs(m0), 0.0)
        rel["input"] = u * (conv + (y * conv).sum(axis=-1, keepdims=True))
    rel["arg"] = a_arg * u * (azc + ybar_z)
    rel["exp"] = u * (c_exp * (azc + ybar_z) + 2.0 * b_exp)
    rel["sum"] = summation_gamma(numerics)(n_live - 1, u)
    rel["div"] = np.full(n_live.shape, div * u)
    rel["oracle"] = _U64 * (n_live + 8.0 + 3.0 * (azc + ybar_z))
    return dict(x=x, in_fmt=in_fmt, w=w, live=live, special=special, y=y, m=m0, lse=lse,
                rel=rel, ybar_z=ybar_z, n_live=n_live)


def softmax_bound(x: Any, *, out_dtype: Any = None, numerics: Numerics = Numerics(),
                  exact: Any = None) -> Bound:
    """Componentwise bound on |softmax_kernel(x) - softmax(x)| over the last axis.

    ``x`` is in its own dtype (bf16 as ``ml_dtypes.bfloat16``); the output dtype defaults to
    x's. ``exact`` (float64, from :func:`onlinesm.oracle.softmax`) may be passed to save the
    float64 recomputation. Terms: ``arg``, ``exp``, ``sum``, ``div`` (relative, times y),
    ``input`` (float64 input in a narrower working precision), ``oracle``, ``higher``, and the
    absolute ``out`` and ``floor`` (see the module docstring).

    >>> b = softmax_bound(np.zeros((1, 4), np.float32))
    >>> bool(b.abs[0, 0] < 4e-7)
    True
    """
    p = _softmax_rel(x, numerics, exact)
    y, live, w = p["y"], p["live"], p["w"]
    out_fmt = _out_format(out_dtype, p["in_fmt"])
    rel = p["rel"]
    r = sum(np.broadcast_to(t, y.shape) for t in rel.values())
    terms = {k: np.where(live, y * t, 0.0) for k, t in rel.items()}
    terms["higher"] = np.where(live, y * _higher(r), 0.0)
    pre = sum(terms.values())
    if _rounding(out_fmt, w):
        terms["out"] = np.where(live, 0.5 * ulp(y + pre, out_fmt), 0.0)
    floor = max(out_fmt.tiny, w.tiny)
    terms["floor"] = np.where(live & (y < floor), floor, 0.0)
    total = sum(terms.values())
    n = p["x"].shape[-1]
    exact_y = np.where(p["special"], np.nan, y)
    return Bound(abs=total, terms=terms, numerics=numerics,
                 what=_what(f"softmax bound, n={n}, {p['in_fmt'].name} in, {out_fmt.name} out",
                            numerics),
                 exact=exact_y)


def rowsum_bound(x: Any, *, out_dtype: Any = None, numerics: Numerics = Numerics(),
                 exact: Any = None) -> Bound:
    """Bound on |Σ_i ŷ_i - 1| per row (shape ``x.shape[:-1]``): the sum of the elementwise bounds.

    The common errors (sum, division) contribute their relative size once; the n output
    roundings and the per-element exp errors add up. Sum the kernel's outputs in float64.
    ``exact`` of the returned bound is 1 (0 for a fully masked row, NaN for a NaN row).
    """
    b = softmax_bound(x, out_dtype=out_dtype, numerics=numerics, exact=exact)
    terms = {k: np.broadcast_to(t, b.abs.shape).sum(axis=-1) for k, t in b.terms.items()}
    xf = np.asarray(x).astype(np.float64)
    special = (np.isnan(xf) | np.isposinf(xf)).any(axis=-1)
    masked = ~np.isfinite(xf).any(axis=-1) & ~special
    ex = np.where(special, np.nan, np.where(masked, 0.0, 1.0))
    return Bound(abs=b.abs.sum(axis=-1), terms=terms, numerics=numerics,
                 what=b.what.replace("softmax bound", "row-sum bound"), exact=ex)


def logsumexp_bound(x: Any, *, numerics: Numerics = Numerics(), out_dtype: Any = None,
                    exact: Any = None) -> Bound:
    """Absolute bound on a kernel's log(Σ exp(x)) per row (shape ``x.shape[:-1]``).

    The lse is stored in float32 (float64 when x and the working precision are float64);
    ``out_dtype`` overrides. ``exact`` is the float64 softmax of x, if at hand. A fully masked
    row (lse -inf) and a NaN row have bound 0.
    """
    p = _softmax_rel(x, numerics, exact)
    w, y, live = p["w"], p["y"], p["live"]
    u = w.u
    a_arg, c_exp, b_exp, _ = numerics.exp_model()
    if out_dtype is None:
        out_dtype = "float64" if (p["in_fmt"].name == w.name == "float64") else "float32"
    out_fmt = resolve(out_dtype)
    xf = p["x"].astype(np.float64)
    rows = live.any(axis=-1)
    m = p["m"][..., 0]
    if p["lse"] is not None:
        lse = p["lse"][..., 0]
    else:
        with np.errstate(under="ignore"):
            s = np.where(live, np.exp(np.where(live, xf, 0.0) - p["m"]), 0.0).sum(axis=-1)
        lse = np.where(s > 0, m + np.log(np.where(s > 0, s, 1.0)), -np.inf)
    log_s = np.where(rows, lse - m, 0.0)
    ybar_z = p["ybar_z"][..., 0]
    terms: dict[str, np.ndarray] = {}
    if "input" in p["rel"]:
        conv = np.where(live, np.abs(xf) + np.abs(p["m"]), 0.0)
        terms["input"] = u * (y * conv).sum(axis=-1)
    terms["arg"] = a_arg * u * ybar_z
    terms["exp"] = u * (c_exp * ybar_z + b_exp)
    terms["sum"] = summation_gamma(numerics)(p["n_live"][..., 0] - 1, u)
    first = sum(terms.values())
    terms["log"] = u * (4.0 * np.abs(log_s) + 2.0)
    terms["add"] = 2.0 * u * (np.abs(m) + np.abs(log_s))
    terms["oracle"] = _U64 * (p["n_live"][..., 0] + 8.0 + 3.0 * ybar_z
                                + np.abs(np.where(rows, lse, 0.0)))
    terms["higher"] = _higher(first)
    pre = sum(terms.values())
    if _rounding(out_fmt, w):
        terms["out"] = 0.5 * ulp(np.where(rows, np.abs(lse), 0.0) + pre, out_fmt)
    terms = {k: np.where(rows, t, 0.0) for k, t in terms.items()}
    special = p["special"][..., 0]
    exact_lse = np.where(special, np.nan, np.where(rows, lse, -np.inf))
    return Bound(abs=sum(terms.values()), terms=terms, numerics=numerics,
                 what=_what(f"logsumexp bound, n={xf.shape[-1]}, lse in {out_fmt.name}",
                            numerics),
                 exact=exact_lse)


# ---------------------------------------------------------------------------------------------
# Attention


def attention_bound(
    q: Any,
    k: Any,
    v: Any,
    *,
    mask: Any = None,
    causal: bool = False,
    scale: float | None = None,
    causal_align: str = "top-left",
    out_dtype: Any = None,
    numerics: Numerics = Numerics(),
    exact: tuple[Any, Any] | None = None,
    lse_dtype: Any = None,
) -> tuple[Bound, Bound]:
    """Bounds for attention's o ([B, H, Sq, D]) and lse ([B, H, Sq]), per element.

    q is [B, H, Sq, D]; k, v are [B, Hkv, Sk, D] with Hkv dividing H (grouped-query). The
    output dtype defaults to q's, the lse's to float32 (float64 for float64 work). ``exact``
    = (o, lse) from :func:`onlinesm.oracle.attention` may be passed; the probabilities are
    recomputed in float64 either way (the terms need them). Queries with no visible key have
    bound 0 (o = 0, lse = -inf by the zeros convention).

    >>> q = np.zeros((1, 1, 1, 4), np.float32); kv = np.ones((1, 1, 3, 4), np.float32)
    >>> bo, bl = attention_bound(q, kv, kv)
    >>> bo.abs.shape, bl.abs.shape
    ((1, 1, 1, 4), (1, 1, 1))
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {t.shape}")
    b_, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if h % hkv or v.shape[1] != hkv or v.shape[2] != sk:
        raise ValueError(f"k {k.shape} and v {v.shape} must be [B, Hkv, Sk, D] with Hkv "
                         f"dividing q's H={h}")
    in_fmt = resolve(q.dtype)
    w = numerics.working
    u = w.u
    out_fmt = _out_format(out_dtype, in_fmt)
    if lse_dtype is None:
        lse_dtype = "float64" if (in_fmt.name == w.name == "float64") else "float32"
    lse_fmt = resolve(lse_dtype)
    a_arg, c_exp, b_exp, div = numerics.exp_model()
    g = summation_gamma(numerics)  # γ_k, or its probabilistic version

    qf = q.astype(np.float64)
    kf = np.repeat(k.astype(np.float64), h // hkv, axis=1)
    vf = np.repeat(v.astype(np.float64), h // hkv, axis=1)
    sc = 1.0 / np.sqrt(d) if scale is None else float(scale)
    visible = visible_keys((b_, h, sq, sk), mask=mask, causal=causal, causal_align=causal_align)
    q_fin = np.isfinite(qf).all(-1)[..., None]  # [B, H, Sq, 1]
    k_fin = np.isfinite(kf).all(-1)[:, :, None, :]  # [B, H, 1, Sk]
    inputs_finite = visible.size == 0 or bool(q_fin.all() and k_fin.all())
    qz, kz = np.nan_to_num(qf), np.nan_to_num(kf)
    vfin = np.isfinite(vf)
    vabs = np.where(vfin, np.abs(vf), 0.0)
    if exact is None:  # the exact answer comes from the oracle
        with np.errstate(all="ignore"):
            exact = oracle.attention(q, k, v, mask=mask, causal=causal, scale=scale,
                                     causal_align=causal_align)
    o = np.asarray(exact[0], dtype=np.float64)
    oabs = np.where(np.isfinite(o), np.abs(o), 0.0)
    conv = 0.0
    if numerics.allow_tf32 and in_fmt.precision > 11:
        conv = 2.0 * _U_TF32
    elif in_fmt.precision > w.precision:
        conv = 2.0 * u
    pf = resolve(numerics.p_dtype) if numerics.p_dtype is not None else None
    u_p = pf.u if pf is not None else 0.0

    # Everything of size Sq x Sk is per query row: computed a block of rows at a time (the
    # same values; memory bounded at long S), reduced to the row quantities kept in `rows`.
    rows: dict[str, np.ndarray] = {}
    for r in row_blocks(b_ * h, sq, sk):
        vis = visible[:, :, r] & q_fin[:, :, r] & k_fin
        with np.errstate(invalid="ignore", over="ignore"):
            s = sc * contract("bhqd,bhkd->bhqk", qz[:, :, r], kz)
            dotabs = abs(sc) * contract("bhqd,bhkd->bhqk", np.abs(qz[:, :, r]), np.abs(kz))
        m = np.where(vis, s, -np.inf).max(axis=-1, keepdims=True)
        m0 = np.where(np.isfinite(m), m, 0.0)
        az = np.where(vis, m0 - np.where(vis, s, 0.0), 0.0)
        with np.errstate(under="ignore"):
            e = np.where(vis, np.exp(-az), 0.0)
        ell = e.sum(axis=-1, keepdims=True)
        p = e / np.where(ell > 0, ell, 1.0)
        block = {
            "live": vis.any(axis=-1),  # queries with at least one visible key
            "m0": m0, "ell": ell,
            "v1": contract("bhqk,bhkd->bhqd", p, vabs),  # Σ_j p_j |v_j|
            "n_vis": vis.sum(axis=-1)[..., None],  # [B, H, rows, 1]
        }
        azc = np.minimum(az, _EXP_UNDERFLOW)
        rho = {  # relative perturbations of each exp(s_j - m), per key
            "dot": (g(d, u) + conv) * dotabs,
            "scale": 3.0 * u * np.abs(np.where(vis, s, 0.0)),
            "arg": a_arg * u * azc,
            "exp": u * (c_exp * azc + b_exp),
        }
        for name, t in rho.items():
            pt = np.where(vis, p * t, 0.0)
            block["pbar_" + name] = pt.sum(axis=-1, keepdims=True)
            block["term_" + name] = (contract("bhqk,bhkd->bhqd", pt, vabs)
                                     + block["pbar_" + name] * oabs[:, :, r])
        if pf is not None:
            block["vis_v"] = contract("bhqk,bhkd->bhqd", vis * 1.0, vabs)
        block["worst_rho"] = np.where(vis, sum(rho.values()), 0.0).max(axis=-1, keepdims=True)
        for key, a in block.items():
            if key not in rows:
                rows[key] = np.empty(a.shape[:2] + (sq,) + a.shape[3:], a.dtype)
            rows[key][:, :, r] = a
    live, m0, ell, v1, n_vis = (rows[k] for k in ("live", "m0", "ell", "v1", "n_vis"))
    terms: dict[str, np.ndarray] = {name: rows["term_" + name] for name in rho}
    pbar: dict[str, np.ndarray] = {name: rows["pbar_" + name] for name in rho}
    if pf is not None:
        terms["p_round"] = pf.u * v1 + 0.5 * pf.smallest_subnormal * rows["vis_v"]
    terms["pv"] = g(n_vis, u) * v1
    terms["sum"] = g(n_vis - 1, u) * oabs
    terms["div"] = div * u * oabs
    linear = sum(terms[k] for k in ("dot", "scale", "arg", "sum", "pv", "div"))
    terms["oracle"] = (_U64 / u) * linear + 4.0 * _U64 * (v1 + oabs)
    big_r = rows["worst_rho"] + g(n_vis, u) + u_p + div * u
    pre_first = sum(terms.values())
    terms["higher"] = pre_first * np.where(big_r < 0.5, big_r / (1.0 - np.minimum(big_r, 0.5)),
                                           big_r)
    pre = sum(terms.values())
    if _rounding(out_fmt, w):
        terms["out"] = 0.5 * ulp(oabs + pre, out_fmt)
    terms["floor"] = np.where(oabs < out_fmt.tiny, out_fmt.tiny, 0.0) + n_vis * w.tiny
    row_ok = live[..., None] & np.isfinite(o)
    terms = {k: np.where(row_ok, t, 0.0) for k, t in terms.items()}
    o_exact = np.where(live[..., None], o, 0.0)
    if not inputs_finite or not vfin.all():
        o_exact = np.where(np.isfinite(o_exact), o_exact, np.nan)
    bound_o = Bound(abs=sum(terms.values()), terms=terms, numerics=numerics,
                    what=_what(f"attention output bound, Sk={sk}, D={d}, {in_fmt.name} in, "
                               f"{out_fmt.name} out", numerics), exact=o_exact)

    # lse = m + log ℓ: absolute perturbations
    m_ = m0[..., 0]
    lse = np.asarray(exact[1], dtype=np.float64)
    log_l = np.where(live, np.log(np.where(ell[..., 0] > 0, ell[..., 0], 1.0)), 0.0)
    lt: dict[str, np.ndarray] = {
        "scores": (pbar["dot"] + pbar["scale"])[..., 0],
        "arg": pbar["arg"][..., 0],
        "exp": pbar["exp"][..., 0],
        "sum": g(n_vis[..., 0] - 1, u),
    }
    first = sum(lt.values())
    lt["log"] = u * (4.0 * np.abs(log_l) + 2.0)
    lt["add"] = 2.0 * u * (np.abs(m_) + np.abs(log_l))
    lt["oracle"] = (_U64 / u) * first + _U64 * (np.abs(np.where(live, lse, 0.0)) + 8.0)
    lt["higher"] = _higher(first)
    pre_l = sum(lt.values())
    if _rounding(lse_fmt, w):
        lt["out"] = 0.5 * ulp(np.abs(np.where(live, lse, 0.0)) + pre_l, lse_fmt)
    lt = {k: np.where(live, t, 0.0) for k, t in lt.items()}
    bound_lse = Bound(abs=sum(lt.values()), terms=lt, numerics=numerics,
                      what=_what(f"attention lse bound, Sk={sk}, D={d}, lse in {lse_fmt.name}",
                                 numerics),
                      exact=np.where(live, lse, -np.inf))
    return bound_o, bound_lse


def relation_bound(b1: Bound, b2: Bound) -> Bound:
    """The bound for a relation between two rounded results (shift, permutation, split/merge).

    Both results may be off by their own bound in opposite directions, so the allowed
    difference is the sum; terms of the same name are added.
    """
    shape = np.broadcast_shapes(np.shape(b1.abs), np.shape(b2.abs))
    terms: dict[str, np.ndarray] = {}
    for src in (b1.terms, b2.terms):
        for k, t in src.items():
            terms[k] = terms.get(k, 0.0) + np.broadcast_to(t, shape)
    return Bound(abs=np.broadcast_to(b1.abs, shape) + np.broadcast_to(b2.abs, shape),
                 terms=terms, numerics=b1.numerics, what=f"({b1.what}) + ({b2.what})")
