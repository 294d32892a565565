"""Dtype-exact scalars and arrays for float64, float32, float16 and bfloat16.

Hypothesis's ``floats(width=...)`` covers IEEE half, single and double, but not bfloat16, and
it does not single out the edges of a *format* (the largest finite value, the smallest normal,
1 ± ulp, values just below a power of two). :func:`floats_of` adds both: every value it draws is
exactly representable in the dtype, one draw in five is an edge of the format, and the rest come
from Hypothesis's own float strategy (bfloat16: a float32 rounded to nearest bf16, with the bounds
first rounded inwards so the rounding can never leave them). Shrinking is Hypothesis's: towards
0, then small integers, then simple fractions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onlinesm.dtypes import FloatFormat

from ._bits import from_ordinals, ordinals
from ._validate import InvalidArgument, check_bool, check_dtype

__all__ = ["floats_of", "arrays_of", "edge_values"]

_HYPOTHESIS_WIDTH = {"float64": 64, "float32": 32, "float16": 16}


def edge_values(dtype: Any) -> tuple[float, ...]:
    """The finite edges of a format, as Python floats exactly representable in it.

    0 and -0, ±1, 1 + eps and 1 - eps/2 (the neighbours of 1), 2 - eps and other values just
    below a power of two, the largest finite value and its neighbour, the smallest normal and
    its two neighbours, the smallest and largest subnormal, and their negatives.

    >>> edge_values("bf16")[:4]
    (0.0, -0.0, 1.0, -1.0)
    """
    fmt = check_dtype("dtype", dtype)
    eps, tiny, sub = fmt.eps, fmt.tiny, fmt.smallest_subnormal
    top = math.frexp(fmt.max)[1]  # max = 2**top - ulp
    positive = [
        1.0, 1.0 + eps, 1.0 - eps / 2, 2.0 - eps, 2.0, 0.5 - eps / 4,
        fmt.max, fmt.max - math.ldexp(1.0, top - fmt.precision), math.ldexp(1.0, top - 1),
        tiny, tiny + sub, tiny - sub, sub, 2 * sub,
    ]
    for k in (8, 11, 16, 24, 64, 127):  # 2**k - ulp: just below a power of two
        if k < top:
            positive.append(math.ldexp(1.0, k) - math.ldexp(1.0, k - fmt.precision))
    values = [0.0, -0.0]
    for v in positive:
        values += [v, -v]
    out: list[float] = []
    for v in values:
        exact = float(fmt.round(float(v)))
        assert exact == v and math.isfinite(exact), (fmt.name, v)
        if not any(exact == w and math.copysign(1, exact) == math.copysign(1, w) for w in out):
            out.append(exact)
    return tuple(out)


def _round_inwards(bound: float, fmt: FloatFormat, *, up: bool) -> float:
    """The nearest value of ``fmt`` at or inside ``bound`` (up: >= bound, else <= bound)."""
    if math.isinf(bound):
        return bound
    clipped = min(max(bound, -fmt.max), fmt.max)
    r = float(fmt.round(float(clipped)))
    if up and r < bound:
        r = float(from_ordinals(ordinals(r, fmt) + 1, fmt))
    if not up and r > bound:
        r = float(from_ordinals(ordinals(r, fmt) - 1, fmt))
    if r == 0.0:
        r = 0.0  # -0.0 as a lower bound would exclude +0.0 in Hypothesis's eyes
    return r


def floats_of(
    dtype: Any,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    allow_subnormal: bool = True,
    allow_infinity: bool = False,
    allow_nan: bool = False,
) -> st.SearchStrategy[float]:
    """Python floats exactly representable in ``dtype``, with the format's edges reachable.

    ``min_value`` / ``max_value`` need not be representable: they are rounded inwards to the
    nearest values of the format. Infinities and NaN are off by default (softmax families add
    their -inf and NaN entries on purpose, not by accident).

    Why: an fp32 strategy never draws bf16's largest finite value (3.39e38) or the fp16
    subnormals, and those are where kernels that convert, compare or flush go wrong.

    Example::

        @given(floats_of("bf16", min_value=-1e30))
        def test_roundtrip(v):
            assert float(np.asarray(v).astype(ml_dtypes.bfloat16)) == v

    Shrinks towards 0, small integers and simple fractions; an edge shrinks to 0.0.
    """
    fmt = check_dtype("dtype", dtype)
    allow_subnormal = check_bool("allow_subnormal", allow_subnormal)
    allow_infinity = check_bool("allow_infinity", allow_infinity)
    allow_nan = check_bool("allow_nan", allow_nan)
    for name, bound in (("min_value", min_value), ("max_value", max_value)):
        if bound is not None and (not isinstance(bound, (int, float)) or isinstance(bound, bool)
                                  or math.isnan(bound)):
            raise InvalidArgument(f"{name}={bound!r} must be a real number (not NaN) or None")
    lo = -math.inf if min_value is None else _round_inwards(float(min_value), fmt, up=True)
    hi = math.inf if max_value is None else _round_inwards(float(max_value), fmt, up=False)
    if lo > hi:
        raise InvalidArgument(
            f"no {fmt.name} value lies in [min_value={min_value!r}, max_value={max_value!r}] "
            f"(rounded inwards: [{lo!r}, {hi!r}]); widen the range"
        )
    if allow_nan and (min_value is not None or max_value is not None):
        raise InvalidArgument(
            f"allow_nan=True cannot be combined with min_value={min_value!r} or "
            f"max_value={max_value!r} (NaN is outside every range); drop one of them"
        )

    finite_lo, finite_hi = max(lo, -fmt.max), min(hi, fmt.max)
    # Hypothesis refuses allow_subnormal=True for a range without subnormals: infer instead.
    has_subnormals = finite_lo < fmt.tiny and finite_hi > -fmt.tiny and (
        finite_lo < 0 or finite_hi > 0)
    subnormal_arg: bool | None = allow_subnormal if has_subnormals else None
    if fmt.name in _HYPOTHESIS_WIDTH:
        core: st.SearchStrategy[float] = st.floats(
            min_value=None if min_value is None else lo,
            max_value=None if max_value is None else hi,
            width=_HYPOTHESIS_WIDTH[fmt.name],
            allow_subnormal=subnormal_arg,
            allow_infinity=allow_infinity,
            allow_nan=allow_nan,
        )
    else:
        # bfloat16: a float32 in the (already bf16-rounded) bounds, rounded to nearest bf16.
        # Rounding is monotone and both bounds are bf16 values, so the result stays inside.
        bf16 = fmt.numpy
        core = st.floats(
            min_value=finite_lo, max_value=finite_hi, width=32,
            allow_subnormal=subnormal_arg, allow_infinity=False, allow_nan=False,
        ).map(lambda v: float(np.float32(v).astype(bf16)))

    edges = [v for v in edge_values(fmt) if finite_lo <= v <= finite_hi
             and (allow_subnormal or v == 0 or abs(v) >= fmt.tiny)]
    if allow_infinity:
        edges += [v for v in (math.inf, -math.inf) if lo <= v <= hi]
    if allow_nan:
        edges.append(math.nan)
    edges.sort(key=lambda v: (math.isnan(v), abs(v) if not math.isnan(v) else 0))
    if not edges:
        return core

    edge_strategy = st.sampled_from(edges)

    @st.composite
    def _draw(draw: Any) -> float:
        # 0..3: Hypothesis's floats; 4: an edge of the format. Shrinks to the core branch.
        if draw(st.integers(0, 4)) == 4:
            return draw(edge_strategy)
        return draw(core)

    return _draw()


def arrays_of(
    dtype: Any,
    shape: int | Sequence[int] | st.SearchStrategy[Any],
    *,
    elements: st.SearchStrategy[float] | None = None,
    unique: bool = False,
) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``dtype`` (bf16 as ``ml_dtypes.bfloat16``) whose elements are drawn one by one.

    ``elements`` defaults to ``floats_of(dtype)``. Small arrays only: each element costs
    Hypothesis choices, so for rows of thousands use :func:`onlinesm.strategies.softmax_rows`.

    >>> arrays_of("bf16", (2, 3)).example().dtype.name
    'bfloat16'

    Shrinks element-wise, like ``hypothesis.extra.numpy.arrays``.
    """
    fmt = check_dtype("dtype", dtype)
    if elements is None:
        elements = floats_of(fmt)
    elif not isinstance(elements, st.SearchStrategy):
        raise InvalidArgument(f"elements={elements!r} must be a Hypothesis strategy, e.g. "
                              f"floats_of({fmt.name!r}, min_value=-1, max_value=1)")
    unique = check_bool("unique", unique)
    # Drawn as float64 (every value is exact in fmt), then converted without rounding.
    return hnp.arrays(np.float64, shape, elements=elements, unique=unique).map(
        fmt.round
    )
