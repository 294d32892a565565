"""The explicit cases catch a kernel that goes NaN only when a whole real-size tile is masked:
a 128-key tile in attention, a 1024-column tile in softmax (tests/tile_kernels.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tile_kernels as tk  # noqa: E402

from onlinesm.strategies import (  # noqa: E402
    LEGACY_DOMAIN,
    default_domain,
    explicit_attention_cases,
    explicit_softmax_batches,
)


def _nan_on_live_queries(fn: Any, case: Any) -> bool:
    """NaN in the output of a query that sees at least one key (no-key queries are a
    convention, not this bug)."""
    o = fn(case.q, case.k, case.v, mask=case.mask, causal=case.causal, scale=case.scale)
    b, h, sq, _ = case.q.shape
    sk = case.k.shape[2]
    visible = np.ones((b, h, sq, sk), bool)
    if case.mask is not None:
        visible &= np.broadcast_to(case.mask, visible.shape)
    if case.causal:
        visible &= np.arange(sk)[None, :] <= np.arange(sq)[:, None]
    live = visible.any(axis=-1)
    return bool(np.isnan(o.astype(np.float64))[live].any())


def _nan_on_regular_rows(fn: Any, batch: Any) -> bool:
    """NaN in a row that holds a finite entry (fully masked rows follow a convention)."""
    y = fn(batch.x).astype(np.float64)
    regular = np.isfinite(batch.x.astype(np.float64)).any(axis=-1)
    return bool(np.isnan(y)[regular].any())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_explicit_attention_cases_catch_a_nan_on_a_masked_128_key_tile(dtype: str) -> None:
    cases = explicit_attention_cases(dtype, default_domain())
    assert any(_nan_on_live_queries(tk.attention_tiled_unguarded, c) for c in cases)
    assert not any(_nan_on_live_queries(tk.attention_tiled, c) for c in cases)
    # the correct kernel is correct, not merely NaN-free
    c = next(c for c in cases if c.family == "masked_leading_tiles" and c.k.shape[2] > 128)
    from onlinesm import oracle

    o, _ = oracle.attention(c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale)
    got = tk.attention_tiled(c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale)
    assert np.allclose(got.astype(np.float64), o, atol=0.05, rtol=0.05)


def test_the_legacy_explicit_attention_cases_miss_it() -> None:
    """Why the defaults grew: with Sk <= 96 no 128-key tile is ever masked whole."""
    cases = explicit_attention_cases("float32", default_domain(**LEGACY_DOMAIN))
    assert not any(_nan_on_live_queries(tk.attention_tiled_unguarded, c) for c in cases)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_explicit_softmax_batches_catch_a_nan_on_a_masked_1024_tile(dtype: str) -> None:
    batches = explicit_softmax_batches(dtype, default_domain())
    assert any(_nan_on_regular_rows(tk.softmax_tiled_unguarded, b) for b in batches)
    assert not any(_nan_on_regular_rows(tk.softmax_tiled, b) for b in batches)
    assert not any(np.isnan(tk.softmax_tiled(b.x).astype(np.float64)).any() for b in batches)


def test_the_legacy_explicit_softmax_batches_miss_it() -> None:
    batches = explicit_softmax_batches("float32", default_domain(**LEGACY_DOMAIN))
    assert not any(_nan_on_regular_rows(tk.softmax_tiled_unguarded, b) for b in batches)
