"""Tiled numpy kernels with real tile widths: correct, or NaN when a whole tile is masked.

Gallery-style (tests/gallery.py): each buggy kernel is a correct tiled online softmax /
attention with exactly one thing wrong, here the unguarded rescale ``exp(m_old - m_new)`` and
``exp(s - m_new)`` with ``m_new = -inf``: ``exp(-inf - -inf) = NaN`` once a *whole* tile holds
nothing but masked entries. Real kernels use wide tiles (1024-8192 columns for softmax, 64-256
keys for attention), so the bug only shows on inputs whose masked run covers such a tile:
these kernels let the tests prove that the explicit cases hold one.

numpy in, numpy out (``backend="numpy"``), float32 state, the calling conventions of
docs/conventions.md.

    >>> import numpy as np
    >>> x = np.full((1, 1100), -np.inf, np.float32); x[0, 1050:] = 0.0
    >>> bool(np.isnan(softmax_tiled_unguarded(x)).any()), bool(np.isnan(softmax_tiled(x)).any())
    (True, False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["SOFTMAX_TILE", "ATTENTION_TILE", "softmax_tiled", "softmax_tiled_unguarded",
           "attention_tiled", "attention_tiled_unguarded"]

SOFTMAX_TILE = 1024
ATTENTION_TILE = 128


def _softmax(x: np.ndarray, *, tile: int, guard: bool) -> np.ndarray:
    xf = np.asarray(x).astype(np.float32)
    rows, n = xf.shape
    m = np.full((rows, 1), -np.inf, np.float32)
    d = np.zeros((rows, 1), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for s in range(0, n, tile):
            t = xf[:, s:s + tile]
            m_new = np.maximum(m, t.max(axis=-1, keepdims=True))
            ref = np.where(np.isneginf(m_new), np.float32(0), m_new) if guard else m_new
            d = d * np.exp(m - ref) + np.exp(t - ref).sum(axis=-1, keepdims=True, dtype=np.float32)
            m = m_new
        ref = np.where(np.isneginf(m), np.float32(0), m) if guard else m
        y = np.exp(xf - ref) / d
        if guard:
            y = np.where(d > 0, y, np.float32(0))
    return y.astype(np.asarray(x).dtype)


def softmax_tiled(x: np.ndarray) -> np.ndarray:
    """Correct: tiled online softmax over 1024-column tiles, guarded (fully masked rows: 0)."""
    return _softmax(x, tile=SOFTMAX_TILE, guard=True)


def softmax_tiled_unguarded(x: np.ndarray) -> np.ndarray:
    """Bug: NaN in every row whose first 1024-column tile is entirely -inf."""
    return _softmax(x, tile=SOFTMAX_TILE, guard=False)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, mask: Any, causal: bool,
               scale: float | None, tile: int, guard: bool) -> np.ndarray:
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kv_of = np.arange(h) // (h // hkv)
    qf = np.asarray(q).astype(np.float32)
    kf, vf = (np.asarray(a).astype(np.float32)[:, kv_of] for a in (k, v))
    sc = np.float32(1.0 / math.sqrt(dim) if scale is None else scale)
    visible = np.ones((b, h, sq, sk), bool)
    if mask is not None:
        visible &= np.broadcast_to(np.asarray(mask), (b, h, sq, sk))
    if causal:
        visible &= np.arange(sk)[None, :] <= np.arange(sq)[:, None]
    m = np.full((b, h, sq, 1), -np.inf, np.float32)
    d = np.zeros((b, h, sq, 1), np.float32)
    o = np.zeros((b, h, sq, dim), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for s in range(0, sk, tile):
            st = (qf @ np.swapaxes(kf[:, :, s:s + tile], -1, -2)) * sc
            st = np.where(visible[..., s:s + tile], st, np.float32(-np.inf))
            m_new = np.maximum(m, st.max(axis=-1, keepdims=True))
            ref = np.where(np.isneginf(m_new), np.float32(0), m_new) if guard else m_new
            alpha = np.exp(m - ref)
            p = np.exp(st - ref)
            d = d * alpha + p.sum(axis=-1, keepdims=True, dtype=np.float32)
            o = o * alpha + p @ vf[:, :, s:s + tile]
            m = m_new
        out = np.where(d > 0, o / d, np.float32(0)) if guard else o / d
    return out.astype(np.asarray(q).dtype)


def attention_tiled(q, k, v, *, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """Correct: tiled online attention over 128-key tiles, guarded (no visible key: zeros)."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, tile=ATTENTION_TILE,
                      guard=True)


def attention_tiled_unguarded(q, k, v, *, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    """Bug: NaN for every query whose first 128-key tile is entirely masked."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, tile=ATTENTION_TILE,
                      guard=False)
