"""Calibration of onlinesm's bounds: correct kernels never fail, precision bugs always do.

(a) correct implementations stay within the bound on adversarial rows of every family;
(b) the precision bugs of the gallery exceed it; (c) the metrics' edge cases (zeros, subnormals,
-inf, NaN); (d) the failure message carries what a kernel author needs.
One or two seeds here; bench/calibrate.py runs 20 and writes reports/calibration.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from onlinesm import oracle, reference
from onlinesm.dtypes import resolve
from onlinesm.oracle import visible_keys
from onlinesm.tolerance import (
    Bound,
    Numerics,
    abs_error,
    attention_bound,
    same_dtype_baseline_check,
    bound_use,
    compare,
    logsumexp_bound,
    rel_error,
    relation_bound,
    rmse,
    rowsum_bound,
    softmax_bound,
    ulp_error,
)

try:
    from onlinesm.strategies import SOFTMAX_FAMILIES, generate_row
except ImportError:  # not re-exported (yet) by the package
    from onlinesm.strategies.families import SOFTMAX_FAMILIES, generate_row
try:
    from onlinesm.strategies import ATTENTION_FAMILIES, generate_attention
except ImportError:
    from onlinesm.strategies.attention import ATTENTION_FAMILIES, generate_attention

from numpy_kernels import attention_sdpa_math as _sdpa_math  # noqa: E402
from numpy_kernels import (  # noqa: E402  (tests/ is on sys.path: conftest)
    BF16, _finite_max, bug_bf16_exp as softmax_bf16_exp, bug_bf16_sum as softmax_bf16_sum,
    bug_off_by_one as softmax_off_by_one, bug_rough_exp as softmax_rough_exp,
    bug_sentinel as softmax_sentinel, softmax_fast_exp, softmax_np32,
)

DTYPES = ["float32", "bfloat16", "float16"]
FAMILIES = [f for f in SOFTMAX_FAMILIES if f != "nonfinite"]


# ---------------------------------------------------------------------------------------------
# inputs


def rows(family: str, dtype: str, seed: int, lengths=(1, 7, 64, 129, 1000), per=3,
         **kw) -> list:
    """Batches of adversarial rows, one batch per length (``kw`` pins generate_row's recipe)."""
    rng = np.random.default_rng(seed)
    return [np.stack([generate_row(family, n, dtype, rng, **kw) for _ in range(per)])
            for n in lengths]


# ---------------------------------------------------------------------------------------------
# correct kernels (numpy simulations of what real kernels do)


def softmax_torch(x: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    from onlinesm.dtypes import to_numpy, to_torch

    return to_numpy(torch.softmax(to_torch(x), dim=-1))


SOFTMAX_KERNELS = {
    "offline": reference.softmax_offline,
    "online_scalar": reference.softmax_online_scalar,
    "online_tiled": lambda x: reference.softmax_online_tiled(x, tile=64),
    "offline_f64acc": lambda x: reference.softmax_offline(x, accumulate="float64"),
    "fast_exp": softmax_fast_exp,
    "numpy_f32": softmax_np32,
    "torch": softmax_torch,
}


# ---------------------------------------------------------------------------------------------
# (a) correct kernels are within the bound


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", list(SOFTMAX_KERNELS))
def test_correct_softmax_within_bound(kernel: str, dtype: str) -> None:
    fn = SOFTMAX_KERNELS[kernel]
    worst = 0.0
    for family in FAMILIES:
        if kernel == "torch" and family == "fully_masked":
            continue  # torch.softmax declares fully_masked="nan"; the property engine checks it
        lengths = (1, 7, 64, 129) if kernel == "online_scalar" else (1, 7, 64, 129, 1000)
        for x in rows(family, dtype, seed=0, lengths=lengths):
            b = softmax_bound(x)
            with np.errstate(all="ignore"):
                c = compare(fn(x), b.exact, b)
            assert c.ok, c.message(inputs=x, name=f"{kernel}[{family}]")
            worst = max(worst, c.max_bound_use)
    assert worst > 1e-3, f"bound never approached (worst use {worst:.2g}): it is too loose"


def test_fast_exp_has_headroom_in_float32() -> None:
    """The fast-exp model's bound use on fp32 rows stays well below 1 (not just below)."""
    worst = 0.0
    for family in ("gaussian", "huge_spread", "monotone", "masked_scattered", "tiny_diff"):
        for x in rows(family, "float32", seed=1, lengths=(64, 1000, 4096)):
            b = softmax_bound(x)
            worst = max(worst, compare(softmax_fast_exp(x), b.exact, b).max_bound_use)
    assert 0.01 < worst < 0.6, worst


def test_fast_exp_error_grows_with_distance_from_max() -> None:
    """tl.exp's error is ~|z| ulp: the fast class's exp term grows with |x - m|."""
    x = np.linspace(-80.0, 0.0, 4001, dtype=np.float32)[None, :]
    y = softmax_fast_exp(x)
    fast = softmax_bound(x)
    assert compare(y, fast.exact, fast).ok
    exp_term = fast.terms["exp"][0] / fast.exact[0]  # relative, per element
    assert exp_term[0] > 5 * exp_term[-1]  # z = -80 against z = 0
    exact = softmax_bound(x, numerics=Numerics(exp="exact"))
    assert np.all(exact.abs <= fast.abs) and "(1.25|z| + 5)u" in fast.numerics.describe()


@pytest.mark.parametrize("dtype", DTYPES)
def test_rowsum_and_logsumexp_of_references(dtype: str) -> None:
    for family in ("gaussian", "huge_spread", "masked_prefix", "one_finite", "monotone",
                   "fully_masked"):
        for x in rows(family, dtype, seed=2, lengths=(5, 300, 2000)):
            y = reference.softmax_online_tiled(x, tile=128)
            rb = rowsum_bound(x)
            total = y.astype(np.float64).sum(axis=-1)
            c = compare(total, rb.exact, rb, out_dtype="float64")
            assert c.ok, c.message(inputs=x, name=f"row sum [{family}]")
            lb = logsumexp_bound(x)
            exact_lse = oracle.logsumexp(x)
            np.testing.assert_allclose(lb.exact, exact_lse, rtol=1e-12)
            xf = x.astype(np.float32)
            m = _finite_max(xf)
            with np.errstate(divide="ignore"):
                lse = (m[..., 0] + np.log(np.exp(xf - m).sum(axis=-1))).astype(np.float32)
            c = compare(lse, exact_lse, lb, out_dtype="float32")
            assert c.ok, c.message(inputs=x, name=f"logsumexp [{family}]")


def test_shift_relation_within_relation_bound() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((8, 500)) * 4).astype(np.float32)
    shifted = (x + np.float32(64.0)).astype(np.float32)  # exact: |x| < 64 keeps the bits
    b1, b2 = softmax_bound(x), softmax_bound(shifted)
    rb = relation_bound(b1, b2)
    c = compare(softmax_fast_exp(x), softmax_fast_exp(shifted).astype(np.float64), rb)
    assert c.ok, c.message(inputs=x)
    assert set(rb.terms) == set(b1.terms)
    np.testing.assert_allclose(rb.abs, b1.abs + b2.abs)


def test_declared_bf16_accumulation_is_allowed() -> None:
    x = rows("gaussian", "bfloat16", seed=4, lengths=(64,))[0]
    b = softmax_bound(x, numerics=Numerics(accumulate="bfloat16"))
    y = softmax_bf16_sum(x)
    assert compare(y, b.exact, b).ok


def test_float64_inputs_with_float32_work_get_an_input_term() -> None:
    x = np.random.default_rng(5).standard_normal((4, 100)) * 1e3 + 1e5
    b = softmax_bound(x)  # accumulate defaults to float32
    assert "input" in b.terms
    y = reference.softmax_offline(x, accumulate="float32")
    assert compare(y, b.exact, b).ok
    b64 = softmax_bound(x, numerics=Numerics(accumulate="float64", exp="accurate"))
    assert compare(reference.softmax_offline(x), b64.exact, b64).ok
    assert b64.abs.max() < 1e-6 * b.abs.max()


# --- attention ---------------------------------------------------------------------------


def _attention_case(family: str, dtype: str, rng: np.random.Generator):
    sq = 1 if family == "decode" else int(rng.integers(1, 40))
    sk = {"one_key": 1, "decode": 700, "masked_leading_tiles": 200}.get(
        family, int(rng.integers(1, 150)))
    heads = 4 if family == "gqa" else 2
    d = int(rng.choice([16, 40, 64, 128]))
    return generate_attention(family, dtype, rng, batch=2, heads=heads, seq_q=sq, seq_k=sk,
                              head_dim=d)


def attention_sdpa_math(case) -> np.ndarray:
    pytest.importorskip("torch")
    return _sdpa_math(case)


def attention_reference(case) -> np.ndarray:
    return reference.attention_online(case.q, case.k, case.v, mask=case.mask,
                                      causal=case.causal, scale=case.scale, tile=32)[0]


def attention_rounded_exact(case) -> np.ndarray:
    o, _ = oracle.attention(case.q, case.k, case.v, mask=case.mask, causal=case.causal,
                            scale=case.scale)
    return o.astype(case.q.dtype)


ATTENTION_KERNELS = {
    "reference": attention_reference,
    "sdpa_math": attention_sdpa_math,
    "float64_rounded": attention_rounded_exact,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", list(ATTENTION_KERNELS))
def test_correct_attention_within_bound(kernel: str, dtype: str) -> None:
    rng = np.random.default_rng(6)
    for family in ATTENTION_FAMILIES:
        case = _attention_case(family, dtype, rng)
        bo, bl = attention_bound(case.q, case.k, case.v, mask=case.mask, causal=case.causal,
                                 scale=case.scale)
        o = ATTENTION_KERNELS[kernel](case)
        if kernel == "sdpa_math":  # SDPA gives NaN for queries with no visible key
            o = np.where(np.isnan(o.astype(np.float64)) & (bo.abs == 0), 0, o).astype(o.dtype)
        c = compare(o, bo.exact, bo)
        assert c.ok, c.message(inputs={"q": case.q, "k": case.k, "mask": case.mask,
                                       "causal": case.causal}, name=f"{kernel}[{family}]")
        if kernel == "reference":
            lse = reference.attention_online(case.q, case.k, case.v, mask=case.mask,
                                             causal=case.causal, scale=case.scale)[1]
            c = compare(lse, bl.exact, bl, out_dtype="float32")
            assert c.ok, c.message(name=f"lse {kernel}[{family}]")


def test_attention_exact_argument_and_gqa_shapes() -> None:
    rng = np.random.default_rng(7)
    case = generate_attention("gqa", "bfloat16", rng, batch=1, heads=4, seq_q=5, seq_k=33,
                              head_dim=32, kv_heads=2)
    o, lse = oracle.attention(case.q, case.k, case.v, mask=case.mask)
    bo, bl = attention_bound(case.q, case.k, case.v, mask=case.mask, exact=(o, lse))
    assert bo.abs.shape == o.shape and bl.abs.shape == lse.shape
    np.testing.assert_allclose(bo.exact, o)
    for name, t in bo.terms.items():
        assert np.all(t >= 0), name
    np.testing.assert_allclose(sum(np.broadcast_to(t, bo.abs.shape) for t in bo.terms.values()),
                               bo.abs)


@pytest.mark.parametrize("family", ["key_padding", "huge_v_cancel", "gqa"])
def test_attention_oracle_and_bound_by_row_blocks_match_all_rows_at_once(family: str,
                                                                         monkeypatch) -> None:
    # Long sequences are worked a block of query rows at a time (oracle.row_blocks): the
    # blocks must give every bit of the all-at-once answer, with a mask and a fully masked row.
    rng = np.random.default_rng(9)
    case = generate_attention(family, "bfloat16", rng, batch=2, heads=4, seq_q=37, seq_k=50,
                              head_dim=16, kv_heads=2 if family == "gqa" else 4)
    kw = dict(mask=case.mask, causal=case.causal, scale=case.scale,
              numerics=Numerics(p_dtype="bfloat16"))
    whole_o, whole_lse = oracle.attention(case.q, case.k, case.v, mask=case.mask,
                                          causal=case.causal, scale=case.scale)
    whole = attention_bound(case.q, case.k, case.v, **kw)
    if family == "key_padding":
        assert np.isneginf(whole_lse).any()  # a query with no visible key among the blocks
    monkeypatch.setattr(oracle, "SCORE_BLOCK", 8 * 50 * 5)  # blocks of 5 rows: 8 of them
    assert len(oracle.row_blocks(8, 37, 50)) == 8
    o, lse = oracle.attention(case.q, case.k, case.v, mask=case.mask, causal=case.causal,
                              scale=case.scale)
    assert np.array_equal(o, whole_o) and np.array_equal(lse, whole_lse)
    blocked = attention_bound(case.q, case.k, case.v, **kw)
    for got, want in zip(blocked, whole):
        assert np.array_equal(got.abs, want.abs)
        assert np.array_equal(got.exact, want.exact, equal_nan=True)
        assert got.terms.keys() == want.terms.keys()
        for name in want.terms:
            assert np.array_equal(got.terms[name], want.terms[name]), name


def test_p_dtype_and_tf32_widen_the_bound() -> None:
    rng = np.random.default_rng(8)
    case = generate_attention("gaussian", "float32", rng, batch=1, heads=1, seq_q=4, seq_k=64,
                              head_dim=64, masked=False)
    base, _ = attention_bound(case.q, case.k, case.v)
    wide, _ = attention_bound(case.q, case.k, case.v,
                              numerics=Numerics(allow_tf32=True, p_dtype="bfloat16"))
    assert "p_round" in wide.terms and np.all(wide.abs > base.abs)
    # FlashAttention-style P in bf16 passes only when declared
    o = attention_p_bf16(case.q, case.k, case.v)
    assert compare(o, wide.exact, wide).ok
    assert not compare(o, base.exact, base).ok


# ---------------------------------------------------------------------------------------------
# (b) precision bugs are caught


BUGS = [  # (kernel, family, dtype, length)
    (softmax_bf16_sum, "gaussian", "bfloat16", 2048),
    (softmax_bf16_sum, "gaussian", "float32", 300),
    (softmax_bf16_exp, "gaussian", "float32", 300),
    (softmax_bf16_exp, "gaussian", "bfloat16", 1000),
    (softmax_rough_exp, "gaussian", "float32", 1000),
    (softmax_rough_exp, "monotone", "float16", 1000),
    (softmax_sentinel, "below_sentinel", "float32", 300),
    (softmax_sentinel, "below_sentinel", "bfloat16", 300),
    (softmax_off_by_one, "gaussian", "float32", 1000),
    (softmax_off_by_one, "gaussian", "float16", 64),
]


@pytest.mark.parametrize("bug,family,dtype,n", BUGS,
                         ids=[f"{b.__name__}-{f}-{d}-{n}" for b, f, d, n in BUGS])
def test_softmax_bugs_are_caught(bug, family, dtype, n) -> None:
    scale = 2.0 if family in ("gaussian", "monotone") else None  # logits of ordinary size
    x = rows(family, dtype, seed=9, lengths=(n,), per=4, scale=scale)[0]
    b = softmax_bound(x)
    with np.errstate(all="ignore"):
        c = compare(bug(x), b.exact, b)
    assert not c.ok, f"{bug.__name__} passed: max bound use {c.max_bound_use:.3g}"


def attention_bf16_pv(q, k, v, *, mask=None, causal=False, scale=None,
                      p_dtype=None, pv_dtype=BF16) -> np.ndarray:
    """FlashAttention-style forward in fp32 with P·V accumulated in ``pv_dtype`` key by key."""
    b, h, sq, d = q.shape
    g = h // k.shape[1]
    kf = np.repeat(k, g, axis=1).astype(np.float32)
    vf = np.repeat(v, g, axis=1).astype(np.float32)
    sc = np.float32(1 / np.sqrt(d) if scale is None else scale)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float32), kf) * sc
    s = np.where(visible_keys(s.shape, mask=mask, causal=causal), s, -np.inf)
    p = np.exp(s - _finite_max(s))
    ell = p.sum(axis=-1, keepdims=True, dtype=np.float32)
    if p_dtype is not None:
        p = p.astype(p_dtype).astype(np.float32)
    o = np.zeros((b, h, sq, d), dtype=pv_dtype)
    for j in range(s.shape[-1]):
        o = (o.astype(np.float32) + p[..., j : j + 1] * vf[:, :, j : j + 1, :]).astype(pv_dtype)
    return (o.astype(np.float32) / ell).astype(q.dtype)


def attention_p_bf16(q, k, v) -> np.ndarray:
    """Correct when declared: P rounded to bf16 before an fp32 P·V (FlashAttention)."""
    return attention_bf16_pv(q, k, v, p_dtype=BF16, pv_dtype=np.float32)


@pytest.mark.parametrize("family,dtype", [("gaussian", "bfloat16"), ("decode", "bfloat16"),
                                          ("outliers", "float16"), ("gaussian", "float32")])
def test_attention_bf16_pv_accumulation_is_caught(family: str, dtype: str) -> None:
    rng = np.random.default_rng(10)
    case = generate_attention(family, dtype, rng, batch=1, heads=2,
                              seq_q=1 if family == "decode" else 8, seq_k=2048, head_dim=64,
                              masked=False)
    bo, _ = attention_bound(case.q, case.k, case.v)
    c = compare(attention_bf16_pv(case.q, case.k, case.v), bo.exact, bo)
    assert not c.ok, c.max_bound_use


# ---------------------------------------------------------------------------------------------
# (c) metrics edge cases


def test_metrics_special_values() -> None:
    inf, nan = np.inf, np.nan
    actual = np.array([nan, nan, 1.0, inf, -inf, inf, 0.0, 0.0, 5e-45])
    exact = np.array([nan, 1.0, nan, inf, -inf, -inf, 0.0, 1e-45, 0.0])
    err = abs_error(actual, exact)
    assert err[:6].tolist() == [0.0, inf, inf, 0.0, 0.0, inf]
    u = ulp_error(actual, exact, "float32")
    assert u[:6].tolist() == [0.0, inf, inf, 0.0, 0.0, inf]
    assert u[6] == 0.0
    sub = resolve("float32").smallest_subnormal
    assert u[7] == pytest.approx(1e-45 / sub)  # measured in subnormal spacings
    r = rel_error(actual, exact)
    assert r[6] == 0.0 and r[8] == inf and r[1] == inf
    assert rel_error(actual, exact, floor=1e-38)[8] == pytest.approx(5e-45 / 1e-38)


def test_metrics_ulps_and_bound_use() -> None:
    one = np.float32(1.0)
    assert float(ulp_error(np.nextafter(one, np.float32(2)), 1.0, "float32")) == 1.0
    assert float(ulp_error(1.0 + 2**-7, 1.0, "bfloat16")) == 1.0
    assert float(ulp_error(np.float16(6.1e-5), 6.1e-5 + 2**-24, "float16")) == pytest.approx(
        abs(float(np.float16(6.1e-5)) - (6.1e-5 + 2**-24)) / 2**-24)
    use = bound_use(np.array([1.0, 1.0, 2.0, np.nan]), np.array([1.0, 1.5, 1.0, 1.0]),
                    np.array([0.0, 0.0, 2.0, 1.0]))
    assert use.tolist() == [0.0, np.inf, 0.5, np.inf]
    assert float(rmse([1.0, 3.0], [0.0, 2.0])) == 1.0
    # lse: -inf against -inf is exact; a finite value where -inf was due is an infinite error
    assert ulp_error(np.array([-np.inf, -3.0]), np.array([-np.inf, -np.inf]),
                     "float32").tolist() == [0.0, np.inf]


def test_neg_inf_inputs_demand_exact_zeros() -> None:
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    b = softmax_bound(x)
    assert b.abs[0, 1] == 0 and np.all(b.abs[1] == 0)
    y = reference.softmax_offline(x)
    y[0, 1] = np.float32(1e-45)  # a single subnormal where an exact 0 is due fails
    c = compare(y, b.exact, b)
    assert not c.ok and c.worst_index == (0, 1)


def test_nan_output_always_fails_and_nan_rows_match_nan() -> None:
    x = np.array([[0.0, 1.0], [np.nan, 1.0]], np.float32)
    b = softmax_bound(x)
    good = np.array([[0.26894143, 0.7310586], [np.nan, np.nan]], np.float32)
    assert compare(good, b.exact, b).ok
    bad = good.copy()
    bad[0, 0] = np.nan
    c = compare(bad, b.exact, b)
    assert not c.ok and c.max_bound_use == np.inf and c.worst_index == (0, 0)


def test_underflow_is_legitimate() -> None:
    x = np.array([[0.0, -20.0, -200.0]], np.float16)  # e^-20 is subnormal in fp16
    b = softmax_bound(x)
    flushed = np.array([[1.0, 0.0, 0.0]], np.float16)
    assert compare(flushed, b.exact, b).ok
    assert b.terms["floor"][0, 1] == resolve("float16").tiny


def test_numerics_validation_and_describe() -> None:
    with pytest.raises(ValueError, match="exp='fastest'"):
        Numerics(exp="fastest")
    with pytest.raises(ValueError, match="accumulate='int8' is not a floating-point dtype"):
        Numerics(accumulate="int8")
    n = Numerics(accumulate="fp32", exp="correctly_rounded", p_dtype="bf16")
    assert n.accumulate == "float32" and n.exp == "exact" and n.p_dtype == "bfloat16"
    text = Numerics(exp=3).describe()
    assert "3 ulp" in text and "allow_tf32=False" in text
    assert "tl.exp" in Numerics().describe()


def test_same_dtype_baseline_check() -> None:
    exact = np.linspace(-1, 1, 101)
    baseline = (exact + 1e-3).astype(np.float32)
    assert same_dtype_baseline_check((exact + 2e-3).astype(np.float32), exact, baseline).ok
    c = same_dtype_baseline_check((exact + 5e-3).astype(np.float32), exact, baseline)
    assert not c.ok and "baseline" in c.terms_at_worst
    assert "2 × the baseline" in c.message()


# ---------------------------------------------------------------------------------------------
# (d) the failure message


def test_failure_message_content() -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 4096)).astype(np.float32)
    x[2, :100] = -np.inf
    x[2, 4000] = np.nan if False else 9.0
    b = softmax_bound(x)
    y = reference.softmax_offline(x)
    y[2, 17] = np.float32(0.0)  # a -inf input: exact 0, fine
    y[2, 3000] *= np.float32(1.01)
    y[1, 5] *= np.float32(1.001)
    c = compare(y, b.exact, b)
    assert not c.ok and c.n_failed == 2 and c.worst_index == (2, 3000)
    msg = c.message(inputs=x, name="softmax")
    assert "Mismatched elements: 2 / 16384 (0.0%)" in msg
    assert "(2, 3000)" in msg and "ulp of float32" in msg and " rel" in msg
    assert "bound " in msg and "exp " in msg and "sum " in msg and " = " in msg
    assert "accumulate=float32" in msg and "exp=fast" in msg
    assert "100 × -inf" in msg  # the row summary
    assert "0: -inf" in msg and "*3000:" in msg and "4000: 9" in msg and "…" in msg
    assert "4095:" in msg and len(msg.splitlines()) < 20


def test_message_for_attention_shows_the_score_row() -> None:
    rng = np.random.default_rng(12)
    case = generate_attention("gaussian", "bfloat16", rng, batch=1, heads=2, seq_q=3,
                              seq_k=50, head_dim=16, masked=False)
    bo, _ = attention_bound(case.q, case.k, case.v)
    o = attention_rounded_exact(case)
    o[0, 1, 2, 3] = BF16(float(o[0, 1, 2, 3]) + 0.25)
    c = compare(o, bo.exact, bo)
    assert not c.ok and c.worst_index == (0, 1, 2, 3)
    msg = c.message(inputs={"q": case.q, "k": case.k}, name="attention")
    assert "Scores of query (0, 1, 2)" in msg and "ulp of bfloat16" in msg
    assert "pv " in msg or "out " in msg


def test_bound_describe_and_at() -> None:
    b = softmax_bound(np.array([[0.0, -1.0, -2.0]], np.float32))
    text = b.describe((0, 2))
    assert text.startswith("bound ") and "exp" in text
    assert pytest.approx(sum(b.at((0, 2)).values())) == float(b.abs[0, 2])
    assert isinstance(b, Bound)
