"""Calling a user's kernel: convert the inputs, check the call contract, return numpy.

Every call a property makes goes through :class:`Kernel`, so the call contract
(docs/conventions.md) is checked on every generated input, not once: the kernel must not raise,
exit, hang, return the wrong type, shape, dtype or device, or modify its inputs. A violation
raises :class:`KernelError` with one line that names the kernel, the input's shape and dtype,
and what was wrong; the property engine turns it into a counterexample like any other failure.

Hangs: each call runs on a helper thread under a deadline (:mod:`onlinesm.devices` picks it
from the device). The first call of each new variant (dtype and power-of-two shape bucket) gets
an extra compile allowance, so that JIT compilation is never reported as a hang. After one hang
the kernel is marked ``hung`` and never called again: a hung thread cannot be killed, and a
second call would only queue behind it.

Kernels may take torch tensors (the default when torch is installed) or numpy arrays
(``backend="numpy"``, or detected on the first call).

Example:
    >>> import numpy as np
    >>> from onlinesm.harness import Kernel
    >>> from onlinesm.reference import softmax_offline
    >>> k = Kernel(softmax_offline, op="softmax", backend="numpy")
    >>> k.softmax(np.zeros((1, 2), np.float32)).tolist()
    [[0.5, 0.5]]
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import threading
from typing import Any, Callable, Sequence

import numpy as np

from onlinesm import interpreter, interpreter_speed
from onlinesm.capture import captured_output
from onlinesm.devices import default_compile_allowance, default_deadline
from onlinesm.dtypes import resolve, same_bits, to_numpy, to_torch
from onlinesm.errors import UsageError

__all__ = ["Kernel", "KernelError", "AttentionInputs", "describe_array", "accepts_keyword",
           "positional_arguments", "hung_threads_alive", "hung_call_count"]


class KernelError(Exception):
    """The kernel broke the call contract on some input; ``str(err)`` is a one-line diagnosis.

    ``kind`` names the breach (raised | exit | hung | type | shape | dtype | device |
    modified_input), or ``refused``: a declared refusal, which is not a breach, ``detail`` says what was wrong without the input, and ``what`` describes
    the input: two errors with the same ``(kind, detail)`` are the same breach.
    """

    def __init__(self, kind: str, message: str, *, detail: str = "", what: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        on = re.search(r" \(on (.*)\)$", message)  # "... (on input float32[1, 4])"
        self.detail = detail or (message[:on.start()] if on else message)
        self.what = what or (on.group(1) if on else "")

    @property
    def breach(self) -> tuple[str, str]:
        """The breach without its input: equal for the same bug met on other inputs."""
        return self.kind, self.detail


@dataclasses.dataclass
class AttentionInputs:
    """One attention call: numpy q [B,H,Sq,D], k and v [B,Hkv,Sk,D], and its options."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None = None
    causal: bool = False
    scale: float | None = None


def describe_array(a: Any) -> str:
    """``float32[4, 130]`` for an array or tensor: the shape and dtype a message names."""
    dtype = str(getattr(a, "dtype", type(a).__name__)).removeprefix("torch.")
    return f"{dtype}{list(getattr(a, 'shape', ()))}"


def _call_with_timeout(fn: Callable[[], Any], timeout: float | None) -> tuple[bool, Any, BaseException | None]:
    """Run fn() on a helper thread; (finished, result, exception). A hung call is left behind.
    A timeout past what a thread's wait takes (``--deadline inf``) waits without a limit."""
    if timeout is None or timeout >= threading.TIMEOUT_MAX:
        try:
            return True, fn(), None
        except BaseException as err:  # noqa: BLE001 - reported to the user, never swallowed
            return True, None, err
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as err:  # noqa: BLE001
            box["error"] = err

    thread = threading.Thread(target=target, daemon=True, name="onlinesm-kernel-call")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _HUNG_THREADS.append(thread)
        return False, None, None
    return True, box.get("result"), box.get("error")


#: Threads left behind by hung calls; they cannot be killed (see :func:`hung_threads_alive`).
_HUNG_THREADS: list[threading.Thread] = []


def hung_threads_alive(since: int = 0) -> bool:
    """Whether a kernel call that hung (the ``since``-th or later) still runs on its thread.

    Such a thread cannot be stopped, and it may hold the GPU or a lock that interpreter
    shutdown waits for: a command line run ends with ``os._exit`` after writing its report.
    ``since`` is :func:`hung_call_count` taken when the run started.
    """
    return any(t.is_alive() for t in _HUNG_THREADS[since:])


def hung_call_count() -> int:
    """How many kernel calls have hung in this process so far."""
    return len(_HUNG_THREADS)


class Kernel:
    """A user kernel bound to an op, a backend and a device, called under the contract.

    ``fn`` follows the call contract (docs/conventions.md): softmax ``fn(x) -> y``; attention
    ``fn(q, k, v, *, mask=None, causal=False, scale=None)`` returning ``o`` or ``(o, lse)``,
    with ``return_lse=True`` passed when the kernel accepts that keyword.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        op: str,
        backend: str | None = None,
        device: str | None = None,
        name: str | None = None,
        deadline: float | None = None,
        compile_allowance: float | None = None,
        extra_kwargs: dict[str, Any] | None = None,
        target: str | None = None,
        refusals: Sequence[tuple[str, str]] = (),
        domain: Any = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"the kernel must be callable, got {fn!r}")
        if op not in ("softmax", "attention"):
            raise ValueError(f"op={op!r} is not supported; use 'softmax' or 'attention'")
        if backend not in (None, "torch", "numpy"):
            raise ValueError(f"backend={backend!r} is not supported; use 'torch' or 'numpy'")
        self.fn = fn
        self.op = op
        self.target = target  # "pkg.mod:fn" when loaded by name, so a replay can import it
        self.name = name or getattr(fn, "__name__", None) or repr(fn)
        self.extra_kwargs = dict(extra_kwargs or {})
        if backend is None:
            backend = "torch" if _torch_available() else "numpy"
        self.backend = backend
        self.device = device or (_default_device() if backend == "torch" else "cpu")
        if self.device == "cuda" and (backend != "torch" or _default_device() != "cuda"):
            raise UsageError("device cuda was asked for, but " + (
                f"backend={backend!r} kernels run on the CPU; use device='cpu'" if backend != "torch"
                else "torch sees no CUDA device on this machine; use --device cpu"))
        #: seconds a call may take (None: no limit); the first call of a variant gets more
        self.deadline = default_deadline(self.device) if deadline is None else deadline
        self.compile_allowance = (default_compile_allowance(self.device)
                                  if compile_allowance is None else compile_allowance)
        if self.deadline is not None and self.deadline <= 0:
            raise UsageError(f"deadline={deadline!r} must be a positive number of seconds")
        self._seen_variants: set[tuple[Any, ...]] = set()
        #: the input the kernel hung on, once it has: the kernel is not called again
        self.hung: str | None = None
        #: where the output of the first successful call that printed anything was saved
        self.output_log: str | None = None
        self.accepts_return_lse = bool(accepts_keyword(fn, "return_lse"))
        #: declared refusals: (exception type name, regex); a match means "outside the domain"
        self.refusals = [(t, re.compile(rx)) for t, rx in refusals]
        #: the declared domain (properties that derive inputs keep them inside it)
        self.domain = domain

    # -- the generic call ---------------------------------------------------------------------

    def _variant(self, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiled variant a call probably hits: dtypes and power-of-two shape buckets."""
        return tuple((str(getattr(a, "dtype", "")),
                      tuple(1 << max(int(n) - 1, 0).bit_length() for n in getattr(a, "shape", ())))
                     for a in arrays if a is not None)

    def _invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Any:
        if self.hung is not None:
            raise KernelError("hung", f"{self.name} was not called on {what}: it hung earlier on "
                              f"{self.hung}", detail="hung earlier", what=what)
        kwargs = {**self.extra_kwargs, **kwargs}
        variant = self._variant(args)
        deadline = self.deadline
        if deadline is not None and variant not in self._seen_variants:
            deadline += self.compile_allowance  # the first call of a variant may compile
        # What the kernel writes (a compiler's thousands of lines) goes to a log, not the
        # terminal; under Triton's interpreter fp32 -> bf16 rounds to nearest even, as on a GPU,
        # and a kernel's helpers do not re-patch triton.language (half the interpreter's time).
        with (captured_output() as out, interpreter.bf16_round_to_nearest(),
              interpreter_speed.patch_once_per_launch()):
            finished, result, error = _call_with_timeout(lambda: self.fn(*args, **kwargs), deadline)
        note = ""
        if out.nbytes and (not finished or error is not None):
            note = f"; the kernel wrote {out.summary(log=out.save(name=self.name))}"
        elif out.nbytes and self.output_log is None:  # a chatty kernel: keep its first words
            self.output_log = str(out.save(name=self.name))
        out.close()
        if not finished:
            self.hung = what
            raise KernelError("hung", f"{self.name} did not return within {deadline:g} s on {what} "
                              "(a hang; raise the deadline with --deadline SECONDS if the kernel is "
                              f"just slow){note}", detail="did not return", what=what)
        self._seen_variants.add(variant)
        if error is not None:
            if isinstance(error, KeyboardInterrupt):
                raise error
            if isinstance(error, SystemExit):
                detail = f"called sys.exit({error.code!r})"
                raise KernelError("exit", f"{self.name} {detail} on {what}{note}", detail=detail,
                                  what=what) from None
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            if self.refuses(error):
                raise KernelError("refused", f"{self.name} refused {what}: {type(error).__name__}: "
                                  f"{first}", detail="refused", what=what)
            detail = f"raised {type(error).__name__}: {first}"
            raise KernelError("raised", f"{self.name} {detail} (on {what}){note}", detail=detail,
                              what=what) from error
        return result

    def refuses(self, error: BaseException) -> bool:
        """Whether ``error`` is one of the kernel's declared refusals (type and message match)."""
        names = {cls.__name__ for cls in type(error).__mro__} | {
            f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__}
        return any(t in names and rx.search(str(error)) for t, rx in self.refusals)

    def _to_backend(self, a: np.ndarray | None) -> Any:
        if a is None or self.backend == "numpy":
            return None if a is None else a.copy()
        return to_torch(a, self.device)

    def _check_output(self, out: Any, like: np.ndarray, what: str, label: str) -> np.ndarray:
        """Type, shape, dtype and device of one output, then as numpy (bits kept)."""
        if self.backend == "torch":
            import torch

            if not isinstance(out, torch.Tensor):
                raise KernelError("type", f"{self.name} returned {type(out).__name__} for {label}, "
                                  f"expected a torch.Tensor (on {what})")
            if out.device.type != torch.device(self.device).type:
                raise KernelError("device", f"{self.name} returned {label} on {out.device}, "
                                  f"expected {self.device} like the input (on {what})")
        elif not isinstance(out, np.ndarray):
            raise KernelError("type", f"{self.name} returned {type(out).__name__} for {label}, "
                              f"expected a numpy array (on {what})")
        if tuple(out.shape) != like.shape:
            raise KernelError("shape", f"{self.name} returned {label} of shape {list(out.shape)}, "
                              f"expected {list(like.shape)} (on {what})")
        got = to_numpy(out)
        if resolve(got.dtype) is not resolve(like.dtype):
            raise KernelError("dtype", f"{self.name} returned {label} as {resolve(got.dtype)}, "
                              f"expected {resolve(like.dtype)} (on {what})")
        return got

    def _check_unchanged(self, sent: Any, original: np.ndarray, what: str, name: str) -> None:
        after = to_numpy(sent) if self.backend == "torch" else sent
        if not same_bits(after, original):
            detail = f"modified its input {name} in place"
            raise KernelError("modified_input", f"{self.name} {detail}: {_changed(original, after, name)} "
                              f"(on {what})", detail=detail, what=what)

    # -- softmax ------------------------------------------------------------------------------

    def softmax(self, x: np.ndarray, *, strided: bool = False) -> np.ndarray:
        """Call the kernel on rows ``x`` (numpy, any float dtype); return y as numpy.

        ``strided=True`` sends a non-contiguous view of the same values (every other column of
        a buffer twice as wide) to check strided-input support.
        """
        what = f"input {describe_array(x)}" + (" (strided)" if strided else "")
        if strided:
            wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
            wide[..., ::2] = x
            buffer = self._to_backend(wide)
            sent = buffer[..., ::2]
        else:
            sent = self._to_backend(x)
        out = self._invoke((sent,), {}, what)
        y = self._check_output(out, x, what, "y")
        self._check_unchanged(sent, x, what, "x")
        return y

    # -- attention ----------------------------------------------------------------------------

    def attention(self, inp: AttentionInputs, *, want_lse: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Call the kernel on one attention input; return (o, lse or None) as numpy."""
        what = f"q {describe_array(inp.q)}, k {describe_array(inp.k)}" + (
            f", mask {list(inp.mask.shape)}" if inp.mask is not None else "") + (
            ", causal" if inp.causal else "")
        q, k, v = (self._to_backend(t) for t in (inp.q, inp.k, inp.v))
        kwargs: dict[str, Any] = {}
        if inp.mask is not None:
            kwargs["mask"] = self._to_backend(inp.mask)
        if inp.causal:
            kwargs["causal"] = True
        if inp.scale is not None:
            kwargs["scale"] = inp.scale
        if want_lse and self.accepts_return_lse:
            kwargs["return_lse"] = True
        out = self._invoke((q, k, v), kwargs, what)
        lse = None
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise KernelError("type", f"{self.name} returned a {type(out).__name__} of {len(out)} "
                                  f"items, expected o or (o, lse) (on {what})")
            out, lse_raw = out
            # lse is float32 by the contract (float64 allowed for float64 inputs)
            lse_dtype = np.float64 if inp.q.dtype == np.float64 else np.float32
            lse_like = np.zeros(inp.q.shape[:-1], dtype=lse_dtype)
            lse = self._check_output(lse_raw, lse_like, what, "lse")
        o = self._check_output(out, inp.q, what, "o")
        for name, sent, original in (("q", q, inp.q), ("k", k, inp.k), ("v", v, inp.v)):
            self._check_unchanged(sent, original, what, name)
        return o, lse


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def accepts_keyword(fn: Callable[..., Any], name: str) -> bool | None:
    """Whether ``fn`` takes keyword ``name``: True, False, or None when it cannot be told
    (no signature, or ``**kwargs``, which may or may not use it)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if name in params:
        return params[name].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return False


def positional_arguments(fn: Callable[..., Any]) -> tuple[int, int | None] | None:
    """(required, most) positional arguments ``fn`` takes; most None with ``*args``; None
    when it has no signature. Tells a softmax kernel (one tensor) from an attention kernel
    (q, k, v) before the first call.

    >>> positional_arguments(lambda q, k, v, causal=False: q)
    (3, 4)
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    star = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    return required, None if star else len(positional)


def _changed(before: np.ndarray, after: Any, name: str, show: int = 3) -> str:
    """Which elements an in-place write changed: ``2 of 8 elements changed: x[0, 1] 1.5 -> 0``."""
    after = np.ascontiguousarray(after)
    before = np.ascontiguousarray(before)
    bits = np.dtype(f"u{before.dtype.itemsize}")
    where = np.argwhere(before.view(bits) != after.view(bits))  # bitwise: -0.0 and NaNs count

    def value(a: np.ndarray, idx: np.ndarray) -> str:
        v = a[tuple(idx)]
        return str(bool(v)) if a.dtype == np.bool_ else f"{float(v):.6g}"

    items = ", ".join(f"{name}[{', '.join(str(int(i)) for i in idx)}] {value(before, idx)} -> "
                      f"{value(after, idx)}" for idx in where[:show])
    more = f", ... ({len(where) - show} more)" if len(where) > show else ""
    return f"{len(where)} of {before.size} elements changed: {items}{more}"
