"""Count Triton JIT compilations (and autotuning runs) in this process, and time them.

What: ``with counting() as c: ...`` records every Triton kernel compilation started inside
the block: ``c.count``, ``c.seconds`` (wall time spent compiling), ``c.by_kernel`` and
``c.records``; plus the autotuner's work, ``c.autotune_runs`` (new tuning keys benchmarked)
and ``c.autotune_seconds`` (their wall time, the compilations of every candidate included).

Why: on a GPU one compilation costs about a second, so a property check that feeds a kernel
many shapes can spend nearly all its time compiling (one compilation per new integer
specialisation or constexpr combination, and one per autotuning candidate). This makes that
cost visible, so a kernel's specialisation choices can be judged by a number.

How: the first ``counting()`` wraps ``JITFunction._do_compile`` (Triton 3.3 and later,
including 3.6 and 3.9); without it, Triton's ``knobs.runtime.jit_cache_hook`` /
``jit_post_compile_hook`` pair; without those, the older ``JITFunction.cache_hook``. A
compilation served from Triton's on-disk cache is still counted (the in-process compile step
ran), only faster: ``seconds`` tells a cold cache from a warm one. ``counting()`` never
imports triton itself (that would fix Triton's interpreter-or-GPU mode too early): when triton
is not imported yet, the hooks go in right after its import. Under Triton's CPU
interpreter (``TRITON_INTERPRET=1``) nothing is compiled, so the count stays 0 and
``c.note`` says why. When no hook exists at all, ``c.note`` says that too.

Example:
    >>> from onlinesm.compiles import counting
    >>> with counting() as c:
    ...     run_my_kernel_on_many_shapes()          # doctest: +SKIP
    >>> print(c.summary())                         # doctest: +SKIP
    14 Triton compilations, 9.8 s (_attn_fwd: 12, _softmax_on_chip_kernel: 2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.abc
import importlib.util
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

__all__ = ["CompileRecord", "Counter", "counting", "install", "mechanism"]


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    """One compilation: the kernel's name and the wall seconds its compile step took."""

    kernel: str
    seconds: float


@dataclasses.dataclass
class Counter:
    """What one ``counting()`` block saw. Live: it grows while the block runs."""

    records: list[CompileRecord] = dataclasses.field(default_factory=list)
    autotune_runs: int = 0
    autotune_seconds: float = 0.0

    @property
    def note(self) -> str:
        """Why the counts may stay 0 (interpreter, no hook, triton never imported), or ""."""
        if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
            return "TRITON_INTERPRET=1: the interpreter compiles nothing"
        if _MECHANISM == "":
            return "no compile hook found in this Triton version; counts stay 0"
        if _MECHANISM is None:
            return "triton was not imported"
        return ""

    @property
    def count(self) -> int:
        """Number of Triton JIT compilations."""
        return len(self.records)

    @property
    def seconds(self) -> float:
        """Wall seconds spent inside Triton's compile step."""
        return sum(r.seconds for r in self.records)

    @property
    def by_kernel(self) -> dict[str, int]:
        """Compilations per kernel name."""
        out: dict[str, int] = {}
        for r in self.records:
            out[r.kernel] = out.get(r.kernel, 0) + 1
        return out

    def summary(self) -> str:
        """One line: count, seconds, per kernel, autotuning, and the note if any."""
        kernels = ", ".join(f"{k}: {n}" for k, n in sorted(self.by_kernel.items()))
        text = f"{self.count} Triton compilations, {self.seconds:.1f} s"
        if kernels:
            text += f" ({kernels})"
        if self.autotune_runs:
            text += f"; {self.autotune_runs} autotuning runs, {self.autotune_seconds:.1f} s"
        if self.note:
            text += f" [{self.note}]"
        return text


_LOCK = threading.Lock()
_ACTIVE: list[Counter] = []
_MECHANISM: str | None = None  # set by install(): which hook is in place, or "" for none


def _record(kernel: str, seconds: float) -> None:
    rec = CompileRecord(kernel, seconds)
    with _LOCK:
        for c in _ACTIVE:
            c.records.append(rec)


def _record_tuning(seconds: float) -> None:
    with _LOCK:
        for c in _ACTIVE:
            c.autotune_runs += 1
            c.autotune_seconds += seconds


def _kernel_name(jit_fn: Any) -> str:
    fn = getattr(jit_fn, "fn", None)
    return str(getattr(fn, "__name__", None) or getattr(jit_fn, "__name__", "?"))


def _wrap_do_compile(cls: Any) -> None:
    """Time ``cls._do_compile`` (Triton >= 3.3): it runs exactly when a key is not cached."""
    original = cls._do_compile

    def _do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        kernel = original(self, *args, **kwargs)
        if kernel is not None:  # None: a jit_cache_hook asked to skip the compile
            _record(_kernel_name(self), time.perf_counter() - t0)
        return kernel

    _do_compile.__wrapped__ = original  # type: ignore[attr-defined]
    cls._do_compile = _do_compile


def _install_knob_hooks(runtime: Any) -> None:
    """Chain onto ``knobs.runtime.jit_cache_hook`` (before) and ``jit_post_compile_hook``."""
    starts: dict[Any, float] = {}
    before_prev: Callable[..., Any] | None = runtime.jit_cache_hook
    after_prev: Callable[..., Any] | None = runtime.jit_post_compile_hook

    def before(*args: Any, **kwargs: Any) -> Any:
        starts[(threading.get_ident(), kwargs.get("key"))] = time.perf_counter()
        return before_prev(*args, **kwargs) if before_prev else None  # None: compile

    def after(*args: Any, **kwargs: Any) -> Any:
        t0 = starts.pop((threading.get_ident(), kwargs.get("key")), time.perf_counter())
        fn = kwargs.get("fn")
        name = getattr(fn, "name", None) or _kernel_name(getattr(fn, "jit_function", fn))
        _record(str(name), time.perf_counter() - t0)
        return after_prev(*args, **kwargs) if after_prev else None

    runtime.jit_cache_hook = before
    runtime.jit_post_compile_hook = after


def _install_class_hook(cls: Any) -> None:
    """Triton < 3.3: ``JITFunction.cache_hook`` is called once per compilation (no timing)."""
    previous = cls.cache_hook

    def hook(*args: Any, **kwargs: Any) -> Any:
        fn = kwargs.get("fn")
        _record(str(getattr(fn, "name", "?")), 0.0)
        return previous(*args, **kwargs) if previous else False

    cls.cache_hook = hook


def _wrap_autotuner(cls: Any) -> None:
    """Count a tuning when ``Autotuner.run`` adds a key to its cache, and time that call."""
    original = cls.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = len(getattr(self, "cache", {}))
        t0 = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            if len(getattr(self, "cache", {})) > before and len(self.configs) > 1:
                _record_tuning(time.perf_counter() - t0)

    run.__wrapped__ = original  # type: ignore[attr-defined]
    cls.run = run


def install() -> str:
    """Put the hooks in place once per process; return the mechanism used ("" for none)."""
    global _MECHANISM
    with _LOCK:
        if _MECHANISM is not None:
            return _MECHANISM
        mechanism = ""
        try:
            from triton.runtime import jit
        except Exception:  # noqa: BLE001 - no (working) triton: nothing to count
            _MECHANISM = ""
            return _MECHANISM
        knobs = getattr(__import__("triton"), "knobs", None)
        runtime = getattr(knobs, "runtime", None)
        if hasattr(jit.JITFunction, "_do_compile"):
            _wrap_do_compile(jit.JITFunction)
            mechanism = "JITFunction._do_compile"
        elif runtime is not None and hasattr(runtime, "jit_post_compile_hook"):
            _install_knob_hooks(runtime)
            mechanism = "knobs.runtime.jit_post_compile_hook"
        elif hasattr(jit.JITFunction, "cache_hook"):
            _install_class_hook(jit.JITFunction)
            mechanism = "JITFunction.cache_hook (count only, no seconds)"
        try:
            from triton.runtime import autotuner

            _wrap_autotuner(autotuner.Autotuner)
        except Exception:  # noqa: BLE001 - autotuning stays uncounted
            pass
        _MECHANISM = mechanism
        return mechanism


def mechanism() -> str | None:
    """The hook in place ("" when none was found), or None before the first ``install()``."""
    return _MECHANISM


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Runs ``install()`` right after ``import triton`` completes.

    ``counting()`` must not import triton itself: Triton fixes compiled-vs-interpreted mode
    when it is first imported, and the caller may not have chosen that mode yet.
    """

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "triton":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return real.create_module(spec)

            def exec_module(self, module: Any) -> None:
                # The real loader, not this wrapper, is what triton's package data reads use.
                module.__loader__ = real
                if module.__spec__ is not None:
                    module.__spec__.loader = real
                real.exec_module(module)
                install()

        spec.loader = _Loader()
        return spec


_PENDING = _InstallAfterImport()


def _install_when_imported() -> None:
    """``install()`` now if triton is imported, else as soon as it is."""
    if "triton" in sys.modules:
        install()
    elif _PENDING not in sys.meta_path:
        sys.meta_path.insert(0, _PENDING)


@contextlib.contextmanager
def counting() -> Iterator[Counter]:
    """Count the Triton compilations and autotuning runs started inside the block.

    Blocks may nest and may run in several threads at once: each compilation is added to
    every block open at that moment.
    """
    _install_when_imported()
    counter = Counter()
    with _LOCK:
        _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        with _LOCK:
            _ACTIVE.remove(counter)
