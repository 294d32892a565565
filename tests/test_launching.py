"""onlinesm.kernels.launching: device switching only where it is needed (no GPU needed)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from onlinesm.kernels import launching  # noqa: E402


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
