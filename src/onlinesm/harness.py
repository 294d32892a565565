"""Calling a user's kernel: convert the inputs, check the call contract, return numpy.

Every call a property makes goes through :class:`Kernel`, so the contract of DESIGN.md
section 3 is checked on every generated input, not once: the kernel must not raise, hang,
return the wrong type, shape, dtype or device, or modify its inputs. A violation raises
:class:`KernelError` with one line that names the kernel, the input's shape and dtype, and
what was wrong; the property engine turns it into a counterexample like any other failure.

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
import threading
from typing import Any, Callable

import numpy as np

from onlinesm.dtypes import resolve, same_bits, to_numpy, to_torch

__all__ = ["Kernel", "KernelError", "AttentionInputs", "describe_array"]

#: Seconds one kernel call may take before it is reported as hung (the first call compiles).
DEFAULT_TIMEOUT = 300.0


class KernelError(Exception):
    """The kernel broke the call contract on some input; ``str(err)`` is a one-line diagnosis."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # raised | hung | type | shape | dtype | device | modified_input


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
    """Run fn() on a helper thread; (finished, result, exception). A hung call is left behind."""
    if timeout is None:
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

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, None, None
    return True, box.get("result"), box.get("error")


class Kernel:
    """A user kernel bound to an op, a backend and a device, called under the contract.

    ``fn`` follows DESIGN.md section 3: softmax ``fn(x) -> y``; attention
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
        timeout: float | None = DEFAULT_TIMEOUT,
        extra_kwargs: dict[str, Any] | None = None,
        target: str | None = None,
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
        self.timeout = timeout
        self.extra_kwargs = dict(extra_kwargs or {})
        if backend is None:
            backend = "torch" if _torch_available() else "numpy"
        self.backend = backend
        self.device = device or (_default_device() if backend == "torch" else "cpu")
        self.accepts_return_lse = _accepts_keyword(fn, "return_lse")

    # -- the generic call ---------------------------------------------------------------------

    def _invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Any:
        kwargs = {**self.extra_kwargs, **kwargs}
        finished, result, error = _call_with_timeout(lambda: self.fn(*args, **kwargs), self.timeout)
        if not finished:
            raise KernelError("hung", f"{self.name} did not return within {self.timeout:.0f} s on {what}")
        if error is not None:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise error
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise KernelError(
                "raised", f"{self.name} raised {type(error).__name__}: {first} (on {what})"
            ) from error
        return result

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
            raise KernelError("modified_input", f"{self.name} modified its input {name} in place (on {what})")

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


def _accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params
