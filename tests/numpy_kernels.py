"""Kernels for calibrating the tolerance model: correct ones (numpy simulations of what real
kernels compute, and torch's SDPA math backend), and precision bugs the bound must catch.

The precision half of the gallery (tests/gallery.py holds the torch kernels): shared by
tests/test_tolerance.py and bench/calibrate.py, so the calibration and the tests judge the
same kernels.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
LOG2E = np.float32(1.4426950408889634)  # log2(e), rounded to fp32 as tl.exp uses it


def _finite_max(xf: np.ndarray) -> np.ndarray:
    m = xf.max(axis=-1, keepdims=True)
    return np.where(np.isneginf(m), np.zeros_like(m), m)  # guard: fully masked rows


def _parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xf = x.astype(np.float32)
    m = _finite_max(xf)
    return xf, m, np.exp(xf - m)


# --- correct ----------------------------------------------------------------------------------


def softmax_fast_exp(x: np.ndarray) -> np.ndarray:
    """What a Triton kernel with tl.exp computes: exp2(fl32(z·log2e)), fp32 sum and division."""
    xf = x.astype(np.float32)
    z = (xf - _finite_max(xf)).astype(np.float32)
    e = np.exp2((z * LOG2E).astype(np.float32)).astype(np.float32)
    s = e.sum(axis=-1, keepdims=True, dtype=np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, e / s, np.float32(0)).astype(np.float32).astype(x.dtype)


def softmax_np32(x: np.ndarray) -> np.ndarray:
    """The textbook float32 numpy softmax with np.exp."""
    xf = x.astype(np.float32)
    e = np.exp(xf - _finite_max(xf))
    s = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, e / s, np.float32(0)).astype(x.dtype)


def attention_sdpa_math(case) -> np.ndarray:  # type: ignore[no-untyped-def]
    """torch SDPA's math backend on a strategies ``AttentionCase`` (grouped-query included)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from onlinesm.dtypes import to_numpy

    (q, k, v), kw = case.torch_args()
    with sdpa_kernel([SDPBackend.MATH]):
        o = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=kw["mask"], is_causal=kw["causal"], scale=kw["scale"],
            enable_gqa=q.shape[1] != k.shape[1])
    return to_numpy(o)


# --- precision bugs ---------------------------------------------------------------------------


def bug_bf16_sum(x: np.ndarray) -> np.ndarray:
    """Bug: the denominator accumulated in bf16 (rounded after every addition)."""
    _, _, e = _parts(x)
    s = np.zeros(x.shape[:-1] + (1,), dtype=BF16)
    for j in range(x.shape[-1]):
        s = (s.astype(np.float32) + e[..., j : j + 1]).astype(BF16)
    return (e / s.astype(np.float32)).astype(x.dtype)


def bug_bf16_exp(x: np.ndarray) -> np.ndarray:
    """Bug: exp evaluated in bf16."""
    xf, m, _ = _parts(x)
    e = np.exp((xf - m).astype(BF16).astype(np.float32)).astype(BF16).astype(np.float32)
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def bug_rough_exp(x: np.ndarray, accuracy: float = 1e-3) -> np.ndarray:
    """Bug: a cheap exp good to ``accuracy`` relative (a short polynomial)."""
    xf, _, e = _parts(x)
    wobble = np.sin(np.arange(x.shape[-1]) * 12.9898 + np.where(np.isfinite(xf), xf, 0) * 78.233)
    e = (e * (1 + accuracy * wobble)).astype(np.float32)
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def bug_sentinel(x: np.ndarray) -> np.ndarray:
    """Bug: the running max starts at the finite sentinel -1e30."""
    xf = x.astype(np.float32)
    m = np.maximum(np.float32(-1e30), xf.max(axis=-1, keepdims=True))
    e = np.exp(xf - m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def bug_off_by_one(x: np.ndarray) -> np.ndarray:
    """Bug: the normalisation leaves out the last element."""
    _, _, e = _parts(x)
    return (e / (e.sum(axis=-1, keepdims=True) - e[..., -1:])).astype(x.dtype)
