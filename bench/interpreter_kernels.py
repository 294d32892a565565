"""Two tiny Triton kernels that convert float32 to bfloat16: at a store, and with ``.to``.

Shared by ``bench/interpreter_numerics.py`` and ``tests/test_interpreter.py``. Import this only
after the interpreter-or-GPU mode is chosen (``TRITON_INTERPRET`` is read when a kernel is
decorated).
"""

import triton
import triton.language as tl


@triton.jit
def store_fp32(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.load(x_ptr + i))  # implicit fp32 -> bf16 at the store


@triton.jit
def cast(x_ptr, y_ptr, N: tl.constexpr, MODE: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    if MODE == 0:
        y = x.to(tl.bfloat16)
    elif MODE == 1:
        y = x.to(tl.bfloat16, fp_downcast_rounding="rtne")
    else:
        y = x.to(tl.bfloat16, fp_downcast_rounding="rtz")
    tl.store(y_ptr + i, y)
