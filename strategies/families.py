"""Adversarial softmax rows, one pure-numpy generator per family.

Each family targets one way an online (tiled) softmax goes wrong; :data:`SOFTMAX_FAMILIES`
names them and says which bug class each exposes. :func:`generate_row` builds a row from a
family, a length, a dtype and a seeded ``numpy.random.Generator``: the report engine calls it
directly, and the Hypothesis strategies (:mod:`onlinesm.strategies.softmax`) call it with a small
recipe drawn by Hypothesis (:class:`RowRecipe`), so that shrinking simplifies the recipe
(seed 0, scale 1, shortest prefix, position 0) rather than thousands of values.

Every value of a row is a value of the dtype: rows are built in float64 (or directly as
ordinals, see ``_bits``) and rounded once with ``fmt.round``; the family's promise is
then re-checked on the rounded row (:func:`check_row`), since rounding can merge ties, overflow
to inf or lift a value above -1e30.

Example:
    >>> import numpy as np
    >>> row = generate_row("masked_prefix", 200, "bf16", np.random.default_rng(0))
    >>> bool(np.isneginf(row[:65]).all()), row.dtype.name
    (True, 'bfloat16')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onlinesm.dtypes import FloatFormat

from ._bits import from_ordinals, max_ordinal, ordinals, tiny_ordinal
from ._validate import InvalidArgument, check_dtype, check_int

__all__ = [
    "SOFTMAX_FAMILIES",
    "DEFAULT_FAMILIES",
    "OPT_IN_FAMILIES",
    "SENTINEL",
    "RowRecipe",
    "generate_row",
    "check_row",
    "masked_run_candidates",
    "scale_exponent_range",
    "preferred_min_length",
]

#: A plausible finite "minus infinity" a kernel might initialise its running max to.
SENTINEL: float = -1e30

#: Family name -> what it generates and which bug class it exposes.
SOFTMAX_FAMILIES: dict[str, str] = {
    "gaussian": "N(0, scale^2) at any scale, tiny (subnormal results) to huge (near overflow): "
                "the baseline; huge scales catch a missing max subtraction",
    "huge_max": "the row max lies in [max/2, max] of the dtype, body gaussian, near-max or "
                "uniform in [-max, max]: catches exp(x) without the shift, and x - m overflow",
    "huge_spread": "one max, a few entries near it, the rest far enough below that their exps "
                   "underflow: catches bf16/fp16 accumulation and lost small terms in long rows",
    "below_sentinel": "finite, unmasked, every entry below -1e30 (fp16: in [-65504, -32768]): "
                      "catches a running max initialised to a finite sentinel (-1e30, dtype min)",
    "masked_prefix": "a -inf prefix longer than a tile (65, 128±1, 256±1, 1024±1, ...), then "
                     "finite: catches exp(-inf - -inf) = NaN on a fully masked first tile",
    "masked_suffix": "finite, then a -inf suffix longer than a tile: catches a NaN or wrong "
                     "rescale from a fully masked last tile",
    "masked_scattered": "-inf at random positions (at least one finite entry): catches masks "
                        "applied to the wrong lanes and -inf leaking into sums",
    "fully_masked": "every entry -inf: the fully masked row; the kernel's declared convention "
                    "(zeros or NaN) must hold, not garbage",
    "one_finite": "exactly one finite entry, the rest -inf: the answer is exactly one-hot",
    "ties": "the max value repeated (at least twice): catches argmax-style shortcuts and "
            "double counting of the max",
    "constant": "every entry equal (any magnitude): the answer is exactly uniform 1/n",
    "monotone": "strictly increasing, so the running max grows at every tile: catches a "
                "missing or misordered rescale exp(m_old - m_new)",
    "tiny_diff": "values a few ulps apart around a large magnitude: catches cancellation in "
                 "x - m computed in low precision and a max taken after rounding",
    "subnormal": "subnormal and smallest-normal values: catches flush-to-zero and "
                 "denormal-unsafe comparisons",
    "nonfinite": "opt-in: NaN and/or +inf entries in a gaussian row: the answer must be NaN "
                 "(not a silent finite value)",
}

#: Families only drawn when asked for (``allow_nonfinite=True`` or by name).
OPT_IN_FAMILIES: tuple[str, ...] = ("nonfinite",)

#: The families drawn when ``families=None``.
DEFAULT_FAMILIES: tuple[str, ...] = tuple(f for f in SOFTMAX_FAMILIES if f not in OPT_IN_FAMILIES)

# Shortest row on which the family keeps its whole promise (shorter rows get a weaker form).
_PREFERRED_MIN_LENGTH = {
    "masked_prefix": 66, "masked_suffix": 66, "masked_scattered": 2, "one_finite": 1,
    "ties": 2, "monotone": 2, "tiny_diff": 2, "huge_spread": 3,
}

# Families whose finite entries follow N(0, scale^2); the others choose their own magnitudes.
SCALED_FAMILIES: frozenset[str] = frozenset({
    "gaussian", "masked_prefix", "masked_suffix", "masked_scattered", "one_finite", "ties",
    "constant", "monotone", "nonfinite",
})

_MASK_TILE = 64  # the smallest tile a masked run must be longer than


def preferred_min_length(family: str) -> int:
    """The shortest row on which ``family`` keeps its full promise (e.g. 66 for a prefix > 64)."""
    return _PREFERRED_MIN_LENGTH.get(family, 1)


def scale_exponent_range(dtype: Any) -> tuple[int, int]:
    """(lo, hi) such that N(0, 2**e) for e in [lo, hi] stays representable and not all zero."""
    fmt = check_dtype("dtype", dtype)
    lo = math.frexp(fmt.smallest_subnormal)[1] + 8
    return lo, _largest_exponent(fmt)


def _largest_exponent(fmt: FloatFormat) -> int:
    """The largest e of :func:`scale_exponent_range`: 2**e times a few dozen stays finite."""
    return math.frexp(fmt.max)[1] - 5


#: Scales above 2**this overflow float64, in which every row is built (then rounded).
_MAX_SCALE_EXPONENT = _largest_exponent(check_dtype("dtype", "float64"))


def masked_run_candidates(length: int) -> tuple[int, ...]:
    """Lengths of a masked prefix / suffix worth trying in a row of ``length``.

    Runs longer than 64 and at tile sizes ± 1, capped so that one entry stays finite; rows of
    66 or fewer entries get ``length - 1`` (0 for a row of one).

    >>> masked_run_candidates(130)
    (65, 127, 128, 129)
    """
    if length <= _MASK_TILE + 2:
        return (max(0, length - 1),)
    found = {_MASK_TILE + 1, length - 1}
    for tile in (128, 256, 512, 1024, 2048, 4096, 65536):
        found |= {tile - 1, tile, tile + 1, 2 * tile}
    return tuple(sorted(p for p in found if _MASK_TILE < p <= length - 1))


@dataclasses.dataclass(frozen=True)
class RowRecipe:
    """Everything needed to regenerate one row: ``recipe.generate(dtype)``.

    The Hypothesis strategies draw recipes and keep them in :class:`SoftmaxCase.recipes`, so a
    failing row can be rebuilt, printed compactly and minimised without Hypothesis.
    """

    family: str
    length: int
    seed: int
    scale: float | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def generate(self, dtype: Any) -> np.ndarray:
        return generate_row(self.family, self.length, dtype, np.random.default_rng(self.seed),
                            scale=self.scale, **dict(self.params))


# --------------------------------------------------------------------------------------------
# helpers


def _default_scale(rng: np.random.Generator, fmt: FloatFormat) -> float:
    """Half the time a moderate scale 2**[-4, 4], half the time anywhere the dtype allows."""
    lo, hi = scale_exponent_range(fmt)
    e = rng.integers(-4, 5) if rng.random() < 0.5 else rng.integers(lo, hi + 1)
    return float(2.0 ** int(e))


def _round(x: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Round float64 values to the dtype; finite values are clipped first so none overflow."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    x = np.where(finite, np.clip(x, -fmt.max, fmt.max), x)
    return fmt.round(x)


def _positions(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.choice(n, size=k, replace=False) if k else np.zeros(0, dtype=np.int64)


def _param(params: dict[str, Any], name: str, default: Callable[[], Any]) -> Any:
    return params.pop(name) if name in params else default()


def _check_int_param(family: str, name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidArgument(
            f"{name}={value!r} for family {family!r} must be an int in [{lo}, {hi}] "
            f"(the bounds follow from the row length); pass {name}={min(max(lo, 0), hi)} "
            "or leave it out to draw one"
        )
    return value


def _largest_below(limit: float, fmt: FloatFormat) -> float:
    """The largest value of ``fmt`` strictly below ``limit``."""
    r = fmt.round(float(limit))
    if float(r) >= limit:
        r = from_ordinals(ordinals(r, fmt) - 1, fmt)
    return float(r)


# --------------------------------------------------------------------------------------------
# the families: each returns a row of fmt.numpy (rounded), consuming its params


def _gaussian(n, fmt, rng, s, p):
    return _round(rng.standard_normal(n) * s, fmt)


def _huge_max(n, fmt, rng, s, p):
    count = _check_int_param("huge_max", "count", _param(
        p, "count", lambda: rng.integers(1, min(n, 4) + 1)), 1, n)
    body = _param(p, "body", lambda: ("gaussian", "near_max", "uniform")[rng.integers(0, 3)])
    if body == "gaussian":
        x = rng.standard_normal(n) * (1.0 if s is None else s)
    elif body == "near_max":
        x = rng.uniform(0.25, 1.0, n) * fmt.max
    elif body == "uniform":
        x = rng.uniform(-1.0, 1.0, n) * fmt.max
    else:
        raise InvalidArgument(f"body={body!r} (family 'huge_max') must be one of "
                              "'gaussian', 'near_max', 'uniform'")
    x[_positions(rng, n, count)] = rng.uniform(0.5, 1.0, count) * fmt.max
    return _round(x, fmt)


def _underflow_gap(fmt: FloatFormat) -> float:
    # exp(t) underflows to 0 below t = log(smallest subnormal): -103.3 in fp32 (where kernels
    # usually compute exp, also for bf16/fp16 inputs), -744.4 in fp64.
    return 746.0 if fmt.name == "float64" else 104.0


def _huge_spread(n, fmt, rng, s, p):
    top = math.frexp(fmt.max)[1] - 3
    lo_k = 13 if fmt.name == "float64" else 10
    k = _check_int_param("huge_spread", "spread", _param(
        p, "spread", lambda: rng.integers(lo_k, max(lo_k, min(24, top)) + 1)), 1, top)
    gap = _underflow_gap(fmt)
    c = float(rng.standard_normal() * 4)
    x = c - gap - rng.random(n) * 2.0**k  # every entry's exp underflows ...
    near = int(rng.integers(0, min(3, (n - 1) // 4) + 1)) if n > 1 else 0
    idx = _positions(rng, n, near + 1)
    x[idx[0]] = c  # ... except the max ...
    x[idx[1:]] = c - rng.uniform(0.0, 4.0, near)  # ... and a few entries close to it
    return _round(x, fmt)


def _below_sentinel(n, fmt, rng, s, p):
    if fmt.max > 1e31:
        # magnitudes 1e30 * 2**[0.05, E], with a relative spread that is sometimes tiny
        e_top = min(math.log2(fmt.max / 1e30) - 1.0, 40.0)
        base = 1e30 * 2.0 ** rng.uniform(0.05, e_top)
        rel = 2.0 ** -rng.uniform(0, 24)
        x = -base * (1.0 + np.abs(rng.standard_normal(n)) * rel)
        if rng.random() < 0.25:  # a tie at the max
            x[_positions(rng, n, min(n, 2))] = -base
        row = _round(x, fmt)
        ceiling = _largest_below(SENTINEL, fmt)
        return np.minimum(row, fmt.round(ceiling))
    # float16 cannot reach -1e30: stay near its most negative finite value instead
    x = -fmt.max * rng.uniform(0.5, 1.0, n)
    if rng.random() < 0.5:
        x[rng.integers(0, n)] = -fmt.max
    return _round(x, fmt)


def _masked_run(n, fmt, rng, s, p, *, family, name, at_start):
    cands = masked_run_candidates(n)
    run = _check_int_param(family, name, _param(
        p, name, lambda: cands[rng.integers(0, len(cands))]), 0, n - 1)
    x = rng.standard_normal(n) * s
    if at_start:
        x[:run] = -np.inf
    else:
        x[n - run:] = -np.inf
    return _round(x, fmt)


def _masked_prefix(n, fmt, rng, s, p):
    return _masked_run(n, fmt, rng, s, p, family="masked_prefix", name="prefix", at_start=True)


def _masked_suffix(n, fmt, rng, s, p):
    return _masked_run(n, fmt, rng, s, p, family="masked_suffix", name="suffix", at_start=False)


def _masked_scattered(n, fmt, rng, s, p):
    masked = _check_int_param("masked_scattered", "masked", _param(
        p, "masked", lambda: min(n - 1, max(1, int(n * rng.uniform(0.05, 0.99))))),
        0, n - 1)
    x = rng.standard_normal(n) * s
    x[_positions(rng, n, masked)] = -np.inf
    return _round(x, fmt)


def _fully_masked(n, fmt, rng, s, p):
    return np.full(n, -np.inf).astype(fmt.numpy)


def _one_finite(n, fmt, rng, s, p):
    pos = _check_int_param("one_finite", "position", _param(
        p, "position", lambda: rng.integers(0, n)), 0, n - 1)
    x = np.full(n, -np.inf)
    x[pos] = rng.standard_normal() * s
    return _round(x, fmt)


def _ties(n, fmt, rng, s, p):
    count = _check_int_param("ties", "count", _param(
        p, "count", lambda: rng.integers(min(n, 2), min(n, 8) + 1)), 1, n)
    x = _round(rng.standard_normal(n) * s, fmt).astype(np.float64)
    top = float(_round(np.array([x.max() + abs(s)]), fmt)[0])
    x[_positions(rng, n, count)] = top
    return _round(x, fmt)


def _constant(n, fmt, rng, s, p):
    value = _param(p, "value", lambda: float(rng.standard_normal() * s))
    if not (isinstance(value, (int, float, np.floating)) and math.isfinite(value)):
        raise InvalidArgument(f"value={value!r} (family 'constant') must be a finite number")
    return _round(np.full(n, float(value)), fmt)


def _monotone(n, fmt, rng, s, p):
    span = s * rng.uniform(1.0, 64.0)
    if not math.isfinite(span):  # float64 near its max: the span itself would overflow
        span = math.copysign(float(fmt.max), span)
    steps = rng.exponential(1.0, n)
    with np.errstate(over="ignore"):  # cumsum / sum can round past 1: past max, clipped next
        x = np.cumsum(steps) / steps.sum() * span - span * rng.uniform(0.0, 1.0)
    x = np.clip(x, -fmt.max, fmt.max)  # a huge scale must not round to ±inf
    o = ordinals(_round(x, fmt), fmt)
    top = max_ordinal(fmt)
    idx = np.arange(n, dtype=np.int64)
    if n <= 2 * top + 1:
        o = np.maximum.accumulate(o - idx) + idx  # strictly increasing, as little moved as can be
        o -= max(0, int(o[-1]) - top)  # pushed past max: slide the whole row down
        if o[0] < -top:  # the slide went past the most negative finite: spread evenly instead
            # in Python's integers: float64's 2 * top passes int64's range
            step = (2 * top) // max(n - 1, 1)
            o = np.array([-top + i * step for i in range(n)], dtype=np.int64)
    else:  # more entries than finite values: non-decreasing, still growing at every tile
        o = -top + (idx * (2 * top) // (n - 1))
    return from_ordinals(o, fmt)


def _tiny_diff(n, fmt, rng, s, p):
    top = math.frexp(fmt.max)[1] - 2
    if s is None:
        s = float(2.0 ** rng.integers(4, top + 1) * rng.uniform(1.0, 2.0))
    ulps = _check_int_param("tiny_diff", "ulps", _param(
        p, "ulps", lambda: rng.integers(1, 9)), 1, 1 << 20)
    sign = -1 if rng.random() < 0.5 else 1
    center = int(ordinals(_round(np.array([abs(s)]), fmt), fmt)[0])
    center = min(max(center, int(ordinals(16.0, fmt)) + ulps), max_ordinal(fmt) - ulps)
    o = center + rng.integers(-ulps, ulps + 1, n)
    if n >= 2 and np.all(o == o[0]):
        o[rng.integers(0, n)] = o[0] + (1 if o[0] < center + ulps else -1)
    return from_ordinals(sign * o, fmt)


def _subnormal(n, fmt, rng, s, p):
    t = tiny_ordinal(fmt)
    o = rng.integers(-t - 2, t + 3, n)
    o[rng.integers(0, n)] = rng.integers(1, t) * (1 if rng.random() < 0.5 else -1)
    return from_ordinals(o, fmt)


def _nonfinite(n, fmt, rng, s, p):
    kind = int(rng.integers(0, 3))
    n_nan = _check_int_param("nonfinite", "nans", _param(
        p, "nans", lambda: min(n, rng.integers(1, 4)) if kind != 1 else 0), 0, n)
    n_inf = _check_int_param("nonfinite", "infs", _param(
        p, "infs", lambda: min(n, rng.integers(1, 4)) if kind != 0 else 0), 0, n)
    if n_nan + n_inf == 0:
        n_nan = 1
    n_nan = min(n_nan, n)
    n_inf = min(n_inf, n - n_nan)
    x = rng.standard_normal(n) * s
    idx = _positions(rng, n, n_nan + n_inf)
    x[idx[:n_nan]] = np.nan
    x[idx[n_nan:]] = np.inf
    return _round(x, fmt)


_GENERATORS: dict[str, Callable[..., np.ndarray]] = {
    "gaussian": _gaussian, "huge_max": _huge_max, "huge_spread": _huge_spread,
    "below_sentinel": _below_sentinel, "masked_prefix": _masked_prefix,
    "masked_suffix": _masked_suffix, "masked_scattered": _masked_scattered,
    "fully_masked": _fully_masked, "one_finite": _one_finite, "ties": _ties,
    "constant": _constant, "monotone": _monotone, "tiny_diff": _tiny_diff,
    "subnormal": _subnormal, "nonfinite": _nonfinite,
}
assert set(_GENERATORS) == set(SOFTMAX_FAMILIES)


def generate_row(family: str, length: int, dtype: Any, rng: np.random.Generator, *,
                 scale: float | None = None, **params: Any) -> np.ndarray:
    """One row of ``family``, ``length`` values of ``dtype`` (bf16 as ``ml_dtypes.bfloat16``).

    ``scale`` is the standard deviation of the finite entries for the gaussian-bodied families
    (gaussian, masked_*, one_finite, ties, constant, monotone, nonfinite), the magnitude for
    tiny_diff and the body's scale for huge_max, at most 2**1019 but for tiny_diff (rows are
    built in float64);
    None draws one from ``rng`` (half the time in 2**[-4, 4], half the time anywhere the dtype
    allows). Family-specific ``params`` pin what is
    otherwise drawn: ``prefix`` / ``suffix`` (masked run length), ``masked`` (count),
    ``position`` (one_finite), ``count`` (ties, huge_max), ``body`` (huge_max), ``spread``
    (huge_spread, log2 of the width), ``value`` (constant), ``ulps`` (tiny_diff), ``nans`` /
    ``infs`` (nonfinite).

    The rounded row is checked against the family's promise (:func:`check_row`); a broken
    promise is a bug in onlinesm and raises AssertionError.

    >>> row = generate_row("monotone", 300, "float16", np.random.default_rng(1))
    >>> bool((np.diff(row.astype(float)) > 0).all())
    True
    """
    if family not in _GENERATORS:
        raise InvalidArgument(f"family={family!r} is not a softmax family; choose from: "
                              f"{', '.join(SOFTMAX_FAMILIES)}")
    n = check_int("length", length, min_value=1)
    fmt = check_dtype("dtype", dtype)
    if not isinstance(rng, np.random.Generator):
        raise InvalidArgument(f"rng={rng!r} must be a numpy.random.Generator; use "
                              "rng=numpy.random.default_rng(seed)")
    if scale is not None and not (isinstance(scale, (int, float)) and 0 < scale < math.inf):
        raise InvalidArgument(f"scale={scale!r} must be a positive finite number, or None")
    s = float(scale) if scale is not None else None
    if s is not None and s > 2.0**_MAX_SCALE_EXPONENT and family != "tiny_diff":
        # Rows are built in float64 (then rounded, narrower dtypes clipped to their max):
        # past this, a family's multiples of the scale overflow float64 itself (tiny_diff's
        # scale is the magnitude its values crowd around, up to the dtype's max / 4).
        raise InvalidArgument(
            f"scale={scale!r} is too large: at most 2**{_MAX_SCALE_EXPONENT} "
            f"({2.0**_MAX_SCALE_EXPONENT:.3g}), where N(0, scale) and the families' multiples "
            "of it stay finite in float64, in which rows are built; pass a smaller scale")
    if s is None and family in SCALED_FAMILIES:
        s = _default_scale(rng, fmt)
    p = dict(params)
    row = _GENERATORS[family](n, fmt, rng, s, p)
    if p:
        raise InvalidArgument(f"unexpected parameter(s) {sorted(p)} for family {family!r}; "
                              "see generate_row's docstring for each family's parameters")
    row = np.ascontiguousarray(fmt.round(row))  # generators return fmt values; rounded once if not
    problems = check_row(family, row, fmt)
    assert not problems, f"onlinesm bug: {family} row broke its promise: {problems}"
    return row


def check_row(family: str, row: np.ndarray, dtype: Any) -> list[str]:
    """What ``row`` fails of ``family``'s promise (empty list: it keeps it).

    Shorter rows are held to the weaker promise their length allows (a masked prefix of a row
    of 10 is 9 long, not 65).
    """
    fmt = check_dtype("dtype", dtype)
    x = np.asarray(row).astype(np.float64)
    n = x.size
    bad: list[str] = []
    if np.asarray(row).dtype != fmt.numpy:
        bad.append(f"dtype {np.asarray(row).dtype} is not {fmt.name}")
    finite = np.isfinite(x)
    neginf = np.isneginf(x)
    if family != "nonfinite" and (np.isnan(x).any() or np.isposinf(x).any()):
        bad.append("NaN or +inf outside the nonfinite family")
    if family in ("gaussian", "huge_max", "huge_spread", "below_sentinel", "ties", "constant",
                  "monotone", "tiny_diff", "subnormal") and not finite.all():
        bad.append("a non-finite entry in a finite family")
    if not bad and finite.all() and n:
        if family == "huge_max" and not x.max() > fmt.max / 4:
            bad.append(f"max {x.max()} is not above dtype max / 4")
        if family == "huge_spread" and n >= 3:
            under = (x - x.max() < -_underflow_gap(fmt) + 1).sum()
            if not under > n / 2:
                bad.append(f"only {under} of {n} exps underflow")
        if family == "below_sentinel":
            limit = SENTINEL if fmt.max > 1e31 else -fmt.max / 2
            if not (x < limit).all() if fmt.max > 1e31 else not (x <= limit).all():
                bad.append(f"an entry is not below {limit}")
        if family == "ties" and n >= 2 and (x == x.max()).sum() < 2:
            bad.append("the max is not repeated")
        if family == "constant" and not (x == x[0]).all():
            bad.append("not constant")
        if family == "monotone" and n <= 2 * max_ordinal(fmt) + 1 and not (np.diff(x) > 0).all():
            bad.append("not strictly increasing")
        if family == "tiny_diff":
            o = ordinals(row, fmt)
            if o.max() - o.min() > 2 * (1 << 20) or (np.abs(x) < 16).any():
                bad.append("not a few ulps apart around a large magnitude")
        if family == "subnormal" and (np.abs(x) > 2 * fmt.tiny).any():
            bad.append("an entry is not subnormal or near the smallest normal")
    if family in ("masked_prefix", "masked_suffix"):
        mask = neginf if family == "masked_prefix" else neginf[::-1]
        run = n if mask.all() else int(np.argmin(mask))
        want = min(_MASK_TILE + 1, n - 1)
        if run < want or not finite[~(neginf)].all() or (neginf.sum() != run) or (n > 1 and run == n):
            bad.append(f"masked run {run} (want >= {want}, then only finite entries)")
    if family == "masked_scattered" and (not (finite | neginf).all()
                                         or (n >= 2 and not (neginf.any() and finite.any()))):
        bad.append("needs some -inf and some finite entries, nothing else")
    if family == "fully_masked" and not neginf.all():
        bad.append("not every entry is -inf")
    if family == "one_finite" and not (finite.sum() == 1 and (finite | neginf).all()):
        bad.append("not exactly one finite entry among -inf")
    if family == "nonfinite" and not (np.isnan(x).any() or np.isposinf(x).any()):
        bad.append("no NaN or +inf entry")
    return bad
