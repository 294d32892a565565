"""The family registry and the domain: every draw and every explicit case lies inside the
domain, a family that cannot be generated is reported with a reason, shapes come from one table."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from onlinesm.strategies import (
    ATTENTION_FAMILIES,
    FAMILIES,
    SOFTMAX_FAMILIES,
    InvalidArgument,
    attention_strategy,
    default_domain,
    explicit_attention_cases,
    explicit_softmax_batches,
    family_excluded,
    family_shape,
    generate_attention,
    read_domain,
    softmax_strategy,
)

#: name -> domain overrides: the domains every draw is checked against
DOMAINS: dict[str, dict[str, Any]] = {
    "default": {},
    "multiple64": dict(seq_multiple=64, max_seq_q=128),
    "same_seq": dict(same_seq=True),
    "no_mask": dict(allow_mask=False),
    "no_causal_no_mask": dict(allow_mask=False, allow_causal=False),
    "min_lengths": dict(min_seq_q=8, min_seq_k=32, min_len=100, max_len=3000),
    "bf16_only": dict(dtypes=("bfloat16",), head_dims=(128,)),
    "gqa_same_seq_multiple16": dict(allow_gqa=True, same_seq=True, seq_multiple=16,
                                    max_seq_q=128, max_seq_k=128),
    "small": dict(max_seq_q=8, max_seq_k=8, max_len=50, max_rows=3, max_batch=1, max_heads=1),
    "rows_of_128": dict(len_multiple=128, min_len=100, max_len=3000),
}


def assert_attention_inside(case: Any, d: Any) -> None:
    b, h, sq, dim = case.q.shape
    bk, hkv, sk, dk = case.k.shape
    where = repr(case)
    assert case.dtype in d.dtypes or len(d.dtypes) > 0, where
    assert case.v.shape == case.k.shape and bk == b and dk == dim, where
    assert 1 <= b <= d.max_batch and 1 <= h <= d.max_heads, where
    assert h % hkv == 0 and (hkv == h or d.allow_gqa), where
    assert dim in d.head_dims, where
    assert d.min_seq_q <= sq <= d.max_seq_q and sq % d.seq_multiple == 0, where
    assert d.min_seq_k <= sk <= d.max_seq_k and sk % d.seq_multiple == 0, where
    if d.same_seq:
        assert sq == sk, where
    if not d.allow_mask:
        assert case.mask is None, where
    if not d.allow_causal:
        assert not case.causal, where
    assert not (case.causal and case.mask is not None), where
    if d.families is not None:
        assert case.family in d.families, where


def assert_softmax_inside(case: Any, d: Any) -> None:
    rows, n = case.x.shape
    assert d.min_len <= n <= d.max_len and n % d.len_multiple == 0, case
    assert 1 <= rows <= d.max_rows, case
    if not d.allow_nonfinite:
        assert not np.isnan(case.x.astype(np.float64)).any(), case


@pytest.mark.parametrize("name", list(DOMAINS))
@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_attention_draw_lies_inside_the_domain(name: str, data: st.DataObject) -> None:
    d = default_domain(**DOMAINS[name])
    dtype = data.draw(st.sampled_from(d.dtypes))
    case = data.draw(attention_strategy(dtype, d))
    assert case.dtype == dtype
    assert_attention_inside(case, d)


@pytest.mark.parametrize("name", list(DOMAINS))
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_softmax_draw_lies_inside_the_domain(name: str, data: st.DataObject) -> None:
    d = default_domain(**DOMAINS[name])
    case = data.draw(softmax_strategy(data.draw(st.sampled_from(d.dtypes)), d))
    assert_softmax_inside(case, d)


@pytest.mark.parametrize("name", list(DOMAINS))
def test_explicit_cases_lie_inside_the_domain(name: str) -> None:
    d = default_domain(**DOMAINS[name])
    for dtype in d.dtypes:
        cases = explicit_attention_cases(dtype, d)
        for case in cases:
            assert_attention_inside(case, d)
        admitted = {f for f in ATTENTION_FAMILIES if family_excluded(f, d) is None}
        assert {c.family for c in cases} == admitted  # one case per admitted family, no other
        for batch in explicit_softmax_batches(dtype, d):
            assert_softmax_inside(batch, d)


def test_the_same_seq_leading_tiles_keep_sq_equal_sk() -> None:
    """masked_leading_tiles under same_seq used to draw Sq = 64 with Sk >= 65."""
    d = default_domain(same_seq=True, max_seq_q=64, max_seq_k=300)
    assert family_excluded("masked_leading_tiles", d) is not None
    d = default_domain(same_seq=True, max_seq_q=100, max_seq_k=300,
                       families=("masked_leading_tiles",))

    @settings(max_examples=30, deadline=None, database=None)
    @given(attention_strategy("float32", d))
    def check(case: Any) -> None:
        assert case.q.shape[2] == case.k.shape[2] >= 65
        assert case.k.shape[2] <= 100

    check()


@pytest.mark.parametrize(("family", "overrides", "reason"), [
    ("decode", dict(same_seq=True), r"decode needs Sq = 1 < Sk.*same_seq=True"),
    ("decode", dict(seq_multiple=64), r"decode needs Sq=1.*seq_multiple=64"),
    ("decode", dict(min_seq_q=2), r"decode needs Sq=1.*min_seq_q=2"),
    ("one_key", dict(min_seq_k=4), r"one_key needs Sk=1.*min_seq_k=4"),
    ("masked_leading_tiles", dict(max_seq_k=64), r"needs Sk >= 65.*raise max_seq_k"),
    ("masked_leading_tiles", dict(allow_mask=False), r"needs a mask.*allow_mask=False"),
    ("key_padding", dict(allow_mask=False), r"allow_mask=False"),
    ("causal", dict(allow_causal=False), r"allow_causal=False"),
    ("gqa", dict(), r"allow_gqa=False"),
    ("gqa", dict(allow_gqa=True, max_heads=1), r"max_heads=1"),
    ("gaussian", dict(families=("decode",)), r"not among the domain's families"),
    ("nonfinite", dict(), r"allow_nonfinite=False"),
])
def test_excluded_families_say_why(family: str, overrides: dict[str, Any], reason: str) -> None:
    d = default_domain(**overrides)
    why = family_excluded(family, d)
    assert why is not None
    assert pytest.importorskip("re").search(reason, why), why
    if family in ATTENTION_FAMILIES:
        assert family_shape(family, d, 64) is None
        assert family_shape(family, d, np.random.default_rng(0)) is None
        if d.families is None:  # named explicitly: an error with the reason, not a substitute
            with pytest.raises(InvalidArgument, match="but"):
                attention_strategy("float32", default_domain(**overrides, families=(family,)))
        assert family not in {c.family for c in explicit_attention_cases("float32", d)}


def test_every_family_is_in_the_registry_once() -> None:
    assert set(ATTENTION_FAMILIES) | set(SOFTMAX_FAMILIES) == set(FAMILIES)
    for name, fam in FAMILIES.items():
        assert fam.catches and fam.description and callable(fam.generator)
        assert (fam.rule is not None) == (fam.op == "attention")


@pytest.mark.parametrize("name", list(DOMAINS))
def test_family_shape_fits_the_domain_and_the_generator(name: str) -> None:
    d = default_domain(**DOMAINS[name])
    rng = np.random.default_rng(0)
    for fam in ATTENTION_FAMILIES:
        for size_or_rng in (1, 16, 40, 80, 256, rng, rng, rng):
            shape = family_shape(fam, d, size_or_rng)
            if shape is None:
                continue
            case = generate_attention(fam, "float32", np.random.default_rng(1), **shape,
                                      masked=None if FAMILIES[fam].rule.mask != "maybe" else False)
            assert_attention_inside(case, d)


def test_duck_typed_domains() -> None:
    from onlinesm.declarations import Domain

    fields = dict(default_domain().__dict__)
    ns = types.SimpleNamespace(**fields)
    assert read_domain(ns) == read_domain(Domain(**fields)) == default_domain()
    with pytest.raises(InvalidArgument, match=r"lacks the attribute\(s\) \['seq_multiple'\]"):
        read_domain(types.SimpleNamespace(**{k: v for k, v in fields.items() if k != "seq_multiple"}))
    with pytest.raises(InvalidArgument, match="default_domain"):
        default_domain(max_seqk=3)
    # a field added since the first release reads as its default where an object lacks it
    older = types.SimpleNamespace(**{k: v for k, v in fields.items() if k != "len_multiple"})
    assert read_domain(older).len_multiple == 1


def test_rows_a_multiple_of_a_tile_keep_the_tile_lengths_one_tile_past() -> None:
    d = default_domain(len_multiple=128)
    widths = [b.x.shape[1] for b in explicit_softmax_batches("float32", d)]
    # 130 -> 256, 1000 and 1023 -> 1024; one past 1024, 2048, 4096 -> one tile past; 8193 -> 8192
    assert sorted(set(widths)) == [256, 1024, 1152, 2176, 4224, 8192]
    with pytest.raises(InvalidArgument, match=r"len_multiple=128: no row length in min_len=1"
                                              r"\.\.max_len=100 .* raise max_len to 128"):
        default_domain(len_multiple=128, max_len=100)


def _first_visible(mask: np.ndarray) -> set[int]:
    m = np.broadcast_to(mask, mask.shape)
    return {int(np.argmax(row)) for row in m.reshape(-1, m.shape[-1]) if row.any()}


def test_leading_runs_of_whole_tiles_are_reachable_by_default() -> None:
    """Runs of 64, 128 and 256 keys ± 1 in the explicit cases, and drawn at random."""
    d = default_domain()
    tile_cases = [c for c in explicit_attention_cases("float32", d)
                  if c.family == "masked_leading_tiles"]
    runs = set().union(*(_first_visible(c.mask) for c in tile_cases))
    assert {63, 64, 65, 127, 128, 129, 255, 256, 257} <= runs
    seen: set[int] = set()
    strategy = attention_strategy("float32", default_domain(families=("masked_leading_tiles",)))

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate])
    @given(strategy)
    def draw(case: Any) -> None:
        seen.update(_first_visible(case.mask))

    draw()
    assert {64, 128, 256} <= seen, sorted(seen)


def test_explicit_cases_reach_real_tile_sizes_by_default() -> None:
    d = default_domain()
    cases = explicit_attention_cases("bfloat16", d)
    assert max(c.k.shape[2] for c in cases) == 300
    assert max(c.q.shape[3] for c in cases) == 128
    widths = {b.x.shape[1] for b in explicit_softmax_batches("float32", d)}
    assert {1023, 1025, 2049, 4097, 8193} <= widths
    prefixes = {r for b in explicit_softmax_batches("float32", d)
                for r, fam in zip(b.x, b.families) if fam == "masked_prefix"
                for r in [int(np.argmax(np.isfinite(r.astype(np.float64))))]}
    assert {1024, 2048, 4096, 8192} <= prefixes
