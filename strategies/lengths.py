"""Row lengths that sit where tiled kernels branch: powers of two, tile sizes, and ±1 around them.

A kernel that processes a row in tiles of 64, 128, 256 or 1024 has its edge cases at multiples
of the tile (the last tile exactly full) and one past them (a last tile of one element), and
one below (a partial last tile with a single padded lane). Uniform lengths almost never hit
them; :func:`row_lengths` draws them about two times in three, and reaches 65,536 and beyond
when ``max_len`` allows (the length where some kernels switch strategy or refuse).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ._validate import InvalidArgument, check_int, check_int_range

__all__ = ["TILE_SIZES", "MAX_LENGTH", "interesting_lengths", "row_lengths", "random_length",
           "tile_bounds"]

#: Tile widths common in softmax / attention kernels (Triton BLOCK sizes, FlashAttention tiles).
TILE_SIZES: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)

#: The largest row length the strategies accept (2**26 elements; one float64 row is 512 MiB).
MAX_LENGTH: int = 2**26

_EXTRA = (3, 5, 7, 100, 384, 640, 1000, 1536, 3072, 50257, 65536 + 64, 3 * 65536)


def interesting_lengths(min_len: int, max_len: int) -> tuple[int, ...]:
    """Sorted lengths in [min_len, max_len]: 2**k - 1, 2**k, 2**k + 1, tile multiples ± 1,
    a few vocabulary-like sizes, and both ends of the range.

    >>> interesting_lengths(60, 70)
    (60, 63, 64, 65, 70)
    """
    found = {min_len, max_len, 1, 2}
    k = 1
    while k <= 2 * max_len:
        found |= {k - 1, k, k + 1}
        k *= 2
    for tile in TILE_SIZES:
        for mult in (1, 2, 3):
            found |= {mult * tile - 1, mult * tile, mult * tile + 1}
    found |= set(_EXTRA)
    return tuple(sorted(n for n in found if min_len <= n <= max_len))


def row_lengths(*, min_len: int = 1, max_len: int = 4096) -> st.SearchStrategy[int]:
    """Row lengths in [min_len, max_len], clustered at and around powers of two and tiles.

    Two draws in three come from :func:`interesting_lengths`, one in three is log-uniform over
    the range. Shrinks towards ``min_len``.

    >>> 1 <= row_lengths(max_len=300).example() <= 300
    True
    """
    check_int("min_len", min_len, min_value=1, max_value=MAX_LENGTH)
    check_int("max_len", max_len, min_value=1, max_value=MAX_LENGTH)
    check_int_range("min_len", min_len, "max_len", max_len)
    special = st.sampled_from(interesting_lengths(min_len, max_len))
    top_exp = int(np.log2(max_len))

    @st.composite
    def _lengths(draw: st.DrawFn) -> int:
        kind = draw(st.integers(0, 2))
        if kind == 0:
            return draw(special)
        if kind == 1:
            return draw(st.integers(min_len, max_len))
        e = draw(st.integers(0, top_exp))  # log-uniform: a binade, then a length in it
        lo, hi = max(min_len, 2**e), min(max_len, 2 ** (e + 1))
        return draw(st.integers(lo, hi)) if lo <= hi else min_len

    # kind 0 first: Hypothesis shrinks `kind` to 0 and then the sampled index to min_len.
    return _lengths()


def random_length(rng: np.random.Generator, min_len: int = 1, max_len: int = 4096) -> int:
    """The numpy twin of :func:`row_lengths` for seeded generation without Hypothesis."""
    kind = rng.integers(0, 3)
    if kind == 0:
        lengths = interesting_lengths(min_len, max_len)
        return int(lengths[rng.integers(0, len(lengths))])
    if kind == 1:
        return int(rng.integers(min_len, max_len + 1))
    e = int(rng.integers(0, int(np.log2(max_len)) + 1))
    lo, hi = max(min_len, 2**e), min(max_len, 2 ** (e + 1))
    return int(rng.integers(lo, hi + 1)) if lo <= hi else min_len


def tile_bounds(min_len: int, max_len: int, multiple: int) -> tuple[int, int]:
    """(shortest, longest) row length in ``min_len..max_len`` that is a multiple of
    ``multiple`` (a kernel's tile); InvalidArgument, naming the fix, when there is none.

    >>> tile_bounds(1, 8193, 128)
    (128, 8192)
    """
    lo, hi = -(-min_len // multiple) * multiple, max_len // multiple * multiple
    if lo > hi:
        raise InvalidArgument(f"len_multiple={multiple}: no row length in min_len={min_len}.."
                              f"max_len={max_len} is a multiple of it; raise max_len to {lo} or "
                              "more")
    return lo, hi
