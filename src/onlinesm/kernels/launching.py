"""Host-side helpers the kernel launchers share: what a launch asks of the device, cheaply.

What: the device's properties (its SM count among them) and compute capability, asked once per
device; a context that makes a device current only where it is not already; and the grid's
integer arithmetic (:func:`cdiv`, :func:`next_pow2`) in plain Python.

Why: on short inputs a launch's host time is the call's time (a softmax of 256 x 1024 runs
for a few µs on an H200), and torch's device queries and ``torch.cuda.device`` cost µs each
on every call; so do ``triton.cdiv`` and ``triton.next_power_of_2``, which newer tritons
(3.9 here) wrap as constexpr functions (about 4 µs a call from the host), and so does
Triton's JIT on every launch (:func:`launch_kernel` goes around it). No torch at import:
``softmax_plan`` (plain Python) takes :func:`next_pow2` from here.

    >>> from onlinesm.kernels.launching import on_device, sm_count
    >>> with on_device(q.device):  # doctest: +SKIP
    ...     kernel[(sm_count(q.device),)](q)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["device_properties", "sm_count", "capability", "on_device", "cdiv", "next_pow2",
           "launch_kernel", "argument_key", "SMEM_BYTES"]

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


def launch_kernel(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...],
                  options: dict[str, Any], compiled: dict[Any, Any], key: Any = None) -> Any:
    """Launch the Triton kernel ``kernel`` on ``grid`` with its runtime ``args`` (the
    parameters before its constexprs, in order) and ``options`` (its constexprs by name, and
    num_warps, maxnreg and such), on the current device and stream; returns the compiled
    kernel (None under the interpreter).

    The first launch under ``key`` goes through Triton's JIT, which compiles (or finds) the
    kernel and is kept in ``compiled``; later ones launch that compiled kernel directly. The
    JIT would bind every argument, rebuild its cache key from them and look the kernel up
    again on every call: tens of µs of host time, most of a short call's. The caller owns
    the promise this rests on: every launch under one key specialises alike (the same
    dtypes and constexprs, integers equal where the kernel specialises on them, pointers
    aligned alike), which a key made of the launch's plan and its inputs' alignment keeps.

    >>> launch_kernel(kernel, (8,), (x, y, n), dict(BLOCK=1024, num_warps=4),
    ...               plan.compiled)  # doctest: +SKIP
    """
    hit = compiled.get(key)
    if hit is None:
        done = kernel[grid](*args, **options)
        if hasattr(done, "result"):  # a compilation still in flight: its kernel
            done = done.result()
        if done is not None:  # the interpreter compiles nothing
            compiled[key] = (done, _constexpr_values(kernel, len(args), options))
        return done
    done, constexprs = hit
    done[tuple(grid) + (1,) * (3 - len(grid))](*args, *constexprs)
    return done


def argument_key(args: tuple[Any, ...], n_tensors: int) -> tuple[Any, ...]:
    """A key for :func:`launch_kernel` of a kernel's runtime ``args``, whose first
    ``n_tensors`` are tensors: each tensor by its dtype and whether its address is a multiple
    of 16 (all Triton's JIT specialises a tensor on), every other argument by its value.
    Values tell apart more than the JIT's own rules (an integer's width, whether it is 1 or a
    multiple of 16), so two launches with one key always run the same compiled kernel; a new
    value only sends its first launch through the JIT again, which finds the kernel in its
    own cache. Why by value: it costs a third to a half of applying those rules to each
    argument (the Triton attention launch's 32 arguments, key and lookup: 3.9-5.4 µs against
    9.7-13.5 on a development CPU, ``python bench/launch_key.py``), on every call. Each
    position must always hold the same type (a bool where a bool goes: ``True == 1``).

    >>> argument_key((torch.empty(4), 48, 0.5, True), 1)  # doctest: +SKIP
    ((torch.float32, True), 48, 0.5, True)
    """
    return (*[(t.dtype, t.data_ptr() % 16 == 0) for t in args[:n_tensors]], *args[n_tensors:])


def _constexpr_values(kernel: Any, n_args: int, options: dict[str, Any]) -> tuple[Any, ...]:
    """The values of ``kernel``'s parameters after its first ``n_args``, in order, from
    ``options`` or their defaults: a compiled kernel takes every parameter by position, its
    constexprs included (it ignores their values, baked in at compilation)."""
    params = list(inspect.signature(kernel.fn).parameters.values())[n_args:]
    return tuple(options.get(p.name, p.default) for p in params)
