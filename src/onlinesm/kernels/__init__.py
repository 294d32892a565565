"""onlinesm's own Triton kernels: online softmax and a FlashAttention-style forward.

The kernels are imported lazily: ``import onlinesm.kernels`` imports neither torch nor triton.
That matters because Triton decides *when a kernel is decorated* (at module import) whether it
runs compiled on a GPU or under the CPU interpreter (``TRITON_INTERPRET=1``). So choose the
mode first, then touch a kernel:

    >>> from onlinesm import kernels
    >>> kernels.use_interpreter()          # interpreter iff torch sees no CUDA device
    True
    >>> import torch
    >>> from onlinesm.kernels import softmax
    >>> softmax(torch.zeros(2, 4))              # CPU tensors under the interpreter
    tensor([[0.2500, 0.2500, 0.2500, 0.2500],
            [0.2500, 0.2500, 0.2500, 0.2500]])

``use_interpreter(True)`` forces the interpreter (CPU tensors), ``use_interpreter(False)`` the
compiled path (CUDA tensors). Asking for the other mode after a kernel module was imported is an
error: Triton has already decorated its kernels in the first mode.

``pinned_configs()`` (or ``ONLINESM_PIN_CONFIGS=1``) makes the launchers use a fixed
configuration table instead of autotuning: property checks turn it on, so that each new
shape does not compile and benchmark every tile candidate (see ``kernels/pinning.py``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import types
from typing import Any

from onlinesm.kernels.pinning import PIN_ENV, configs_pinned, pinned_configs

__all__ = [
    "use_interpreter",
    "interpreting",
    "softmax",
    "attention",
    "use_gluon",
    "gluon_takes",
    "PIN_ENV",
    "configs_pinned",
    "pinned_configs",
]

_ENV = "TRITON_INTERPRET"
#: The kernel modules and the public function each one provides.
_KERNEL_MODULES = {
    "softmax": "onlinesm.kernels.softmax",
    "attention": "onlinesm.kernels.attention",
}


def interpreting() -> bool:
    """Whether ``TRITON_INTERPRET`` currently asks Triton for its CPU interpreter."""
    return os.environ.get(_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


def _imported_kernel_modes() -> dict[str, bool]:
    """The mode each already-imported kernel module was decorated under.

    A kernel module records it as a module constant ``INTERPRETED``; one that does not is
    assumed to follow the environment as it is now (the best guess we have).
    """
    modes = {}
    # triton.language decorates its own library functions (tl.max, tl.sum, ...) when it is
    # first imported: a kernel interpreted later still calls those, so their mode counts too.
    lang = sys.modules.get("triton.language")
    if lang is not None and hasattr(lang, "max"):
        modes["triton.language"] = type(lang.max).__name__ == "InterpretedFunction"
    for name in _KERNEL_MODULES.values():
        module = sys.modules.get(name)
        if module is not None:
            modes[name] = bool(getattr(module, "INTERPRETED", interpreting()))
    return modes


def use_interpreter(flag: bool | None = None) -> bool:
    """Choose between Triton's CPU interpreter and compiled GPU kernels; return the choice.

    ``flag=True`` sets ``TRITON_INTERPRET=1`` (kernels take CPU tensors), ``flag=False`` clears
    it (kernels take CUDA tensors), ``flag=None`` keeps an explicit ``TRITON_INTERPRET=1`` and
    otherwise picks the interpreter exactly when ``torch.cuda.is_available()`` is False.
    Call it before the first kernel import (and before anything imports ``triton.language``,
    whose own functions are decorated then too); calling it again with the same answer is harmless.

    Raises RuntimeError when a kernel module was already imported in the other mode, since
    Triton reads the variable once, when the kernels are decorated.

    >>> use_interpreter(True)
    True
    """
    if flag is None:
        if interpreting():
            want = True
        else:
            import torch

            want = not torch.cuda.is_available()
    else:
        want = bool(flag)
    for name, mode in _imported_kernel_modes().items():
        if mode != want:
            have = "the interpreter" if mode else "compiled GPU kernels"
            raise RuntimeError(
                f"use_interpreter({flag!r}) asks for "
                f"{'the interpreter' if want else 'compiled GPU kernels'}, but {name} was already "
                f"imported with {have}; call onlinesm.kernels.use_interpreter(...) before the "
                f"first kernel import (or run a fresh process with TRITON_INTERPRET="
                f"{'1' if want else '0'})"
            )
    os.environ[_ENV] = "1" if want else "0"
    return want


class KernelModule(types.ModuleType):
    """A kernel module that is also its kernel (``onlinesm.kernels.softmax``, ``.attention``).

    An import of the submodule before the first ``from onlinesm.kernels import attention``
    (``import onlinesm.kernels.attention``, ``from onlinesm.kernels.attention import ...``)
    binds the *module* to the package's attribute of the function's name, and that import
    then returns the module. Calling the module calls the function, and ``inspect.signature``
    sees the function's, so every spelling gives a kernel that runs and can be checked.
    """

    def _kernel(self) -> Any:
        return getattr(self, self.__name__.rsplit(".", 1)[-1])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._kernel()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self._kernel())


def _kernel_module(name: str) -> Any:
    """Import the module of kernel ``name`` (softmax, attention) and bind its function here."""
    module = importlib.import_module(_KERNEL_MODULES[name])
    # Importing the submodule bound the *module* to this package's attribute of the same
    # name; rebind the function, so later lookups skip __getattr__ and get what they asked for.
    globals()[name] = getattr(module, name)
    return module


def use_gluon(on: bool = True) -> bool:
    """Run the attention calls that the Gluon kernel for Hopper covers (16-bit, Sq == Sk, no
    GQA, no mask, S % 128 == 0, D 64 or 128, no lse, an sm_90 GPU) and is faster on (D = 128,
    S >= 4096; D = 64 causal, S >= 16k) on it, or stop; returns whether it is on (off where
    this triton has no Gluon). On by default; ``ONLINESM_ATTENTION_GLUON=0`` turns it off for
    a process. Choose the interpreter or not first (:func:`use_interpreter`): this imports
    the kernel.

    >>> use_gluon(False)
    False
    """
    return _kernel_module("attention").use_gluon(on)


def gluon_takes(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                return_lse: bool = False, scale: float | None = None) -> bool:
    """Whether ``attention(q, k, v, ...)`` runs on the Gluon kernel for Hopper (see
    :func:`use_gluon`) or on the Triton kernel.

    >>> gluon_takes(q, k, v, causal=True)  # doctest: +SKIP
    True
    """
    return _kernel_module("attention").gluon_takes(q, k, v, mask=mask, causal=causal,
                                                   return_lse=return_lse, scale=scale)


def __getattr__(name: str) -> Any:
    """Import a kernel on first use: ``from onlinesm.kernels import softmax, attention``."""
    if name in _KERNEL_MODULES:
        return getattr(_kernel_module(name), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
