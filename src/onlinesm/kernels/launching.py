"""Host-side helpers the kernel launchers share: what a launch asks of the device, cheaply.

What: the device's properties (its SM count among them) and compute capability, asked once per
device; a context that makes a device current only where it is not already; and the grid's
integer arithmetic (:func:`cdiv`, :func:`next_pow2`) in plain Python.

Why: on short inputs a launch's host time is the call's time (a softmax of 256 x 1024 runs
for a few µs on an H200), and torch's device queries and ``torch.cuda.device`` cost µs each
on every call; so do ``triton.cdiv`` and ``triton.next_power_of_2``, which newer tritons
(3.9 here) wrap as constexpr functions (about 4 µs a call from the host). No torch at import:
``softmax_plan`` (plain Python) takes :func:`next_pow2` from here.

    >>> from onlinesm.kernels.launching import on_device, sm_count
    >>> with on_device(q.device):  # doctest: +SKIP
    ...     kernel[(sm_count(q.device),)](q)
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["device_properties", "sm_count", "capability", "on_device", "cdiv", "next_pow2",
           "SMEM_BYTES"]

#: Shared memory one program may take on the H100 and H200 (227 KiB of the SM's 228)
SMEM_BYTES = 227 * 1024


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for a positive b.

    >>> cdiv(1000, 128), cdiv(1024, 128)
    (8, 8)
    """
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two at least n (1 for n <= 1).

    >>> next_pow2(1000), next_pow2(1024), next_pow2(1)
    (1024, 1024, 1)
    """
    return 1 << max(0, (int(n) - 1).bit_length())


@functools.lru_cache(maxsize=None)
def device_properties(device: torch.device) -> Any:
    """``torch.cuda.get_device_properties(device)``, asked once per device."""
    import torch

    return torch.cuda.get_device_properties(device)


def sm_count(device: torch.device) -> int:
    """The device's streaming multiprocessors."""
    return int(device_properties(device).multi_processor_count)


@functools.lru_cache(maxsize=None)
def capability(device: torch.device) -> tuple[int, int]:
    """The device's compute capability, (major, minor), asked once per device."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return major, minor


def on_device(device: torch.device) -> Any:
    """``torch.cuda.device(device)`` where ``device`` is not the current CUDA device, else a
    context that does nothing."""
    import torch

    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)
