"""Every property's bound arrays, bit for bit, and its verdicts are those of the stored snapshot.

The snapshot (``bench/verdict_snapshot.py``, stored in ``tests/data/verdict_snapshot.*``) runs
fixed inputs through the gallery's and the built-in kernels under every property. Correct
kernels reach 0.999 of the bf16 bound, so a change that moves an exact computation (a different
summation order, one more rounding) can flip a near-tie: this test sees it as a changed digest.
The kernels' own outputs differ in their last bits between CPUs (torch's vector kernels), so
they enter as verdicts and counts only. Regenerate the snapshot only for an intended change of
the bounds or the verdicts, and say so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def test_bounds_and_verdicts_match_the_snapshot() -> None:
    import verdict_snapshot

    from onlinesm.kernels import use_interpreter

    use_interpreter(True)
    diffs = verdict_snapshot.compare_with_stored()
    assert not diffs, f"{len(diffs)} records differ, first ones:\n" + "\n".join(diffs[:20])


def test_the_snapshot_sees_a_bound_moved_by_one_ulp_and_ignores_the_kernels_last_bits(
        monkeypatch) -> None:
    # onlinesm's own arithmetic is recorded bit for bit; a kernel's output enters only through
    # verdicts and counts, which a correct kernel's last bits (torch's CPU kernels differ by
    # instruction set) do not move.
    import dataclasses

    import numpy as np
    import verdict_snapshot

    from onlinesm import properties as P
    from onlinesm.kernels import use_interpreter

    use_interpreter(True)
    inputs = {k: v for k, v in verdict_snapshot.load_inputs().items() if k == "sm/float32/130"}
    base = verdict_snapshot.compute(inputs)
    real_bound = P.softmax_bound

    def nudged(*a, **kw):
        b = real_bound(*a, **kw)
        return dataclasses.replace(b, abs=np.nextafter(b.abs, np.inf))

    monkeypatch.setattr(P, "softmax_bound", nudged)
    moved = verdict_snapshot.compute(inputs)
    monkeypatch.setattr(P, "softmax_bound", real_bound)
    assert verdict_snapshot.compare_with_stored(moved, stored=base), "a one-ulp bound went unseen"

    import gallery
    import torch

    real_online = gallery.correct_online

    def last_bits(x, *a, **kw):  # the correct kernel, its inexact outputs one ulp up
        y = real_online(x, *a, **kw)
        inexact = (y > 0) & (y < 1)  # exact 0 (masked) and 1 (one visible entry) stay
        return torch.where(inexact, torch.nextafter(y, torch.ones_like(y)), y)

    monkeypatch.setattr(gallery, "correct_online", last_bits)
    wobbled = verdict_snapshot.compute(inputs)
    mine = [k for k in base if k.startswith("gallery.correct_online |")]
    assert len(mine) == 11  # one record per softmax property
    assert not verdict_snapshot.compare_with_stored({k: wobbled[k] for k in mine},
                                                   stored={k: base[k] for k in mine})
