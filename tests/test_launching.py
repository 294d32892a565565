"""onlinesm.kernels.launching: device switching only where it is needed (no GPU needed)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from onlinesm.kernels import launching  # noqa: E402

from bench_modules import bench_module  # noqa: E402  (conftest puts tests/ on sys.path)
from launch_stubs import Compiled, Jit  # noqa: E402


def test_on_device_switches_only_to_another_cuda_device(monkeypatch):
    # Triton launches on the current device: a tensor on another GPU needs it made current,
    # and a tensor on the current one (or on the CPU, under the interpreter) needs nothing.
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert isinstance(launching.on_device(torch.device("cuda", 1)), torch.cuda.device)
    assert launching.on_device(torch.device("cuda", 1)).idx == 1
    for device in (torch.device("cuda", 0), torch.device("cpu")):
        assert isinstance(launching.on_device(device), contextlib.nullcontext)


def test_the_grid_arithmetic_matches_tritons():
    # cdiv and next_pow2 stand in for triton.cdiv and triton.next_power_of_2 on the host.
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton")
    from onlinesm import kernels

    kernels.use_interpreter(None)  # the mode is chosen before triton's first import
    import triton
    for n in (1, 2, 3, 16, 17, 1000, 1024, 1025, 50257):
        assert launching.next_pow2(n) == triton.next_power_of_2(n)
        for d in (1, 16, 64, 128):
            assert launching.cdiv(n, d) == triton.cdiv(n, d)


def _kernel(x, y, n, BLOCK: "tl.constexpr", ROWS: "tl.constexpr" = 1,  # noqa: F821, N803
            WIDE: "tl.constexpr" = False):  # noqa: F821, N803
    """The signature the stubs launch: three runtime arguments, then constexprs."""


def test_a_kernel_is_launched_through_the_jit_once_per_key_then_directly():
    # The first launch under a key compiles (the JIT); later ones launch that compiled kernel
    # with every parameter by position: the constexprs given, then the defaults of the rest.
    direct = []
    jit = Jit(_kernel, lambda: Compiled(direct))
    compiled: dict = {}
    options = dict(WIDE=True, BLOCK=1024, num_warps=4)  # not in the signature's order
    first = launching.launch_kernel(jit, (8,), ("x", "y", 5), options, compiled)
    assert isinstance(first, Compiled)
    assert jit.launches == [((8,), ("x", "y", 5), options)] and not direct
    assert launching.launch_kernel(jit, (3, 2), ("x2", "y2", 5), options, compiled) is first
    assert direct == [((3, 2, 1), ("x2", "y2", 5, 1024, 1, True))]
    assert len(jit.launches) == 1
    launching.launch_kernel(jit, (8,), ("x", "y", 5), options, compiled, key="fp16")
    assert len(jit.launches) == 2 and len(direct) == 1  # another key: the JIT again


def test_what_compiles_nothing_or_later_is_handled():
    # The interpreter's launch returns None: nothing is kept, every launch takes the JIT.
    jit = Jit(_kernel, lambda: None)
    compiled: dict = {}
    for _ in range(2):
        assert launching.launch_kernel(jit, (1,), (1, 2, 3), dict(BLOCK=16), compiled) is None
    assert len(jit.launches) == 2 and compiled == {}
    # A compilation still in flight (Triton's async mode) returns a future: its kernel is kept.
    direct = []
    done = Compiled(direct)

    class Future:
        def result(self):
            return done

    jit = Jit(_kernel, Future)
    assert launching.launch_kernel(jit, (1,), (1, 2, 3), dict(BLOCK=16), compiled) is done
    launching.launch_kernel(jit, (1,), (1, 2, 3), dict(BLOCK=16), compiled)
    assert direct == [((1, 1, 1), (1, 2, 3, 16, 1, False))]


def test_the_argument_key_tells_apart_what_triton_compiles_apart_and_every_value():
    # Another tensor of the same dtype and alignment gives the same key; each thing the JIT
    # specialises on, moved alone, gives another (a tensor's dtype or 16-byte alignment, an
    # integer equal to 1, a multiple of 16 or not, past 32 bits; a bool's value), and so does
    # any other value (an integer of the same specialisation, a float).
    x = torch.empty(64)
    base = launching.argument_key((x, 48, 7, 2.5, True), 1)
    assert launching.argument_key((torch.empty(64), 48, 7, 2.5, True), 1) == base
    for moved in ((x.double(), 48, 7, 2.5, True), (x[1:], 48, 7, 2.5, True),
                  (x, 47, 7, 2.5, True), (x, 48, 1, 2.5, True), (x, 48, 2**31 + 7, 2.5, True),
                  (x, 48, 7, 2.5, False), (x, 32, 9, 2.5, True), (x, 48, 7, -1.0, True)):
        assert launching.argument_key(moved, 1) != base, moved
    assert launching.argument_key((2**63 + 16,), 0) != launching.argument_key((2**62 + 16,), 0)


def test_the_key_bench_builds_the_attention_kernel_s_own_runtime_arguments():
    # bench/launch_key.py times the key on arguments it builds by hand: as many as the Triton
    # attention kernel takes before its constexprs, the six tensors first, as argument_key
    # is told by attention's launch.
    import inspect
    import sys

    pytest.importorskip("triton")
    import onlinesm.kernels.attention  # noqa: F401  (registers the module in sys.modules)

    bench = bench_module("launch_key")
    kernel = sys.modules["onlinesm.kernels.attention"]._attn_fwd
    params = inspect.signature(kernel.fn).parameters.values()  # the JIT's or the interpreter's
    runtime = [p.name for p in params if "constexpr" not in str(p.annotation)]
    args = bench.launch_args()
    assert len(args) == len(runtime) == 32
    assert all(isinstance(a, torch.Tensor) for a in args[:6])
    assert not any(isinstance(a, torch.Tensor) for a in args[6:])
    assert runtime[:6] == ["Q", "K", "V", "Mask", "Out", "Lse"]
    key = launching.argument_key(args, 6)
    assert key == launching.argument_key(bench.launch_args(), 6)  # other tensors, same key
    assert key != launching.argument_key(bench.launch_args(s=144), 6)  # S moved
