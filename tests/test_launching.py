"""onlinesm.kernels.launching: device switching only where it is needed (no GPU needed)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from onlinesm.kernels import launching  # noqa: E402


def test_on_device_switches_only_to_another_cuda_device(monkeypatch):
    # Triton launches on the current device: a tensor on another GPU needs it made current,
    # and a tensor on the current one (or on the CPU, under the interpreter) needs nothing.
    monkeypatch.setattr(launching.torch.cuda, "current_device", lambda: 0)
    assert isinstance(launching.on_device(torch.device("cuda", 1)), torch.cuda.device)
    assert launching.on_device(torch.device("cuda", 1)).idx == 1
    for device in (torch.device("cuda", 0), torch.device("cpu")):
        assert isinstance(launching.on_device(device), contextlib.nullcontext)
