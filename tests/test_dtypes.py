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
