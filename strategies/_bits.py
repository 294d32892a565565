"""Ordinals: the values of a format as consecutive integers (x < y iff ord(x) < ord(y)).

Walking ordinals is how the generators step "one ulp" exactly in any format, bf16 included,
without arithmetic in that format: nextup(x) = from_ordinals(ordinals(x) + 1). +0 and -0 both
map to 0 (and 0 maps back to +0). Only finite values are meaningful.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onlinesm.dtypes import FloatFormat

__all__ = ["ordinals", "from_ordinals", "max_ordinal", "tiny_ordinal"]


def _sign(fmt: FloatFormat) -> np.uint64:
    return np.uint64(1) << np.uint64(fmt.bits - 1)


def ordinals(x: Any, fmt: FloatFormat) -> np.ndarray:
    """int64 ordinals of ``x`` (already of ``fmt`` or exactly representable in it)."""
    a = fmt.round(x)
    bits = a.view(fmt.bits_dtype).astype(np.uint64)
    sign = _sign(fmt)
    mag = (bits & (sign - np.uint64(1))).astype(np.int64)
    return np.where((bits & sign) != 0, -mag, mag)


def from_ordinals(o: Any, fmt: FloatFormat) -> np.ndarray:
    """The values of ``fmt`` with ordinals ``o`` (inverse of :func:`ordinals`)."""
    o = np.asarray(o, dtype=np.int64)
    mag = np.abs(o).astype(np.uint64)
    bits = np.where(o < 0, mag | _sign(fmt), mag).astype(fmt.bits_dtype)
    return bits.view(fmt.numpy)


def max_ordinal(fmt: FloatFormat) -> int:
    """Ordinal of the largest finite value (so -max has ``-max_ordinal``)."""
    return int(ordinals(fmt.max, fmt))


def tiny_ordinal(fmt: FloatFormat) -> int:
    """Ordinal of the smallest positive normal value (subnormals lie strictly below)."""
    return int(ordinals(fmt.tiny, fmt))
