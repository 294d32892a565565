"""Measure how Triton's CPU interpreter converts and accumulates low-precision floats.

Run: ``python bench/interpreter_numerics.py`` (sets ``TRITON_INTERPRET=1`` itself), or
``python bench/interpreter_numerics.py --gpu`` for the same experiments compiled on a CUDA device.
Prints, per experiment, how the result compares with the GPU's semantics (fp32 -> bf16 rounds to
nearest even; tl.dot accumulates in fp32). The numbers in docs/INTERNALS.md ("Interpreter
numerics") come from this script.
"""

from __future__ import annotations

import os
import sys

GPU = "--gpu" in sys.argv
os.environ["TRITON_INTERPRET"] = "0" if GPU else "1"  # before triton.language is imported
DEVICE = "cuda" if GPU else "cpu"

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from onlinesm import interpreter  # noqa: E402

BF16 = ml_dtypes.bfloat16


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interpreter_kernels import cast as _store_to  # noqa: E402
from interpreter_kernels import store_fp32 as _store_fp32_into  # noqa: E402


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr, OUT_F32: tl.constexpr):
    rm = tl.arange(0, M)
    rk = tl.arange(0, K)
    rn = tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)  # fp32 accumulator by default
    if OUT_F32:
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)
    else:
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], c.to(c_ptr.dtype.element_ty))


@triton.jit
def _sum(x_ptr, y_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    s = tl.sum(x, axis=0)
    tl.store(y_ptr, s.to(tl.float32))


@triton.jit
def _sum_f32(x_ptr, y_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N)).to(tl.float32)
    tl.store(y_ptr, tl.sum(x, axis=0))


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def conversions(n: int = 4096, seed: int = 0) -> dict[str, tuple[int, int]]:
    """(values off from RNE, of which exactly 1 ulp toward zero) per way of converting."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n)).astype(np.float32)
    want = x.astype(BF16).view(np.uint16)
    trunc = (x.view(np.uint32) >> 16).astype(np.uint16)
    xt = torch.from_numpy(x).to(DEVICE)
    out: dict[str, tuple[int, int]] = {}
    for label, run in (
        ("store fp32 into bf16 pointer", lambda y: _store_fp32_into[(1,)](xt, y, N=n)),
        (".to(tl.bfloat16)", lambda y: _store_to[(1,)](xt, y, N=n, MODE=0)),
        ('.to(..., fp_downcast_rounding="rtne")', lambda y: _store_to[(1,)](xt, y, N=n, MODE=1)),
        ('.to(..., fp_downcast_rounding="rtz")', lambda y: _store_to[(1,)](xt, y, N=n, MODE=2)),
    ):
        for patched in ((False,) if GPU else (False, True)):
            y = torch.empty(n, dtype=torch.bfloat16, device=DEVICE)
            if patched:
                with interpreter.bf16_round_to_nearest():
                    run(y)
            else:
                run(y)
            got = _bits(y)
            off = int((got != want).sum())
            truncated = int((got == trunc).all())
            out[f"{label}{' (patched)' if patched else ''}"] = (off, truncated)
    return out


def dots(seed: int = 0) -> dict[str, float]:
    """tl.dot on bf16 / fp16 inputs: largest difference from an fp32-accumulated reference."""
    rng = np.random.default_rng(seed)
    M = K = N = 16
    res = {}
    for dt in (torch.bfloat16, torch.float16):
        a = torch.from_numpy(rng.standard_normal((M, K)).astype(np.float32)).to(dt).to(DEVICE)
        b = torch.from_numpy(rng.standard_normal((K, N)).astype(np.float32)).to(dt).to(DEVICE)
        ref64 = a.double().cpu() @ b.double().cpu()
        ref32 = (a.float().cpu() @ b.float().cpu())
        c32 = torch.empty(M, N, dtype=torch.float32, device=DEVICE)
        _dot[(1,)](a, b, c32, M=M, K=K, N=N, OUT_F32=True)
        name = str(dt).removeprefix("torch.")
        c = c32.cpu()
        res[f"{name} dot, fp32 out: max |c - exact| / |exact|"] = float(
            ((c.double() - ref64).abs() / ref64.abs()).max())
        res[f"{name} dot, fp32 out: max |c - fp32 matmul|"] = float((c - ref32).abs().max())
        # Cancellation: a bf16/fp16 accumulator would lose the 1 after adding 2**12 (bf16 p = 8)
        a = torch.zeros(M, K, dtype=dt, device=DEVICE)
        b = torch.zeros(K, N, dtype=dt, device=DEVICE)
        a[:, 0], a[:, 1], a[:, 2] = 4096.0, 1.0, -4096.0
        b[:3, :] = 1.0
        _dot[(1,)](a, b, c32, M=M, K=K, N=N, OUT_F32=True)
        res[f"{name} dot of [4096, 1, -4096] . [1, 1, 1] (fp32 acc gives 1)"] = float(c32[0, 0])
    return res


def sums() -> dict[str, float]:
    """tl.sum over bf16 / fp16 without a dtype: does it accumulate wider than the input?"""
    res = {}
    n = 16
    for dt in (torch.bfloat16, torch.float16):
        x = torch.zeros(n, dtype=dt, device=DEVICE)
        x[0], x[1], x[2] = 4096.0, 1.0, -4096.0  # exact sum 1; a 16-bit accumulator gives 0
        y = torch.empty(1, dtype=torch.float32, device=DEVICE)
        name = str(dt).removeprefix("torch.")
        try:
            _sum[(1,)](x, y, N=n)
            res[f"{name} tl.sum([4096, 1, -4096, 0...]) (exact 1)"] = float(y[0])
        except Exception as err:  # noqa: BLE001 - a measurement, reported
            res[f"{name} tl.sum([4096, 1, -4096, 0...]) (exact 1)"] = f"raised {type(err).__name__}"
        # 2048 + 1 + 1: fp16 / bf16 steps give 2048 (ties to even), fp32 then one rounding 2050
        x2 = torch.zeros(n, dtype=dt, device=DEVICE)
        x2[0], x2[1], x2[2] = 2048.0, 1.0, 1.0
        try:
            _sum[(1,)](x2, y, N=n)
            res[f"{name} tl.sum([2048, 1, 1, 0...]) (16-bit steps 2048, fp32 acc 2050)"] = float(y[0])
        except Exception as err:  # noqa: BLE001
            res[f"{name} tl.sum([2048, 1, 1, 0...])"] = f"raised {type(err).__name__}"
        ones = torch.ones(n, dtype=dt, device=DEVICE) * 1.5
        try:
            _sum[(1,)](ones, y, N=n)
            res[f"{name} tl.sum(16 x 1.5) (exact 24)"] = float(y[0])
        except Exception as err:  # noqa: BLE001
            res[f"{name} tl.sum(16 x 1.5) (exact 24)"] = f"raised {type(err).__name__}"
        _sum_f32[(1,)](x, y, N=n)
        res[f"{name} tl.sum(x.to(fp32)) (exact 1)"] = float(y[0])
    return res


if __name__ == "__main__":
    print(f"triton {triton.__version__}, torch {torch.__version__}, {'GPU' if GPU else 'interpreter'}, "
          f"patch works: {interpreter.patch_works() if not GPU else 'n/a'}")
    print("\nfp32 -> bf16, 4096 values: (elements != RNE, all equal to truncation)")
    for k, v in conversions().items():
        print(f"  {k:48s} {v}")
    print("\ntl.dot (16x16x16)")
    for k, v in dots().items():
        print(f"  {k:60s} {v}")
    print("\ntl.sum (16 elements)")
    for k, v in sums().items():
        print(f"  {k:60s} {v}")
