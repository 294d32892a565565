"""Make Triton's CPU interpreter patch ``triton.language`` once per launch, not once per call.

Under ``TRITON_INTERPRET=1`` a kernel launch first swaps ``triton.language``'s builtins for
NumPy versions (``triton.runtime.interpreter._patch_lang``), runs the grid, then restores them.
But every call of a ``@triton.jit`` helper *inside* the kernel (``_load_chunk``, ``_inverse``,
...) runs ``_patch_lang`` again, in every program of the grid: ``inspect.getmembers`` over
``triton.language``, its tensor class and its math module, to find nothing left to patch (the
launch already did it). For kernels written as small helpers that is most of the time spent:
the built-in softmax's interpreted ``onlinesm check`` took 74 s, 40 s without the repeats.

:func:`patch_once_per_launch` skips a helper's ``_patch_lang`` when the launch it runs in has
already patched the same ``triton.language`` modules (the helper gets an empty patch scope,
exactly what the repeat would have amounted to); the launch's own patch and its restore are
untouched. Like :mod:`onlinesm.interpreter`, it is active only inside the ``with`` block
(process-wide, counted, removed on exit) and does nothing when this Triton's interpreter lacks
the internals it expects (``installable()`` says why).

Example:
    >>> from onlinesm import interpreter_speed
    >>> with interpreter_speed.patch_once_per_launch() as active:  # doctest: +SKIP
    ...     y = my_kernel(x)        # same results; helpers no longer re-patch the language
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any, Callable, Iterator

from onlinesm.interpreter import CountedPatch, interpreted

__all__ = ["patch_once_per_launch", "installable"]

_MODULE = "triton.runtime.interpreter"

#: Per thread: the ids of the triton.language modules the current launch has patched (None
#: outside a launch). A launch and its helpers run on one thread.
_state = threading.local()


def _module() -> Any:
    """triton.runtime.interpreter when it has the expected internals, else why not (a str)."""
    try:
        module = importlib.import_module(_MODULE)
    except Exception as err:  # noqa: BLE001 - any import failure means "unavailable"
        return f"cannot import {_MODULE}: {type(err).__name__}: {err}"
    missing = [name for name in ("_patch_lang", "GridExecutor", "_LangPatchScope")
               if not hasattr(module, name)]
    if missing or not callable(getattr(module.GridExecutor, "__call__", None)):
        return f"{_MODULE} lacks {', '.join(missing) or 'GridExecutor.__call__'} in this triton"
    return module


def installable() -> str | None:
    """None when :func:`patch_once_per_launch` can act in this Triton; else the reason."""
    module = _module()
    return module if isinstance(module, str) else None


def _languages(fn: Any) -> frozenset[int]:
    """Ids of the triton.language modules fn's globals hold (what _patch_lang patches for it)."""
    import triton.language as tl

    return frozenset(id(v) for v in getattr(fn, "__globals__", {}).values()
                     if v is tl or v is tl.core)


def _put_in() -> Callable[[], None] | None:
    """Wrap the interpreter's _patch_lang and launch; the undo, or None when it cannot."""
    module = _module()
    if isinstance(module, str):
        return None
    patch_lang, launch = module._patch_lang, module.GridExecutor.__call__

    def patch_lang_once(fn: Any) -> Any:
        done = getattr(_state, "done", None)
        langs = _languages(fn)
        if done is not None and langs and langs <= done:
            return module._LangPatchScope()  # this launch patched them already
        scope = patch_lang(fn)
        if done is not None:
            _state.done = done | langs
        return scope

    def launch_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_state, "done", None)
        _state.done = frozenset()  # a launch starts with nothing patched
        try:
            return launch(self, *args, **kwargs)
        finally:
            _state.done = outer

    module._patch_lang, module.GridExecutor.__call__ = patch_lang_once, launch_once

    def undo() -> None:
        module._patch_lang, module.GridExecutor.__call__ = patch_lang, launch

    return undo


_PATCH = CountedPatch(_put_in)


@contextlib.contextmanager
def patch_once_per_launch() -> Iterator[bool]:
    """Within the block, a Triton helper called inside an interpreted launch does not re-patch
    ``triton.language``; yields whether the patch is in (False: this Triton lacks the
    internals, and kernels run as before)."""
    active = interpreted() and _PATCH.enter()  # compiled kernels: nothing to patch
    try:
        yield active
    finally:
        if active:
            _PATCH.exit()
