"""The floating-point formats onlinesm knows: one table, exact conversions, ulps.

Everything that needs to know "how precise is bf16" reads it here, so the tolerance model,
the strategies and the harness agree on one set of constants. numpy has no bfloat16, so
``ml_dtypes.bfloat16`` stands in; torch dtypes are resolved lazily, so importing this module
never imports torch.

Example:
    >>> from onlinesm.dtypes import resolve, ulp
    >>> resolve("bf16").precision
    8
    >>> float(ulp(1.0, "float16"))
    0.0009765625
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "FloatFormat",
    "FORMATS",
    "resolve",
    "ulp",
    "round_to",
    "to_numpy",
    "to_torch",
    "to_hex",
    "from_hex",
    "same_bits",
]


@dataclasses.dataclass(frozen=True)
class FloatFormat:
    """One IEEE-style binary format: its numpy type and the constants error analysis uses.

    ``precision`` is p, the significand width including the implicit bit, so the unit
    roundoff (round to nearest) is ``u = 2**-p`` and the machine epsilon ``2**(1-p)``.
    """

    name: str
    numpy: np.dtype
    bits_dtype: np.dtype  # unsigned integer of the same width, to view the bits
    precision: int
    max: float  # largest finite value
    tiny: float  # smallest positive normal value
    smallest_subnormal: float

    @property
    def u(self) -> float:
        """Unit roundoff for round-to-nearest: half the gap between 1 and the next value."""
        return 2.0 ** -self.precision

    @property
    def eps(self) -> float:
        """Machine epsilon: the gap between 1 and the next representable value."""
        return 2.0 ** (1 - self.precision)

    @property
    def bits(self) -> int:
        return self.numpy.itemsize * 8

    def round(self, x: Any) -> np.ndarray:
        """``x`` rounded to this format once (to nearest, ties to even), as its numpy type.

        The same bits whatever the numpy and ml_dtypes versions: numpy rounds float64 to
        float32 and float16 once, but ml_dtypes rounded float64 to bfloat16 through float32
        before 0.7 (twice: a value just past a bf16 tie could land on the wrong side) and
        once since. Here float64 goes to bfloat16 through float32 rounded *to odd*, which
        makes the second rounding exact (float32 has 16 more bits than bf16; 2 suffice).

        >>> x = 1 + 2**-8 + 2**-30  # just past the tie between 1 and 1 + 2**-7
        >>> float(resolve("bf16").round(x)), float(resolve("bf16").round(1 + 2**-8))
        (1.0078125, 1.0)
        """
        a = np.asarray(x)
        if self.name != "bfloat16" or a.dtype != np.float64:
            with np.errstate(over="ignore"):  # past the format's range: inf, as it should
                return a.astype(self.numpy)
        with np.errstate(over="ignore", invalid="ignore"):
            f = a.astype(np.float32)  # to nearest; now make it round to odd:
            back = f.astype(np.float64)
            inexact = (back != a) & ~np.isnan(a)
            # rounded away from zero: step back one float32 toward zero (inf: to the max) ...
            f = np.where(inexact & (np.abs(back) > np.abs(a)), np.nextafter(f, np.float32(0)), f)
        # ... then an inexact value gets its last bit set: it lies strictly between two bf16
        # halfway points exactly when the exact value does
        odd = np.asarray(f, dtype=np.float32).view(np.uint32) | inexact.astype(np.uint32)
        return odd.view(np.float32).astype(self.numpy)

    @property
    def torch(self) -> Any:
        """The matching ``torch.dtype`` (imports torch on first use)."""
        import torch

        return getattr(torch, self.name)

    def __str__(self) -> str:
        return self.name


def _format(name: str, np_type: Any, bits_type: Any, precision: int) -> FloatFormat:
    info = ml_dtypes.finfo(np_type) if np_type is ml_dtypes.bfloat16 else np.finfo(np_type)
    return FloatFormat(
        name=name,
        numpy=np.dtype(np_type),
        bits_dtype=np.dtype(bits_type),
        precision=precision,
        max=float(info.max),
        tiny=float(info.smallest_normal),
        smallest_subnormal=float(info.smallest_subnormal),
    )


#: The four formats, keyed by their canonical (torch) name.
FORMATS: dict[str, FloatFormat] = {
    "float64": _format("float64", np.float64, np.uint64, 53),
    "float32": _format("float32", np.float32, np.uint32, 24),
    "float16": _format("float16", np.float16, np.uint16, 11),
    "bfloat16": _format("bfloat16", ml_dtypes.bfloat16, np.uint16, 8),
}

_ALIASES = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
}


def resolve(dtype: Any) -> FloatFormat:
    """Return the :class:`FloatFormat` for a name, numpy dtype, torch dtype or FloatFormat.

    >>> resolve("fp16").name, resolve(np.float32).name
    ('float16', 'float32')
    """
    if isinstance(dtype, FloatFormat):
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
    else:
        text = str(dtype)
        if text.startswith("torch."):
            return resolve(text)
        try:
            np_dtype = np.dtype(dtype)
        except TypeError:
            np_dtype = None
        for fmt in FORMATS.values():
            if np_dtype == fmt.numpy:
                return fmt
    raise ValueError(
        f"dtype={dtype!r} is not a floating-point format onlinesm supports; "
        f"use one of {', '.join(FORMATS)} (or bf16, fp16, fp32, fp64)"
    )


def ulp(x: Any, dtype: Any) -> np.ndarray:
    """The spacing of ``dtype``'s values at ``|x|`` (unit in the last place), as float64.

    For ``|x|`` in [2**e, 2**(e+1)) that is ``2**(e - p + 1)``; below the smallest normal
    it is the subnormal spacing. Zero has the subnormal spacing; inf and NaN give NaN.

    >>> float(ulp(3.0, "bf16"))
    0.015625
    """
    fmt = resolve(dtype)
    a = np.abs(np.asarray(x, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        _, exponent = np.frexp(a)  # a = f * 2**exponent with f in [0.5, 1)
        spacing = np.ldexp(1.0, exponent - fmt.precision)
    spacing = np.where(a < fmt.tiny, fmt.smallest_subnormal, spacing)
    return np.where(np.isfinite(a), spacing, np.nan)


def round_to(x: Any, dtype: Any) -> np.ndarray:
    """Round ``x`` to ``dtype`` once (to nearest, ties to even) and return it as that numpy
    type (see :meth:`FloatFormat.round`).

    >>> float(round_to(1 / 3, "bf16"))
    0.333984375
    """
    return resolve(dtype).round(x)


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor (any device) or array-like as a numpy array, with the exact bits kept.

    bf16 tensors become ``ml_dtypes.bfloat16`` arrays through their bit pattern, so no value
    is rounded on the way.
    """
    if type(t).__module__.startswith("torch"):
        import torch

        t = t.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy().copy()
    return np.asarray(t)


def to_torch(a: Any, device: Any = "cpu") -> Any:
    """A numpy array as a torch tensor on ``device``, bits kept (bf16 included)."""
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(a.copy()).to(device)


def to_hex(a: np.ndarray) -> list[str]:
    """The bit patterns of a flat array as hex strings: exact, portable, NaN and inf included."""
    fmt = resolve(a.dtype)
    width = fmt.bits // 4
    return [format(int(b), f"0{width}x") for b in np.ravel(a).view(fmt.bits_dtype)]


def from_hex(words: list[str], dtype: Any) -> np.ndarray:
    """Inverse of :func:`to_hex`: a flat array of ``dtype`` from its bit patterns."""
    fmt = resolve(dtype)
    bits = np.array([int(w, 16) for w in words], dtype=fmt.bits_dtype)
    return bits.view(fmt.numpy)


def same_bits(a: Any, b: Any) -> bool:
    """True when two arrays have the same shape, dtype and bits (NaN payloads, -0.0 included).

    The bitwise equality that determinism, batch invariance and "inputs unchanged" demand;
    works on non-contiguous views too.
    """
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
