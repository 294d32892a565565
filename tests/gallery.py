"""A gallery of softmax and attention kernels: one deliberately buggy kernel per bug class,
beside correct kernels. The suite must catch every bug and pass every correct kernel.

All kernels take torch tensors (CPU) and follow the calling conventions of DESIGN.md section 3.
Each buggy kernel is a correct online softmax/attention with exactly one thing wrong, so a
catch says that onlinesm sees *that* bug.
"""

from __future__ import annotations

import math

import torch

# ---------------------------------------------------------------------------------------------
# Softmax: a correct tiled online softmax, with switches for each bug


def _online_softmax(
    x: torch.Tensor,
    *,
    tile: int = 64,
    init_max: float = -math.inf,
    guard: bool = True,
    rescale: bool = True,
    acc: torch.dtype = torch.float32,
    drop_tail: bool = False,
) -> torch.Tensor:
    """Tiled (m, d) recurrence in float32 (or ``acc``), then a normalising second pass."""
    xf = x.float()
    rows, n = xf.shape
    m = torch.full((rows, 1), init_max)
    d = torch.zeros((rows, 1), dtype=acc)
    end = (n // tile) * tile if drop_tail and n > tile else n
    for s in range(0, end, tile):
        t = xf[:, s : s + tile]
        m_new = torch.maximum(m, t.amax(dim=1, keepdim=True))
        ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new) if guard else m_new
        alpha = torch.exp(m - ref) if rescale else torch.ones_like(m)
        p = torch.exp(t - ref)
        if acc == torch.float32:
            d = d * alpha + p.sum(dim=1, keepdim=True)
        else:  # accumulate in a low-precision dtype: round after every addition
            d = (d.float() * alpha).to(acc)
            for j in range(p.shape[1]):
                d = (d.float() + p[:, j : j + 1]).to(acc)
        m = m_new
    ref = torch.where(torch.isneginf(m), torch.zeros_like(m), m) if guard else m
    d = d.float()
    y = torch.exp(xf - ref) / d
    if guard:
        y = torch.where(d > 0, y, torch.zeros_like(y))
    return y.to(x.dtype)


def correct_online(x: torch.Tensor) -> torch.Tensor:
    """Correct: -inf start, guarded max, float32 sums, every tile."""
    return _online_softmax(x)


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    """Correct (declare fully_masked='nan'): torch's own softmax."""
    return torch.softmax(x, dim=-1)


def bug_sentinel_max(x: torch.Tensor) -> torch.Tensor:
    """Running max initialised to -1e30: rows whose values all lie below it are garbage."""
    return _online_softmax(x, init_max=-1e30)


def bug_unguarded_masked_tile(x: torch.Tensor) -> torch.Tensor:
    """No guard: a fully masked tile evaluates exp(-inf - -inf) = NaN."""
    return _online_softmax(x, guard=False)


def bug_missing_rescale(x: torch.Tensor) -> torch.Tensor:
    """The old sum is not rescaled when the max grows (alpha forgotten)."""
    return _online_softmax(x, rescale=False)


def bug_bf16_accumulation(x: torch.Tensor) -> torch.Tensor:
    """The running sum is accumulated in bf16."""
    return _online_softmax(x, acc=torch.bfloat16)


def bug_drops_tail(x: torch.Tensor) -> torch.Tensor:
    """The last partial tile is never added to the sum."""
    return _online_softmax(x, drop_tail=True)


def bug_no_max_subtraction(x: torch.Tensor) -> torch.Tensor:
    """exp(x) without subtracting the max: overflows on large inputs."""
    e = torch.exp(x.float())
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def bug_coarse_exp(x: torch.Tensor) -> torch.Tensor:
    """exp with a relative error of about 4e-3 (computed in bf16): far outside the fast-exp class."""
    xf = x.float()
    m = xf.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp((xf - m).bfloat16()).float()
    d = e.sum(dim=-1, keepdim=True)
    return torch.where(d > 0, e / d, torch.zeros_like(e)).to(x.dtype)


def bug_fully_masked_nan(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax, but run under the default convention fully_masked='zeros'."""
    return torch.softmax(x, dim=-1)


def bug_batch_max(x: torch.Tensor) -> torch.Tensor:
    """Subtracts the batch's max instead of each row's: rows far below it underflow to 0/0."""
    xf = x.float()
    finite = torch.where(torch.isfinite(xf), xf, torch.full_like(xf, -math.inf))
    m = finite.max()
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(xf - m)
    d = e.sum(dim=-1, keepdim=True)
    return torch.where(d > 0, e / d, torch.zeros_like(e)).to(x.dtype)


def bug_mutates_input(x: torch.Tensor) -> torch.Tensor:
    """Subtracts the max in place, changing the caller's tensor."""
    y = torch.softmax(x.float(), dim=-1)
    x.sub_(x.amax(dim=-1, keepdim=True).nan_to_num(0.0, 0.0, 0.0))
    return torch.where(torch.isnan(y), torch.zeros_like(y), y).to(x.dtype)


def bug_wrong_dtype(x: torch.Tensor) -> torch.Tensor:
    """Returns float32 whatever the input dtype."""
    return correct_online(x).float()


def bug_nondeterministic(x: torch.Tensor) -> torch.Tensor:
    """Adds one-ulp noise at random, as a racy reduction might."""
    y = correct_online(x)
    noise = torch.rand(y.shape) < 0.5
    return torch.where(noise & (y > 0), torch.nextafter(y, torch.ones_like(y)), y)


def bug_refuses_long_rows(x: torch.Tensor) -> torch.Tensor:
    """Raises for rows longer than 256 (a valid input the kernel must handle)."""
    if x.shape[-1] > 256:
        raise ValueError("row too long")
    return correct_online(x)


# ---------------------------------------------------------------------------------------------
# Attention


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask=None, causal=False, scale=None,
    return_lse: bool = False, tile: int = 16, guard: bool = True, align: str = "top-left",
    default_scale=None, pv_acc: torch.dtype = torch.float32, finite_mask: float | None = None,
):
    """A tiled online attention in float32 with the (m, d, o) state; switches for each bug."""
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    kx = k.float().repeat_interleave(h // hkv, dim=1)
    vx = v.float().repeat_interleave(h // hkv, dim=1)
    sc = scale if scale is not None else (default_scale(dim) if default_scale else 1.0 / math.sqrt(dim))
    visible = torch.ones((b, h, sq, sk), dtype=torch.bool)
    if mask is not None:
        visible = visible & mask.expand(b, h, sq, sk)
    if causal:
        off = 0 if align == "top-left" else sk - sq
        visible = visible & (torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + off)
    m = torch.full((b, h, sq, 1), -math.inf)
    d = torch.zeros((b, h, sq, 1))
    o = torch.zeros((b, h, sq, dim), dtype=pv_acc)
    for s in range(0, sk, tile):
        sc_t = (q.float() @ kx[:, :, s : s + tile].transpose(-1, -2)) * sc
        vis = visible[..., s : s + tile]
        fill = -math.inf if finite_mask is None else finite_mask
        sc_t = torch.where(vis, sc_t, torch.full_like(sc_t, fill))
        m_new = torch.maximum(m, sc_t.amax(dim=-1, keepdim=True))
        ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new) if guard else m_new
        alpha = torch.exp(m - ref)
        p = torch.exp(sc_t - ref)
        d = d * alpha + p.sum(dim=-1, keepdim=True)
        o = (o.float() * alpha + p @ vx[:, :, s : s + tile]).to(pv_acc)
        m = m_new
    o = o.float()
    out = torch.where(d > 0, o / d, torch.zeros_like(o)) if guard else o / d
    lse = torch.where(d[..., 0] > 0, m[..., 0] + torch.log(d[..., 0]), torch.full_like(d[..., 0], -math.inf))
    out = out.to(q.dtype)
    return (out, lse.float()) if return_lse else out


def correct_attention(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Correct: guarded online attention, float32 state, lse returned on request."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse)


def sdpa_math(q, k, v, *, mask=None, causal=False, scale=None):
    """Correct (declare fully_masked='nan' or 'any'): torch SDPA, math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        if causal and mask is not None:
            sq, sk = q.shape[2], k.shape[2]
            mask = mask & torch.ones(sq, sk, dtype=torch.bool).tril()
            causal = False
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=scale)


def bug_attn_unguarded(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """A fully masked KV tile gives exp(-inf - -inf) = NaN."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse, guard=False)


def bug_attn_causal_bottom_right(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Aligns the causal mask bottom-right while top-left (SDPA) is declared."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      align="bottom-right")


def bug_attn_scale_1_over_d(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Default scale 1/D instead of 1/sqrt(D)."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      default_scale=lambda dim: 1.0 / dim)


def bug_attn_bf16_pv(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """The output accumulator o is kept in bf16 across KV tiles."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      pv_acc=torch.bfloat16, tile=4)


def bug_attn_finite_mask(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Masks with a finite -1e4 instead of -inf: masked keys leak when logits are huge or no key is visible."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      finite_mask=-1e4)
