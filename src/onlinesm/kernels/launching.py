"""Host-side helpers the kernel launchers share: what a launch asks of the device, cheaply.

What: the device's properties (its SM count among them) and compute capability, asked once per
device, and a context that makes a device current only where it is not already.

Why: on short inputs a launch's host time is the call's time (a softmax of 256 x 1024 runs
for a few µs on an H200), and torch's device queries and ``torch.cuda.device`` cost µs each
on every call.

    >>> from onlinesm.kernels.launching import on_device, sm_count
    >>> with on_device(q.device):  # doctest: +SKIP
    ...     kernel[(sm_count(q.device),)](q)
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

__all__ = ["device_properties", "sm_count", "capability", "on_device"]


@functools.lru_cache(maxsize=None)
def device_properties(device: torch.device) -> Any:
    """``torch.cuda.get_device_properties(device)``, asked once per device."""
    return torch.cuda.get_device_properties(device)


def sm_count(device: torch.device) -> int:
    """The device's streaming multiprocessors."""
    return int(device_properties(device).multi_processor_count)


@functools.lru_cache(maxsize=None)
def capability(device: torch.device) -> tuple[int, int]:
    """The device's compute capability, (major, minor), asked once per device."""
    return torch.cuda.get_device_capability(device)


def on_device(device: torch.device) -> Any:
    """``torch.cuda.device(device)`` where ``device`` is not the current CUDA device, else a
    context that does nothing."""
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)
