"""Tests for onlinesm.strategies: exactness, family promises, reach, validation, light import."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument as HypothesisInvalidArgument

from onlinesm.dtypes import FORMATS, resolve
from onlinesm.strategies import (
    ATTENTION_FAMILIES,
    DEFAULT_FAMILIES,
    FAMILY_STRATEGIES,
    SOFTMAX_FAMILIES,
    InvalidArgument,
    arrays_of,
    attention_inputs,
    check_row,
    edge_values,
    floats_of,
    generate_attention,
    generate_row,
    masked_prefix_rows,
    row_lengths,
    softmax_cases,
    softmax_rows,
)

DTYPES = list(FORMATS)  # float64, float32, float16, bfloat16
FIND = settings(max_examples=3000, database=None, deadline=None,
                phases=[Phase.generate, Phase.shrink])  # no explain phase: slow, unused


class _Found(Exception):
    pass


def appears(strategy: st.SearchStrategy, *predicates, max_examples: int = 1000) -> None:  # type: ignore[type-arg, no-untyped-def]
    """Assert that, for each predicate, some draw of ``strategy`` satisfies it.

    Generation only, no shrinking (much cheaper than ``find`` when only existence matters),
    derandomized so the outcome is deterministic; stops once every predicate has been met.
    """
    missing = list(predicates)

    @settings(max_examples=max_examples, database=None, deadline=None, derandomize=True,
              phases=[Phase.generate])
    @given(strategy)
    def search(value) -> None:  # type: ignore[no-untyped-def]
        missing[:] = [p for p in missing if not p(value)]
        if not missing:
            raise _Found

    try:
        search()
    except _Found:
        return
    raise AssertionError(f"no example in {max_examples} satisfied {missing}")


def roundtrips(x: np.ndarray, dtype: str) -> bool:
    """x (of dtype) survives float64 -> dtype bit for bit: it is exactly a value of dtype."""
    fmt = resolve(dtype)
    back = np.asarray(x).astype(np.float64).astype(fmt.numpy)
    return np.array_equal(np.asarray(x).view(fmt.bits_dtype), back.view(fmt.bits_dtype))


# ------------------------------------------------------------------------------------------
# light import


def test_import_does_not_pull_heavy_modules() -> None:
    code = ("import sys, onlinesm.strategies; "
            "print(sorted(m for m in ('torch', 'triton', 'mpmath') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# ------------------------------------------------------------------------------------------
# scalars


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_floats_of_is_exact(dtype: str, data: st.DataObject) -> None:
    fmt = resolve(dtype)
    v = data.draw(floats_of(dtype))
    assert math.isfinite(v)
    assert float(np.asarray(v, dtype=np.float64).astype(fmt.numpy)) == v
    assert abs(v) <= fmt.max


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_floats_of_respects_bounds_and_subnormal_flag(dtype: str, data: st.DataObject) -> None:
    fmt = resolve(dtype)
    lo = -1e30 if fmt.max > 1e31 else -60000.0
    v = data.draw(floats_of(dtype, min_value=lo, max_value=0.3, allow_subnormal=False))
    assert lo <= v <= 0.3
    assert v == 0 or abs(v) >= fmt.tiny
    assert float(np.asarray(v).astype(fmt.numpy)) == v


@pytest.mark.parametrize("dtype", DTYPES)
def test_format_edges_are_reachable(dtype: str) -> None:
    fmt = resolve(dtype)
    edges = {fmt.max, fmt.tiny, fmt.smallest_subnormal, 1 + fmt.eps, 1 - fmt.eps / 2,
             2 - fmt.eps}
    assert edges <= set(edge_values(dtype))
    appears(floats_of(dtype), *(lambda v, e=edge: v == e for edge in edges))


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values_only_on_request(dtype: str) -> None:
    appears(floats_of(dtype, allow_infinity=True), math.isinf)
    appears(floats_of(dtype, allow_nan=True), math.isnan)


@settings(max_examples=50, deadline=None)
@given(arrays_of("bfloat16", (3, 4)))
def test_arrays_of_bf16(a: np.ndarray) -> None:
    assert a.shape == (3, 4) and a.dtype == resolve("bf16").numpy
    assert roundtrips(a, "bfloat16")


def test_floats_shrink_to_zero() -> None:
    assert find(floats_of("bf16"), lambda v: True, settings=FIND) == 0.0


# ------------------------------------------------------------------------------------------
# families, numpy side


def assert_promise(family: str, row: np.ndarray, dtype: str) -> None:
    """The family's promise, written out independently of check_row."""
    fmt = resolve(dtype)
    x = row.astype(np.float64)
    n = len(x)
    assert row.dtype == fmt.numpy and roundtrips(row, dtype)
    finite, neginf = np.isfinite(x), np.isneginf(x)
    if family != "nonfinite":
        assert not np.isnan(x).any() and not np.isposinf(x).any()
    if family in ("gaussian", "huge_max", "huge_spread", "below_sentinel", "ties", "constant",
                  "monotone", "tiny_diff", "subnormal"):
        assert finite.all()
    if family == "huge_max":
        assert x.max() > fmt.max / 4
    elif family == "huge_spread" and n >= 3:
        gap = 745 if dtype == "float64" else 103
        assert (x < x.max() - gap).sum() > n / 2
    elif family == "below_sentinel":
        assert (x < -1e30).all() if fmt.max > 1e31 else (x <= -fmt.max / 2).all()
    elif family == "masked_prefix":
        run = int(np.argmin(neginf)) if not neginf.all() else n
        assert run >= min(65, n - 1) and finite[run:].all() and run < max(n, 2)
    elif family == "masked_suffix":
        run = int(np.argmin(neginf[::-1])) if not neginf.all() else n
        assert run >= min(65, n - 1) and finite[: n - run].all()
    elif family == "masked_scattered":
        assert (finite | neginf).all() and finite.any()
        assert n < 2 or neginf.any()
    elif family == "fully_masked":
        assert neginf.all()
    elif family == "one_finite":
        assert finite.sum() == 1 and (finite | neginf).all()
    elif family == "ties" and n >= 2:
        assert (x == x.max()).sum() >= 2
    elif family == "constant":
        assert (x == x[0]).all()
    elif family == "monotone" and n <= 60000:
        assert (np.diff(x) > 0).all()
    elif family == "tiny_diff":
        assert (np.abs(x) >= 16).all()
        if n >= 2:
            assert x.max() > x.min()
            assert x.max() - x.min() <= 16 * float(np.max(np.abs(x))) * fmt.eps
    elif family == "subnormal":
        assert (np.abs(x) <= 2 * fmt.tiny).all()
        assert ((np.abs(x) < fmt.tiny) & (x != 0)).any()
    elif family == "nonfinite":
        assert np.isnan(x).any() or np.isposinf(x).any()


@pytest.mark.parametrize("family", list(SOFTMAX_FAMILIES))
def test_generate_row_keeps_each_family_promise(family: str) -> None:
    for dtype in DTYPES:
        for n in (1, 2, 3, 64, 65, 66, 129, 1025):
            for seed in range(4):
                row = generate_row(family, n, dtype, np.random.default_rng(seed))
                assert row.shape == (n,)
                assert_promise(family, row, dtype)
                assert check_row(family, row, dtype) == []


def test_generate_row_is_deterministic_and_takes_params() -> None:
    a = generate_row("masked_prefix", 300, "bf16", np.random.default_rng(7), prefix=129)
    b = generate_row("masked_prefix", 300, "bf16", np.random.default_rng(7), prefix=129)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert np.isneginf(a[:129].astype(float)).all() and np.isfinite(a[129:].astype(float)).all()
    with pytest.raises(InvalidArgument, match="prefix=300"):
        generate_row("masked_prefix", 300, "bf16", np.random.default_rng(0), prefix=300)
    with pytest.raises(InvalidArgument, match="unexpected parameter"):
        generate_row("gaussian", 10, "bf16", np.random.default_rng(0), prefix=3)
    with pytest.raises(ValueError, match="family='nope'"):  # also a ValueError
        generate_row("nope", 10, "bf16", np.random.default_rng(0))


def test_check_row_detects_broken_promises() -> None:
    assert check_row("monotone", np.array([1.0, 1.0], np.float32), "float32")
    assert check_row("below_sentinel", np.array([-1e29], np.float32), "float32")
    assert check_row("fully_masked", np.array([-np.inf, 0.0]), "float64")


def test_monotone_rows_at_float64s_largest_scales() -> None:
    # The largest scale float64 rows take (the strategies draw it too): the row's span (the
    # scale times up to 64) would overflow to inf, and the spread evenly over every finite
    # float64 passes int64's range (2 * its largest ordinal); the row still grows at every
    # entry and stays finite.
    rng = np.random.default_rng(0)
    hi = 1019  # the documented limit (README, generate_row): the top of the scales drawn
    for n in (1, 2, 3, 300):
        for scale in (1e300, 2.0**hi):
            row = generate_row("monotone", n, "float64", rng, scale=scale)
            assert np.isfinite(row).all() and (np.diff(row) > 0).all(), (n, scale, row[:4])
    # past it, rows of any family and dtype would overflow float64, in which they are built:
    # one line that names the limit
    for family, dtype in itertools.product(("gaussian", "monotone", "constant"),
                                           ("float64", "float16")):
        with pytest.raises(InvalidArgument,
                           match=rf"scale=1.7e\+308 is too large: at most 2\*\*{hi} "):
            generate_row(family, 8, dtype, rng, scale=1.7e308)
    # tiny_diff's scale is the magnitude its values crowd around: up to float64's max / 4
    assert np.isfinite(generate_row("tiny_diff", 8, "float64", rng, scale=2.0**1022)).all()
    # a narrower dtype clips a large scale's values to its max
    assert np.isfinite(generate_row("gaussian", 8, "float16", rng, scale=2.0**hi)).all()


def test_long_rows() -> None:
    rng = np.random.default_rng(0)
    for family in ("monotone", "huge_spread", "masked_prefix"):
        for dtype in ("float16", "bfloat16"):
            row = generate_row(family, 70000, dtype, rng)
            assert_promise(family, row, dtype)
            if family == "monotone":  # more than fp16 has values: still grows every 64
                m = np.maximum.accumulate(row.astype(float))
                assert (np.diff(m[::64]) > 0).all()


# ------------------------------------------------------------------------------------------
# Hypothesis strategies for softmax


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_softmax_cases_rows_keep_their_promise(dtype: str, data: st.DataObject) -> None:
    case = data.draw(softmax_cases(dtype=dtype, max_len=1100, allow_nonfinite=True))
    fmt = resolve(dtype)
    assert case.x.ndim == 2 and case.x.dtype == fmt.numpy and case.dtype == fmt.name
    assert len(case.families) == len(case.recipes) == case.x.shape[0] <= 8
    assert 1 <= case.x.shape[1] <= 1100
    for row, family, recipe in zip(case.x, case.families, case.recipes):
        assert_promise(family, row, dtype)
        again = recipe.generate(dtype)
        assert np.array_equal(again.view(fmt.bits_dtype), row.view(fmt.bits_dtype))


@pytest.mark.parametrize("family", list(SOFTMAX_FAMILIES))
def test_named_family_strategies(family: str) -> None:
    strategy = FAMILY_STRATEGIES[family]
    assert strategy.__name__ == f"{family}_rows"

    @settings(max_examples=15, deadline=None)
    @given(strategy(dtype="bf16", max_len=300, max_rows=3))
    def check(x: np.ndarray) -> None:
        for row in x:
            assert_promise(family, row, "bfloat16")
        if family in ("masked_prefix", "masked_suffix"):
            assert x.shape[1] >= 66  # long enough for a run longer than a tile

    check()


def test_families_argument_selects_a_subset() -> None:
    @settings(max_examples=30, deadline=None)
    @given(softmax_cases(families=["ties", "constant"], max_len=100))
    def check(case) -> None:  # type: ignore[no-untyped-def]
        assert set(case.families) <= {"ties", "constant"}

    check()


@pytest.mark.parametrize("dtype", DTYPES)
def test_features_appear(dtype: str) -> None:
    fmt = resolve(dtype)
    cases = softmax_cases(dtype=dtype, max_len=1100)
    appears(cases, lambda c: np.isneginf(c.x.astype(float)).all(axis=1).any())
    appears(cases, lambda c: (c.x.astype(float) > fmt.max / 2).any())
    if fmt.max > 1e31:
        appears(cases, lambda c: (c.x.astype(float) < -1e30).all(axis=1).any())

    def long_prefix(c) -> bool:  # type: ignore[no-untyped-def]
        neginf = np.isneginf(c.x.astype(float))
        return c.x.shape[1] > 128 and bool(neginf[:, :128].all(axis=1).any())

    appears(cases, long_prefix)


def test_bf16_max_above_1e38_appears() -> None:
    appears(softmax_rows(dtype="bf16"), lambda x: x.astype(float).max() > 1e38)


@pytest.mark.parametrize("n", [64, 65, 127, 128, 129, 1023, 1024, 1025, 4096])
def test_lengths_hit_tile_boundaries(n: int) -> None:
    appears(row_lengths(max_len=4096), lambda m: m == n)


def test_whole_tiles_only_and_one_tile_past_a_power_of_two() -> None:
    rows = masked_prefix_rows(dtype="bf16", max_len=4096, len_multiple=128)

    @settings(max_examples=60, database=None, deadline=None)
    @given(rows)
    def every_length_is_whole_tiles(x: np.ndarray) -> None:
        assert x.shape[1] % 128 == 0 and 128 <= x.shape[1] <= 4096

    every_length_is_whole_tiles()
    appears(softmax_rows(max_len=4096, len_multiple=128), lambda x: x.shape[1] == 1152,
            lambda x: x.shape[1] == 128, lambda x: x.shape[1] == 4096)
    with pytest.raises(InvalidArgument, match="len_multiple=128: no row length in min_len=1..max_len=100"):
        softmax_rows(max_len=100, len_multiple=128).example()


def test_long_rows_reachable_and_within_hypothesis_limits() -> None:
    appears(softmax_rows(max_len=70000, max_rows=2), lambda x: x.shape[1] >= 65536)

    # health checks on: no data_too_large / too_slow / Overrun for 8 rows of up to 65,536
    @settings(max_examples=12, deadline=None, suppress_health_check=(), database=None)
    @given(softmax_rows(dtype="bf16", max_len=65536, max_rows=8))
    def check(x: np.ndarray) -> None:
        assert x.shape[1] <= 65536

    check()


def test_planted_failure_shrinks_to_a_short_row() -> None:
    # "no row is fully masked" is false; the minimal batch is one row of length one
    c = find(softmax_cases(max_len=300, max_rows=3), lambda c: np.isneginf(c.x).all(axis=1).any(),
             settings=FIND)
    assert c.x.shape == (1, 1)
    # "no masked prefix longer than a tile" is false; minimal: one row just long enough
    x = find(masked_prefix_rows(max_len=300, max_rows=3), lambda x: np.isneginf(x[:, :65]).all(),
             settings=FIND)
    assert x.shape == (1, 66)


# ------------------------------------------------------------------------------------------
# attention


def assert_attention_promise(case, dtype: str, head_dims) -> None:  # type: ignore[no-untyped-def]
    fmt = resolve(dtype)
    b, h, sq, d = case.q.shape
    bk, hkv, sk, dk = case.k.shape
    assert case.k.shape == case.v.shape and (bk, dk) == (b, d) and h % hkv == 0
    assert d in head_dims and case.dtype == fmt.name
    for t in (case.q, case.k, case.v):
        assert t.dtype == fmt.numpy and np.isfinite(t.astype(float)).all()
    assert not (case.causal and case.mask is not None)
    mask = None
    if case.mask is not None:
        assert case.mask.dtype == np.bool_ and case.mask.ndim == 4
        mask = np.broadcast_to(case.mask, (b, h, sq, sk))
    f = case.family
    if f == "key_padding":
        assert mask is not None and (~mask.any(axis=-1)).any()
    elif f == "masked_leading_tiles":
        assert mask is not None and sk >= 65
        hidden = ~mask[..., :64].any(axis=-1) & mask.any(axis=-1)
        assert hidden.any()
    elif f == "causal":
        assert case.causal
    elif f == "decode":
        assert sq == 1
    elif f == "one_key":
        assert sk == 1
    elif f == "gqa":
        assert hkv < h
    elif f == "outliers":
        assert np.abs(case.q.astype(float)).max() > 5 and np.abs(case.k.astype(float)).max() > 5
    elif f == "huge_logits":
        assert np.abs(case.q.astype(float)).max() > 5
    elif f == "huge_v_cancel":
        assert np.abs(case.v.astype(float)).max() > 9000
    if f in ("gaussian", "outliers", "huge_logits", "gqa", "decode", "one_key") and mask is not None:
        assert mask.any(axis=-1).all()  # random masks leave every query a key


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_attention_inputs(dtype: str, data: st.DataObject) -> None:
    dims = (16, 24, 64, 80)
    case = data.draw(attention_inputs(dtype=dtype, max_heads=4, max_seq_k=200, head_dims=dims,
                                      allow_gqa=True))
    assert_attention_promise(case, dtype, dims)
    if case.family == "causal":
        assert case.q.shape[2] != case.k.shape[2]


def test_every_attention_family_appears() -> None:
    strategy = attention_inputs(max_heads=4, max_seq_k=100, allow_gqa=True)
    appears(strategy, *(lambda c, f=family: c.family == f for family in ATTENTION_FAMILIES))


def test_the_planted_outliers_cannot_cancel():
    # The family's guaranteed outlier in k is planted on the one key of a head (seq_k = 1);
    # seed 1 plants it on an entry that already held an outlier of the other sign (-10.26):
    # added, the two cancelled to -0.05 and k had no outlier left.
    case = generate_attention("outliers", "float16", np.random.default_rng(1), batch=2,
                              heads=4, seq_q=52, seq_k=1, head_dim=24, causal=True)
    assert np.abs(case.k.astype(float)).max() >= 10
    assert np.abs(case.q.astype(float)).max() >= 10


def test_attention_same_seq_and_generate() -> None:
    @settings(max_examples=30, deadline=None)
    @given(attention_inputs(same_seq=True, families=["causal", "gaussian", "one_key"]))
    def check(case) -> None:  # type: ignore[no-untyped-def]
        assert case.q.shape[2] == case.k.shape[2]

    check()
    rng = np.random.default_rng(3)
    case = generate_attention("gqa", "bf16", rng, batch=1, heads=4, seq_q=5, seq_k=7,
                              head_dim=24)
    assert case.k.shape[1] in (1, 2)
    with pytest.raises(InvalidArgument, match="seq_q=4"):
        generate_attention("decode", "bf16", rng, batch=1, heads=1, seq_q=4, seq_k=9,
                           head_dim=16)


# ------------------------------------------------------------------------------------------
# eager validation


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: softmax_rows(max_len=0), r"max_len=0 must be at least 1"),
        (lambda: softmax_rows(min_len=10, max_len=5), r"min_len=10 is greater than max_len=5"),
        (lambda: softmax_rows(max_rows=2.0), r"max_rows=2.0 must be an int.*max_rows=2"),
        (lambda: softmax_rows(dtype="int8"), r"dtype='int8'.*bfloat16"),
        (lambda: softmax_rows(families="ties"), r"families='ties'.*families=\['ties'\]"),
        (lambda: softmax_rows(families=["nope"]), r"'nope', which is not a family"),
        (lambda: softmax_rows(families=[]), r"families=\[\] is empty"),
        (lambda: softmax_rows(families=["nonfinite"]), r"allow_nonfinite=True"),
        (lambda: softmax_rows(allow_nonfinite=1), r"allow_nonfinite=1 must be a bool"),
        (lambda: floats_of("bf16", min_value=2, max_value=1), r"widen the range"),
        (lambda: floats_of("fp32", min_value=float("nan")), r"min_value=nan"),
        (lambda: attention_inputs(families=["masked_leading_tiles"]),
         r"needs Sk >= 65.*raise max_seq_k to 65"),
        (lambda: attention_inputs(families=["gqa"]), r"allow_gqa=True"),
        (lambda: attention_inputs(head_dims=()), r"head_dims=\(\)"),
        (lambda: attention_inputs(head_dims=(0,)), r"head_dims\[0\]=0"),
        (lambda: attention_inputs(same_seq=True, families=["decode"]), r"same_seq=False"),
    ],
)
def test_arguments_are_validated_eagerly(build, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HypothesisInvalidArgument, match=match):
        build()  # at construction: no draw needed


def test_default_families_exclude_nonfinite() -> None:
    assert "nonfinite" not in DEFAULT_FAMILIES
    assert set(DEFAULT_FAMILIES) | {"nonfinite"} == set(SOFTMAX_FAMILIES)
