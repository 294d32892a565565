"""Make Triton's CPU interpreter round float32 -> bfloat16 to nearest even, like the GPU.

Under ``TRITON_INTERPRET=1`` Triton converts float32 to bfloat16 by truncation (round toward
zero): ``x.to(tl.bfloat16)``, ``fp_downcast_rounding="rtne"`` and a float32 value stored into a
bfloat16 pointer all drop the low 16 bits. The GPU rounds to nearest even. A correct kernel then
misses a bf16 accuracy bound by up to one bf16 ulp under the interpreter only.

The interpreter does every fp32 <-> bf16 conversion in one module-level helper,
``triton.runtime.interpreter._convert_float(input, input_dtype, output_dtype, rounding_mode)``
(the same name and signature from triton 3.x through 3.9). :func:`bf16_round_to_nearest`
replaces that helper, *while it is active*, by one that converts fp32 -> bf16 as the GPU does
(to nearest even; toward zero for an explicit ``fp_downcast_rounding="rtz"``) and hands every
other conversion to the original.
The patch is process-wide while active (kernels called on a helper thread see it too) and is
removed on exit, also on an exception, so nothing leaks into the rest of a pytest session.

Before its first use the patch checks itself (:func:`patch_works`): it converts tricky values
(ties in both directions, overflow to +-inf, the largest finite bf16, NaN, subnormals, -0.0)
through the interpreter's own cast and compares the bits with ml_dtypes. If a Triton version
changed the internals, the check fails, :func:`bf16_round_to_nearest` does nothing, and a
caller can fall back to :func:`interpreter_suspect`, which says whether a bf16 failure is
explained by truncation (within one bf16 ulp, toward zero).

Example:
    >>> from onlinesm import interpreter
    >>> with interpreter.bf16_round_to_nearest() as active:  # doctest: +SKIP
    ...     y = my_kernel(x)        # bf16 results rounded as on the GPU when ``active``
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
from typing import Any, Callable, Iterator

import numpy as np

__all__ = [
    "CountedPatch",
    "interpreted",
    "bf16_round_to_nearest",
    "patch_works",
    "patch_unavailable_reason",
    "f32_to_bf16_bits",
    "interpreter_suspect",
]

#: Where the interpreter's float conversion lives, and its name.
_MODULE = "triton.runtime.interpreter"
_FUNCTION = "_convert_float"

_unavailable: str | None = None  # why the patch cannot work, once patch_works() said so


def interpreted() -> bool:
    """Whether Triton kernels run under the CPU interpreter in this process.

    Once ``triton.language`` is imported its own functions tell (they are decorated as
    ``InterpretedFunction`` under the interpreter); before that, ``TRITON_INTERPRET`` does.
    Importing nothing itself, it is safe to call before the interpreter is chosen.

    >>> interpreted() in (True, False)
    True
    """
    lang = sys.modules.get("triton.language")
    if lang is not None and hasattr(lang, "max"):
        return type(lang.max).__name__ == "InterpretedFunction"
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def f32_to_bf16_bits(x: Any, rounding: str = "rtne") -> np.ndarray:
    """float32 values -> the bits (uint16) of bfloat16, as the GPU's ``cvt.rn`` / ``cvt.rz``.

    ``rounding="rtne"`` (round to nearest, ties to even) adds 0x7FFF plus the lowest kept bit,
    then drops the low 16 bits: a tie goes to the even neighbour, values past the largest finite
    bf16 by half an ulp or more become +-inf, subnormals and -0.0 need no special case.
    ``rounding="rtz"`` (toward zero) just drops the low 16 bits. Either way NaN stays NaN (sign
    and top payload bits kept, quiet bit set) instead of becoming inf.

    >>> hex(int(f32_to_bf16_bits(np.float32(1.00390625))))   # a tie between 1 and 1 + 2**-7
    '0x3f80'
    >>> hex(int(f32_to_bf16_bits(np.float32(1.01171875))))   # a tie: up to the even 1 + 2**-6
    '0x3f82'
    """
    mode = rounding.strip().lower()
    if mode not in ("rtne", "rtz"):
        raise ValueError(f"rounding={rounding!r} is not supported; use 'rtne' or 'rtz'")
    values = np.asarray(x, dtype=np.float32)
    bits = np.ascontiguousarray(values).view(np.uint32)  # at least 1-d
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if mode == "rtne":
        with np.errstate(over="ignore"):  # only NaNs can wrap around, and they are replaced
            bits = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    kept = bits >> np.uint32(16)
    quiet_nan = (np.ascontiguousarray(values).view(np.uint32) >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(is_nan, quiet_nan, kept).astype(np.uint16).reshape(values.shape)


def _mode_name(rounding_mode: Any) -> str:
    """'RTZ' / 'RTNE' / '' for a pybind enum value, its string or None."""
    if rounding_mode is None:
        return ""
    name = getattr(rounding_mode, "name", None)
    return str(name if name is not None else rounding_mode).rsplit(".", 1)[-1].upper()


def _is_format(dtype: Any, name: str) -> bool:
    """Whether a triton.language dtype is fp32 / bf16 (by its name, stable across versions)."""
    return getattr(getattr(dtype, "scalar", dtype), "name", None) == name


def _make_rounding(original: Callable[..., Any]) -> Callable[..., Any]:
    """The replacement helper: fp32 -> bf16 as the GPU does, the rest to ``original``.

    Explicit ``"rtz"`` is done here too (plain truncation): the interpreter's own helper also
    mishandles float32 subnormals (0x00018000 -> 0x0040, not 0x0001) and truncates a NaN whose
    payload sits in the low bits into inf.
    """

    @functools.wraps(original)
    def convert_float(input: Any, input_dtype: Any, output_dtype: Any, rounding_mode: Any,
                      *args: Any, **kwargs: Any) -> Any:
        if _is_format(input_dtype, "fp32") and _is_format(output_dtype, "bf16"):
            data = np.asarray(input)
            mode = "rtz" if _mode_name(rounding_mode) == "RTZ" else "rtne"
            return f32_to_bf16_bits(data, mode).reshape(data.shape)
        return original(input, input_dtype, output_dtype, rounding_mode, *args, **kwargs)

    convert_float.__onlinesm_rne__ = True  # type: ignore[attr-defined]
    return convert_float


def _target_module() -> Any:
    """triton.runtime.interpreter, or a str saying why it is not usable."""
    try:
        module = importlib.import_module(_MODULE)
    except Exception as err:  # noqa: BLE001 - any import failure means "unavailable"
        return f"cannot import {_MODULE}: {type(err).__name__}: {err}"
    if not callable(getattr(module, _FUNCTION, None)):
        return (f"{_MODULE} has no {_FUNCTION}() in this triton version; bf16 results under "
                f"the interpreter stay truncated (label 1-ulp failures with interpreter_suspect)")
    return module


class CountedPatch:
    """A process-wide patch of Triton's internals that nested blocks (several threads too)
    share: put in when the first block opens, taken out when the last one closes.

    ``put_in()`` patches and returns the function that undoes it, or None when it cannot patch.

    >>> patch = CountedPatch(lambda: (lambda: None))
    >>> patch.enter(), patch.enter(), patch.exit(), patch.exit()
    (True, True, None, None)
    """

    def __init__(self, put_in: Callable[[], Callable[[], None] | None]) -> None:
        self._put_in = put_in
        self._lock = threading.RLock()
        self._depth = 0
        self._undo: Callable[[], None] | None = None

    def enter(self) -> bool:
        """Open one block; False (nothing to exit) when the patch cannot go in."""
        with self._lock:
            if self._depth == 0:
                undo = self._put_in()
                if undo is None:
                    return False
                self._undo = undo
            self._depth += 1
            return True

    def exit(self) -> None:
        """Close one block; the last one takes the patch out."""
        with self._lock:
            if self._depth == 0:
                return
            self._depth -= 1
            if self._depth == 0 and self._undo is not None:
                undo, self._undo = self._undo, None
                undo()


def _put_in_rounding() -> Callable[[], None] | None:
    """Replace the interpreter's float conversion by the rounding one; the undo, or None."""
    module = _target_module()
    if isinstance(module, str):
        return None
    current = getattr(module, _FUNCTION)
    if getattr(current, "__onlinesm_rne__", False):  # left by someone else's copy
        current = current.__wrapped__
    setattr(module, _FUNCTION, _make_rounding(current))

    def undo() -> None:
        if getattr(getattr(module, _FUNCTION, None), "__onlinesm_rne__", False):
            setattr(module, _FUNCTION, current)

    return undo


_ROUNDING = CountedPatch(_put_in_rounding)  # open bf16_round_to_nearest() blocks share it


#: float32 inputs of the self-test: ties both ways, overflow, extremes, NaN, subnormals, zeros.
_SELF_TEST_BITS = np.array([
    0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF,  # 1, ties to even down / up, near ties
    0xBF808000, 0xBF818000, 0xBF80FFFF,                          # negative ties, a round-up
    0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0x7F7F0000,              # below / at / above overflow, max bf16
    0xFF7F8000, 0xFF7FFFFF,                                      # to -inf
    0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,  # inf, NaNs (one signalling)
    0x00000001, 0x00008000, 0x00018000, 0x0000FFFF, 0x007FFFFF,  # subnormals, ties among them
    0x00808000, 0x80018000, 0x80000000, 0x00000000,              # smallest normal tie, -sub, -0, 0
    0x40490FDB, 0xC02DF854, 0x3EAAAAAB,                          # pi, -e, 1/3
], dtype=np.uint32)


def _self_test() -> str | None:
    """None when the patched interpreter rounds like ml_dtypes; else what went wrong."""
    import ml_dtypes

    module = _target_module()
    if isinstance(module, str):
        return module
    x = _SELF_TEST_BITS.view(np.float32)
    with np.errstate(invalid="ignore"):  # the signalling NaN
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    try:
        import triton.language as tl

        builder = module.InterpreterBuilder()
        handle = module.TensorHandle(x.copy(), tl.float32)
        if not _ROUNDING.enter():
            return f"cannot patch {_MODULE}.{_FUNCTION}"
        try:
            # The default path (x.to(tl.bfloat16), a store into a bf16 pointer) and an
            # explicit "rtne" both reach cast_impl / create_fp_to_fp; "rtz" must still truncate.
            got = np.asarray(builder.cast_impl(handle, tl.bfloat16).data).view(np.uint16)
            rtz = _rounding_mode("RTZ")
            got_rtz = (np.asarray(builder.create_fp_to_fp(handle, tl.bfloat16, rtz).data).view(np.uint16)
                       if rtz is not None else None)
        finally:
            _ROUNDING.exit()
    except Exception as err:  # noqa: BLE001 - any failure means the patch cannot be trusted
        return f"the self-test raised {type(err).__name__}: {err}"
    nan = np.isnan(x)
    got_f = got.view(ml_dtypes.bfloat16).astype(np.float32)
    if not (np.array_equal(got[~nan], want[~nan]) and np.isnan(got_f[nan]).all()):
        bad = np.flatnonzero((got != want) & ~nan)
        first = int(bad[0]) if bad.size else int(np.flatnonzero(nan & ~np.isnan(got_f))[0])
        return (f"the patched interpreter converted float32 0x{int(_SELF_TEST_BITS[first]):08X} to "
                f"bf16 0x{int(got[first]):04X}, round-to-nearest-even gives 0x{int(want[first]):04X}")
    if got_rtz is not None:
        trunc = (_SELF_TEST_BITS >> 16).astype(np.uint16)
        finite = ~nan
        if not np.array_equal(got_rtz[finite], trunc[finite]):
            return "with the patch in, fp_downcast_rounding='rtz' no longer truncates"
    if getattr(getattr(module, _FUNCTION), "__onlinesm_rne__", False):
        return f"{_MODULE}.{_FUNCTION} was not restored after the self-test"
    return None


def _rounding_mode(name: str) -> Any:
    """triton's ROUNDING_MODE.<name>, or None when this version has no such enum."""
    for path in ("triton._C.libtriton.ir", "triton._C.libtriton"):
        try:
            enum = getattr(importlib.import_module(path), "ROUNDING_MODE", None)
        except Exception:  # noqa: BLE001
            continue
        if enum is not None and hasattr(enum, name):
            return getattr(enum, name)
    module = sys.modules.get(_MODULE)
    ir = getattr(module, "_ir", None)
    return getattr(getattr(ir, "ROUNDING_MODE", None), name, None)


@functools.lru_cache(maxsize=1)
def _self_test_result() -> str | None:
    return _self_test()


def patch_works() -> bool:
    """Whether :func:`bf16_round_to_nearest` makes this triton's interpreter round like the GPU.

    Runs the self-test once per process (cached): the interpreter's own cast, patched, must
    give ml_dtypes' bits on ties, overflow, NaN, subnormals and -0.0, ``"rtz"`` must still
    truncate, and the original helper must be back afterwards. Imports triton: call it only
    after the interpreter was chosen (``onlinesm.kernels.use_interpreter``).

    >>> patch_works()
    True
    """
    global _unavailable
    reason = _self_test_result()
    _unavailable = reason
    return reason is None


def patch_unavailable_reason() -> str | None:
    """Why :func:`patch_works` is False (one line), or None when it works or was not checked."""
    return _unavailable


@contextlib.contextmanager
def bf16_round_to_nearest() -> Iterator[bool]:
    """Round float32 -> bfloat16 to nearest even under Triton's interpreter, inside the block.

    Yields True when the patch is in. It is a no-op (yields False) when kernels are not
    interpreted (the GPU already rounds to nearest even), or when :func:`patch_works` says this
    triton version cannot be patched. An explicit ``fp_downcast_rounding="rtz"`` still
    truncates. Safe to nest and to enter from several threads; the interpreter's own helper is
    back once the last block exits, also when the block raises.

    >>> with bf16_round_to_nearest() as active:  # doctest: +SKIP
    ...     y = kernel(x)
    """
    if not interpreted() or not patch_works() or not _ROUNDING.enter():
        yield False
        return
    try:
        yield True
    finally:
        _ROUNDING.exit()


def interpreter_suspect(actual: Any, exact: Any, dtype: Any, *, allowed: Any = 0.0) -> bool:
    """Whether a bf16 failure is explained by the interpreter truncating instead of rounding.

    ``actual`` are the kernel's outputs, ``exact`` the exact answers (float64), ``allowed`` the
    absolute error the bound allows per element (scalar or broadcastable). True when ``dtype``
    is bfloat16, at least one element exceeds ``allowed``, and every such element is finite,
    lies on the zero side of ``exact`` (truncation only ever moves toward zero) and misses by
    at most one bf16 ulp more than allowed. A NaN, inf or sign error, an element off by two ulps,
    or one pushed away from zero is a real failure. Other dtypes give False.

    A caller labels such a failure "interpreter-suspect" (a pass on the GPU is likely) unless it
    runs strict.

    >>> interpreter_suspect(np.float32(1.0), 1.0 + 2**-8, "bf16")      # 1 ulp toward zero
    True
    >>> interpreter_suspect(np.float32(1.0), 1.0 + 3 * 2**-8, "bf16")  # 2 ulps: a real failure
    False
    """
    from onlinesm.dtypes import resolve, ulp

    if resolve(dtype).name != "bfloat16":
        return False
    a = np.asarray(actual)
    if a.dtype.kind in "uib":
        raise TypeError(f"actual has dtype {a.dtype}; pass the bf16 values (e.g. "
                        f"bits.view(ml_dtypes.bfloat16) or a float array), not their bits")
    a = a.astype(np.float64)
    e = np.asarray(exact, dtype=np.float64)
    a, e = np.broadcast_arrays(a, e)
    tol = np.broadcast_to(np.asarray(allowed, dtype=np.float64), a.shape)
    with np.errstate(invalid="ignore"):
        err = np.abs(a - e)
        same_special = (np.isnan(a) & np.isnan(e)) | ((a == e) & ~np.isfinite(e))
        fails = ~same_special & ~(err <= tol)
        if not fails.any():
            return False
        af, ef, tf, errf = a[fails], e[fails], tol[fails], err[fails]
        if not (np.isfinite(af).all() and np.isfinite(ef).all()):
            return False
        toward_zero = (np.abs(af) <= np.abs(ef)) & ((np.sign(af) == np.sign(ef)) | (af == 0))
        within = errf <= tf + ulp(ef, "bfloat16")
    return bool((toward_zero & within).all())
