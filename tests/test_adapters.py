"""onlinesm.adapters: kernels of other calling conventions called through onlinesm's contract.

flash-attn and xformers are not installed here, so the kernels below follow their signatures
exactly (flash_attn_func, memory_efficient_attention) with torch math in their own layouts.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onlinesm import oracle  # noqa: E402
from onlinesm.adapters import (  # noqa: E402
    SDPA_TARGET, Adapted, AdapterSpec, adapt, implied_fully_masked, parse_kwarg, to_mask_kind)
from onlinesm.harness import AttentionInputs, Kernel, KernelError  # noqa: E402

TOL = dict(atol=2e-5, rtol=2e-5)  # loose unit-test tolerance for float32 inputs


# -- kernels in other conventions (torch math) -----------------------------------------------------

def _reference_bshd(q, k, v, *, bias=None, scale=None, causal_offset=None, empty_lse=float("inf")):
    """[B, S, H, D] attention in float32: (o in q's dtype, lse [B, H, Sq])."""
    b, sq, h, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))          # [B, H, S, D]
    kf, vf = (t.repeat_interleave(h // hkv, dim=1) for t in (kf, vf))
    s = qf @ kf.transpose(-1, -2) * (d ** -0.5 if scale is None else scale)
    if bias is not None:
        s = s + bias.float()
    if causal_offset is not None:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + causal_offset, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isneginf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    den = p.sum(-1, keepdim=True)
    o = torch.where(empty, torch.zeros_like(den), p / den.clamp_min(1e-38)) @ vf
    lse = torch.where(empty, torch.full_like(m, empty_lse), m + den.log()).squeeze(-1)
    return o.transpose(1, 2).to(q.dtype), lse


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash-attn 2's signature; causal aligned bottom-right; an empty row gives o 0, lse +inf."""
    assert dropout_p == 0.0 and tuple(window_size) == (-1, -1)
    sq, sk = q.shape[1], k.shape[1]
    out, lse = _reference_bshd(q, k, v, scale=softmax_scale, causal_offset=sk - sq if causal else None)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_top_left(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """A bug: causal aligned top-left where flash-attn aligns bottom-right."""
    out, lse = _reference_bshd(q, k, v, scale=softmax_scale, causal_offset=0 if causal else None)
    return (out, lse, None) if return_attn_probs else out


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                               output_dtype=None):
    """xformers' signature, BMHK layout, a tensor attn_bias [B, H, Mq, Mk] added to the scores."""
    assert p == 0.0
    if key.shape[2] != query.shape[2]:
        raise ValueError("BMHK inputs need equal heads (xformers takes GQA as BMGHK)")
    return _reference_bshd(query, key, value, bias=attn_bias, scale=scale)[0]


def bshd_attention(q, k, v, *, mask=None, causal=False, scale=None):
    """An onlinesm-convention kernel taking [B, S, H, D] tensors (mask stays [B, H, Sq, Sk])."""
    bias = None if mask is None else torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return _reference_bshd(q, k, v, bias=bias, scale=scale, causal_offset=0 if causal else None)[0]


# -- helpers -----------------------------------------------------------------------------------------

def _inputs(b=2, h=4, hkv=None, sq=5, sk=7, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).to(dtype)
    k = torch.randn(b, hkv or h, sk, d, generator=g).to(dtype)
    v = torch.randn(b, hkv or h, sk, d, generator=g).to(dtype)
    mask = torch.rand(b, 1, sq, sk, generator=g) > 0.3
    mask[..., :, 0] = True  # every query sees a key, unless causal hides it
    return q, k, v, mask


def _exact(q, k, v, **kw):
    return oracle.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), **kw)


def _close(actual, expected):
    np.testing.assert_allclose(actual.double().numpy(), expected, **TOL)


# -- flash_attn ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sq,sk", [(5, 7), (7, 5), (6, 6)])
@pytest.mark.parametrize("hkv", [4, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_matches_the_oracle_bottom_right(sq, sk, hkv, causal):
    fa = adapt(flash_attn_func, convention="flash_attn")
    q, k, v, _ = _inputs(hkv=hkv, sq=sq, sk=sk)
    o, lse = fa(q, k, v, causal=causal, scale=0.3, return_lse=True)
    eo, else_ = _exact(q, k, v, causal=causal, scale=0.3, causal_align="bottom-right")
    assert o.shape == q.shape and o.dtype == q.dtype and lse.dtype == torch.float32
    _close(o, eo)
    finite = np.isfinite(else_)
    np.testing.assert_allclose(lse.double().numpy()[finite], else_[finite], **TOL)
    assert torch.isposinf(lse[torch.from_numpy(~finite)]).all()  # flash-attn's empty lse: +inf
    assert (~finite).any() == (causal and sq > sk)
    assert fa(q, k, v, causal=causal, scale=0.3).shape == q.shape  # o alone without return_lse


def test_flash_attn_default_scale_and_dtype_kept():
    fa = adapt(flash_attn_func, convention="flash_attn")
    q, k, v, _ = _inputs(dtype=torch.bfloat16)
    o = fa(q, k, v)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and o.is_contiguous()
    eo, _ = _exact(q, k, v)
    np.testing.assert_allclose(o.double().numpy(), eo, atol=2e-2, rtol=2e-2)


def test_top_left_flash_kernel_disagrees_under_bottom_right():
    bug = adapt(flash_attn_top_left, convention="flash_attn")
    q, k, v, _ = _inputs(sq=3, sk=8)
    eo, _ = _exact(q, k, v, causal=True, causal_align="bottom-right")
    o = bug(q, k, v, causal=True).double().numpy()
    assert np.abs(o - eo).max() > 0.1
    # ... while the correct kernel agrees, and without causal both agree
    _close(adapt(flash_attn_func, convention="flash_attn")(q, k, v, causal=True), eo)
    _close(bug(q, k, v), _exact(q, k, v)[0])


def test_flash_attn_signature_has_return_lse_and_no_mask():
    fa = adapt(flash_attn_func, convention="flash_attn")
    params = inspect.signature(fa).parameters
    assert "return_lse" in params and "mask" not in params and "causal" in params
    assert Kernel(fa, op="attention", backend="torch", device="cpu").accepts_return_lse
    q, k, v, mask = _inputs()
    with pytest.raises(ValueError, match="takes no mask.*allow_mask=False"):
        fa(q, k, v, mask=mask)


def test_flash_attn_through_the_harness_gives_lse():
    kernel = Kernel(adapt(flash_attn_func, convention="flash_attn"), op="attention", backend="torch",
                    device="cpu", deadline=60)
    q, k, v = (t.numpy() for t in _inputs(hkv=2)[:3])
    o, lse = kernel.attention(AttentionInputs(q, k, v, causal=True))
    eo, else_ = oracle.attention(q, k, v, causal=True, causal_align="bottom-right")
    np.testing.assert_allclose(o, eo, **TOL)
    np.testing.assert_allclose(lse, else_, **TOL)


def test_flash_attn_implied():
    implied = adapt(flash_attn_func, convention="flash_attn").implied
    assert implied["causal_align"] == "bottom-right" and implied["allow_mask"] is False
    assert implied["allow_gqa"] is True and implied["dtypes"] == ("bfloat16", "float16")
    assert implied["empty_lse"] == float("inf")


# -- xformers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["additive", "additive-f32", "finite-min"])
@pytest.mark.parametrize("use_mask,causal", [(True, False), (False, True), (True, True), (False, False)])
@pytest.mark.parametrize("sq,sk,hkv", [(5, 7, 4), (7, 5, 4), (5, 9, 2)])
def test_xformers_matches_the_oracle_top_left(kind, use_mask, causal, sq, sk, hkv):
    xf = adapt(memory_efficient_attention, convention="xformers", mask_kind=kind)
    q, k, v, mask = _inputs(sq=sq, sk=sk, hkv=hkv)
    mask = mask if use_mask else None
    eo, _ = _exact(q, k, v, mask=None if mask is None else mask.numpy(), causal=causal, scale=0.25)
    _close(xf(q, k, v, mask=mask, causal=causal, scale=0.25), eo)


def test_xformers_bias_is_full_shape_and_8_aligned():
    seen = {}

    def spy(query, key, value, attn_bias=None, p=0.0, scale=None):
        seen["bias"] = attn_bias
        return memory_efficient_attention(query, key, value, attn_bias=attn_bias, p=p, scale=scale)

    q, k, v, mask = _inputs(sq=5, sk=7)
    adapt(spy, convention="xformers")(q, k, v, mask=mask, causal=True)
    bias = seen["bias"]
    assert bias.shape == (2, 4, 5, 7) and bias.dtype == torch.float32 and bias.stride(-2) % 8 == 0
    expected = (mask & torch.ones(5, 7, dtype=torch.bool).tril()).expand(2, 4, 5, 7)
    assert torch.equal(bias == 0, expected) and torch.isneginf(bias[~expected]).all()
    assert adapt(spy, convention="xformers")(q, k, v) is not None and seen["bias"] is None
    assert "return_lse" not in inspect.signature(adapt(spy, convention="xformers")).parameters


# -- sdpa ------------------------------------------------------------------------------------------------

def _flash_runs_on_cpu() -> str | None:
    q = torch.randn(1, 1, 4, 16)
    try:
        adapt(convention="sdpa", sdpa_backend="flash")(q, q, q)
    except RuntimeError as err:
        return f"torch {torch.__version__} has no CPU flash backend for SDPA: {err}"
    return None


@pytest.mark.parametrize("backend", ["math", "flash"])
@pytest.mark.parametrize("kind", ["bool", "additive", "additive-f32", "finite-min"])
@pytest.mark.parametrize("use_mask,causal", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("sq,sk,hkv", [(5, 7, 4), (7, 5, 2), (6, 6, 1)])
def test_sdpa_matches_the_oracle(backend, kind, use_mask, causal, sq, sk, hkv):
    if backend == "flash" and (reason := _flash_runs_on_cpu()):
        pytest.skip(reason)
    sdpa = adapt(convention="sdpa", sdpa_backend=backend, mask_kind=kind)
    q, k, v, mask = _inputs(sq=sq, sk=sk, hkv=hkv)
    mask = mask if use_mask else None
    eo, _ = _exact(q, k, v, mask=None if mask is None else mask.numpy(), causal=causal)
    _close(sdpa(q, k, v, mask=mask, causal=causal), eo)


def test_sdpa_passes_enable_gqa_and_the_combined_mask():
    calls = []

    def spy(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        calls.append(dict(attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa))
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    q, k, v, mask = _inputs(sq=4, sk=6, hkv=2)
    adapt(spy, convention="sdpa", sdpa_backend="math")(q, k, v, mask=mask, causal=True, scale=0.5)
    call = calls[-1]
    assert call["enable_gqa"] is True and call["is_causal"] is False and call["scale"] == 0.5
    assert torch.equal(call["attn_mask"], mask & torch.ones(4, 6, dtype=torch.bool).tril())
    adapt(spy, convention="sdpa", mask_kind="additive")(*_inputs(hkv=4)[:3], causal=True)
    assert calls[-1]["is_causal"] is True and calls[-1]["attn_mask"] is None and calls[-1]["enable_gqa"] is False


def test_sdpa_math_refuses_mask_with_is_causal_so_the_adapter_never_sends_both():
    q, k, v, mask = _inputs()
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal=True"):
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
    adapt(convention="sdpa", sdpa_backend="math")(q, k, v, mask=mask, causal=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="these backends may run on a GPU")
@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_pinned_backend_that_cannot_run_is_torchs_refusal(backend):
    sdpa = adapt(convention="sdpa", sdpa_backend=backend)
    q, k, v, _ = _inputs()
    with pytest.raises(RuntimeError, match="^No viable backend for scaled_dot_product_attention was found"):
        sdpa(q, k, v)
    kernel = Kernel(sdpa, op="attention", backend="torch", device="cpu", deadline=60)
    with pytest.raises(KernelError, match="raised RuntimeError: No viable backend") as err:
        kernel.attention(AttentionInputs(*(t.numpy() for t in (q, k, v))))
    assert err.value.kind == "raised"


def test_sdpa_defaults_and_signature():
    sdpa = adapt(convention="sdpa")
    assert sdpa.fn is torch.nn.functional.scaled_dot_product_attention
    assert sdpa.spec.target == SDPA_TARGET
    params = inspect.signature(sdpa).parameters
    assert "return_lse" not in params and "mask" in params
    assert not Kernel(sdpa, op="attention", backend="torch", device="cpu").accepts_return_lse
    q, k, v, _ = _inputs()
    with pytest.raises(ValueError, match="gives no lse"):
        sdpa(q, k, v, return_lse=True)
    implied = sdpa.implied
    assert implied["causal_align"] == "top-left" and implied["fully_masked"] == "zeros"
    assert adapt(convention="sdpa", mask_kind="finite-min").implied["fully_masked"] == "uniform"
    assert adapt(convention="sdpa", sdpa_backend="flash").implied["allow_mask"] is False


# -- mask kinds and fully masked rows ---------------------------------------------------------------------

def test_to_mask_kind_values():
    m = torch.tensor([[True, False, True]])
    assert to_mask_kind(m, "bool", torch.bfloat16) is m
    add = to_mask_kind(m, "additive", torch.bfloat16)
    assert add.dtype == torch.bfloat16 and add[0, 0] == 0 and torch.isneginf(add[0, 1])
    f32 = to_mask_kind(m, "additive-f32", "bf16")
    assert f32.dtype == torch.float32 and torch.isneginf(f32[0, 1]) and f32[0, 2] == 0
    fm = to_mask_kind(m, "finite-min", torch.float16)
    assert fm.dtype == torch.float16 and fm[0, 1].item() == -65504.0 and torch.isfinite(fm).all()
    assert to_mask_kind(m, "finite-min", "bfloat16")[0, 1].item() == torch.finfo(torch.bfloat16).min
    with pytest.raises(ValueError, match="mask_kind='additive16' is unknown; use one of 'bool'"):
        to_mask_kind(m, "additive16", torch.float32)
    with pytest.raises(TypeError, match="bool torch tensor"):
        to_mask_kind(m.float(), "additive", torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_min_fully_masked_row_gives_mean_v_with_sdpa_math(dtype):
    q, k, v, mask = _inputs(dtype=dtype)
    mask[:, :, 2, :] = False  # query 2 sees no key
    sdpa = adapt(convention="sdpa", sdpa_backend="math", mask_kind="finite-min")
    row = sdpa(q, k, v, mask=mask)[:, :, 2].double()
    mean_v = v.double().mean(2)
    unmasked = torch.from_numpy(_exact(q, k, v)[0][:, :, 2])
    tol = 1e-6 if dtype == torch.float32 else 8e-3
    assert (row - mean_v).abs().max() < tol
    assert (row - unmasked).abs().max() > 0.1  # what exact arithmetic would give
    assert implied_fully_masked("finite-min", dtype) == "uniform"


def test_finite_min_float16_is_not_uniform_with_sdpa_math():
    q, k, v, mask = _inputs(dtype=torch.float16)
    mask[:, :, 2, :] = False
    row = adapt(convention="sdpa", sdpa_backend="math", mask_kind="finite-min")(q, k, v, mask=mask)[:, :, 2]
    assert (row.double() - v.double().mean(2)).abs().max() > 0.1
    assert implied_fully_masked("finite-min", "float16") == "any"


@pytest.mark.parametrize("kind", ["bool", "additive", "additive-f32"])
def test_bool_and_additive_fully_masked_rows_give_zeros_with_sdpa_math(kind):
    q, k, v, mask = _inputs()
    mask[:, :, 2, :] = False
    o = adapt(convention="sdpa", sdpa_backend="math", mask_kind=kind)(q, k, v, mask=mask)
    assert torch.equal(o[:, :, 2], torch.zeros_like(o[:, :, 2]))
    assert implied_fully_masked(kind) == "zeros"


# -- layout, JSON, errors ------------------------------------------------------------------------------------

def test_bshd_layout_round_trip_and_in_place_writes_stay_visible():
    q, k, v, mask = _inputs(sq=5, sk=7)
    bshd = adapt(bshd_attention, layout="bshd")
    eo, _ = _exact(q, k, v, mask=mask.numpy(), causal=True)
    _close(bshd(q, k, v, mask=mask, causal=True), eo)

    def scribbler(q, k, v, *, mask=None, causal=False, scale=None):
        q[0, 1, 2, 3] = 42.0  # [B, S, H, D]: query 1, head 2
        return bshd_attention(q, k, v)

    q0 = q.clone()
    adapt(scribbler, layout="bshd")(q, k, v)
    assert q[0, 2, 1, 3] == 42.0 and (q != q0).sum() == 1  # seen in the caller's [B, H, S, D] q
    with pytest.raises(KernelError) as err:
        Kernel(adapt(scribbler, layout="bshd"), op="attention", backend="torch", device="cpu",
               deadline=60).attention(AttentionInputs(*(t.numpy() for t in _inputs()[:3])))
    assert err.value.kind == "modified_input"


def test_a_kernel_returning_the_wrong_layout_is_not_accepted():
    def wrong(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, return_attn_probs=False):
        return flash_attn_func(q, k, v, causal=causal).transpose(1, 2)  # [B, H, S, D], not [B, S, H, D]

    q, k, v, _ = _inputs(h=4, sq=5)
    with pytest.raises(ValueError, match=r"shape \[2, 4, 5, 16\], expected \[2, 5, 4, 16\].*layout='bhsd'"):
        adapt(wrong, convention="flash_attn")(q, k, v)
    kernel = Kernel(adapt(wrong, convention="flash_attn"), op="attention", backend="torch", device="cpu", deadline=60)
    with pytest.raises(KernelError) as err:
        kernel.attention(AttentionInputs(*(t.numpy() for t in (q, k, v))), want_lse=False)
    assert err.value.kind == "raised" and "layout" in str(err.value)


def test_spec_json_round_trip():
    a = adapt(flash_attn_func, convention="flash_attn", kwargs={"window_size": [-1, -1], "deterministic": True},
              target="tests/kernels.py:flash_attn_func")
    data = json.loads(a.to_json())
    assert data == {"schema": "onlinesm.adapter/1", "convention": "flash_attn", "layout": "bshd",
                    "kwargs": {"window_size": [-1, -1], "deterministic": True}, "mask_kind": "bool",
                    "sdpa_backend": None, "target": "tests/kernels.py:flash_attn_func"}
    spec = AdapterSpec.from_json(a.to_json())
    assert spec == a.spec and spec.kwargs["window_size"] == (-1, -1)
    again = Adapted.from_json(data, fn=flash_attn_func)
    q, k, v, _ = _inputs(sq=3, sk=6)
    assert torch.equal(again(q, k, v, causal=True), a(q, k, v, causal=True))
    sdpa = Adapted.from_json(adapt(convention="sdpa", sdpa_backend="math", mask_kind="finite-min").to_json())
    assert sdpa.fn is torch.nn.functional.scaled_dot_product_attention
    assert (sdpa.spec.sdpa_backend, sdpa.spec.mask_kind) == ("math", "finite-min")
    with pytest.raises(ValueError, match="unknown fields \\['backend'\\]"):
        AdapterSpec.from_json({"convention": "sdpa", "backend": "math"})
    with pytest.raises(ValueError, match="records no target"):
        Adapted.from_json(AdapterSpec("xformers").to_json())


def test_onlinesm_convention_fixed_kwargs_and_implied():
    seen = {}

    def kernel(q, k, v, *, mask=None, causal=False, scale=None, causal_align="top-left", return_lse=False):
        seen.update(mask=mask, causal_align=causal_align)
        o, lse = oracle.attention(q.numpy(), k.numpy(), v.numpy(), mask=None, causal=causal,
                                  causal_align=causal_align)
        o = torch.from_numpy(o).to(q.dtype)
        return (o, torch.from_numpy(lse).float()) if return_lse else o

    a = adapt(kernel, kwargs={"causal_align": "bottom-right"}, mask_kind="additive")
    assert a.implied == {"causal_align": "bottom-right"} and "return_lse" in inspect.signature(a).parameters
    q, k, v, mask = _inputs(sq=3, sk=6)
    o, lse = a(q, k, v, mask=mask, causal=True, return_lse=True)
    assert seen["causal_align"] == "bottom-right" and seen["mask"].dtype == torch.float32
    assert torch.isneginf(seen["mask"][~mask.expand_as(seen["mask"])]).all()
    _close(o, _exact(q, k, v, causal=True, causal_align="bottom-right")[0])
    assert "return_lse" not in inspect.signature(adapt(bshd_attention)).parameters


def test_errors_name_the_value_and_the_fix():
    with pytest.raises(ValueError, match="convention='flash' is unknown; use one of 'onlinesm', 'sdpa', "
                                         "'flash_attn', 'xformers'"):
        adapt(flash_attn_func, convention="flash")
    with pytest.raises(ValueError, match="layout='bsdh' is unknown"):
        adapt(bshd_attention, layout="bsdh")
    with pytest.raises(ValueError, match="sdpa_backend='fa2' is unknown; use one of 'flash', 'cudnn'"):
        adapt(convention="sdpa", sdpa_backend="fa2")
    with pytest.raises(ValueError, match="applies to convention='sdpa' only"):
        adapt(flash_attn_func, convention="flash_attn", sdpa_backend="flash")
    with pytest.raises(ValueError, match=r"kwargs \['causal'\] are set by the flash_attn adapter"):
        adapt(flash_attn_func, convention="flash_attn", kwargs={"causal": True})
    with pytest.raises(ValueError, match="mask_kind='bool' does not fit convention='xformers'"):
        adapt(memory_efficient_attention, convention="xformers", mask_kind="bool")
    with pytest.raises(ValueError, match="needs the kernel for convention='flash_attn'"):
        adapt(convention="flash_attn")
    with pytest.raises(ValueError, match="must be JSON data"):
        adapt(bshd_attention, kwargs={"bias": torch.zeros(1)})


def test_parse_kwarg():
    assert parse_kwarg("causal_align=bottom-right") == ("causal_align", "bottom-right")
    assert parse_kwarg("window_size=[-1,-1]") == ("window_size", (-1, -1))
    assert parse_kwarg("deterministic=true") == ("deterministic", True)
    assert parse_kwarg("softcap=0.5") == ("softcap", 0.5)
    with pytest.raises(ValueError, match="must look like NAME=VALUE"):
        parse_kwarg("causal_align")


# -- with the property suite as it is today -----------------------------------------------------------------

def test_check_attention_runs_adapted_kernels():
    from onlinesm.check import check_attention
    from onlinesm.errors import UsageError

    fast = dict(seed=0, database=False, save_failures=False, raise_on_failure=False, max_examples=4,
                properties=["accuracy", "split_merge", "default_scale"], max_seq_q=16, max_seq_k=24)
    fa = adapt(flash_attn_func, convention="flash_attn")
    with pytest.raises(UsageError, match="--no-mask"):  # flash-attn takes no mask: the engine says so
        check_attention(fa, **fast)
    implied = {key: fa.implied[key] for key in ("causal_align", "allow_mask", "allow_gqa", "empty_lse")}
    assert check_attention(fa, dtypes=["bfloat16"], **implied, **fast).passed
    # the README's form: every property but causal_mask, which needs an explicit mask
    readme = check_attention(fa, dtypes=["bfloat16", "float16"], **implied, skip={"causal_mask": "no mask"},
                             **{**fast, "properties": None})
    from onlinesm.properties import ATTENTION_PROPERTIES

    # every property reported, accuracy_statistical (after the Hypothesis runs) included
    assert readme.passed and {o.property for o in readme.outcomes} >= set(ATTENTION_PROPERTIES)
    sdpa = adapt(convention="sdpa", sdpa_backend="math")
    assert check_attention(sdpa, **sdpa.implied, **{**fast, "properties": None}).passed
    bug = adapt(flash_attn_top_left, convention="flash_attn")
    result = check_attention(bug, dtypes=["bfloat16"], **implied, **fast)
    assert {o.property for o in result.outcomes if o.status == "failed"} >= {"accuracy"}
