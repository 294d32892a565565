"""onlinesm.interpreter: fp32 -> bf16 rounding under Triton's CPU interpreter.

The kernels here are user-style: they store float32 into a bfloat16 pointer or call
``.to(tl.bfloat16)`` with no rounding of their own. Without the patch the interpreter truncates;
inside ``bf16_round_to_nearest()`` it must give ml_dtypes' round-to-nearest-even bits.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # no import: the mode must be chosen first
    pytest.skip("needs triton", allow_module_level=True)

from onlinesm import interpreter, kernels  # noqa: E402

if not kernels.use_interpreter():
    pytest.skip("the kernels run compiled on a GPU here (set TRITON_INTERPRET=1 to test the "
                "interpreter)", allow_module_level=True)

import triton  # noqa: E402  (after the mode is chosen)

pytestmark = pytest.mark.interpreter

BF16 = ml_dtypes.bfloat16

#: float32 bit patterns where truncation and round-to-nearest-even differ, or must agree.
TRICKY = np.array([
    0x3F808000,  # 1 + 2**-8: a tie, rounds down to the even 1.0
    0x3F818000,  # a tie that rounds up to the even neighbour
    0xBF818000,  # the same, negative
    0x3F80FFFF,  # just below a bf16 value: up
    0x3F808001,  # just above a tie: up
    0x7F7F8000,  # max finite bf16 + half an ulp: overflows to +inf
    0xFF7FFFFF,  # largest float32: -inf
    0x7F7F7FFF,  # just below the overflow threshold: max finite bf16
    0x7F7F0000,  # max finite bf16, exact
    0x00018000,  # subnormal tie: to the even 0x0002
    0x00008000,  # subnormal tie: to the even 0x0000
    0x807FFFFF,  # largest negative subnormal: rounds to -2**-126
    0x80000000,  # -0.0
    0x7F800000,  # +inf
    0x40490FDB,  # pi
    0x3EAAAAAB,  # 1/3
], dtype=np.uint32).view(np.float32)
RNE_BITS = TRICKY.astype(BF16).view(np.uint16)
TRUNC_BITS = (TRICKY.view(np.uint32) >> 16).astype(np.uint16)
N = 16
assert TRICKY.size == N


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from interpreter_kernels import cast as _cast  # noqa: E402
from interpreter_kernels import store_fp32 as _store_fp32  # noqa: E402


def run(kind: str, values: np.ndarray = TRICKY) -> np.ndarray:
    """The bf16 bits a kernel stores for float32 ``values``."""
    x = torch.from_numpy(values.copy())
    y = torch.empty(values.size, dtype=torch.bfloat16)
    if kind == "store":
        _store_fp32[(1,)](x, y, N=values.size)
    else:
        _cast[(1,)](x, y, N=values.size, MODE={"to": 0, "rtne": 1, "rtz": 2}[kind])
    return y.view(torch.int16).numpy().view(np.uint16)


def _helper():
    return getattr(sys.modules["triton.runtime.interpreter"], "_convert_float")


def test_interpreted_here():
    assert interpreter.interpreted()


@pytest.mark.parametrize("kind", ["store", "to", "rtne"])
def test_interpreter_truncates_without_the_patch(kind):
    got = run(kind)
    if np.array_equal(got, RNE_BITS):
        pytest.skip(f"triton {triton.__version__}'s interpreter already rounds to nearest even")
    # Truncation exactly, except the subnormals (the interpreter's own helper mangles those)
    normal = np.abs(TRICKY) >= np.float32(2.0**-126)
    np.testing.assert_array_equal(got[normal], TRUNC_BITS[normal])
    assert (got != RNE_BITS).sum() >= 8


@pytest.mark.parametrize("kind", ["store", "to", "rtne"])
def test_patch_rounds_to_nearest_even_bit_for_bit(kind):
    with interpreter.bf16_round_to_nearest() as active:
        assert active, interpreter.patch_unavailable_reason()
        got = run(kind)
    assert [hex(b) for b in got] == [hex(b) for b in RNE_BITS]


def test_patch_matches_ml_dtypes_on_random_values():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[~np.isnan(x)][:2048]
    with np.errstate(invalid="ignore"):
        want = x.astype(BF16).view(np.uint16)
    with interpreter.bf16_round_to_nearest():
        got = run("store", x)
    np.testing.assert_array_equal(got, want)


def test_nan_stays_nan_under_the_patch():
    x = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF] * 4, np.uint32).view(np.float32)
    with interpreter.bf16_round_to_nearest():
        got = run("store", x)
    assert np.isnan(got.view(BF16).astype(np.float32)).all(), [hex(b) for b in got]


def test_rtz_still_truncates_under_the_patch():
    with interpreter.bf16_round_to_nearest():
        got = run("rtz")
    np.testing.assert_array_equal(got, TRUNC_BITS)


def test_patch_is_removed_after_the_block_and_after_an_exception():
    before = _helper()
    with interpreter.bf16_round_to_nearest():
        assert _helper() is not before
    assert _helper() is before
    with pytest.raises(ZeroDivisionError):
        with interpreter.bf16_round_to_nearest():
            1 / 0
    assert _helper() is before
    assert not np.array_equal(run("store"), RNE_BITS)  # truncating again


def test_nested_blocks_and_a_helper_thread():
    before = _helper()
    box = {}
    with interpreter.bf16_round_to_nearest():
        with interpreter.bf16_round_to_nearest():
            pass
        assert _helper() is not before  # the inner exit keeps the outer patch in
        thread = threading.Thread(target=lambda: box.setdefault("bits", run("store")))
        thread.start()
        thread.join()
    assert _helper() is before
    np.testing.assert_array_equal(box["bits"], RNE_BITS)


def test_self_test_passes_and_detects_a_wrong_rounding(monkeypatch):
    assert interpreter.patch_works()
    assert interpreter._self_test() is None
    # A future triton whose conversion ignores the patch: simulate a rounding that truncates.
    monkeypatch.setattr(interpreter, "f32_to_bf16_bits", lambda x, rounding="rtne": (
        np.ascontiguousarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16))
    message = interpreter._self_test()
    assert message is not None and "round-to-nearest-even gives" in message
    monkeypatch.undo()
    # A future triton without the helper: the patch reports itself unavailable.
    monkeypatch.setattr(interpreter, "_FUNCTION", "_no_such_helper")
    assert "has no _no_such_helper()" in interpreter._self_test()


def test_the_block_is_a_no_op_when_the_self_test_fails(monkeypatch):
    monkeypatch.setattr(interpreter, "_self_test_result", lambda: "simulated failure")
    before = _helper()
    with interpreter.bf16_round_to_nearest() as active:
        assert active is False
        assert _helper() is before
        got = run("store")
    assert not interpreter.patch_works()
    assert interpreter.patch_unavailable_reason() == "simulated failure"
    assert not np.array_equal(got, RNE_BITS)


def test_f32_to_bf16_bits_against_ml_dtypes():
    np.testing.assert_array_equal(interpreter.f32_to_bf16_bits(TRICKY), RNE_BITS)
    np.testing.assert_array_equal(interpreter.f32_to_bf16_bits(TRICKY, "rtz"), TRUNC_BITS)
    with pytest.raises(ValueError, match="'rtne' or 'rtz'"):
        interpreter.f32_to_bf16_bits(TRICKY, "rtna")


# -- interpreter_suspect ------------------------------------------------------------------------

U = 2.0**-7  # bf16 ulp at 1.0


def test_suspect_one_ulp_toward_zero():
    exact = np.array([1.0 + 0.9 * U, -3.0 - 1.5 * U, 0.25])
    actual = np.array([1.0, -3.0, 0.25]).astype(BF16)  # truncated values
    assert interpreter.interpreter_suspect(actual, exact, "bfloat16")
    assert interpreter.interpreter_suspect(actual.astype(np.float32), exact, "bf16", allowed=0.0)


def test_not_suspect_two_ulps_or_away_from_zero():
    assert not interpreter.interpreter_suspect(np.array([1.0]), np.array([1.0 + 2.5 * U]), "bf16")
    # one ulp, but away from zero: truncation cannot do that
    assert not interpreter.interpreter_suspect(np.array([1.0 + 2 * U]), np.array([1.0 + 1.1 * U]), "bf16")
    # sign error
    assert not interpreter.interpreter_suspect(np.array([-0.0078125]), np.array([0.0078125]), "bf16")


def test_not_suspect_nan_or_inf_against_finite():
    assert not interpreter.interpreter_suspect(np.array([np.nan, 1.0]), np.array([0.5, 1.0 + U / 2]), "bf16")
    assert not interpreter.interpreter_suspect(np.array([np.inf]), np.array([3.0e38]), "bf16")
    assert not interpreter.interpreter_suspect(np.array([1.0]), np.array([np.nan]), "bf16")


def test_suspect_uses_the_allowed_error_and_needs_a_failure():
    exact = np.array([1.0 + 1.9 * U])
    actual = np.array([1.0])
    assert not interpreter.interpreter_suspect(actual, exact, "bf16")  # 1.9 ulp > 1
    assert interpreter.interpreter_suspect(actual, exact, "bf16", allowed=U)  # 0.9 ulp beyond
    assert not interpreter.interpreter_suspect(actual, exact, "bf16", allowed=2 * U)  # no failure


def test_suspect_only_for_bf16():
    assert not interpreter.interpreter_suspect(np.array([1.0]), np.array([1.0 + 2**-12]), "float16")
    with pytest.raises(TypeError, match="not their bits"):
        interpreter.interpreter_suspect(np.array([0x3F80], np.uint16), np.array([1.0]), "bf16")
