"""Hypothesis strategies for batches of adversarial softmax rows.

One example is a 2-D array: several rows of one common length (kernels take 2-D tensors), each
row from a family of :data:`~onlinesm.strategies.families.SOFTMAX_FAMILIES`. Hypothesis caps the
choices of one example (about 8 KiB), so rows of thousands of values cannot be drawn element by
element; instead Hypothesis draws a small recipe per row (family, scale exponent, the family's
knobs such as the masked prefix length, and a 32-bit seed) and numpy fills the row from it
(:func:`~onlinesm.strategies.families.generate_row`). Shrinking therefore simplifies recipes:
fewer rows, a shorter length (towards ``min_len``), the first family listed, scale 1, seed 0,
the shortest masked prefix; it does not cut a long row value by value (onlinesm's own minimiser
does that on the failing row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from onlinesm.dtypes import FloatFormat

from ._validate import InvalidArgument, check_bool, check_dtype, check_families, check_int
from ._validate import check_int_range
from .families import (
    DEFAULT_FAMILIES,
    OPT_IN_FAMILIES,
    SCALED_FAMILIES,
    SOFTMAX_FAMILIES,
    RowRecipe,
    masked_run_candidates,
    preferred_min_length,
    scale_exponent_range,
)
from .lengths import MAX_LENGTH, row_lengths, tile_bounds

__all__ = [
    "SoftmaxCase",
    "softmax_rows",
    "softmax_cases",
    "row_recipes",
    "FAMILY_STRATEGIES",
    "gaussian_rows",
    "huge_max_rows",
    "huge_spread_rows",
    "below_sentinel_rows",
    "masked_prefix_rows",
    "masked_suffix_rows",
    "masked_scattered_rows",
    "fully_masked_rows",
    "one_finite_rows",
    "ties_rows",
    "tied_rows",
    "constant_rows",
    "monotone_rows",
    "tiny_diff_rows",
    "subnormal_rows",
    "nonfinite_rows",
]

_MAX_ROWS = 4096
_MAX_BYTES = 2**30  # one example may hold at most 1 GiB of rows


@dataclasses.dataclass(frozen=True, eq=False)
class SoftmaxCase:
    """A batch of softmax rows with the family and recipe of each row.

    ``x`` is 2-D (rows x length) of the dtype's numpy type; ``families[i]`` and ``recipes[i]``
    describe row i (``recipes[i].generate(dtype)`` rebuilds it bit for bit).
    """

    x: np.ndarray
    families: tuple[str, ...]
    dtype: str
    recipes: tuple[RowRecipe, ...] = ()

    def to_torch(self, device: Any = "cpu") -> Any:
        """``x`` as a torch tensor on ``device``, bits kept (imports torch)."""
        from onlinesm.dtypes import to_torch

        return to_torch(self.x, device)

    def __repr__(self) -> str:
        # Compact and reproducible: the recipes rebuild x; the values would drown the output.
        return (f"SoftmaxCase(dtype={self.dtype!r}, shape={self.x.shape}, "
                f"families={self.families!r}, recipes={self.recipes!r})")


def _draw_scale(draw: st.DrawFn, family: str, fmt: FloatFormat) -> float | None:
    if family == "tiny_diff":  # the magnitude the values crowd around: 16 .. max/4
        return float(2.0 ** draw(st.integers(4, int(np.frexp(fmt.max)[1]) - 2)))
    if family not in SCALED_FAMILIES:
        return None
    lo, hi = scale_exponent_range(fmt)
    # moderate first (shrinks to 2**0 = 1), else anywhere the dtype allows
    wide = draw(st.integers(0, 1))
    return float(2.0 ** draw(st.integers(lo, hi) if wide else st.integers(-4, 4)))


def _draw_params(draw: st.DrawFn, family: str, n: int,
                 fmt: FloatFormat) -> tuple[tuple[str, Any], ...]:
    """The family's knobs (see ``generate_row``), each shrinking to its simplest value.

    Only cached primitive strategies are drawn here: building strategies per draw (``builds``,
    ``flatmap``, lambdas) costs Hypothesis far more than numpy spends filling the row.
    """
    if family in ("masked_prefix", "masked_suffix"):
        cands = masked_run_candidates(n)
        if draw(st.integers(0, 1)):
            run = draw(st.integers(cands[0], cands[-1]))
        else:
            run = cands[draw(st.integers(0, len(cands) - 1))]
        return (("prefix" if family == "masked_prefix" else "suffix", run),)
    if family == "masked_scattered":
        return (("masked", draw(st.integers(min(1, n - 1), n - 1))),)
    if family == "one_finite":
        edges = tuple(p for p in (n - 1, 63, 64, 127, 128, 1023, 1024) if p < n)
        if draw(st.integers(0, 1)):
            return (("position", edges[draw(st.integers(0, len(edges) - 1))]),)
        return (("position", draw(st.integers(0, n - 1))),)
    if family == "ties":
        return (("count", draw(st.integers(min(n, 2), min(n, 8)))),)
    if family == "huge_max":
        body = ("gaussian", "near_max", "uniform")[draw(st.integers(0, 2))]
        return (("body", body), ("count", draw(st.integers(1, min(n, 4)))))
    if family == "huge_spread":
        top = int(np.frexp(fmt.max)[1]) - 3
        lo = 13 if fmt.name == "float64" else 10
        return (("spread", draw(st.integers(lo, max(lo, min(24, top))))),)
    if family == "tiny_diff":
        return (("ulps", draw(st.integers(1, 8))),)
    if family == "nonfinite":
        return (("infs", draw(st.integers(0, min(n, 3)))),
                ("nans", draw(st.integers(0, min(n, 3)))))
    return ()


def _draw_recipe(draw: st.DrawFn, family: str, n: int, fmt: FloatFormat) -> RowRecipe:
    scale = _draw_scale(draw, family, fmt)
    params = _draw_params(draw, family, n, fmt)
    seed = draw(st.integers(0, 2**32 - 1))
    return RowRecipe(family, n, seed, scale, params)


@st.composite
def _row_recipes(draw: st.DrawFn, family: str, n: int, fmt: FloatFormat) -> RowRecipe:
    return _draw_recipe(draw, family, n, fmt)


def row_recipes(family: str, length: int, dtype: Any = "float32") -> st.SearchStrategy[RowRecipe]:
    """Recipes for one row: the family's knobs, a scale and a 32-bit seed.

    >>> r = row_recipes("masked_prefix", 300).example()
    >>> r.family, r.length, len(r.generate("float32"))
    ('masked_prefix', 300, 300)

    Shrinks to seed 0, scale 1 and each knob's simplest value (shortest masked run, position 0).
    """
    fmt = check_dtype("dtype", dtype)
    if family not in SOFTMAX_FAMILIES:
        raise InvalidArgument(f"family={family!r} is not a softmax family; choose from: "
                              f"{', '.join(SOFTMAX_FAMILIES)}")
    n = check_int("length", length, min_value=1, max_value=MAX_LENGTH)
    return _row_recipes(family, n, fmt)


@st.composite
def _any_row_recipes(draw: st.DrawFn, families: tuple[str, ...], n: int,
                     fmt: FloatFormat) -> RowRecipe:
    family = families[draw(st.integers(0, len(families) - 1))]
    return _draw_recipe(draw, family, n, fmt)


@st.composite
def _softmax_cases(draw: st.DrawFn, fmt: FloatFormat, lengths: st.SearchStrategy[int],
                   min_rows: int, max_rows: int, families: tuple[str, ...]) -> SoftmaxCase:
    n = draw(lengths)
    # st.lists, not a drawn count: the shrinker can then delete any row, not only the last
    recipes = tuple(draw(st.lists(_any_row_recipes(families, n, fmt), min_size=min_rows,
                                  max_size=max_rows)))
    x = np.empty((len(recipes), n), dtype=fmt.numpy)
    for i, recipe in enumerate(recipes):
        x[i] = recipe.generate(fmt)
    return SoftmaxCase(x=x, families=tuple(r.family for r in recipes), dtype=fmt.name,
                       recipes=recipes)


def softmax_cases(
    *,
    dtype: Any = "float32",
    min_len: int = 1,
    max_len: int = 4096,
    min_rows: int = 1,
    max_rows: int = 8,
    families: Sequence[str] | None = None,
    allow_nonfinite: bool = False,
    len_multiple: int = 1,
) -> st.SearchStrategy[SoftmaxCase]:
    """Like :func:`softmax_rows`, but each example is a :class:`SoftmaxCase` that also says
    which family (and recipe) made each row: what check and report engines need to attribute a
    failure.

    >>> case = softmax_cases(dtype="bf16", families=["fully_masked"], max_rows=2).example()
    >>> case.families[0], case.x.dtype.name
    ('fully_masked', 'bfloat16')
    """
    fmt = check_dtype("dtype", dtype)
    check_int("min_len", min_len, min_value=1, max_value=MAX_LENGTH)
    check_int("max_len", max_len, min_value=1, max_value=MAX_LENGTH)
    check_int_range("min_len", min_len, "max_len", max_len)
    check_int("min_rows", min_rows, min_value=1, max_value=_MAX_ROWS)
    check_int("max_rows", max_rows, min_value=1, max_value=_MAX_ROWS)
    check_int_range("min_rows", min_rows, "max_rows", max_rows)
    check_int("len_multiple", len_multiple, min_value=1, max_value=MAX_LENGTH)
    allow_nonfinite = check_bool("allow_nonfinite", allow_nonfinite)
    default = DEFAULT_FAMILIES + (OPT_IN_FAMILIES if allow_nonfinite else ())
    fams = check_families("families", families, SOFTMAX_FAMILIES, default=default)
    if not allow_nonfinite and any(f in OPT_IN_FAMILIES for f in fams):
        raise InvalidArgument(
            f"families={list(fams)!r} includes 'nonfinite' but allow_nonfinite=False; pass "
            "allow_nonfinite=True to generate NaN / +inf entries"
        )
    if max_rows * max_len * fmt.numpy.itemsize > _MAX_BYTES:
        raise InvalidArgument(
            f"max_rows={max_rows} x max_len={max_len} of {fmt.name} is more than 1 GiB per "
            "example; lower max_rows or max_len"
        )
    # Families that need long rows to keep their promise (masked prefix > 64) get them.
    need = min(preferred_min_length(f) for f in fams)
    lengths = _lengths(max(min_len, min(need, max_len)), min_len, max_len, len_multiple)
    return _softmax_cases(fmt, lengths, min_rows, max_rows, fams)


def _lengths(preferred: int, min_len: int, max_len: int, m: int) -> st.SearchStrategy[int]:
    """Row lengths from ``preferred`` (or ``min_len`` when no multiple of ``m`` is that long)
    to ``max_len``, multiples of ``m``: ``m`` times a length drawn as any other, so they
    cluster at whole powers of two of tiles and one tile either side."""
    if m == 1:
        return row_lengths(min_len=preferred, max_len=max_len)
    lo, hi = tile_bounds(min_len, max_len, m)
    wanted = -(-preferred // m) * m  # preferred, rounded up to a whole tile
    lo = wanted if lo <= wanted <= hi else lo
    return row_lengths(min_len=lo // m, max_len=hi // m).map(lambda k: k * m)


def softmax_rows(
    *,
    dtype: Any = "float32",
    min_len: int = 1,
    max_len: int = 4096,
    min_rows: int = 1,
    max_rows: int = 8,
    families: Sequence[str] | None = None,
    allow_nonfinite: bool = False,
    len_multiple: int = 1,
) -> st.SearchStrategy[np.ndarray]:
    """2-D arrays of adversarial softmax rows: ``min_rows..max_rows`` rows of one length.

    The array has the dtype's numpy type (bf16 as ``ml_dtypes.bfloat16``) and every value is a
    value of that dtype. Each row comes from a family (``families=None``: all but the opt-in
    ``"nonfinite"``, which ``allow_nonfinite=True`` adds); lengths cluster at and around powers
    of two and tile sizes (±1), and reach 65,536 and beyond when ``max_len`` allows. When every
    selected family needs long rows (a masked prefix longer than 64 needs 66), shorter lengths
    are skipped if ``max_len`` allows. ``len_multiple=128``: every length a multiple of 128
    (a kernel that tiles rows by 128 and refuses the rest), clustered at whole powers of two of
    tiles and one tile either side.

    Why: ``randn`` rows never contain a masked tile, values below a -1e30 sentinel, a max that
    grows at every tile, or exps that mostly underflow; kernels break on exactly those.

    Example::

        from hypothesis import given
        from onlinesm.strategies import softmax_rows

        @given(softmax_rows(dtype="bf16", max_len=2048))
        def test_rows_sum_to_one(x):
            y = my_softmax(x)
            ...

    Shrinks towards one row of ``min_len`` from the first family listed, seed 0, scale 1.
    """
    return softmax_cases(dtype=dtype, min_len=min_len, max_len=max_len, min_rows=min_rows,
                         max_rows=max_rows, families=families, allow_nonfinite=allow_nonfinite,
                         len_multiple=len_multiple).map(lambda case: case.x)


def _family_strategy(family: str) -> Callable[..., st.SearchStrategy[np.ndarray]]:
    def strategy(*, dtype: Any = "float32", min_len: int = 1, max_len: int = 4096,
                 min_rows: int = 1, max_rows: int = 8,
                 len_multiple: int = 1) -> st.SearchStrategy[np.ndarray]:
        return softmax_rows(dtype=dtype, min_len=min_len, max_len=max_len, min_rows=min_rows,
                            max_rows=max_rows, families=[family],
                            allow_nonfinite=family in OPT_IN_FAMILIES, len_multiple=len_multiple)

    strategy.__name__ = strategy.__qualname__ = f"{family}_rows"
    strategy.__doc__ = (
        f"Batches of {family!r} rows: {SOFTMAX_FAMILIES[family]}.\n\n"
        f"Same as ``softmax_rows(families=[{family!r}], ...)``"
        + (" with ``allow_nonfinite=True``" if family in OPT_IN_FAMILIES else "")
        + f"; see :func:`softmax_rows`.\n\n    >>> {family}_rows(max_len=256).example().ndim\n"
        "    2\n"
    )
    return strategy


#: Family name -> its named strategy (``FAMILY_STRATEGIES["ties"] is ties_rows``).
FAMILY_STRATEGIES: dict[str, Callable[..., st.SearchStrategy[np.ndarray]]] = {
    f: _family_strategy(f) for f in SOFTMAX_FAMILIES
}

gaussian_rows = FAMILY_STRATEGIES["gaussian"]
huge_max_rows = FAMILY_STRATEGIES["huge_max"]
huge_spread_rows = FAMILY_STRATEGIES["huge_spread"]
below_sentinel_rows = FAMILY_STRATEGIES["below_sentinel"]
masked_prefix_rows = FAMILY_STRATEGIES["masked_prefix"]
masked_suffix_rows = FAMILY_STRATEGIES["masked_suffix"]
masked_scattered_rows = FAMILY_STRATEGIES["masked_scattered"]
fully_masked_rows = FAMILY_STRATEGIES["fully_masked"]
one_finite_rows = FAMILY_STRATEGIES["one_finite"]
ties_rows = FAMILY_STRATEGIES["ties"]
tied_rows = ties_rows  # alias: the plural-noun spelling
constant_rows = FAMILY_STRATEGIES["constant"]
monotone_rows = FAMILY_STRATEGIES["monotone"]
tiny_diff_rows = FAMILY_STRATEGIES["tiny_diff"]
subnormal_rows = FAMILY_STRATEGIES["subnormal"]
nonfinite_rows = FAMILY_STRATEGIES["nonfinite"]
