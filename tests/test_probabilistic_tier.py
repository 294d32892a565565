"""The probabilistic tier: the summation terms as λ(δ)·sqrt(n)·u (Higham & Mary) instead of n·u."""

from __future__ import annotations

import numpy as np
import pytest

import numpy_kernels as nk
from onlinesm.declarations import Numerics
from onlinesm.strategies import generate_row
from onlinesm.tolerance import attention_bound, compare, gamma, gamma_probabilistic, softmax_bound

PROB = Numerics(tier="probabilistic")
N = 8192
FAMILIES = ("gaussian", "monotone", "ties", "huge_spread", "tiny_diff")


def _rows(dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([generate_row(f, N, dtype, rng, scale=2.0 if f != "tiny_diff" else None)
                     for f in FAMILIES])


def _dominated_row(extra: float, seed: int = 0) -> np.ndarray:
    """A long row whose max (first) carries all but ``extra`` of the mass: the rest, each far
    below half a bf16 ulp of the running sum, stagnates in a bf16 accumulator."""
    rng = np.random.default_rng(seed)
    body = rng.normal(0.0, 1.0, N - 1)
    body -= np.log(np.exp(body).sum() / extra)
    return np.concatenate([[0.0], body]).astype(np.float32)[None]


def test_gamma_probabilistic_never_exceeds_gamma() -> None:
    k = np.arange(0, 100_000, 7)
    for u in (2.0**-24, 2.0**-8, 2.0**-11):
        assert (gamma_probabilistic(k, u) <= gamma(k, u)).all()
    assert float(gamma_probabilistic(N - 1, 2.0**-24)) < float(gamma(N - 1, 2.0**-24)) / 10


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_probabilistic_bound_is_below_the_worst_case(dtype: str) -> None:
    x = _rows(dtype)
    bw, bp = softmax_bound(x), softmax_bound(x, numerics=PROB)
    assert (bp.abs <= bw.abs).all()
    if dtype == "float32":  # the sum term dominates long fp32 rows: strictly tighter there
        big = bw.exact > 1e-3
        assert (bp.abs[big] < bw.abs[big]).all()
        live = bw.terms["sum"] > 0
        assert (bp.terms["sum"][live] < bw.terms["sum"][live] / 10).all()
    short = np.zeros((1, 4), np.float32)  # short rows: λ·sqrt(n) > n, the worst case stays
    assert np.array_equal(softmax_bound(short, numerics=PROB).abs, softmax_bound(short).abs)


def test_attention_probabilistic_bound_is_below_the_worst_case() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 4, 64)).astype(np.float32)
    kv = rng.standard_normal((1, 2, 2048, 64)).astype(np.float32)
    (ow, lw), (op, lp) = attention_bound(q, kv, kv), attention_bound(q, kv, kv, numerics=PROB)
    assert (op.abs <= ow.abs).all() and (lp.abs <= lw.abs).all()
    assert (op.abs < ow.abs).all() and (op.terms["pv"] < ow.terms["pv"] / 5).all()
    assert "probabilistic bound (δ=1e-6)" in op.what and "probabilistic" not in ow.what


@pytest.mark.parametrize("kernel", [nk.softmax_fast_exp, nk.softmax_np32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_correct_kernels_pass_the_probabilistic_tier(kernel, dtype: str) -> None:
    for seed in (0, 1):
        x = _rows(dtype, seed)
        b = softmax_bound(x, numerics=PROB)
        assert compare(kernel(x), b.exact, b).ok


def test_bf16_accumulation_declared_as_bf16_passes() -> None:
    x = _rows("bfloat16")
    b = softmax_bound(x, numerics=Numerics(accumulate="bfloat16", tier="probabilistic"))
    assert compare(nk.bug_bf16_sum(x), b.exact, b).ok


def test_bf16_denominator_fails_only_the_probabilistic_tier() -> None:
    x = _dominated_row(2e-4)
    y = nk.bug_bf16_sum(x)
    bw, bp = softmax_bound(x), softmax_bound(x, numerics=PROB)
    cw, cp = compare(y, bw.exact, bw), compare(y, bp.exact, bp)
    assert cw.ok and not cp.ok  # the worst case lets it through; the probabilistic tier does not
    assert cp.max_bound_use > 5 * cw.max_bound_use
    assert "probabilistic bound (δ=1e-6)" in cp.message(inputs=x)
    assert "probabilistic" not in cw.message(inputs=x)
    # the correct kernels stay well inside it on the same row
    for kernel in (nk.softmax_fast_exp, nk.softmax_np32):
        assert compare(kernel(x), bp.exact, bp).max_bound_use < 0.5


def test_bf16_denominator_fails_both_tiers_on_ordinary_long_rows() -> None:
    x = _rows("float32")[:1]
    bw, bp = softmax_bound(x), softmax_bound(x, numerics=PROB)
    y = nk.bug_bf16_sum(x)
    cw, cp = compare(y, bw.exact, bw), compare(y, bp.exact, bp)
    assert not cw.ok and not cp.ok and cp.max_bound_use > 5 * cw.max_bound_use


def test_numerics_tier_validation_and_description() -> None:
    assert Numerics().describe().endswith("p_dtype=None")  # the default is left unsaid
    assert "tier=probabilistic bound (δ=1e-8)" in Numerics(tier="probabilistic",
                                                           delta=1e-8).describe()
    with pytest.raises(ValueError):
        Numerics(tier="typical")
    with pytest.raises(ValueError):
        Numerics(delta=0.0)
    assert Numerics.from_json(PROB.to_json()) == PROB


def test_accuracy_property_uses_the_declared_tier() -> None:
    from onlinesm.declarations import Conventions, split_keywords
    from onlinesm.properties import measure_softmax_accuracy

    x = _dominated_row(2e-4)
    y = nk.bug_bf16_sum(x)
    assert measure_softmax_accuracy(None, x, Conventions(), y=y).ok
    conv, _, _ = split_keywords({"tier": "probabilistic"})  # what --tier probabilistic sets
    m = measure_softmax_accuracy(None, x, conv, y=y)
    assert not m.ok and "probabilistic bound (δ=1e-6)" in m.message


def test_sequential_sum_can_exceed_the_probabilistic_tier_and_the_message_says_so() -> None:
    """The tier's known limit (reports/calibration_probabilistic.md): a correct scalar online
    softmax, one element added at a time, on a monotone fp16 row whose rescales and terms round
    alike, goes past the probabilistic bound and stays inside the worst case; the failure
    message names that possibility instead of advising to declare lower precision."""
    from onlinesm import reference

    rng = np.random.default_rng(5)
    x = generate_row("monotone", 4096, "float16", rng)[None]
    y = reference.softmax_online_scalar(x)
    bw, bp = softmax_bound(x), softmax_bound(x, numerics=PROB)
    cw, cp = compare(y, bw.exact, bw), compare(y, bp.exact, bp)
    assert cw.ok
    assert not cp.ok and cp.max_bound_use < 1.5
    text = cp.message(inputs=x)
    assert "adds one element at a time" in text and "declare it" not in text


def test_failure_hint_names_the_tier_it_failed() -> None:
    """A failure under the probabilistic tier points to the worst-case tier (a correct kernel
    with one-way rounding can exceed it); under the worst case it asks for the numerics."""
    x = np.array([[0.0, 1.0, 2.0]], np.float32)
    for numerics, words, not_words in ((PROB, "worst-case tier", "declare it"),
                                       (Numerics(), "declare it", "worst-case tier")):
        b = softmax_bound(x, numerics=numerics)
        off = compare(b.exact * (1 + 1e-3), b.exact, b, out_dtype="float32")
        assert not off.ok and off.tier == numerics.tier
        text = off.message(inputs=x)
        assert words in text and not_words not in text
