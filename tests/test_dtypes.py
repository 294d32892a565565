"""The format table and the exact conversions every other module relies on."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onlinesm.dtypes import FORMATS, from_hex, resolve, round_to, to_hex, to_numpy, to_torch, ulp

# Published constants of each format (IEEE 754 binary64/32/16 and Google's bfloat16).
KNOWN = {
    "float64": (53, 1.7976931348623157e308, 2.2250738585072014e-308, 5e-324),
    "float32": (24, 3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45),
    "float16": (11, 65504.0, 6.103515625e-05, 5.960464477539063e-08),
    "bfloat16": (8, 3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41),
}


@pytest.mark.parametrize("name", list(KNOWN))
def test_table_matches_published_constants(name: str) -> None:
    fmt = FORMATS[name]
    assert (fmt.precision, fmt.max, fmt.tiny, fmt.smallest_subnormal) == KNOWN[name]
    assert fmt.u == 2.0 ** -KNOWN[name][0]


@pytest.mark.parametrize("name", list(KNOWN))
def test_ulp_at_one_is_epsilon_and_subnormal_spacing_below_tiny(name: str) -> None:
    fmt = FORMATS[name]
    assert ulp(1.0, name) == fmt.eps
    assert ulp(1.9, name) == fmt.eps
    assert ulp(2.0, name) == 2 * fmt.eps
    assert ulp(0.0, name) == fmt.smallest_subnormal
    assert ulp(fmt.tiny / 3, name) == fmt.smallest_subnormal
    assert np.isnan(ulp(np.inf, name))
    # the next value up from x is x + ulp(x): check against the dtype's own nextafter
    x = np.asarray(3.0e-3, dtype=fmt.numpy if name != "bfloat16" else np.float32)
    if name != "bfloat16":
        assert np.nextafter(x, np.inf) - x == ulp(x, name)


def test_resolve_accepts_names_aliases_numpy_and_torch() -> None:
    torch = pytest.importorskip("torch")
    assert resolve("bf16") is FORMATS["bfloat16"]
    assert resolve(ml_dtypes.bfloat16) is FORMATS["bfloat16"]
    assert resolve(np.float16) is FORMATS["float16"]
    assert resolve(torch.float32) is FORMATS["float32"]
    assert resolve("torch.bfloat16") is FORMATS["bfloat16"]
    assert FORMATS["float16"].torch is torch.float16


@pytest.mark.parametrize("bad", ["int8", np.int32, "float8", object])
def test_resolve_rejects_unknown_formats_with_the_value_and_the_fix(bad: object) -> None:
    with pytest.raises(ValueError, match=r"dtype=.*use one of float64, float32, float16, bfloat16"):
        resolve(bad)


def test_every_bf16_bit_pattern_survives_torch_round_trip() -> None:
    torch = pytest.importorskip("torch")
    bits = np.arange(2**16, dtype=np.uint16)
    values = bits.view(ml_dtypes.bfloat16)
    back = to_numpy(to_torch(values))
    assert back.dtype == ml_dtypes.bfloat16
    assert np.array_equal(back.view(np.uint16), bits)  # NaN payloads included
    t = to_torch(values)
    assert t.dtype == torch.bfloat16


@pytest.mark.parametrize("name", list(KNOWN))
def test_hex_round_trip_keeps_nan_inf_and_subnormals(name: str) -> None:
    fmt = FORMATS[name]
    a = round_to([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, fmt.smallest_subnormal, -fmt.max], name)
    words = to_hex(a)
    assert len(words[0]) == fmt.bits // 4
    back = from_hex(words, name)
    assert np.array_equal(back.view(fmt.bits_dtype), a.view(fmt.bits_dtype))


def test_round_to_rounds_to_nearest_even() -> None:
    # 1 + 2**-8 lies exactly between two bf16 values (1 and 1 + 2**-7): ties go to even (1).
    assert float(round_to(1 + 2.0**-8, "bf16")) == 1.0
    assert float(round_to(1 + 3 * 2.0**-8, "bf16")) == 1 + 2 * 2.0**-7


def _exact_rounding(a: float, fmt_name: str) -> float:
    """``a`` rounded once to the format, in exact rational arithmetic (the oracle)."""
    from fractions import Fraction
    import math

    fmt = resolve(fmt_name)
    if not math.isfinite(a) or a == 0:
        return a
    _, e = math.frexp(abs(a))  # |a| in [2**(e-1), 2**e)
    min_exp = math.frexp(fmt.tiny)[1]  # below tiny the spacing stops shrinking
    spacing = Fraction(2) ** (max(e, min_exp) - fmt.precision)
    q = Fraction(abs(a)) / spacing
    r = float(round(q) * spacing)  # round() on a Fraction: to nearest, ties to even
    top = Fraction(fmt.max) + spacing / 2  # past max + half an ulp: overflow
    if Fraction(abs(a)) >= top:
        r = math.inf
    return math.copysign(r, a)


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_round_to_rounds_float64_once(name: str) -> None:
    # Values on, beside and just past the halfway points of the format (where rounding twice,
    # through float32, goes wrong), across the whole range, subnormals and overflow included.
    fmt = resolve(name)
    rng = np.random.default_rng(7)
    base = rng.standard_normal(300) * np.exp2(rng.integers(-140, 128, 300).astype(float))
    grid = [float(v) for v in round_to(base, name).astype(np.float64) if np.isfinite(v)]
    values = []
    for v in grid:
        half = float(ulp(v, name)) / 2
        for off in (half, -half, half * (1 + 2.0**-30), half * (1 - 2.0**-30), half * 0.25):
            values.append(v + off)
    values += [fmt.max + float(ulp(fmt.max, name)) / 2 * s for s in (0.999, 1.0, 1.001)]
    values += [fmt.smallest_subnormal * f for f in (0.5, 0.5000001, 0.4999999, 1.5, 2.5)]
    values += [1e-300, -1e-300, 1e300]
    got = round_to(np.array(values), name).astype(np.float64)
    want = np.array([_exact_rounding(v, name) for v in values])
    bad = np.flatnonzero(~((got == want) & (np.signbit(got) == np.signbit(want))))
    assert bad.size == 0, [(values[i], got[i], want[i]) for i in bad[:5]]
