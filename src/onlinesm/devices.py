"""Choosing the device a run uses, and the per-call deadline that suits it.

``select_device(None)`` gives ``"cuda"`` when torch sees a GPU, else ``"cpu"``. On the CPU,
Triton kernels run under Triton's interpreter, which Triton reads when a kernel is decorated:
so ``TRITON_INTERPRET=1`` is set here, before the user's module (or onlinesm's own kernels) is
imported. Asking for ``"cuda"`` on a machine without CUDA is an environment error
(:class:`~onlinesm.errors.UsageError`), not a kernel failure.

Example:
    >>> from onlinesm.devices import select_device, default_deadline
    >>> select_device("cpu"), default_deadline("cpu")
    ('cpu', 120.0)
"""

from __future__ import annotations

import os

from onlinesm.errors import UsageError

__all__ = ["select_device", "default_deadline", "default_compile_allowance", "DEVICES"]

DEVICES = ("cpu", "cuda")

#: Seconds one kernel call may take before it is reported as hung. A GPU call takes
#: milliseconds, so a short deadline finds a hang fast; under Triton's CPU interpreter a call on
#: a long row can take tens of seconds.
_DEADLINE = {"cuda": 30.0, "cpu": 120.0}

#: Extra seconds the first call of each new compiled variant (dtype, shape bucket) may take:
#: on a GPU it includes Triton's JIT compilation (and autotuning), which is not a hang. The
#: interpreter compiles nothing.
_COMPILE_ALLOWANCE = {"cuda": 240.0, "cpu": 0.0}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def select_device(requested: str | None) -> str:
    """The device to run on; sets ``TRITON_INTERPRET=1`` for the CPU. UsageError if unusable."""
    if requested is None:
        requested = "cuda" if _cuda_available() else "cpu"
    if requested not in DEVICES:
        raise UsageError(f"device={requested!r} is not supported; use cpu or cuda")
    if requested == "cuda" and not _cuda_available():
        raise UsageError("device cuda was asked for, but torch sees no CUDA device on this machine "
                         "(torch.cuda.is_available() is False); use --device cpu")
    if requested == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return requested


def default_deadline(device: str) -> float:
    """The per-call deadline in seconds for ``device`` (see :data:`_DEADLINE`)."""
    return _DEADLINE.get(device, _DEADLINE["cpu"])


def default_compile_allowance(device: str) -> float:
    """Extra seconds granted to the first call of each compiled variant on ``device``."""
    return _COMPILE_ALLOWANCE.get(device, 0.0)
