"""The statistical tier: the simulator, the verdict, regression mode, and the gallery's bugs.

Each bug of tests/gallery_statistical.py passes today's worst-case check on its family and
dtype, and fails accuracy_statistical there; correct kernels pass. Small settings keep every
test to a few seconds (bench/statistical_calibration.py runs the default settings).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gallery_statistical as G
from onlinesm import reference
from onlinesm.simulate import simulate_attention, simulate_softmax
from onlinesm.statistical import (
    DEFAULT,
    Baseline,
    Settings,
    accuracy_statistical,
    attention_sample,
    compare_kernels,
    lower_bound_mean,
    softmax_sample,
    t_quantile,
)
from onlinesm.tolerance import Numerics, attention_bound, compare, softmax_bound

# attention: the default shape (128 queries x Sk 2048 per cell); softmax: 24 rows of 4096
SMALL = dataclasses.replace(DEFAULT, softmax_rows=24,
                            replicas=3)


def _only(op: str, family: str) -> Settings:
    key = "softmax_families" if op == "softmax" else "attention_families"
    return dataclasses.replace(SMALL, **{key: (family,)})


# --- simulator --------------------------------------------------------------------------------


def test_simulator_without_perturbation_is_the_reference() -> None:
    x = softmax_sample("masked_scattered", "bf16", Settings(softmax_rows=3, softmax_length=700))
    assert (simulate_softmax(x, tile=128) == reference.softmax_online_tiled(x, tile=128)).all()
    c = attention_sample("gaussian", "fp16", dataclasses.replace(SMALL, attention_shape=(1, 2, 8, 300, 32)))
    o_ref, _ = reference.attention_online(c.q, c.k, c.v, tile=64)
    assert (simulate_attention(c.q, c.k, c.v, tile=64) == o_ref).all()


def test_simulated_exp_error_has_the_declared_size() -> None:
    x = np.zeros((1, 4096), np.float32)
    x[0, ::2] = -8.0
    y = simulate_softmax(x.astype(np.float64), numerics=Numerics(accumulate="float64", exp=1000.0),
                         rng=np.random.default_rng(0))
    # exp=1000 ulps of float64 -> |rho| <= 2000 u; the ratio of two entries shows it
    rel = np.abs(y[0, 1::2] / y[0, 1::2].mean() - 1)
    assert 1000 * 2.0**-53 < rel.max() < 2 * 2000 * 2.0**-53


# --- statistics -------------------------------------------------------------------------------


def test_t_quantile_matches_tables() -> None:
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=2e-3)
    assert t_quantile(0.999, 63) == pytest.approx(3.229, abs=5e-3)
    assert t_quantile(0.99999, 127) == pytest.approx(4.434, rel=5e-3)


def test_lower_bound_of_a_constant_is_the_constant() -> None:
    assert lower_bound_mean(np.full(10, 0.3), 0.999) == pytest.approx((0.3, 0.3))
    assert lower_bound_mean(np.array([1.0]), 0.9)[1] == -np.inf


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="alpha"):
        Settings(alpha=2.0)
    with pytest.raises(ValueError, match="min_effect"):
        Settings(min_effect=0.5)


# --- correct kernels pass ---------------------------------------------------------------------


@pytest.mark.parametrize("fn", [reference.softmax_online_tiled, reference.softmax_offline,
                                G.softmax_correct])
def test_correct_softmax_passes(fn) -> None:  # type: ignore[no-untyped-def]
    res = accuracy_statistical(fn, op="softmax", settings=SMALL)
    assert res.ok, res.message()
    assert res.tests == 18 and len(res.cells) == 18


def test_correct_attention_passes() -> None:
    res = accuracy_statistical(G.attention_correct, op="attention", settings=SMALL)
    assert res.ok, res.message()


def test_simulated_correct_kernel_passes_on_several_seeds() -> None:
    for seed in range(3):
        base = Baseline("attention", dtypes=("bf16",), settings=dataclasses.replace(SMALL, seed=seed))
        rng = np.random.default_rng(100 + seed)
        res = base.evaluate(lambda q, k, v, m, c, s: simulate_attention(
            q, k, v, mask=m, causal=c, scale=s, numerics=Numerics(p_dtype="bf16"), rng=rng))
        assert res.ok, res.message()


# --- the gallery: passes the worst-case check, fails the statistical one -----------------------


def _worst_case(op: str, fn, dtype: str, family: str) -> float:  # type: ignore[no-untyped-def]
    if op == "softmax":
        x = softmax_sample(family, dtype, SMALL)
        b = softmax_bound(x)
        return compare(fn(x), b.exact, b).max_bound_use
    c = attention_sample(family, dtype, SMALL)
    bo, _ = attention_bound(c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale,
                            numerics=Numerics(p_dtype=dtype))
    return compare(fn(c.q, c.k, c.v, c.mask, c.causal, c.scale), bo.exact, bo).max_bound_use


CASES = [("softmax", name, fn, dt, fam) for name, (fn, w) in G.SOFTMAX_BUGS.items()
         for dt, fam in w.items()] + [
        ("attention", name, fn, dt, fam) for name, (fn, w) in G.ATTENTION_BUGS.items()
        for dt, fam in w.items()]


@pytest.mark.parametrize("op,name,fn,dtype,family", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_bug_passes_worst_case_but_fails_statistical(op, name, fn, dtype, family) -> None:  # type: ignore[no-untyped-def]
    assert _worst_case(op, fn, dtype, family) < 1.0, f"{name} fails the worst-case check"
    res = accuracy_statistical(fn, op=op, dtypes=(dtype,), settings=_only(op, family))
    assert not res.ok, f"{name} passed the statistical check:\n{res.table()}"
    assert "accuracy_statistical" in res.message() and "FAIL" in res.message()


def test_o_accumulator_bug_also_caught_by_worst_case_free_regression() -> None:
    res = compare_kernels(G.attention_o_lowp, G.attention_correct, op="attention",
                          dtypes=("bf16",), settings=_only("attention", "gaussian"))
    assert not res.ok
    row = res.rows[0]
    assert row.ratio > 2.0 and row.lower > 1.25
    assert "attention_o_lowp" in res.table() and "FAIL" in res.message()


def test_regression_passes_equal_kernels() -> None:
    res = compare_kernels(reference.softmax_offline, G.softmax_correct, op="softmax",
                          settings=_only("softmax", "gaussian"))
    assert res.ok, res.message()
    assert len(res.rows) == 3 and all(r.rmse_rounded <= r.rmse_old for r in res.rows)


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match="'softmax' or 'attention'"):
        accuracy_statistical(G.softmax_correct, op="softmx")
    with pytest.raises(ValueError, match="factor"):
        compare_kernels(G.softmax_correct, G.softmax_correct, factor=0.5)
