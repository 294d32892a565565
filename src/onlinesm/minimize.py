"""onlinesm's own minimiser: from a failing batch to the smallest failing row.

Hypothesis shrinks the *recipe* of a batch (family, length, seed ...), not its values, so a
failing example can still be a batch of 8 rows of 4096. This module reduces the input itself
while the property keeps failing (docs/conventions.md):

1. keep the one failing row (the property names it; else try each row alone);
2. cut its length: remove chunks, halving their size (delta debugging), trying chunks that hold
   no special entry (the max, -inf, NaN) first, so the entries that trigger the bug stay;
   never below the domain's ``min_len``, and in chunks of ``len_multiple``, so that every
   candidate is an input the kernel declared it takes;
3. simplify the values: replace entries with 0 or round them to small integers, in bulk.

Every candidate keeps the input's dtype, so the printed row is a real input of that dtype.
The number of property evaluations is capped (each runs the kernel).

Example:
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0, np.nan, 2.0]], np.float32)
    >>> minimise_rows(x, lambda r: bool(np.isnan(r).any())).tolist()
    [[nan]]
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

__all__ = ["minimise_rows"]


class _Budget:
    def __init__(self, calls: int, seconds: float) -> None:
        self.calls, self.deadline = calls, time.monotonic() + seconds

    def spend(self) -> bool:
        self.calls -= 1
        return self.calls >= 0 and time.monotonic() < self.deadline


def _special(row: np.ndarray) -> np.ndarray:
    r = row.astype(np.float64)
    finite = np.isfinite(r)
    top = r[finite].max() if finite.any() else np.nan
    return ~finite | (r == top)


def minimise_rows(
    x: np.ndarray,
    fails: Callable[[np.ndarray], bool],
    *,
    worst_row: int | None = None,
    max_calls: int = 120,
    max_seconds: float = 60.0,
    min_len: int = 1,
    len_multiple: int = 1,
) -> np.ndarray:
    """The smallest 2-D input (one row if possible) on which ``fails`` still holds.

    ``fails(candidate)`` runs the property and returns True when it is still falsified; any
    exception it raises counts as "does not fail" (a different bug is not the one we chase).
    Rows stay at least ``min_len`` long, and a length that is a multiple of ``len_multiple``
    stays one.
    """
    budget = _Budget(max_calls, max_seconds)

    def still(c: np.ndarray) -> bool:
        if not budget.spend():
            return False
        try:
            return bool(fails(np.ascontiguousarray(c)))
        except Exception:  # noqa: BLE001 - a different failure is not this one
            return False

    best = x
    # 1. one row
    if best.shape[0] > 1:
        order = ([worst_row] if worst_row is not None else []) + [
            r for r in range(best.shape[0]) if r != worst_row]
        for r in order[:8]:
            if still(best[r : r + 1]):
                best = best[r : r + 1]
                break
    # 2. shorter: remove chunks, plain ones (no max, -inf, NaN) first
    m = len_multiple
    chunk = best.shape[-1] // 2 // m * m
    while chunk >= m and best.shape[-1] > max(1, min_len):
        removed = False
        special = _special(best[0]) if best.shape[0] == 1 else np.zeros(best.shape[-1], bool)
        starts = list(range(0, best.shape[-1], chunk))
        starts.sort(key=lambda s: bool(special[s : s + chunk].any()))
        for s in starts:
            if best.shape[-1] - chunk < max(1, min_len):
                break
            cand = np.concatenate([best[..., :s], best[..., s + chunk :]], axis=-1)
            if cand.shape[-1] >= 1 and still(cand):
                best, removed = cand, True
                break
        if not removed:
            chunk = chunk // 2 // m * m
        if budget.calls <= 0:
            break
    # 3. simpler values: zeros, then integers, for the finite non-special entries
    for simplify in (lambda v: np.zeros_like(v), np.round):
        r64 = best.astype(np.float64)
        plain = np.isfinite(r64) & ~np.stack([_special(row) for row in best])
        if not plain.any():
            break
        cand = np.where(plain, simplify(r64), r64).astype(best.dtype)
        if not np.array_equal(cand, best, equal_nan=True) and still(cand):
            best = cand
    return best
