"""Tests of the Triton attention kernel against the exact (float64) oracle.

Without CUDA the kernel runs under Triton's CPU interpreter (tiny shapes: the interpreter is
numpy, one program at a time). Its tile config is 16 x 16 (``INTERPRET_CONFIG``; 64-key tiles
past 256 keys), so shapes of 20..60 keys already cross several KV tiles, a ragged tail and the
causal diagonal.

Tolerances come from the kernel's error model (module docstring of the kernel): with
``w_j`` the exact softmax weights, ``A = sum_j w_j |v_j|`` (>= |o|), u the input dtype's unit
roundoff and u32 float32's:

* output rounding to the input dtype: ``u * |o|``;
* P rounded to the input dtype before P @ V (``P_DTYPE = "input"``): each weight off by at most
  a relative u in the numerator only, so ``u * A`` (0 for fp32, where P is not rounded), plus
  an absolute half-subnormal per key for P that underflow (fp16);
* float32 work: scores from a D-term dot (``gamma_D * scale * sum_d |q_d k_d|``), the scale and
  max subtraction, exp2 (a few ulp), and the Sk-term sums of d and o; each is a relative error
  of the weights, entering numerator and denominator: ``2 * eps32 * A`` with
  ``eps32 = u32 * (2 (D + 4) * S_abs + Sk + 8)``, S_abs the row's largest |score| bound.

lse is computed from float32 alone: ``|dlse| <= eps32 + u32 |lse|``. The bound is first-order;
a 1 % slack covers the neglected second-order terms.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import os
import subprocess
import sys
import types
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton must not load yet
    pytest.skip("needs triton", allow_module_level=True)

from onlinesm import kernels, oracle  # noqa: E402
from onlinesm.dtypes import resolve, to_numpy  # noqa: E402

# Interpreter iff there is no CUDA device. This must run before triton is first imported:
# Triton decides at decoration time (its own tl.* helpers included) whether to interpret.
INTERPRET = kernels.use_interpreter(None)
from onlinesm.kernels import attention as attention_module  # noqa: E402  (the function)
from onlinesm.kernels.attention import attention  # noqa: E402

from bench_modules import bench_module  # noqa: E402  (conftest puts tests/ on sys.path)
from launch_stubs import Compiled, Jit  # noqa: E402

DEVICE = "cpu" if INTERPRET else "cuda"


@pytest.fixture(autouse=True)
def _pin_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled path: one tile config instead of autotuning every new shape (few compiles).
    64 x 32, 2 stages fits every head dim up to 256 in fp32. The interpreter ignores it."""
    monkeypatch.setenv("ONLINESM_ATTENTION_CONFIG", "64,32,2,4")
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
U32 = 2.0**-24


def _inputs(
    shape_q: tuple[int, int, int, int],
    shape_kv: tuple[int, int, int, int],
    dtype: Any,
    *,
    seed: int = 0,
    q_scale: float = 1.0,
) -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(shape_q, generator=g) * q_scale).to(dtype).to(DEVICE)
    k = torch.randn(shape_kv, generator=g).to(dtype).to(DEVICE)
    v = torch.randn(shape_kv, generator=g).to(dtype).to(DEVICE)
    return q, k, v


def _bounds(q: Any, k: Any, v: Any, dtype: Any, scale: float | None = None, **kw: Any):
    """Exact (o, lse) from the oracle, and the allowed |error| of o and lse (see module doc)."""
    qn, kn, vn = (to_numpy(t).astype(np.float64) for t in (q, k, v))
    mask = kw.pop("mask", None)
    mask_n = None if mask is None else to_numpy(mask)
    o_ref, lse_ref = oracle.attention(qn, kn, vn, mask=mask_n, scale=scale, **kw)
    a_ref, _ = oracle.attention(qn, kn, np.abs(vn), mask=mask_n, scale=scale, **kw)
    B, H, Sq, D = qn.shape
    Sk = kn.shape[2]
    sc = 1.0 / math.sqrt(D) if scale is None else abs(scale)
    kx = np.repeat(np.abs(kn), H // kn.shape[1], axis=1)
    s_abs = (sc * np.abs(qn) @ kx.transpose(0, 1, 3, 2)).max(-1)  # [B, H, Sq]
    eps32 = U32 * (2 * (D + 4) * s_abs + Sk + 8)
    fmt = resolve(str(dtype).removeprefix("torch."))
    u_p = 0.0 if fmt.name == "float32" else fmt.u
    underflow = 0.5 * fmt.smallest_subnormal * Sk * np.abs(vn).max()
    o_tol = fmt.u * np.abs(o_ref) + (u_p + 2 * eps32[..., None]) * a_ref
    o_tol = 1.01 * (o_tol + underflow) + fmt.smallest_subnormal
    lse_tol = 1.01 * (eps32 + U32 * np.abs(np.where(np.isfinite(lse_ref), lse_ref, 0)))
    return o_ref, lse_ref, o_tol, lse_tol


def _check(o: Any, lse: Any, o_ref, lse_ref, o_tol, lse_tol) -> None:
    o_n = to_numpy(o).astype(np.float64)
    lse_n = to_numpy(lse).astype(np.float64)
    assert np.isfinite(o_n).all(), "kernel returned NaN/inf in o"
    err = np.abs(o_n - o_ref)
    worst = np.unravel_index(np.argmax(err - o_tol), err.shape)
    assert (err <= o_tol).all(), (
        f"o off at {worst}: got {o_n[worst]!r}, want {o_ref[worst]!r}, "
        f"error {err[worst]:.3g} > bound {o_tol[worst]:.3g}"
    )
    empty = np.isneginf(lse_ref)
    assert (lse_n[empty] == -np.inf).all(), "fully masked rows must give lse = -inf"
    assert (o_n[empty] == 0).all(), "fully masked rows must give o = 0 exactly"
    lerr = np.abs(lse_n[~empty] - lse_ref[~empty])
    assert (lerr <= lse_tol[~empty]).all(), f"lse error {lerr.max():.3g} over its bound"


# D, Sq, Sk, causal, causal_align, Hkv: ragged lengths, non-power-of-two D, GQA.
CASES = [
    (16, 20, 33, False, "top-left", 2),
    (40, 21, 37, True, "top-left", 1),
    (64, 19, 45, True, "bottom-right", 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"D{c[0]}-{c[1]}x{c[2]}-{c[4] if c[3] else 'full'}"
)
def test_matches_oracle(dtype: Any, case: tuple) -> None:
    D, Sq, Sk, causal, align, hkv = case
    q, k, v = _inputs((1, 2, Sq, D), (1, hkv, Sk, D), dtype, seed=D)
    o, lse = attention(q, k, v, causal=causal, causal_align=align, return_lse=True)
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == torch.float32
    _check(o, lse, *_bounds(q, k, v, dtype, causal=causal, causal_align=align))


@pytest.mark.skipif(not INTERPRET, reason="the interpreter's tiles")
def test_long_key_sequences_take_wider_interpreter_tiles() -> None:
    # Past INTERPRET_LONG_KEYS keys the interpreter sweeps 64-key tiles (4x fewer steps); the
    # answer stays within the bound, across a ragged tail and the causal diagonal.
    from onlinesm.kernels.attention import INTERPRET_LONG_KEYS, interpret_config

    assert interpret_config(INTERPRET_LONG_KEYS)["BLOCK_N"] == 16
    assert interpret_config(INTERPRET_LONG_KEYS + 1)["BLOCK_N"] == 64
    q, k, v = _inputs((1, 1, 18, 16), (1, 1, 301, 16), torch.bfloat16, seed=3)
    o, lse = attention(q, k, v, causal=True, causal_align="bottom-right", return_lse=True)
    _check(o, lse, *_bounds(q, k, v, torch.bfloat16, causal=True, causal_align="bottom-right"))


def test_bottom_right_more_queries_than_keys_gives_empty_rows() -> None:
    # Sq > Sk bottom-right: queries i < Sq - Sk see no key at all.
    q, k, v = _inputs((1, 1, 40, 16), (1, 1, 24, 16), torch.float16, seed=1)
    o, lse = attention(q, k, v, causal=True, causal_align="bottom-right", return_lse=True)
    ref = _bounds(q, k, v, torch.float16, causal=True, causal_align="bottom-right")
    assert np.isneginf(ref[1][0, 0, :16]).all() and np.isfinite(ref[1][0, 0, 16:]).all()
    _check(o, lse, *ref)


def test_key_padding_with_fully_masked_queries() -> None:
    # Batch 0 pads its last keys; batch 1 masks every key: all its queries are empty.
    dtype = torch.bfloat16
    q, k, v = _inputs((2, 2, 18, 32), (2, 2, 35, 32), dtype, seed=2)
    mask = torch.ones(2, 1, 1, 35, dtype=torch.bool)
    mask[0, ..., 29:] = False
    mask[1] = False
    mask = mask.to(DEVICE)
    o, lse = attention(q, k, v, mask=mask, return_lse=True)
    ref = _bounds(q, k, v, dtype, mask=mask)
    assert np.isneginf(ref[1][1]).all()
    _check(o, lse, *ref)


def test_masked_leading_tile_and_row_mask_under_causal() -> None:
    # The first 20 keys (more than one 16-key tile) are masked for every query, and a full
    # [Sq, Sk] mask empties two query rows: under top-left causal, queries 0..19 see nothing.
    dtype = torch.float32
    q, k, v = _inputs((1, 2, 30, 24), (1, 2, 41, 24), dtype, seed=3)
    mask = torch.ones(30, 41, dtype=torch.bool)
    mask[:, :20] = False
    mask[25] = False
    mask[27, 21:] = False
    mask = mask.to(DEVICE)
    o, lse = attention(q, k, v, mask=mask, causal=True, return_lse=True)
    ref = _bounds(q, k, v, dtype, mask=mask, causal=True)
    assert np.isneginf(ref[1][0, 0, [0, 19, 25]]).all()
    _check(o, lse, *ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_huge_logits(dtype: Any) -> None:
    # Scores of size ~1e3..1e4: exp of them overflows anything without the running max.
    q, k, v = _inputs((1, 1, 17, 16), (1, 1, 37, 16), dtype, seed=4, q_scale=300.0)
    o, lse = attention(q, k, v, return_lse=True)
    ref = _bounds(q, k, v, dtype)
    assert np.abs(ref[1]).max() > 100
    _check(o, lse, *ref)


def test_scale_and_strided_inputs() -> None:
    # [B, S, H, D] memory viewed as [B, H, S, D] (no copy), a negative explicit scale.
    dtype = torch.float32
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 22, 2, 16, generator=g).to(DEVICE).transpose(1, 2)
    k = torch.randn(1, 26, 2, 16, generator=g).to(DEVICE).transpose(1, 2)
    v = torch.randn(1, 26, 2, 16, generator=g).to(DEVICE).transpose(1, 2)
    o, lse = attention(q, k, v, scale=-0.3, return_lse=True)
    _check(o, lse, *_bounds(q, k, v, dtype, scale=-0.3))


def test_return_lse_false_gives_tensor() -> None:
    q, k, v = _inputs((1, 1, 5, 16), (1, 1, 7, 16), torch.float16)
    o = attention(q, k, v)
    assert isinstance(o, torch.Tensor) and o.shape == (1, 1, 5, 16) and o.dtype == torch.float16


def test_declared_numerics() -> None:
    assert attention_module is attention
    from onlinesm.kernels import attention as mod_fn  # the lazy hook returns the function

    assert mod_fn is attention
    mod = sys.modules["onlinesm.kernels.attention"]  # the attribute is the function

    assert (mod.EXP, mod.P_DTYPE, mod.ACCUMULATE, mod.LSE_BASE) == ("fast", "input", "float32", "e")
    assert mod.INTERPRETED == INTERPRET


def _t(*shape: int, dtype: Any = torch.float16) -> Any:
    return torch.zeros(shape, dtype=dtype, device=DEVICE)


BAD = [
    (lambda: attention(_t(1, 1, 4, 16, dtype=torch.float64), _t(1, 1, 4, 16), _t(1, 1, 4, 16)),
     TypeError, "q.dtype=torch.float64"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 4, 16, dtype=torch.bfloat16), _t(1, 1, 4, 16)),
     TypeError, "mismatched dtypes"),
    (lambda: attention(_t(1, 4, 16), _t(1, 1, 4, 16), _t(1, 1, 4, 16)), ValueError, "has 3 dims"),
    (lambda: attention(_t(1, 1, 4, 8), _t(1, 1, 4, 8), _t(1, 1, 4, 8)), ValueError, "D=8"),
    (lambda: attention(_t(1, 1, 4, 300), _t(1, 1, 4, 300), _t(1, 1, 4, 300)), ValueError, "D=300"),
    (lambda: attention(_t(1, 3, 4, 16), _t(1, 2, 4, 16), _t(1, 2, 4, 16)), ValueError, "Hkv=2"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 4, 32), _t(1, 1, 4, 32)), ValueError, "head dim"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 5, 16), _t(1, 1, 4, 16)), ValueError, "k.shape"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 4, 16), _t(1, 1, 4, 16), causal=True,
                       causal_align="center"), ValueError, "causal_align='center'"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 4, 16), _t(1, 1, 4, 16),
                       mask=torch.ones(4, 4, device=DEVICE)), TypeError, "torch.bool"),
    (lambda: attention(_t(1, 1, 4, 16), _t(1, 1, 4, 16), _t(1, 1, 4, 16),
                       mask=torch.ones(3, 4, dtype=torch.bool, device=DEVICE)), ValueError,
     "does not broadcast"),
    (lambda: attention([1.0], _t(1, 1, 4, 16), _t(1, 1, 4, 16)), TypeError, "torch.Tensor"),
]


@pytest.mark.parametrize("call,exc,text", BAD, ids=[b[2] for b in BAD])
def test_clear_errors(call: Any, exc: type, text: str) -> None:
    with pytest.raises(exc, match=text.replace("(", r"\(").replace("[", r"\[")):
        call()


@pytest.mark.skipif(not INTERPRET, reason="only the compiled kernel refuses CPU tensors")
def test_interpreter_mode_is_fixed_at_import() -> None:
    with pytest.raises(RuntimeError, match="already"):
        kernels.use_interpreter(False)


# ---------------------------------------------------------------------------------------------
# GPU: the compiled kernel on real sizes (autotuned tiles, tensor cores, the unmasked hot loop).
# ---------------------------------------------------------------------------------------------

GPU_CASES = [
    # B, H, Hkv, Sq, Sk, D, causal, align, mask
    (2, 4, 4, 1000, 1000, 128, False, "top-left", False),
    (2, 4, 4, 1024, 1024, 64, True, "top-left", False),
    (1, 8, 2, 333, 1031, 96, True, "bottom-right", False),
    (1, 4, 4, 700, 513, 256, True, "bottom-right", False),
    (2, 4, 1, 257, 900, 40, False, "top-left", True),
    (1, 2, 2, 512, 512, 16, True, "top-left", True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[3]}x{c[4]}xD{c[5]}")
def test_gpu_matches_oracle(dtype: Any, case: tuple) -> None:
    _gpu_case(dtype, case)


@pytest.mark.gpu
@pytest.mark.slow  # one compile per candidate: ~1 min on the H200 machine
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_gpu_every_tile_config(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each autotuning candidate must be right on its own: ragged, causal bottom-right, masked.
    mod = sys.modules["onlinesm.kernels.attention"]
    for bm, bn, stages, warps in mod._CONFIGS:
        if not mod._fits(bm, bn, stages, 128, dtype.itemsize):
            continue  # the autotuner prunes it too (shared memory / registers)
        monkeypatch.setenv("ONLINESM_ATTENTION_CONFIG", f"{bm},{bn},{stages},{warps}")
        _gpu_case(dtype, (1, 4, 2, 301, 517, 128, True, "bottom-right", False))


def _gpu_mask(B: int, Sq: int, Sk: int) -> Any:
    """A boolean mask of GPU_CASES: random, with masked leading tiles and one empty row."""
    g = torch.Generator().manual_seed(7)
    mask = torch.rand(B, 1, Sq, Sk, generator=g) > 0.5
    mask[:, :, :, :200] = False  # several masked leading tiles
    mask[:, :, 3] = False  # one empty query row
    return mask.to(DEVICE)


def _gpu_case(dtype: Any, case: tuple) -> None:
    B, H, Hkv, Sq, Sk, D, causal, align, use_mask = case
    q, k, v = _inputs((B, H, Sq, D), (B, Hkv, Sk, D), dtype, seed=Sq + D)
    mask = _gpu_mask(B, Sq, Sk) if use_mask else None
    o, lse = attention(q, k, v, mask=mask, causal=causal, causal_align=align, return_lse=True)
    _check(o, lse, *_bounds(q, k, v, dtype, mask=mask, causal=causal, causal_align=align))
    o2, lse2 = attention(q, k, v, mask=mask, causal=causal, causal_align=align, return_lse=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2), "not deterministic"


@pytest.mark.gpu
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "autotuned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_gpu_repeated_calls_launch_their_kernel_directly_and_stay_right(dtype, pinned,
                                                                       monkeypatch):
    # The Triton kernel with a known config (pinned, or the autotuner's pick) compiles through
    # the JIT once per specialisation; later calls launch the compiled kernel directly (the
    # JIT made to raise proves it), on other data, as right. Cases with and without a mask.
    import triton

    if not pinned:
        monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG")
    cases = [(1, 4, 2, 301, 517, 64, True, "bottom-right", False),
             (2, 4, 1, 257, 900, 40, False, "top-left", True)]
    for case in cases:  # two calls each: the JIT (autotuned: the autotuner, then the JIT)
        _gpu_case(dtype, case)

    def no_jit(*args, **kwargs):
        raise AssertionError("launched through the JIT again")

    monkeypatch.setattr(triton.runtime.jit.JITFunction, "run", no_jit)
    for B, H, Hkv, Sq, Sk, D, causal, align, use_mask in cases:
        q, k, v = _inputs((B, H, Sq, D), (B, Hkv, Sk, D), dtype, seed=99, q_scale=4.0)
        mask = _gpu_mask(B, Sq, Sk) if use_mask else None
        o, lse = attention(q, k, v, mask=mask, causal=causal, causal_align=align,
                           return_lse=True)
        _check(o, lse, *_bounds(q, k, v, dtype, mask=mask, causal=causal, causal_align=align))


# ---- the Gluon candidate (bench/gluon_attention.py: not shipped, not yet run on a GPU) ----
def _gluon_module() -> Any:
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    return bench_module("gluon_attention")


def _gluon_offline(*args: str) -> list[dict]:
    """bench/gluon_attention.py --offline: compiled for sm_90a, ptxas -v (no GPU needed)."""
    from offline_compile import sm90_json  # conftest puts tests/ on sys.path

    _gluon_module()  # skips where this triton has no Gluon for Hopper
    return sm90_json("gluon_attention.py", "--offline", *args)


@pytest.mark.parametrize("flag", ["--schedules", "--candidates"])
def test_the_gluon_bench_refuses_a_launch_position_past_its_table_in_one_line(flag, capsys):
    # Before any GPU work: a position past WS_SCHEDULES / WS_CANDIDATES ends the command with
    # argparse's one line (exit 2), naming the flag and the positions there are.
    g = _gluon_module()
    n = len(g.WS_SCHEDULES if flag == "--schedules" else g.WS_CANDIDATES)
    with pytest.raises(SystemExit) as exit_info:
        g.main(["--bench-ws", flag, f"0,{n}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    table = "WS_SCHEDULES" if flag == "--schedules" else "WS_CANDIDATES"
    assert f"{flag} '0,{n}'" in err and f"in {table}, 0 to {n - 1}" in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
@pytest.mark.parametrize("flag", ["--bench", "--bench-ws", "--bench-compact"])
def test_the_gluon_bench_refuses_to_time_without_cuda_in_one_line(flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _gluon_module().main([flag])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{flag} times kernels on a GPU" in err and "--offline" in err, err


def test_the_gluon_candidate_compiles_without_spills_or_serialised_wgmma():
    rows = _gluon_offline()
    assert len(rows) == 4  # D = 64 and 128, causal and not
    ws = _gluon_offline("--ws", "--sass")  # warp-specialized: 12 warps at 168 registers fill the SM
    assert len(ws) == 4
    # and the chained launch at S = 1280 (key tiles of 128, one Q buffer; causal: not chained)
    chained = _gluon_offline("--ws", "--sass", "--chain", "--dims", "128", "--seq", "1280")
    assert [(r["causal"], r["chained"]) for r in chained] == [(False, True), (True, False)]
    # The softmax multiplies no score by the scale: the row max is of the raw scores and the
    # scale rides in p's FMA, so a turn's FMULs are the rescale of o (D / 2 per thread: 64
    # rows x D over 128 threads) and two per row pair, and each score costs one FFMA. (A
    # chained launch's turn between two blocks also holds the first block's o = acc / l and
    # its stores: its FMULs are that division's.)
    for r in ws + chained:
        assert r["turns"], r
        for t in r["turns"]:
            assert _stores_o(t) or t["ops"].get("FMUL", 0) <= r["head_d"] // 2 + 2, (
                r["head_d"], r["causal"], t)
            assert t["ops"]["FFMA"] >= t["ops"]["MUFU"] - 2, (r["head_d"], r["causal"], t)
        # chained, o leaves inside the turn of the next block's first scores, and only there
        assert any(_stores_o(t) for t in r["turns"]) == r["chained"], r
    # the shipped launches (at S = 4096): D = 64 in 3 consumers, causal in 4 with key tiles
    # of 64; all persistent, their blocks from the counter but D = 128's without causal
    assert [(r["head_d"], r["causal"], r["warpgroups"], r["block_n"]) for r in ws] == [
        (64, False, 3, 128), (64, True, 4, 64), (128, False, 2, 128), (128, True, 2, 128)]
    assert all(r["persistent"] for r in ws)
    assert [r["dynamic"] for r in ws] == [r["head_d"] == 64 or r["causal"] for r in ws]
    # chained blocks (the last P V beside the next first Q K^T) where the shipped launch has
    # them; chained, each warpgroup stores o in one turn
    ag = _gluon_module().attention_gluon
    assert [r["chained"] for r in ws] == [
        ag._ws_chained(r["head_d"], r["causal"], r["warpgroups"], True, r["dynamic"])
        for r in ws]
    r = chained[0]
    assert sum(_stores_o(t) for t in r["turns"]) == r["warpgroups"], r["turns"]
    # o leaves by TMA from shared memory in every shipped launch: its own buffer where one
    # fits, else (D = 128 in key tiles of 128) the block's last K buffer; never by the
    # threads' own stores
    for r in ws:
        assert r["tma_stores"] >= 1 and r["global_stores"] == 0, r
    for r in rows + ws + chained:
        assert r["spill_bytes"] <= _ws_spill_allowed(r) and not r["serialized"], r
        assert r["registers"] <= 255 and r["shared"] <= 227 * 1024, r
    assert all(r["registers"] <= 168 for r in ws), ws


def test_the_sass_audit_finds_a_softmax_split_from_its_matmuls():
    # The compact consumer's turn branches between its matmuls and its softmax, so its
    # softmax lies in a basic block without HGMMA: ``wgmma=False`` still finds it.
    common = bench_module("_common")
    exps = "".join(f" /*{0x20 + i:04x}*/ MUFU.EX2 R1, R1 ;\n" for i in range(16))
    text = (".L_x_1:\n /*0010*/ HGMMA.64x64x16.F32 R0, gdesc[UR4], R0 ;\n"
            f" /*0011*/ @P0 BRA `(.L_x_2) ;\n.L_x_2:\n{exps}")
    assert common.sass_softmax_blocks(text) == []
    [block] = common.sass_softmax_blocks(text, wgmma=False)
    assert block["label"] == ".L_x_2" and block["ops"] == {"MUFU": 16}


def _stores_o(turn: dict) -> bool:
    """Whether a turn's SASS stores o: to global memory, or to shared memory for TMA."""
    return any(op in turn["ops"] for op in ("STG", "STS", "STSM"))


def _ws_spill_allowed(r: dict) -> int:
    """Spill bytes a compiled launch may have: none, but 4 where four consumer warpgroups
    run causal at 96 registers with o stored by TMA. That word is one value of the kernel's
    shared prologue, stored once before the partitions split and loaded once at each
    partition's start (nvdisasm: one STL, then one LDL per partition, none in a loop)."""
    return 4 if r.get("warpgroups") == 4 and r["causal"] else 0


def test_the_gluon_ws_launches_from_the_counter_compile_and_fit():
    # Every persistent launch taking its blocks from the counter (--bench-ws times them all)
    # fits in shared memory with the block numbers' words and o's buffers; the causal ones,
    # shipped (D = 64 in four warpgroups at S = 4096), spill at most a word of the prologue
    # (_ws_spill_allowed; three warpgroups at D = 64, causal, spill 124-304 bytes: not
    # shipped from the counter).
    rows = _gluon_offline("--ws", "--dynamic")
    assert len(rows) == 4 and all(r["dynamic"] and r["persistent"] for r in rows), rows
    for r in rows:
        assert r["shared"] <= 227 * 1024 and not r["serialized"], r
        assert not r["causal"] or r["spill_bytes"] <= _ws_spill_allowed(r), r
    # and the causal launches below S = 4096, from the counter: at D = 64 two warpgroups in
    # key tiles of 128 with two Q buffers; at D = 128 key tiles of 128 in three K/V buffers
    # with one (224 KB of shared memory, within the 227 KB of the SM; o through a K tile)
    rows = [r for r in _gluon_offline("--ws", "--seq", "1024", "--dims", "64,128") if r["causal"]]
    assert [(r["head_d"], r["warpgroups"], r["block_n"], r["num_buf"], r["dynamic"],
             r["q_buffers"]) for r in rows] == [(64, 2, 128, 3, True, 2),
                                                (128, 2, 128, 3, True, 1)]
    for r in rows:
        assert r["spill_bytes"] == 0 and not r["serialized"] and r["shared"] <= 227 * 1024, r


def test_the_compact_consumer_compiles_one_copy_of_the_step():
    # The compact consumer (forward's compact) runs every key tile through one copy of the
    # step, tile 0 (no P V before it) and the diagonal tile (its mask behind a branch) too:
    # the kernel is smaller by a copy of the softmax or two per consumer warpgroup, causal or
    # not, with no spill and the same shared memory.
    def compiled(compact: str) -> dict[bool, dict]:  # causal or not -> its kernel's row
        rows = _gluon_offline("--ws", "--sass", "--dims", "64", "--seq", "512",
                              "--compact", compact)
        return {r["causal"]: r for r in rows}

    asked, not_asked = compiled("yes"), compiled("no")
    for causal in (False, True):
        split, compact = not_asked[causal], asked[causal]
        assert compact["compact"] and not split["compact"], causal
        for r in (split, compact):
            assert r["spill_bytes"] == 0 and not r["serialized"], r
        assert compact["shared"] == split["shared"]
        if split["sass_instructions"] is None:
            pytest.skip("no nvdisasm beside ptxas: SASS not counted")
        assert compact["sass_instructions"] < 0.8 * split["sass_instructions"], (split, compact)


def test_the_compact_consumer_is_shipped_at_d64_and_for_short_causal_rows():
    # Where it measured faster: D = 64 without causal at every length, causal below
    # WS_COMPACT_BELOW; forward's compact overrides it. Compact waits for each P V at once:
    # it turns off P V's overlap (shipped at D = 128), and refuses it asked for, or chains.
    ag = _gluon_kernel_module()
    device = torch.device("cpu")

    def launch(s: int, d: int, causal: bool, override: Any = None, **kw: Any) -> Any:
        args = dict(block_n=None, num_buf=None, maxnreg=None, pv_overlap=None,
                    warpgroups=None, persistent=None, programs=5, q_buffers=None,
                    dynamic=None, chain=None, compact=override)
        args.update(kw)
        return ag._ws_launch.__wrapped__(2, 3, s, d, device, causal, **args).constexprs

    def compact(s: int, d: int, causal: bool, override: Any = None, **kw: Any) -> bool:
        return launch(s, d, causal, override, **kw)["COMPACT"]

    below = ag.WS_COMPACT_BELOW
    assert 512 < below <= 4096
    assert compact(512, 64, True) and compact(below - 128, 64, True)
    assert not compact(below, 64, True) and not compact(512, 128, True)
    assert compact(256, 64, False) and compact(16384, 64, False)
    assert not compact(512, 128, False) and not compact(512, 64, False, False)
    assert compact(4096, 64, True, True) and not compact(512, 64, True, False)
    assert launch(512, 128, True)["PV_OVERLAP"]
    assert not launch(512, 128, True, True)["PV_OVERLAP"]
    assert not compact(512, 64, False, pv_overlap=True)  # asked for: the split consumer
    with pytest.raises(ValueError, match="pv_overlap"):
        launch(512, 128, True, True, pv_overlap=True)
    with pytest.raises(ValueError, match="chain"):
        launch(512, 128, False, True, persistent=True, chain=True)


def test_the_gluon_ws_launch_candidates_compile_without_spills():
    # What --bench-ws times on a GPU: other key tiles, buffer counts, register caps and
    # three or four consumer warpgroups.
    g = _gluon_module()
    rows = _gluon_offline("--ws-candidates")
    assert [(r["head_d"], r["block_n"], r["num_buf"], r["maxnreg"], r["pv_overlap"],
             r["warpgroups"]) for r in rows] == [tuple(c) for c in g.WS_CANDIDATES]
    for r in rows:  # P V left running through the softmax must not serialise the wgmma
        assert r["spill_bytes"] == 0 and not r["serialized"], r
        assert r["shared"] <= 227 * 1024, r
    # D = 64 below S = 2048 ships four warpgroups: that launch is among those audited here
    ag, wg = g.attention_gluon, g.attention_gluon._ws_warpgroups(64, 1024)
    assert (64, ag._ws_block_n(wg), ag._ws_num_buf(wg), ag._ws_maxnreg(wg),
            ag._ws_pv_overlap(64), wg) in g.WS_CANDIDATES


def test_the_triton_kernels_masked_tiles_keep_vector_loads():
    # The masked phase (the causal diagonal, the tail past the last whole key tile): where D
    # fills the tile, K and V are masked by row only, so their loads stay 16-byte vectors
    # (LDGSTS) as in the unmasked tiles; a per-element mask split them into 2-byte LDGs and
    # packed their bytes (the masked tile then cost 2.4x an unmasked one).
    from offline_compile import sm90_json  # conftest puts tests/ on sys.path

    rows = sm90_json("attention.py", "--sass", "64,64,3,4", "--dims", "64,128")
    assert [(r["head_d"], r["causal"]) for r in rows] == [
        (64, False), (64, True), (128, False), (128, True)]
    for r in rows:
        assert r["spill_bytes"] == 0 and len(r["tiles"]) == 2, r
        plain, masked = (t["ops"] for t in r["tiles"])
        assert "LDG" not in masked and masked.get("LDGSTS", 0) >= plain["LDGSTS"], r
        assert r["tiles"][1]["instructions"] <= 1.5 * r["tiles"][0]["instructions"], r


def test_the_gluon_audit_sees_serialised_wgmma():
    # P V left in flight across the loop's back edge (FA3's order): ptxas serialises.
    rows = _gluon_offline("--overlap-pv", "--dims", "128")
    assert rows and all(r["serialized"] for r in rows), rows


def test_the_gluon_candidate_refuses_what_it_does_not_support():
    g = _gluon_module()
    q = torch.zeros(1, 2, 128, 64, dtype=torch.bfloat16)
    for kw, why in ((dict(mask=torch.ones(1, 1, 128, 128, dtype=torch.bool)), "no mask"),
                    (dict(q=q.float()), "bf16 or fp16"),
                    (dict(k=q[:, :1]), "one shape"),
                    (dict(q=q[:, :, :100], k=q[:, :, :100], v=q[:, :, :100]), "multiple of 128"),
                    ({}, "CUDA")):
        args = dict(q=q, k=q, v=q)
        args.update({n: kw.pop(n) for n in ("q", "k", "v") if n in kw})
        with pytest.raises(ValueError, match=f"gluon candidate: .*{why}"):
            g.attention(args["q"], args["k"], args["v"], **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("block_n", [64, 128])
def test_gpu_gluon_candidate_matches_oracle(dtype: Any, d: int, causal: bool, block_n: int):
    g = _gluon_module()
    q, k, v = _inputs((2, 2, 384, d), (2, 2, 384, d), dtype, seed=d)
    q = q * 8  # large scores: the running max moves from tile to tile
    o = g.attention(q, k, v, causal=causal, block_n=block_n)
    o_ref, _, o_tol, _ = _bounds(q, k, v, dtype, causal=causal)
    err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
    worst = err.argmax()
    assert np.all(err <= o_tol), f"|error| {err.flat[worst]:.3g} > {o_tol.flat[worst]:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [128, 384, 1024])
def test_gpu_gluon_ws_candidate_matches_oracle(dtype: Any, d: int, causal: bool, seq: int):
    # The warp-specialized kernel: one key tile (no loop), three (the unmasked middle and the
    # masked last), eight (the 3-buffer ring wraps, its barriers change phase).
    g = _gluon_module()
    q, k, v = _inputs((2, 2, seq, d), (2, 2, seq, d), dtype, seed=seq + d)
    q = q * 8  # large scores: the running max moves from tile to tile
    o = g.attention_ws(q, k, v, causal=causal)
    o_ref, _, o_tol, _ = _bounds(q, k, v, dtype, causal=causal)
    err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
    worst = err.argmax()
    assert np.all(err <= o_tol), f"|error| {err.flat[worst]:.3g} > {o_tol.flat[worst]:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_gluon_ws_launch_candidates_match_oracle(causal: bool):
    # Before --bench-ws's numbers are believed: each candidate launch is correct (three
    # warpgroups: 192-row blocks, so S = 1024 and 128 end in a block that passes S; four:
    # 256-row blocks, S = 128 and 384 end in one).
    g = _gluon_module()
    for d, block_n, num_buf, maxnreg, overlap, wg in g.WS_CANDIDATES:
        for seq in {2: (1024,), 3: (1024, 128), 4: (1024, 128, 384)}[wg]:
            q, k, v = _inputs((1, 2, seq, d), (1, 2, seq, d), torch.bfloat16, seed=d + block_n)
            o = g.attention_gluon.forward(q * 8, k, v, causal=causal, block_n=block_n,
                                          num_buf=num_buf, maxnreg=maxnreg, pv_overlap=overlap,
                                          warpgroups=wg)
            o_ref, _, o_tol, _ = _bounds(q * 8, k, v, torch.bfloat16, causal=causal)
            err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
            assert np.all(err <= o_tol), (d, block_n, num_buf, maxnreg, overlap, wg, seq,
                                          float(err.max()))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_gluon_ws_persistent_launch_matches_oracle(causal: bool, d: int):
    # Persistent: 3 programs walk 2 x 3 heads' query blocks of unequal length (causal: in
    # rounds, every other one reversed), so the ring of K/V buffers, the turns and Q's
    # barriers run on from block to block; with one Q buffer and with two in turn; and
    # taking blocks from the counter (dynamic), whichever program is free first. Causal,
    # the warpgroups of a block own different numbers of key tiles (four warpgroups: 3 / 2
    # / 1 / 0 turns handed on), and the ring runs on across that.
    g = _gluon_module()
    q, k, v = _inputs((2, 3, 1024, d), (2, 3, 1024, d), torch.bfloat16, seed=d)
    o_ref, _, o_tol, _ = _bounds(q * 8, k, v, torch.bfloat16, causal=causal)
    for wg, q_buffers, dynamic in itertools.product((2, 3, 4) if d == 64 else (2,), (1, 2),
                                                    (False, True)):
        # D = 128: 2 Q + 3 K/V of 128 keys is too much shared memory; with one Q, o leaves
        # through each block's last K tile
        num_buf = 2 if d == 128 and q_buffers == 2 else None
        o = g.attention_gluon.forward(q * 8, k, v, causal=causal, warpgroups=wg,
                                      persistent=True, programs=3, q_buffers=q_buffers,
                                      num_buf=num_buf, dynamic=dynamic)
        err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
        assert np.all(err <= o_tol), (d, wg, q_buffers, dynamic, float(err.max()))
    if d == 128:  # D = 128 in key tiles of 64, four K/V buffers and two Q buffers (shipped
        # below S = 2560 until tiles of 128 won there; forward(block_n=64) runs it): o
        # leaves through a buffer of its own
        for dynamic in (False, True):
            o = g.attention_gluon.forward(q * 8, k, v, causal=causal, persistent=True,
                                          programs=3, block_n=64, num_buf=4, q_buffers=2,
                                          dynamic=dynamic)
            err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
            assert np.all(err <= o_tol), (d, "key tiles of 64", dynamic, float(err.max()))
    # the shipped launch at this length (D = 128: key tiles of 128, three K/V buffers, one Q
    # buffer, o through each block's last K tile)
    o = g.attention_gluon.forward(q * 8, k, v, causal=causal)
    err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
    assert np.all(err <= o_tol), (d, "shipped", float(err.max()))
    with pytest.raises(ValueError, match="q_buffers=2 is not supported"):
        g.attention_gluon.forward(q, k, v, causal=causal, persistent=False, q_buffers=2)
    with pytest.raises(ValueError, match="dynamic=True needs persistent programs"):
        g.attention_gluon.forward(q, k, v, causal=causal, persistent=False, dynamic=True)


@pytest.mark.gpu
def test_gpu_gluon_ws_counter_resets_itself_per_stream_and_graph():
    # Launches scheduled by the counter share one pair of words per stream, which the last
    # program out zeroes: each launch finds them zero (else its programs would take no
    # block and o would stay as allocated), on the default stream, on a side stream, and
    # replayed from a CUDA graph with new inputs.
    g = _gluon_module()
    ag = g.attention_gluon
    q, k, v = _inputs((2, 3, 1024, 64), (2, 3, 1024, 64), torch.bfloat16, seed=7)
    q = q * 8

    def check(o: Any, bounds: tuple, what: str) -> None:
        o_ref, _, o_tol, _ = bounds
        err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
        assert np.all(err <= o_tol), (what, float(np.nanmax(err)))

    def run(q: Any, k: Any, v: Any, programs: int) -> Any:
        return ag.forward(q, k, v, causal=True, persistent=True, dynamic=True,
                          programs=programs)

    bounds = _bounds(q, k, v, torch.bfloat16, causal=True)  # the oracle once for q, k, v
    for programs in (3, 5, 3):  # counted out by 3, then 5, then 3 programs
        check(run(q, k, v, programs), bounds, f"default stream, {programs} programs")
    words = ag._COUNTERS[(q.device, torch.cuda.current_stream(q.device).cuda_stream)]
    torch.cuda.synchronize()
    assert words.tolist() == [0, 0]
    side = torch.cuda.Stream(q.device)
    side.wait_stream(torch.cuda.current_stream(q.device))
    with torch.cuda.stream(side):
        o_side = run(q, k, v, 4)
        side_words = ag._COUNTERS[(q.device, side.cuda_stream)]
    torch.cuda.synchronize()
    assert side_words.data_ptr() != words.data_ptr() and side_words.tolist() == [0, 0]
    check(o_side, bounds, "side stream")
    graph = torch.cuda.CUDAGraph()
    static = [t.clone() for t in (q, k, v)]
    capture = torch.cuda.Stream(q.device)
    capture.wait_stream(torch.cuda.current_stream(q.device))
    with torch.cuda.stream(capture):
        run(*static, 3)  # compiled before the capture
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=capture):
        o_graph = run(*static, 3)
    for seed in (11, 12):  # two replays: the second finds the words the first zeroed
        new = _inputs((2, 3, 1024, 64), (2, 3, 1024, 64), torch.bfloat16, seed=seed)
        for t, n in zip(static, new):
            t.copy_(n)
        static[0].mul_(8)
        graph.replay()
        torch.cuda.synchronize()
        check(o_graph, _bounds(*static, torch.bfloat16, causal=True),
              f"graph replay, seed {seed}")


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_gluon_ws_chained_launch_matches_oracle(d: int):
    # Chained blocks (a block's last P V in the turn of the next block's first Q K^T;
    # forward(chain=True), not shipped: it timed slower): 1, 3 and 7 programs walk 2 x 3 heads' 8
    # blocks each (one program all 48 in a row; 7: programs whose last block differs), with
    # one Q buffer and with two, key tiles of 64 and 128; and the launch that does not chain.
    g = _gluon_module()
    ag = g.attention_gluon
    q, k, v = _inputs((2, 3, 1024, d), (2, 3, 1024, d), torch.bfloat16, seed=d + 1)
    o_ref, _, o_tol, _ = _bounds(q * 8, k, v, torch.bfloat16, causal=False)
    for programs, q_buffers, block_n, chain in itertools.product(
            (1, 3, 7), (1, 2), (64, 128), (True, False)):
        num_buf = 4 if block_n == 64 else 2 if q_buffers == 2 and d == 128 else 3
        # dynamic=False: the static share, which D = 64 without causal no longer takes
        # left to itself (it takes the counter, which does not chain)
        o = ag.forward(q * 8, k, v, warpgroups=2, persistent=True, programs=programs,
                       q_buffers=q_buffers, block_n=block_n, num_buf=num_buf, chain=chain,
                       dynamic=False)
        err = np.abs(to_numpy(o).astype(np.float64) - o_ref)
        assert np.all(err <= o_tol), (d, programs, q_buffers, block_n, chain, float(err.max()))
    for kw in (dict(causal=True), dict(dynamic=True), dict(persistent=False),
               dict(warpgroups=3)):
        with pytest.raises(ValueError, match="chain=True needs persistent blocks of two"):
            ag.forward(q, k, v, chain=True, **kw)


# ---- the opt-in Gluon kernel (kernels/attention_gluon.py) behind attention() ----
def _gluon_kernel_module() -> Any:
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    return importlib.import_module("onlinesm.kernels.attention_gluon")


def test_the_gluon_kernel_says_why_a_call_is_not_its_own():
    ag = _gluon_kernel_module()
    q = torch.zeros(1, 2, 128, 64, dtype=torch.bfloat16)
    assert "no mask" in ag.fits(q, q, q, mask=torch.ones(128, 128, dtype=torch.bool))
    assert "logsumexp" in ag.fits(q, q, q, return_lse=True)
    assert "bf16 or fp16" in ag.fits(q.float(), q.float(), q.float())
    assert "one shape" in ag.fits(q, q[:, :1], q[:, :1])  # grouped-query
    assert "multiple of 128" in ag.fits(*(q[:, :, :100],) * 3)
    assert "D of 64 or 128" in ag.fits(*(torch.zeros(1, 2, 128, 96, dtype=torch.bfloat16),) * 3)
    assert "CUDA" in ag.fits(q, q, q)
    assert "non-empty" in ag.fits(*(q[:0],) * 3)
    # its row max is of the raw scores, scaled once: a scale flushed to 0 would turn a hidden
    # key's -inf into NaN, so tiny scales (and 0) go to the Triton kernel; negative ones fold
    # into q
    assert "a scale of magnitude at least 1e-30 (got 0)" in ag.fits(q, q, q, scale=0.0)
    assert "magnitude at least" in ag.fits(q, q, q, scale=-1e-31)
    assert "magnitude at least" not in ag.fits(q, q, q, scale=-1e-29)  # "a CUDA device"
    # where it pays (measured on an H100 below S = 1024, on the H200 above): from S = 256,
    # causal or not
    for d, causal in itertools.product((64, 128), (False, True)):
        assert ag.pays(torch.zeros(1, 1, 256, d), causal=causal), (d, causal)
        assert not ag.pays(torch.zeros(1, 1, 128, d), causal=causal), (d, causal)
    # the launch: three consumer warpgroups at D = 64 (four below S = 2048, in key tiles of
    # 64 with four buffers and 96 registers at launch; causal, two below 4096 in key tiles
    # of 128, four below 8192), two at D = 128; persistent without causal, and causal with
    # blocks from the counter at D = 128 below 16k and at D = 64 below 8192
    assert (ag._ws_warpgroups(64), ag._ws_warpgroups(128)) == (3, 2)
    assert [ag._ws_warpgroups(64, s, causal=True) for s in (1024, 3968, 4096, 8064, 8192)] == [
        2, 2, 4, 4, 3]
    assert ag._ws_warpgroups(128, 4096, causal=True) == 2
    # below 2048 four, unless three leave fewer rows of the last block past S
    seqs = (1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048)
    assert [ag._ws_warpgroups(64, s) for s in seqs] == [4, 3, 4, 4, 4, 3, 4, 3, 3]
    assert ag._ws_warpgroups(128, 1024) == 2
    assert (ag._ws_block_n(4), ag._ws_num_buf(4), ag._ws_maxnreg(4)) == (64, 4, 96)
    assert (ag._ws_block_n(3), ag._ws_num_buf(3), ag._ws_maxnreg(3)) == (128, 3, 128)
    # D = 128 (two warpgroups) runs key tiles of 128 in three K/V buffers with one Q buffer
    # at every length, causal or not (o then leaves through the block's last K tile)
    assert (ag._ws_block_n(2), ag._ws_num_buf(2)) == (128, 3)
    for s, causal in itertools.product((256, 1024, 1536, 2048, 2560, 8192), (False, True)):
        assert ag._ws_q_buffers(128, causal, s) == 1, (s, causal)
    assert ag._ws_o_tma(128, 2, 64, 4, 2)
    # a launch naming its own ring gets the shipped Q count where it fits beside it, else one
    assert ag._ws_default_q_buffers(64, True, 1024, True, True, 2, 128, 3) == 2
    assert ag._ws_default_q_buffers(64, True, 1024, True, True, 2, 128, 6) == 2  # 225 KB
    assert ag._ws_default_q_buffers(64, True, 1024, True, True, 2, 128, 8) == 1  # 289 KB
    assert ag._ws_default_q_buffers(64, True, 1024, True, False, 2, 128, 3) == 1  # static
    assert ag._ws_default_q_buffers(128, True, 1024, True, True, 2, 64, 4) == 1  # D = 128
    assert ag._ws_persistent(64, False, 4096) and not ag._ws_persistent(64, True, 8192)
    assert ag._ws_dynamic(128, True, 8192) and ag._ws_persistent(128, True, 8192)
    assert not ag._ws_dynamic(128, True, 16384) and not ag._ws_persistent(128, True, 16384)
    assert not ag._ws_dynamic(128, False, 4096) and ag._ws_dynamic(64, True, 4096)
    assert not ag._ws_dynamic(64, True, 8192) and ag._ws_persistent(64, True, 4096)
    # without causal at D = 64 the blocks come from the counter with two Q buffers at every
    # length (three or four warpgroups); at D = 128 from the static share, with one
    for s in (256, 384, 1024, 2048, 4096, 16384):
        assert (ag._ws_dynamic(64, False, s), ag._ws_persistent(64, False, s),
                ag._ws_q_buffers(64, False, s)) == (True, True, 2), s
        assert (ag._ws_dynamic(128, False, s), ag._ws_persistent(128, False, s),
                ag._ws_q_buffers(128, False, s)) == (False, True, 1), s
    assert ag._ws_warpgroups(64, 256) == 4 and ag._ws_warpgroups(64, 256, causal=True) == 2
    # causal, two Q buffers where the consumers take blocks from the counter at D = 64
    assert [ag._ws_q_buffers(64, True, s) for s in (1024, 2048, 4096, 8192)] == [2, 2, 2, 1]
    assert ag._ws_q_buffers(128, True, 4096) == 1
    # o leaves by TMA through a shared buffer per consumer where it fits beside Q and the
    # ring: every D = 64 launch; not beside D = 128's three K/V buffers of 128 keys
    for s, causal in itertools.product((1024, 2048, 4096, 8192, 16384), (False, True)):
        wg = ag._ws_warpgroups(64, s, causal)
        assert ag._ws_o_tma(64, wg, ag._ws_block_n(wg), ag._ws_num_buf(wg),
                            ag._ws_q_buffers(64, causal, s)), (s, causal, wg)
    assert not ag._ws_o_tma(128, 2, 128, 3, 1) and ag._ws_o_tma(128, 2, 128, 2, 1)
    with pytest.raises(ValueError, match="the Gluon attention kernel needs q, k, v of one shape"):
        ag.forward(q[:, :, :100], q, q)


def test_use_gluon_leaves_calls_it_does_not_cover_to_the_triton_kernel(monkeypatch):
    ag = _gluon_kernel_module()
    module = sys.modules["onlinesm.kernels.attention"]
    calls = []
    monkeypatch.setattr(ag, "forward", lambda *a, **kw: calls.append(1))
    was_on = module._gluon_on
    try:
        assert kernels.use_gluon(True)
        q, k, v = _inputs((1, 2, 128, 64), (1, 2, 128, 64), torch.bfloat16, seed=1)
        mask = torch.ones(128, 128, dtype=torch.bool, device=DEVICE)
        o = attention(q, k, v, mask=mask)  # a mask: never the Gluon kernel
        o_ref, _, o_tol, _ = _bounds(q, k, v, torch.bfloat16, mask=mask)
        assert np.all(np.abs(to_numpy(o).astype(np.float64) - o_ref) <= o_tol)
        if INTERPRET:  # under the interpreter not even a call it covers
            attention(q, k, v)
        assert calls == []
        assert not kernels.use_gluon(False) and not module._gluon_on
    finally:
        kernels.use_gluon(was_on)


def test_a_gluon_kernel_that_fails_leaves_the_call_to_the_triton_kernel(monkeypatch):
    # Gluon is experimental: a triton that cannot compile the kernel must not cost the call.
    module = sys.modules["onlinesm.kernels.attention"]

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("PassManager::run failed\nthe rest of the log")

    stub = types.SimpleNamespace(pays=lambda q, causal: True, fits=lambda *a, **kw: None,
                                 forward_fitted=broken)
    monkeypatch.setattr(module, "_gluon_module", lambda: stub)
    monkeypatch.setattr(module, "_gluon_on", True)
    monkeypatch.setattr(module, "INTERPRETED", False)
    monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG")
    q = torch.zeros(1, 1, 128, 128, dtype=torch.bfloat16)
    assert module.gluon_takes(q, q, q)
    with pytest.warns(RuntimeWarning, match=r"the Gluon attention kernel failed \(RuntimeError: "
                      r"PassManager::run failed\) .*ONLINESM_ATTENTION_GLUON=0"):
        assert module._gluon_forward(q, q, q, False, 0.1) is None
    assert not module._gluon_on and not module.gluon_takes(q, q, q)  # off from now on

    def out_of_memory(*a: Any, **kw: Any) -> Any:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    stub.forward_fitted = out_of_memory
    with pytest.raises(torch.cuda.OutOfMemoryError):  # out of memory is the caller's to see
        module._gluon_forward(q, q, q, False, 0.1)


def test_gluon_takes_what_it_covers_and_pays_on_and_nothing_while_tiles_are_pinned(monkeypatch):
    module = sys.modules["onlinesm.kernels.attention"]
    stub = types.SimpleNamespace(
        pays=lambda q, causal: causal,
        fits=lambda q, k, v, mask, return_lse, scale: (
            "no mask (got one)" if mask is not None else "a scale" if scale == 0 else None))
    monkeypatch.setattr(module, "_gluon_module", lambda: stub)
    monkeypatch.setattr(module, "_gluon_on", True)
    monkeypatch.setattr(module, "INTERPRETED", False)
    monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG")
    q = torch.zeros(1, 1, 128, 64, dtype=torch.bfloat16)
    assert module.gluon_takes(q, q, q, causal=True)
    assert kernels.gluon_takes(q, q, q, causal=True)  # the package's name for it
    assert not module.gluon_takes(q, q, q)  # it does not pay
    assert not module.gluon_takes(q, q, q, causal=True, mask=torch.ones(128, 128, dtype=bool))
    assert not kernels.gluon_takes(q, q, q, causal=True, scale=0.0)  # the scale reaches fits
    monkeypatch.setenv("ONLINESM_ATTENTION_CONFIG", "128,64,3,8")  # Triton tiles pinned
    assert not module.gluon_takes(q, q, q, causal=True)
    monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG")
    monkeypatch.setattr(module, "INTERPRETED", True)  # the interpreter runs no Gluon
    assert not module.gluon_takes(q, q, q, causal=True)


def test_the_gluon_kernel_keeps_an_allocator_the_caller_set():
    import contextvars

    import triton
    from triton.runtime import _allocation

    ag = _gluon_kernel_module()

    def allocator_after(caller: Any) -> Any:
        def run() -> Any:
            if caller is not None:
                triton.set_allocator(caller)
            ag._use_scratch_allocator()
            return _allocation._allocator.get()
        return contextvars.copy_context().run(run)  # a fresh context each time

    def mine(size: int, alignment: int, stream: Any) -> Any:
        return torch.empty(size, dtype=torch.int8)

    assert allocator_after(mine) is mine  # the caller's stays
    ours = allocator_after(None)  # none set: ours, not Triton's "no allocator" default
    assert not isinstance(ours, _allocation.NullAllocator) and ours is ag._SCRATCH


def test_the_gluon_scratch_is_one_buffer_per_device_and_stream(monkeypatch):
    # Launches on one stream run in turn, so they share a buffer; another stream or device
    # gets its own, a larger request a larger one, and a graph's capture or a request past
    # SCRATCH_KEPT a fresh tensor each time. torch.empty on the CPU stands in for CUDA's.
    ag = _gluon_kernel_module()
    state = {"device": 0, "capturing": False}
    made = []
    empty = torch.empty

    def fake_empty(size: int, dtype: Any, device: str) -> Any:
        assert device == "cuda" and dtype is torch.int8
        made.append(empty(size, dtype=dtype))
        return made[-1]

    monkeypatch.setattr(torch, "empty", fake_empty)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["device"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state["capturing"])
    scratch = ag._StreamScratch()
    first = scratch(4096, 128, 7)
    assert first.numel() == 4096 and scratch(1024, 128, 7) is first  # reused on stream 7
    other = scratch(1024, 128, 8)  # another stream
    assert other is not first and len(made) == 2
    grown = scratch(8192, 128, 7)  # more than stream 7's buffer holds: a larger one, kept
    assert grown.numel() == 8192 and scratch(4096, 128, 7) is grown and len(made) == 3
    state["device"] = 1  # stream 7 of another device
    assert scratch(1024, 128, 7) is made[3] and len(made) == 4
    state["capturing"] = True  # a graph keeps what its capture allocated: fresh each time
    assert scratch(1024, 128, 7) is not scratch(1024, 128, 7) and len(made) == 6
    state["capturing"] = False
    big = ag.SCRATCH_KEPT + 1
    assert scratch(big, 128, 7) is not scratch(big, 128, 7) and len(made) == 8
    assert scratch(1024, 128, 7) is made[3]  # device 1's stream 7 kept its own


def test_the_gluon_launch_is_planned_once_and_its_kernel_launched_directly(monkeypatch):
    # forward() plans a launch once per shape (_ws_launch) and launches the kernel the JIT
    # compiled for it directly on later calls, with the compile-time arguments in the
    # kernel's order; another dtype goes through the JIT again. Stubs stand for the JIT and
    # the compiled kernel (no GPU needed).
    ag = _gluon_kernel_module()
    direct = []
    stub = Jit(ag._attn_fwd_ws.fn, lambda: Compiled(direct))
    jit = stub.launches

    device = torch.device("cpu")
    plan = ag._ws_launch.__wrapped__(2, 3, 512, 64, device, True, None, None, None, None,
                                     None, None, 5, None, None, None)  # not the shared cache
    assert ag._ws_launch(2, 3, 512, 64, device, True, *[None] * 6, 5, *[None] * 3) is \
        ag._ws_launch(2, 3, 512, 64, device, True, *[None] * 6, 5, *[None] * 3)
    jit_kernel = ag._attn_fwd_ws
    monkeypatch.setattr(ag, "_attn_fwd_ws", stub)
    q = torch.zeros(4, dtype=torch.bfloat16)
    args = (q, q, q, q, q, 512, plan.n_blocks, plan.n_work, 0.5)
    ag._launch_ws(plan, args)
    ag._launch_ws(plan, args)
    assert len(jit) == 1 and jit[0][1] == args
    assert jit[0][2] == {**plan.constexprs, "num_warps": 4, "maxnreg": plan.maxnreg}
    assert direct == [((5, 1, 1), args + tuple(
        plan.constexprs[name] for name in jit_kernel.arg_names[9:]))]
    assert list(direct[0][1][9:]) != list(plan.constexprs.values())  # the order matters
    half = (q.half(),) * 5 + args[5:]
    ag._launch_ws(plan, half)  # fp16: a specialisation of its own
    assert len(jit) == 2 and len(direct) == 1


@pytest.mark.parametrize("env, on", [(None, True), ("0", False), ("off", False), ("1", True)])
def test_the_gluon_kernel_is_on_unless_the_environment_turns_it_off(env, on):
    code = "import onlinesm.kernels.attention as a; print(a._gluon_on)"
    environ = {k: v for k, v in os.environ.items() if k != "ONLINESM_ATTENTION_GLUON"}
    if env is not None:
        environ["ONLINESM_ATTENTION_GLUON"] = env
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str(on)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_use_gluon_runs_the_calls_it_covers(dtype: Any, causal: bool, d: int, monkeypatch):
    ag = _gluon_kernel_module()
    calls = []
    forward = ag.forward_fitted
    monkeypatch.setattr(ag, "forward_fitted",
                        lambda *a, **kw: calls.append(1) or forward(*a, **kw))
    was_on = sys.modules["onlinesm.kernels.attention"]._gluon_on
    monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG")  # this file pins Triton tiles: unpin
    try:
        assert kernels.use_gluon(True)
        # the shortest rows it takes, 256 (at D = 64 four warpgroups, causal two from the
        # counter)
        shape = (1, 2, 256, d)
        q, k, v = _inputs(shape, shape, dtype, seed=7)
        o = attention(q * 8, k, v, causal=causal)
        assert calls == [1]
        o_ref, _, o_tol, _ = _bounds(q * 8, k, v, dtype, causal=causal)
        assert np.all(np.abs(to_numpy(o).astype(np.float64) - o_ref) <= o_tol)
        # the same call again: the compiled kernel launched directly, the same o
        assert torch.equal(attention(q * 8, k, v, causal=causal), o)
        assert calls == [1, 1]
        # q not 16-byte aligned (TMA's need): the Triton kernel, as correct
        q_off = torch.empty(q.numel() + 1, dtype=dtype, device=q.device)[1:].view(q.shape)
        q_off.copy_(q * 8)
        assert "16-byte aligned" in ag.fits(q_off, k, v)
        o = attention(q_off, k, v, causal=causal)
        assert calls == [1, 1]
        assert np.all(np.abs(to_numpy(o).astype(np.float64) - o_ref) <= o_tol)
        # the same, strided ([B, S, H, D] memory read as [B, H, S, D]): forward's copy is
        # aligned, so the Gluon kernel takes it
        q_bshd = torch.empty(q.numel() + 1, dtype=dtype, device=q.device)[1:]
        q_bshd = q_bshd.view(1, 256, 2, d).transpose(1, 2)
        q_bshd.copy_(q * 8)
        assert not q_bshd.is_contiguous() and ag.fits(q_bshd, k, v) is None
        o = attention(q_bshd, k, v, causal=causal)
        assert calls == [1, 1, 1]
        assert np.all(np.abs(to_numpy(o).astype(np.float64) - o_ref) <= o_tol)
        # A negative scale: the kernel takes the row max of the raw scores, so forward folds
        # the sign into q.
        o = attention(q * 8, k, v, causal=causal, scale=-0.05)
        assert calls == [1, 1, 1, 1]
        o_ref, _, o_tol, _ = _bounds(q * 8, k, v, dtype, scale=-0.05, causal=causal)
        assert np.all(np.abs(to_numpy(o).astype(np.float64) - o_ref) <= o_tol)
        attention(q, k, v, causal=causal, return_lse=True)  # lse: the Triton kernel
        attention(q, k, v, causal=causal, scale=0.0)  # a scale of 0: the Triton kernel
        attention(q[..., :128, :], k[..., :128, :], v[..., :128, :])  # short: Triton's
        monkeypatch.setenv("ONLINESM_ATTENTION_CONFIG", "128,64,3,8")  # pinned Triton tiles
        attention(q, k, v, causal=causal)
        assert calls == [1, 1, 1, 1]
    finally:
        kernels.use_gluon(was_on)


def _autotuned_path_on_the_cpu(monkeypatch: pytest.MonkeyPatch, tuner: Any) -> None:
    """attention() routed to its autotuned Triton path as on a GPU, on CPU tensors: ``tuner``
    stands for the autotuner, nothing remembered yet, no config pinned."""
    module = sys.modules["onlinesm.kernels.attention"]
    monkeypatch.setattr(module, "_attn_fwd_tuned", tuner)
    monkeypatch.setattr(module, "_TUNED", {})
    monkeypatch.setattr(module, "INTERPRETED", False)
    monkeypatch.setattr(module, "_check_inputs", lambda *a: None)
    monkeypatch.setattr(module, "_gluon_on", False)
    monkeypatch.delenv("ONLINESM_ATTENTION_CONFIG", raising=False)
    monkeypatch.delenv("ONLINESM_PIN_CONFIGS", raising=False)


def test_the_autotuners_pick_is_launched_directly_once_made(monkeypatch):
    # attention() remembers the config the autotuner picked and launches it on the fully
    # specialised kernel next time, with the same arguments: through the JIT once, then the
    # kernel it compiled directly; a new key tunes again, and new arguments (another length)
    # go through the JIT again, which compiles or finds their kernel. The cache's key holds
    # no tensor (dtype and alignment only). The kernels are stubs that record their launches
    # (no GPU needed).
    module = sys.modules["onlinesm.kernels.attention"]
    tuned, direct = [], []
    import triton

    pick = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_warps=4, num_stages=2)

    class Tuner:
        best_config = None

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                Tuner.best_config = pick
                tuned.append((grid({"BLOCK_M": 32}), args, kwargs))
            return launch

    kernel = Jit(module._attn_fwd.fn, lambda: Compiled(direct))
    jit = kernel.launches
    _autotuned_path_on_the_cpu(monkeypatch, Tuner())
    monkeypatch.setattr(module, "_attn_fwd_specialised", kernel)
    monkeypatch.setattr(module, "_COMPILED", {})
    q = torch.zeros(2, 3, 96, 64, dtype=torch.bfloat16)
    module.attention(q, q, q, causal=True)
    assert len(tuned) == 1 and not jit
    module.attention(q, q, q, causal=True)
    assert len(tuned) == 1 and len(jit) == 1 and not direct
    grid, args, kwargs = jit[0]
    assert grid == tuned[0][0] == (3, 6)  # cdiv(96, 32) query blocks, B * H
    assert kwargs == {**tuned[0][2], **pick.all_kwargs()}
    assert all(a is b or a == b for a, b in zip(args[6:], tuned[0][1][6:]))  # past the tensors
    module.attention(q, q, q, causal=True)
    assert len(jit) == 1 and len(direct) == 1
    (key,) = module._COMPILED  # the tensors by dtype and alignment: none held by the cache
    assert not any(isinstance(part, torch.Tensor) for part in key)
    assert key.count((torch.bfloat16, True)) == 5 and (torch.float32, True) in key  # q..o, lse
    n_params = len(inspect.signature(module._attn_fwd.fn).parameters)
    assert direct[0][0] == (3, 6, 1) and len(direct[0][1]) == n_params
    assert direct[0][1][len(args):len(args) + 2] == (32, 16)  # BLOCK_M, BLOCK_N: in order
    p = torch.zeros(2, 3, 100, 64, dtype=torch.bfloat16)  # the autotuner's key, another S
    module.attention(p, p, p, causal=True)
    assert len(tuned) == 1 and len(jit) == 2 and len(direct) == 1
    module.attention(q, q, q, causal=False)  # another key: the autotuner again
    assert len(tuned) == 2 and len(jit) == 2 and len(direct) == 1


def test_two_threads_tuning_at_once_each_keep_their_own_pick(monkeypatch):
    # The autotuner keeps its pick on itself (best_config): two threads tuning different keys
    # at once must each remember their own. The stub tuner picks by the call's CAUSAL and
    # sleeps before returning, so that without the lock the other thread's pick lands first.
    import threading
    import time

    import triton

    module = sys.modules["onlinesm.kernels.attention"]
    picks = {c: triton.Config({"BLOCK_M": 16 if c else 32, "BLOCK_N": 16}, num_warps=4,
                              num_stages=2) for c in (False, True)}

    class Tuner:
        best_config = None

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                Tuner.best_config = picks[kwargs["CAUSAL"]]
                time.sleep(0.2)
            return launch

    _autotuned_path_on_the_cpu(monkeypatch, Tuner())
    q = torch.zeros(1, 2, 64, 32, dtype=torch.bfloat16)
    threads = [threading.Thread(target=module.attention, args=(q, q, q), kwargs={"causal": c})
               for c in (False, True)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert {key[-7]: config for key, config in module._TUNED.items()} == picks  # by CAUSAL


# ---- bench/attention.py: the timed call is the one checked ----
def test_the_attention_bench_checks_the_head_of_the_timed_call_against_float32() -> None:
    bench = bench_module("attention")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 64, 16, generator=g) for _ in range(3))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert bench._timed_call_error(o, q, k, v, True)["error"] < 1e-5
    wrong = o.clone()
    wrong[0, 0, 63, 5] += 0.25  # the first head's last row: seen
    assert bench._timed_call_error(wrong, q, k, v, True)["error"] > 0.24
    assert bench._timed_call_error(o, q, k, v, False)["error"] > 0.01  # causal matters
    row = dict(dtype="float32", D=16, S=64, B=2, H=2, causal=True, onlinesm=1.0, flash=1.0,
               cudnn=1.0, efficient=1.0, config="", error=0.25, flash_error=float("nan"))
    md = bench.to_markdown(dict(device="cpu", date="d", torch="t", triton="t", cudnn=0,
                                python="p", command="c", flops="f", rows=[row], checks=[]))
    assert "| float32 | 16 | 64 | True | 0.25 | nan |" in md
