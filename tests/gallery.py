"""A gallery of softmax and attention kernels: one deliberately buggy kernel per bug class,
beside correct kernels. The suite must catch every bug and pass every correct kernel.

All kernels take torch tensors (CPU) and follow the calling conventions of docs/conventions.md.
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
    pad_tail: float | None = None,
    inverted_rescale: bool = False,
    exp=torch.exp,
) -> torch.Tensor:
    """Tiled (m, d) recurrence in float32 (or ``acc``), then a normalising second pass.

    ``pad_tail``: pad the last partial tile with this value (a masked load's ``other=``);
    ``inverted_rescale``: alpha = exp(m_new - m_old) (guarded on the first tile);
    ``exp``: the exp function used throughout.
    """
    xf = x.float()
    rows, n = xf.shape
    m = torch.full((rows, 1), init_max)
    d = torch.zeros((rows, 1), dtype=acc)
    end = (n // tile) * tile if drop_tail and n > tile else n
    for s in range(0, end, tile):
        t = xf[:, s : s + tile]
        if pad_tail is not None and t.shape[1] < tile:
            t = torch.cat([t, torch.full((rows, tile - t.shape[1]), pad_tail)], dim=1)
        m_new = torch.maximum(m, t.amax(dim=1, keepdim=True))
        ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new) if guard else m_new
        if inverted_rescale:
            alpha = torch.where(torch.isneginf(m), torch.ones_like(m), exp(ref - m))
        else:
            alpha = exp(m - ref) if rescale else torch.ones_like(m)
        p = exp(t - ref)
        if acc == torch.float32:
            d = d * alpha + p.sum(dim=1, keepdim=True)
        else:  # accumulate in a low-precision dtype: round after every addition
            d = (d.float() * alpha).to(acc)
            for j in range(p.shape[1]):
                d = (d.float() + p[:, j : j + 1]).to(acc)
        m = m_new
    ref = torch.where(torch.isneginf(m), torch.zeros_like(m), m) if guard else m
    d = d.float()
    y = exp(xf - ref) / d
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


def bug_batch_variant(x: torch.Tensor) -> torch.Tensor:
    """Batch-variant reduction order: tile 64 for a single row, 32 for a batch (as a kernel that
    picks its split by occupancy). Accurate (passes the default suite), but a row's bits depend
    on the batch: caught only when ``batch_invariant=True`` is declared."""
    return _online_softmax(x, tile=64 if x.shape[0] == 1 else 32)


def _exp_1e4(z: torch.Tensor) -> torch.Tensor:
    """A float32 exp good to only ~1e-4 relative (a deterministic, smooth perturbation)."""
    zf = torch.where(torch.isfinite(z), z, torch.zeros_like(z))
    return torch.exp(z) * (1.0 + 1e-4 * torch.sin(37.0 * zf))


def bug_approx_exp_1e4(x: torch.Tensor) -> torch.Tensor:
    """A cheap float32 exp accurate to about 1e-4 relative (a short polynomial / table): 100x
    beyond the fast-exp class, yet it would pass assert_close's bf16 tolerance."""
    return _online_softmax(x, exp=_exp_1e4)


def bug_pad_zero_tail(x: torch.Tensor) -> torch.Tensor:
    """The last partial tile is loaded with ``other=0.0`` instead of ``-inf`` (Triton's
    ``tl.load(..., mask=..., other=0.0)``): the padding joins the max and exp(0 - m) joins the
    sum whenever n is not a multiple of the tile."""
    return _online_softmax(x, pad_tail=0.0)


def bug_inverted_rescale(x: torch.Tensor) -> torch.Tensor:
    """The rescale factor has its sign inverted: alpha = exp(m_new - m_old) (the first tile is
    guarded, so short rows are right); when the max grows the old sum is inflated, not shrunk."""
    return _online_softmax(x, inverted_rescale=True)


def bug_ignores_strides(x: torch.Tensor) -> torch.Tensor:
    """Assumes a contiguous row-major input (pointer arithmetic with stride n, as a kernel that
    never reads ``x.stride()``): a non-contiguous view is read from the wrong addresses."""
    rows, n = x.shape
    flat = torch.as_strided(x, (rows, n), (n, 1))
    return correct_online(flat.clone())


# ---------------------------------------------------------------------------------------------
# Attention


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask=None, causal=False, scale=None,
    return_lse: bool = False, tile: int = 16, guard: bool = True, align: str = "top-left",
    default_scale=None, pv_acc: torch.dtype = torch.float32, finite_mask: float | None = None,
    rescale_o: bool = True, causal_strict: bool = False, head_map: str = "group",
    lse_base2: bool = False, mask_first_query: bool = False,
):
    """A tiled online attention in float32 with the (m, d, o) state; switches for each bug."""
    b, h, sq, dim = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if head_map == "group":  # query head h reads kv head h // (H // Hkv)
        kv_of = torch.arange(h) // (h // hkv)
    else:  # the bug: h % Hkv (right only when Hkv == 1 or Hkv == H)
        kv_of = torch.arange(h) % hkv
    kx = k.float()[:, kv_of]
    vx = v.float()[:, kv_of]
    sc = scale if scale is not None else (default_scale(dim) if default_scale else 1.0 / math.sqrt(dim))
    visible = torch.ones((b, h, sq, sk), dtype=torch.bool)
    if mask is not None:
        full = mask.expand(b, h, sq, sk)
        if mask_first_query:  # the bug: the mask is read as if it were [B, H, 1, Sk]
            full = full[:, :, :1].expand(b, h, sq, sk)
        visible = visible & full
    if causal:
        off = 0 if align == "top-left" else sk - sq
        j, i = torch.arange(sk)[None, :], torch.arange(sq)[:, None] + off
        visible = visible & ((j < i) if causal_strict else (j <= i))
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
        o = (o.float() * (alpha if rescale_o else 1.0) + p @ vx[:, :, s : s + tile]).to(pv_acc)
        m = m_new
    o = o.float()
    out = torch.where(d > 0, o / d, torch.zeros_like(o)) if guard else o / d
    lse = torch.where(d[..., 0] > 0, m[..., 0] + torch.log(d[..., 0]), torch.full_like(d[..., 0], -math.inf))
    if lse_base2:
        lse = lse * (1.0 / math.log(2.0))
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


def bug_attn_o_not_rescaled(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Missing rescale of o: d is rescaled by alpha when the max grows, the accumulator o is not."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      rescale_o=False)


def bug_attn_causal_off_by_one(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Causal mask off by one: key j visible when j < i instead of j <= i (the diagonal is masked,
    so the first query sees nothing)."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      causal_strict=True)


def bug_attn_gqa_modulo(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Grouped-query head map wrong: kv head = h % Hkv instead of h // (H // Hkv) (the same when
    Hkv is 1 or H; wrong for H = 4, Hkv = 2). Declare ``allow_gqa=True``."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      head_map="modulo")


def bug_attn_lse_base2(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """lse returned in base 2 (m·log2 e + log2 d, as exp2 kernels keep it) while base e is
    declared: o is right, only lse is wrong."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      lse_base2=True)


def bug_attn_mask_first_query(q, k, v, *, mask=None, causal=False, scale=None, return_lse=False):
    """Every mask is read as a key-padding mask ([B, H, 1, Sk]: the first query's row, as a kernel
    built for padding masks only): per-query masks (e.g. an explicit causal mask) are ignored."""
    return _attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse,
                      mask_first_query=True)
