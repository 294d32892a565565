"""Adversarial Hypothesis strategies for softmax and attention kernels.

Import them into any project's Hypothesis tests; only hypothesis, numpy and ml_dtypes are
imported (never torch, triton or mpmath)::

    from hypothesis import given
    from onlinesm.strategies import softmax_rows, attention_inputs

    @given(softmax_rows(dtype="bf16", max_len=4096))
    def test_my_softmax(x):          # x: 2-D ml_dtypes.bfloat16 array, rows of one length
        ...

Contents:

- scalars: :func:`floats_of`, :func:`arrays_of`, :func:`edge_values` (dtype-exact, bf16 too);
- softmax rows: :func:`softmax_rows`, :func:`softmax_cases` (:class:`SoftmaxCase` with each
  row's family), one named strategy per family (:func:`masked_prefix_rows`, ...), and the
  numpy generator :func:`generate_row` with :data:`SOFTMAX_FAMILIES`;
- attention: :func:`attention_inputs` (:class:`AttentionCase`), the numpy generator
  :func:`generate_attention` with :data:`ATTENTION_FAMILIES`;
- lengths: :func:`row_lengths`, clustered at powers of two and tile sizes ± 1;
- the family registry (:mod:`.registry`): :data:`FAMILIES` (name, op, description, what it
  catches, generator, shape rule), and, for a *domain* (any object with the attributes of
  ``onlinesm.declarations.Domain``, or :func:`default_domain`): the explicit examples
  :func:`explicit_softmax_batches` / :func:`explicit_attention_cases`, the strategies
  :func:`softmax_strategy` / :func:`attention_strategy`, :func:`family_excluded` (why a
  family cannot be generated inside the domain) and :func:`family_shape`.

Every value drawn is exactly a value of the requested dtype (bf16 as ``ml_dtypes.bfloat16``).
"""

from __future__ import annotations

from . import softmax as _softmax
from ._validate import InvalidArgument
from .attention import (
    ALL_HEAD_DIMS,
    ATTENTION_FAMILIES,
    AttentionCase,
    attention_inputs,
    attention_strategy,
    generate_attention,
)
from .domain import LEGACY_DOMAIN, RECOMMENDED_DOMAIN, DomainSpec, default_domain, read_domain
from .families import (
    DEFAULT_FAMILIES,
    OPT_IN_FAMILIES,
    SENTINEL,
    SOFTMAX_FAMILIES,
    RowRecipe,
    check_row,
    generate_row,
)
from .lengths import TILE_SIZES, interesting_lengths, row_lengths
from .registry import (
    FAMILIES,
    REGISTRY,
    Family,
    explicit_attention_cases,
    explicit_softmax_batches,
    softmax_strategy,
)
from .scalars import arrays_of, edge_values, floats_of
from .shapes import SHAPE_RULES, ShapeRule, family_excluded, family_shape
from .softmax import (
    FAMILY_STRATEGIES,
    SoftmaxCase,
    below_sentinel_rows,
    constant_rows,
    fully_masked_rows,
    gaussian_rows,
    huge_max_rows,
    huge_spread_rows,
    masked_prefix_rows,
    masked_scattered_rows,
    masked_suffix_rows,
    monotone_rows,
    nonfinite_rows,
    one_finite_rows,
    row_recipes,
    softmax_cases,
    softmax_rows,
    subnormal_rows,
    tied_rows,
    ties_rows,
    tiny_diff_rows,
)

__all__ = [
    # scalars and arrays
    "floats_of",
    "arrays_of",
    "edge_values",
    # softmax
    *_softmax.__all__,
    "RowRecipe",
    "generate_row",
    "check_row",
    "SOFTMAX_FAMILIES",
    "DEFAULT_FAMILIES",
    "OPT_IN_FAMILIES",
    "SENTINEL",
    # attention
    "attention_inputs",
    "AttentionCase",
    "generate_attention",
    "ATTENTION_FAMILIES",
    "ALL_HEAD_DIMS",
    # lengths
    "row_lengths",
    "interesting_lengths",
    "TILE_SIZES",
    # the registry and the domain
    "FAMILIES",
    "REGISTRY",
    "Family",
    "explicit_softmax_batches",
    "explicit_attention_cases",
    "softmax_strategy",
    "attention_strategy",
    "family_excluded",
    "family_shape",
    "SHAPE_RULES",
    "ShapeRule",
    "DomainSpec",
    "default_domain",
    "read_domain",
    "RECOMMENDED_DOMAIN",
    "LEGACY_DOMAIN",
    # errors
    "InvalidArgument",
]
