"""Simulated *correct* kernels: what a kernel with the declared numerics would output.

The statistical tier (:mod:`onlinesm.statistical`) compares a kernel's error with the error
distribution of a correct kernel that has the same declared numerics (:class:`Numerics`). This
module produces draws from that distribution. Each function mirrors a reference algorithm of
:mod:`onlinesm.reference` step for step (the same tile recurrence, every step rounded to the
accumulation dtype), with two additions:

- the exp is perturbed: every computed exp(z) (the probabilities *and* the online rescale
  factors) is multiplied by ``1 + ρ``, ρ uniform in ``[-s(z), s(z)]`` with ``s(z)`` the size of
  the declared exp class in :meth:`Numerics.exp_model`: ``(c·|z| + b + (a - 1)·|z|)·u``
  (``a - 1``: the argument roundings a real kernel makes beyond the subtraction z = x - m,
  which the simulation performs itself). A GPU's fast exp errs deterministically, not
  randomly; the model only needs the right *size*, and a uniform draw of the worst-case size
  has an RMS (s/√3) at or above what the measured fast exp does (measured on an H200: 62.7
  ulp at z = -87 where the class allows 114), so the simulated baseline errs on the large side;
- the attention dot products (scores over D terms, P·V over a tile's keys) carry a random
  rounding error of the size a sequential float32 FMA chain makes (:func:`dot_noise`);
- attention's P is rounded to ``numerics.p_dtype`` before P·V (the denominator sums the
  unrounded P, as FlashAttention does); the output is rounded to the output dtype.

With ``rng=None`` no perturbation is applied and the result equals the reference bitwise
(tests/test_statistical.py checks this), so the simulator *is* the reference plus a modelled
exp.

Example:
    >>> import numpy as np
    >>> from onlinesm.reference import softmax_online_tiled
    >>> x = np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32)
    >>> bool((simulate_softmax(x, tile=128) == softmax_online_tiled(x, tile=128)).all())
    True
    >>> y = simulate_softmax(x, rng=np.random.default_rng(1))
    >>> bool(0 < np.abs(y - softmax_online_tiled(x)).max() < 1e-6)
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onlinesm.dtypes import resolve
from onlinesm.oracle import visible_keys
from onlinesm.reference import _divide, _safe_max, _sum, tiled_recurrence
from onlinesm.tolerance import Numerics

__all__ = ["dot_noise", "exp_size", "perturbed_exp", "simulate_softmax", "simulate_attention"]


def exp_size(z: np.ndarray, numerics: Numerics) -> np.ndarray:
    """The relative size s(z) of the declared exp class's error at argument z (float64).

    >>> float(exp_size(np.array(-4.0), Numerics(exp="fast")) / 2.0**-24)
    10.0
    """
    a, c, b, _ = numerics.exp_model()
    az = np.abs(np.where(np.isfinite(z), z, 0.0).astype(np.float64))
    return (c * az + b + max(a - 1.0, 0.0) * az) * numerics.working.u


def perturbed_exp(z: np.ndarray, acc: np.dtype, numerics: Numerics,
                  rng: np.random.Generator | None) -> np.ndarray:
    """exp(z) in ``acc`` (as the references compute it), times 1 + U(-s, s) when ``rng`` is set.

    Exact zeros (exp(-inf)) stay zero; the result is rounded to ``acc``.
    """
    e = np.exp(z.astype(acc)).astype(acc)
    if rng is None:
        return e
    rho = rng.uniform(-1.0, 1.0, size=e.shape) * exp_size(z, numerics)
    return (e.astype(np.float64) * (1.0 + rho)).astype(acc)


def _acc(x: np.ndarray, numerics: Numerics) -> np.dtype:
    return np.dtype(np.float64) if x.dtype == np.float64 else resolve(numerics.accumulate).numpy


def dot_noise(terms_abs: np.ndarray, length: int, u: float,
              rng: np.random.Generator | None) -> np.ndarray:
    """A random rounding error for dot products of ``length`` terms accumulated one FMA at a time.

    A GPU's float32 matmul without tensor cores (Triton's ``input_precision="ieee"``) adds the
    terms in sequence: each of the ``length`` additions rounds, so the error is a sum of
    ``length`` roundings of partial sums bounded by ``Σ|terms|`` (``terms_abs``). Modelled as
    a normal draw of standard deviation ``u·sqrt(length/3)·Σ|terms|`` (independent roundings,
    each uniform in ``±u``, at the largest partial sum): numpy's blocked sums err less, so this
    errs on the large side, like the exp model.

    >>> float(dot_noise(np.ones(1), 64, 2.0**-24, None)[0])
    0.0
    """
    if rng is None:
        return np.zeros_like(terms_abs)
    return rng.standard_normal(terms_abs.shape) * (u * np.sqrt(length / 3.0)) * terms_abs


def simulate_softmax(x: Any, *, numerics: Numerics = Numerics(), rng: np.random.Generator | None
                     = None, tile: int = 128, out_dtype: Any = None) -> np.ndarray:
    """One simulated correct softmax of rows ``x``: the online tiled recurrence with a modelled exp.

    Mirrors :func:`onlinesm.reference.softmax_online_tiled` (tile ``tile``, state rounded to
    ``numerics.accumulate``; the second read recomputes each exp, perturbed independently, as
    a kernel's second pass does). Output in ``out_dtype`` (default: x's dtype).
    """
    x = np.asarray(x)
    acc = _acc(x, numerics)
    y = tiled_recurrence(x.astype(acc), acc, tile, lambda z: perturbed_exp(z, acc, numerics, rng))
    return resolve(x.dtype if out_dtype is None else out_dtype).round(y)


def simulate_attention(
    q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
    scale: float | None = None, causal_align: str = "top-left",
    numerics: Numerics = Numerics(), rng: np.random.Generator | None = None, tile: int = 64,
    out_dtype: Any = None,
) -> np.ndarray:
    """One simulated correct attention output o: FlashAttention's recurrence with modelled numerics.

    Mirrors :func:`onlinesm.reference.attention_online` (scores in float32, state (m, d, o)
    rounded to ``numerics.accumulate``), with perturbed exps, P rounded to
    ``numerics.p_dtype`` (when set) before P·V, and o rounded to ``out_dtype`` (default q's).
    ``allow_tf32`` is not simulated (the scores use full float32 operands).
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    acc = _acc(q, numerics)
    dot = np.dtype(np.float64) if acc == np.float64 else np.dtype(np.float32)
    pdt = None if numerics.p_dtype is None else resolve(numerics.p_dtype).numpy
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kx = np.repeat(k, h // hkv, axis=1).astype(dot)
    vx = np.repeat(v, h // hkv, axis=1).astype(dot)
    visible = visible_keys((b, h, sq, sk), mask=mask, causal=causal, causal_align=causal_align)
    sc = dot.type(1.0 / np.sqrt(dim) if scale is None else scale)
    ud = float(np.finfo(dot).eps) / 2  # unit roundoff of the dot products' accumulation
    m = np.full((b, h, sq, 1), -np.inf, dtype=acc)
    d = np.zeros((b, h, sq, 1), dtype=acc)
    o = np.zeros((b, h, sq, dim), dtype=acc)
    qx = q.astype(dot)
    for start in range(0, sk, tile):
        kt, vt = kx[:, :, start : start + tile], vx[:, :, start : start + tile]
        s = np.einsum("bhqd,bhkd->bhqk", qx, kt)
        if rng is not None:  # the score dot's rounding (D terms), as a GPU's FMA chain makes it
            s = s + dot_noise(np.einsum("bhqd,bhkd->bhqk", np.abs(qx), np.abs(kt)), dim, ud, rng).astype(dot)
        s = (s * sc).astype(acc)
        s = np.where(visible[..., start : start + tile], s, acc.type(-np.inf))
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        ref = _safe_max(m_new)
        alpha = perturbed_exp((m - ref).astype(acc), acc, numerics, rng)
        p = perturbed_exp((s - ref).astype(acc), acc, numerics, rng)
        d = ((d * alpha).astype(acc) + _sum(p, acc)).astype(acc)
        pp = p if pdt is None else p.astype(pdt)
        pv = np.einsum("bhqk,bhkd->bhqd", pp.astype(dot), vt)
        if rng is not None:  # the P·V tile product's rounding (one term per key of the tile)
            pv = pv + dot_noise(np.einsum("bhqk,bhkd->bhqd", np.abs(pp.astype(dot)), np.abs(vt)),
                                kt.shape[2], ud, rng).astype(dot)
        pv = pv.astype(acc)
        o = ((o * alpha).astype(acc) + pv).astype(acc)
        m = m_new
    out = resolve(q.dtype if out_dtype is None else out_dtype)
    return out.round(_divide(o, d).astype(acc))
