"""The reference implementations: right against the oracle, and the pitfalls they demonstrate."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onlinesm import oracle
from onlinesm.dtypes import resolve
from onlinesm.reference import (
    attention_online,
    merge_states,
    softmax_offline,
    softmax_online_scalar,
    softmax_online_tiled,
)

SOFTMAXES = {
    "offline": softmax_offline,
    "online_scalar": softmax_online_scalar,
    "tiled_4": lambda x, **kw: softmax_online_tiled(x, 4, **kw),
    "tiled_64": lambda x, **kw: softmax_online_tiled(x, 64, **kw),
}


def _rows(rng: np.random.Generator, n: int = 70) -> np.ndarray:
    rows = [
        rng.standard_normal(n),
        rng.standard_normal(n) * 50,
        np.arange(n, dtype=np.float64),  # the max grows at every element and every tile
        -1e31 - np.arange(n) * 1e24,  # every value below a -1e30 sentinel
        np.concatenate([np.full(66, -np.inf), rng.standard_normal(n - 66)]),  # masked tiles
        np.full(n, -np.inf),  # fully masked
    ]
    return np.stack(rows).astype(np.float32)


@pytest.mark.parametrize("name", list(SOFTMAXES))
def test_softmax_references_match_the_oracle_in_float32(name: str) -> None:
    x = _rows(np.random.default_rng(0))
    y = SOFTMAXES[name](x)
    assert y.dtype == np.float32 and not np.isnan(y).any()
    exact = oracle.softmax(x)
    # float32 analysis (Blanchard-Higham-Higham): |err| <= (n + 2 + 2|x-m|)u per element; the
    # spread rows reach |x - m| ~ 300 but exp(-300) underflows in float32, so |err| < 1e-6.
    assert np.max(np.abs(y - exact)) < (70 + 2 + 2 * 103) * 2.0**-24
    assert np.array_equal(y[-1], np.zeros(70, np.float32))  # fully masked -> zeros
    assert np.all(y[4, :66] == 0)  # -inf -> exactly 0


@pytest.mark.parametrize("name", list(SOFTMAXES))
def test_softmax_references_in_float64_agree_with_the_oracle_to_float64_accuracy(name: str) -> None:
    x = _rows(np.random.default_rng(1)).astype(np.float64)
    y = SOFTMAXES[name](x)
    assert y.dtype == np.float64
    assert np.max(np.abs(y - oracle.softmax(x))) < 1e-13


@pytest.mark.parametrize("name", list(SOFTMAXES))
def test_bf16_accumulation_stalls_at_256(name: str) -> None:
    # A constant row of 4096: the bf16 running sum reaches 256, where its ulp is 2, and 256 + 1
    # rounds back to 256 (ties to even). The result is 1/256 instead of 1/4096.
    x = np.zeros((1, 4096), dtype=ml_dtypes.bfloat16)
    right = SOFTMAXES[name](x)
    wrong = SOFTMAXES[name](x, accumulate="bfloat16")
    assert float(right[0, 0]) == 1 / 4096
    if name == "tiled_4":
        # tile sums of 4 are exact; the running sum then grows by 4: 1024 + 4 is a tie between
        # bf16 neighbours 1024 and 1032 (ulp 8) and rounds to even, so it stalls at 1024.
        assert float(wrong[0, 0]) == 1 / 1024
    elif name == "tiled_64":
        # tile sums of 64 are exact, and every multiple of 64 up to 4096 is a bf16 value:
        # wide tiles hide the pitfall, which is why onlinesm varies the tile-size regime.
        assert float(wrong[0, 0]) == 1 / 4096
    else:
        assert float(wrong[0, 0]) == 1 / 256


def test_tile_sizes_and_tails_agree() -> None:
    x = _rows(np.random.default_rng(2), n=67)
    base = softmax_online_scalar(x)
    for tile in (1, 2, 3, 64, 66, 67, 68, 1000):
        np.testing.assert_allclose(softmax_online_tiled(x, tile), base, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="tile=0"):
        softmax_online_tiled(x, 0)


def test_nan_rows_give_nan_and_integer_input_is_refused() -> None:
    y = softmax_online_scalar(np.array([[0.0, np.nan, 1.0]], np.float32))
    assert np.isnan(y).all()
    with pytest.raises(ValueError, match="dtype="):
        softmax_offline(np.array([[1, 2, 3]]))


def _attention_case(rng: np.random.Generator, dtype=np.float32):
    q = rng.standard_normal((2, 4, 9, 16)).astype(dtype)
    k = rng.standard_normal((2, 2, 13, 16)).astype(dtype)
    v = rng.standard_normal((2, 2, 13, 16)).astype(dtype)
    mask = rng.random((2, 1, 9, 13)) < 0.7
    mask[0, 0, 3] = False
    mask[:, :, :, :8] = False  # the first tiles of 4 are fully masked for every query
    mask[1, 0, 5, 10] = True
    return q, k, v, mask


@pytest.mark.parametrize("causal_align", ["top-left", "bottom-right"])
@pytest.mark.parametrize("tile", [4, 5, 64])
def test_attention_online_matches_the_oracle(tile: int, causal_align: str) -> None:
    q, k, v, mask = _attention_case(np.random.default_rng(tile))
    o, lse = attention_online(q, k, v, mask=mask, causal=True, causal_align=causal_align, tile=tile)
    oe, lsee = oracle.attention(q, k, v, mask=mask, causal=True, causal_align=causal_align)
    assert o.dtype == np.float32 and lse.dtype == np.float32
    assert not np.isnan(o).any()
    np.testing.assert_allclose(o, oe, atol=2e-6)
    empty = np.isneginf(lsee)
    assert empty.any() and np.array_equal(np.isneginf(lse), empty)
    assert np.all(o[empty] == 0)
    np.testing.assert_allclose(lse[~empty], lsee[~empty], rtol=1e-6)


def test_split_keys_and_merge_gives_the_whole_answer() -> None:
    q, k, v, mask = _attention_case(np.random.default_rng(7))
    whole = oracle.attention(q, k, v, mask=mask)
    o1, l1 = attention_online(q, k[:, :, :6], v[:, :, :6], mask=mask[..., :6])
    o2, l2 = attention_online(q, k[:, :, 6:], v[:, :, 6:], mask=mask[..., 6:])
    o, lse = merge_states(o1, l1, o2, l2)
    np.testing.assert_allclose(o, whole[0], atol=3e-6)
    # the first half is fully masked everywhere (keys 0..7 hidden): merging must return side 2
    assert np.all(np.isneginf(l1))
    assert np.array_equal(o, o2) and np.array_equal(lse, l2)


def test_merge_of_two_empty_states_is_empty_and_nan_free() -> None:
    o, lse = merge_states(np.zeros((3, 4), np.float32), np.full(3, -np.inf, np.float32),
                          np.zeros((3, 4), np.float32), np.full(3, -np.inf, np.float32))
    assert np.all(o == 0) and np.all(np.isneginf(lse))


def test_attention_bf16_inputs_keep_dtype_and_accuracy() -> None:
    q, k, v, mask = _attention_case(np.random.default_rng(8), dtype=ml_dtypes.bfloat16)
    o, lse = attention_online(q, k, v, mask=mask)
    oe, _ = oracle.attention(q, k, v, mask=mask)
    assert o.dtype == ml_dtypes.bfloat16
    # float32 state, then one rounding to bf16: within an ulp of bf16 at |o| <= max|v|
    assert np.max(np.abs(o.astype(np.float64) - oe)) <= resolve("bf16").eps * 4


@pytest.mark.parametrize("name", list(SOFTMAXES))
def test_seed_worked_example_for_every_reference(name: str) -> None:
    # The seeds work [1, 3, 2] by hand: exp(-2), 1, exp(-1) over 1.5032 = 0.0900, 0.6652, 0.2447.
    y = SOFTMAXES[name](np.array([[1.0, 3.0, 2.0]], np.float32))
    np.testing.assert_allclose(y, [[0.0900, 0.6652, 0.2447]], atol=5e-5)


def test_seed_exercise_four_elements_in_two_tiles_of_two() -> None:
    # The seeds' exercise: a 4-element row in two tiles of 2; the expected values come from the
    # oracle (mpmath), never from the code under test. The max grows in the second tile.
    x = np.array([[1.0, 3.0, 2.0, 5.0]])
    exact = oracle.softmax(x, exact=True)
    for tile in (1, 2, 4):
        np.testing.assert_allclose(softmax_online_tiled(x, tile), exact, rtol=1e-14)
    # and the state after each tile, by hand: (m, d) = (3, e^-2 + 1), then (5, (e^-2 + 1) e^-2 + e^-3 + 1)
    d_final = (np.exp(-2.0) + 1) * np.exp(-2.0) + np.exp(-3.0) + 1
    assert abs(float(oracle.logsumexp(x)[0]) - (5.0 + np.log(d_final))) < 1e-14


def test_tiled_agrees_with_offline_for_every_tile_size_within_the_bound() -> None:
    from onlinesm.tolerance import Numerics, compare, relation_bound, softmax_bound

    x = _rows(np.random.default_rng(5), n=70)[:5]  # regular rows (the sixth is fully masked)
    offline = softmax_offline(x)
    b = softmax_bound(x, out_dtype=np.float32, numerics=Numerics(exp="accurate"))
    allowed = relation_bound(b, b)
    for tile in range(1, 71):
        cmp = compare(softmax_online_tiled(x, tile), offline.astype(np.float64), allowed, out_dtype=np.float32)
        assert cmp.ok, (tile, cmp.summary())


def test_merge_of_halves_is_within_the_attention_bound() -> None:
    from onlinesm.tolerance import Numerics, attention_bound, compare, relation_bound

    q, k, v, _ = _attention_case(np.random.default_rng(9))
    o1, l1 = attention_online(q, k[:, :, :5], v[:, :, :5])
    o2, l2 = attention_online(q, k[:, :, 5:], v[:, :, 5:])
    o, _ = merge_states(o1, l1, o2, l2)
    ob, _ = attention_bound(q, k, v, numerics=Numerics(exp="accurate"))
    assert compare(o, ob.exact, relation_bound(ob, ob), out_dtype=np.float32).ok
