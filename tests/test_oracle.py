"""The oracle: the fast float64 path against mpmath, and the conventions it promises."""

from __future__ import annotations

import numpy as np
import pytest

from onlinesm import oracle

SEED_EXAMPLE = np.array([[1.0, 3.0, 2.0]])  # worked by hand in the seeds


def test_seed_example_matches_the_hand_computation() -> None:
    # exp(-2), exp(0), exp(-1) over their sum 1.5032...: the seeds' 0.0900, 0.6652, 0.2447.
    np.testing.assert_allclose(oracle.softmax(SEED_EXAMPLE), [[0.0900, 0.6652, 0.2447]], atol=5e-5)
    assert abs(float(oracle.logsumexp(SEED_EXAMPLE)[0]) - (3.0 + np.log(1.5032))) < 1e-4


def _adversarial_rows(rng: np.random.Generator) -> list[np.ndarray]:
    n = 37
    return [
        rng.standard_normal(n) * 3,
        rng.standard_normal(n) * 1e4,  # most exps underflow
        -1e31 + rng.standard_normal(n) * 1e25,  # below any finite sentinel
        np.where(rng.random(n) < 0.5, -np.inf, rng.standard_normal(n)),
        np.concatenate([np.full(20, -np.inf), rng.standard_normal(n - 20)]),
        np.linspace(-700, 0, n),  # exps near float64's underflow
        np.full(n, 3.0e38),
    ]


@pytest.mark.parametrize("seed", [0, 1])
def test_fast_path_is_within_its_stated_bound_of_mpmath(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.stack([r.astype(np.float32).astype(np.float64) for r in _adversarial_rows(rng)])
    fast, exact = oracle.softmax(x), oracle.softmax(x, exact=True)
    bound = oracle.fast_path_rel_error(x.shape[-1]) * np.abs(exact) + 1e-320
    assert np.all(np.abs(fast - exact) <= bound)
    lse_fast, lse_exact = oracle.logsumexp(x), oracle.logsumexp(x, exact=True)
    assert np.all(np.abs(lse_fast - lse_exact) <= 1e-12 * np.maximum(1, np.abs(lse_exact)))


def test_conventions_fully_masked_nan_and_posinf() -> None:
    x = np.array([
        [-np.inf, -np.inf, -np.inf],
        [0.0, np.nan, 1.0],
        [0.0, np.inf, 1.0],
        [-np.inf, 5.0, -np.inf],
    ])
    for exact in (False, True):
        y, lse = oracle.softmax(x, exact=exact), oracle.logsumexp(x, exact=exact)
        assert np.array_equal(y[0], [0, 0, 0]) and lse[0] == -np.inf
        assert np.isnan(y[1]).all() and np.isnan(lse[1])
        assert np.isnan(y[2]).all() and lse[2] == np.inf
        assert np.array_equal(y[3], [0, 1, 0]) and lse[3] == 5.0


def test_bfloat16_input_is_read_exactly() -> None:
    import ml_dtypes

    x = np.array([[1.0078125, 1.0]], dtype=ml_dtypes.bfloat16)  # 1 + 2**-7 is a bf16 value
    y = oracle.softmax(x)
    assert abs(y[0, 0] - 1 / (1 + np.exp(-2.0**-7))) < 1e-15


def test_rejects_integer_input_and_empty_rows() -> None:
    with pytest.raises(TypeError, match="floating-point"):
        oracle.softmax(np.array([[1, 2]]))
    with pytest.raises(ValueError, match="at least one element"):
        oracle.softmax(np.zeros((2, 0)))


def test_visible_keys_causal_alignments() -> None:
    top = oracle.visible_keys((1, 1, 2, 4), causal=True, causal_align="top-left")[0, 0]
    bottom = oracle.visible_keys((1, 1, 2, 4), causal=True, causal_align="bottom-right")[0, 0]
    assert top.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert bottom.tolist() == [[True, True, True, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="causal_align='diag'"):
        oracle.visible_keys((1, 1, 2, 4), causal=True, causal_align="diag")


def _naive_attention(q, k, v, visible, scale):  # the textbook formula, one query at a time
    o = np.zeros(q.shape)
    for idx in np.ndindex(*q.shape[:3]):
        keys = visible[idx]
        if not keys.any():
            continue
        s = (k[idx[0], idx[1]][keys] @ q[idx]) * scale
        w = np.exp(s - s.max())
        o[idx] = (w / w.sum()) @ v[idx[0], idx[1]][keys]
    return o


def test_attention_matches_the_textbook_formula_with_mask_causal_and_gqa() -> None:
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 5, 8))
    k = rng.standard_normal((2, 2, 7, 8))
    v = rng.standard_normal((2, 2, 7, 8))
    mask = rng.random((2, 1, 5, 7)) < 0.6
    mask[1, 0, 2] = False  # a query with no visible key
    o, lse = oracle.attention(q, k, v, mask=mask, causal=True, causal_align="bottom-right")
    visible = oracle.visible_keys((2, 4, 5, 7), mask=mask, causal=True, causal_align="bottom-right")
    expected = _naive_attention(q, np.repeat(k, 2, 1), np.repeat(v, 2, 1), visible, 1 / np.sqrt(8))
    np.testing.assert_allclose(o, expected, rtol=1e-12, atol=1e-14)
    assert np.all(o[1, :, 2] == 0) and np.all(lse[1, :, 2] == -np.inf)


def test_attention_fast_path_matches_mpmath() -> None:
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 1, 3, 5)) * 30  # large logits
    k = rng.standard_normal((1, 1, 4, 5))
    v = rng.standard_normal((1, 1, 4, 5))
    o, lse = oracle.attention(q, k, v)
    oe, lsee = oracle.attention(q, k, v, exact=True)
    np.testing.assert_allclose(o, oe, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(lse, lsee, rtol=1e-13)


def test_attention_rejects_bad_shapes_and_head_counts() -> None:
    with pytest.raises(ValueError, match="4-D"):
        oracle.attention(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="does not divide"):
        oracle.attention(np.zeros((1, 3, 2, 4)), np.zeros((1, 2, 2, 4)), np.zeros((1, 2, 2, 4)))
    with pytest.raises(ValueError, match="does not broadcast"):
        oracle.attention(np.zeros((1, 1, 2, 4)), np.zeros((1, 1, 3, 4)), np.zeros((1, 1, 3, 4)),
                         mask=np.ones((5, 5), bool))


def test_exact_path_gives_the_same_bits_from_any_starting_precision() -> None:
    # Two precisions must agree: the exact path returns the same bits at any starting precision.
    import onlinesm.oracle as o

    x = np.array([[0.1, 0.2, 0.3000000000000001]])
    first = o.softmax(x, exact=True)
    saved = o.EXACT_DIGITS
    try:
        o.EXACT_DIGITS = 80
        assert np.array_equal(o.softmax(x, exact=True), first)
    finally:
        o.EXACT_DIGITS = saved


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fast_path_audit_within_2_to_the_minus_40_on_every_family(dtype: str) -> None:
    from onlinesm.strategies import DEFAULT_FAMILIES, generate_row

    rng = np.random.default_rng(11)
    rows = np.stack([generate_row(f, 300, dtype, rng) for f in DEFAULT_FAMILIES])
    assert oracle.audit_softmax(rows) <= oracle.AUDIT_TOLERANCE


def test_attention_fast_path_audit_relative_to_sum_p_abs_v() -> None:
    from onlinesm.strategies import generate_attention

    rng = np.random.default_rng(12)
    for fam in ("outliers", "huge_logits", "huge_v_cancel", "key_padding"):
        case = generate_attention(fam, "bfloat16", rng, batch=2, heads=1, seq_q=3, seq_k=24, head_dim=16)
        err = oracle.audit_attention(case.q, case.k, case.v, mask=case.mask, causal=case.causal, scale=case.scale)
        assert err <= oracle.AUDIT_TOLERANCE, fam


@pytest.mark.parametrize("blas", [False, True], ids=["einsum", "blas"])
def test_attention_fast_path_within_the_audit_on_either_contraction(blas: bool, monkeypatch) -> None:
    # contract() hands large contractions to BLAS, whose summation order differs from
    # einsum's: the fast path must stay within the audit's bound against mpmath either way.
    from onlinesm.strategies import generate_attention

    if blas:
        monkeypatch.setattr(oracle, "BLAS_FROM", 0)
    rng = np.random.default_rng(13)
    for fam in ("outliers", "huge_logits", "huge_v_cancel", "key_padding"):
        case = generate_attention(fam, "bfloat16", rng, batch=1, heads=2, seq_q=3, seq_k=40, head_dim=16)
        err = oracle.audit_attention(case.q, case.k, case.v, mask=case.mask, causal=case.causal, scale=case.scale)
        assert err <= oracle.AUDIT_TOLERANCE, fam


def test_contract_is_einsum_bit_for_bit_below_the_blas_threshold(monkeypatch) -> None:
    rng = np.random.default_rng(14)
    q, k = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 7, 8))
    p = rng.random((2, 3, 5, 7))
    small_qk = oracle.contract("bhqd,bhkd->bhqk", q, k)
    small_pv = oracle.contract("bhqk,bhkd->bhqd", p, k)
    assert np.array_equal(small_qk, np.einsum("bhqd,bhkd->bhqk", q, k))
    assert np.array_equal(small_pv, np.einsum("bhqk,bhkd->bhqd", p, k))
    monkeypatch.setattr(oracle, "BLAS_FROM", 0)  # now matmul: the same values to rounding
    np.testing.assert_allclose(oracle.contract("bhqd,bhkd->bhqk", q, k), small_qk, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(oracle.contract("bhqk,bhkd->bhqd", p, k), small_pv, rtol=1e-13, atol=1e-14)
    with pytest.raises(ValueError, match="contract\\(\\) takes one of"):
        oracle.contract("ij,jk->ik", q[0, 0], k[0, 0])
