"""The kernels ``onlinesm report`` runs when no TARGET is given, with their declared numerics.

What: :func:`builtin_kernels` returns :class:`ReportKernel` entries (a callable, the op, the
conventions it declares, and the largest shapes it is given) for the references, onlinesm's
Triton kernels, ``torch.softmax`` and torch's SDPA. :func:`user_kernel` wraps a user's TARGET
the same way.

Why declared here: the bound a kernel is held to follows from what it declares (accumulation
dtype, exp accuracy class, P's dtype), so each declaration must be honest and visible. The
references accumulate in float32 with numpy's exp ("accurate"); the Triton kernels expose their
numerics as module constants (``EXP``, ``ACCUMULATE``, ``P_DTYPE``) and are read from there;
torch on the CPU uses an accurate exp and float32 accumulation. SDPA's math backend rounds P
to the input dtype before P·V and gives zeros for a query with no visible key (torch 2.13).

Every built-in is a torch-tensor function defined in this module, so a saved counterexample
names an importable target (``onlinesm.report.builtin:reference_softmax_offline``) and
``onlinesm replay FILE`` re-runs it.

Example:
    >>> ks = builtin_kernels("softmax", device="cpu", include_triton=False)
    >>> [k.name for k in ks]
    ['reference.offline', 'reference.online_scalar', 'reference.online_tiled', 'torch.softmax']
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

from onlinesm.declarations import Domain
from onlinesm.properties import Conventions
from onlinesm.tolerance import Numerics

__all__ = [
    "ReportKernel",
    "builtin_kernels",
    "user_kernel",
    "declared_fields",
    "declared_domain",
    "reference_softmax_offline",
    "reference_softmax_online_scalar",
    "reference_softmax_online_tiled",
    "reference_attention_online",
    "torch_softmax",
    "triton_softmax",
    "triton_attention",
    "sdpa_math",
]


@dataclasses.dataclass
class ReportKernel:
    """One kernel the report runs: the callable, its op, what it declares, how big to go.

    ``max_len`` (softmax rows) and ``max_seq`` (attention Sq and Sk) cap the shapes it is
    given: the Triton interpreter is slow, so interpreted kernels get smaller shapes (the
    report says so). ``domain``: what a user's kernel declares it takes (its dtypes, families,
    lengths, tiles, masks); the grid's cases outside it are not run, as ``onlinesm check``
    never generates them. ``p_input=True`` (kept for callers) is the same as declaring
    ``Numerics(p_dtype="input")``: P rounded to the input dtype, resolved per dtype by
    :meth:`~onlinesm.declarations.Numerics.for_dtype`.
    """

    name: str
    op: str
    fn: Callable[..., Any]
    conventions: Conventions
    target: str | None = None
    backend: str | None = "torch"
    max_len: int | None = None
    max_seq: int | None = None
    note: str = ""
    p_input: bool = False  # P rounded to the input dtype (resolved per dtype)
    domain: Domain | None = None
    #: its own grid, where the tile it declares rounds the report's up (None: the report's)
    lengths: tuple[int, ...] | None = None
    seqs: tuple[int, ...] | None = None
    head_dim: int | None = None  # attention: its own head dim (None: the report's)

    def __post_init__(self) -> None:
        if self.p_input:  # declared as a value: Numerics.for_dtype resolves it per dtype
            num = dataclasses.replace(self.conventions.numerics, p_dtype="input")
            self.conventions = dataclasses.replace(self.conventions, numerics=num)

    def numerics(self, dtype: str) -> Numerics:
        """The declared numerics for inputs of ``dtype`` (``p_dtype="input"`` resolved)."""
        return self.conventions.numerics.for_dtype(dtype)

    def describe(self) -> dict[str, Any]:
        """JSON-ready declaration (schema ``kernels[]``)."""
        c = self.conventions
        return {
            "name": self.name,
            "op": self.op,
            "target": self.target,
            "fully_masked": c.fully_masked,
            "causal_align": c.causal_align,
            "lse_base": c.lse_base,
            "empty_lse": "inf" if c.empty_lse > 0 else "-inf",
            "numerics": c.numerics.to_dict(),
            "max_len": self.max_len,
            "max_seq": self.max_seq,
            "note": self.note,
        }


# ---------------------------------------------------------------------------------------------
# torch-tensor wrappers of the numpy references (importable, so replays can name them)


def _np_call(fn: Callable[..., Any], *tensors: Any, **kwargs: Any) -> Any:
    from onlinesm.dtypes import to_numpy, to_torch

    device = tensors[0].device
    args = [to_numpy(t) for t in tensors]
    out = fn(*args, **kwargs)
    if isinstance(out, tuple):
        return tuple(to_torch(o, device) for o in out)
    return to_torch(out, device)


def reference_softmax_offline(x: Any) -> Any:
    """:func:`onlinesm.reference.softmax_offline` on a torch tensor (float32 accumulation)."""
    from onlinesm.reference import softmax_offline

    return _np_call(softmax_offline, x)


def reference_softmax_online_scalar(x: Any) -> Any:
    """:func:`onlinesm.reference.softmax_online_scalar` on a torch tensor."""
    from onlinesm.reference import softmax_online_scalar

    return _np_call(softmax_online_scalar, x)


def reference_softmax_online_tiled(x: Any) -> Any:
    """:func:`onlinesm.reference.softmax_online_tiled` (tile 128) on a torch tensor."""
    from onlinesm.reference import softmax_online_tiled

    return _np_call(softmax_online_tiled, x)


def reference_attention_online(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                               scale: float | None = None, return_lse: bool = False) -> Any:
    """:func:`onlinesm.reference.attention_online` (KV tile 64) on torch tensors."""
    from onlinesm.dtypes import to_numpy, to_torch
    from onlinesm.reference import attention_online

    m = None if mask is None else mask.detach().cpu().numpy()
    o, lse = attention_online(to_numpy(q), to_numpy(k), to_numpy(v), mask=m, causal=causal,
                              scale=scale)
    o_t = to_torch(o, q.device)
    return (o_t, to_torch(lse, q.device)) if return_lse else o_t


def torch_softmax(x: Any) -> Any:
    """``torch.softmax(x, -1)``: NaN for a fully masked row."""
    import torch

    return torch.softmax(x, dim=-1)


def triton_softmax(x: Any) -> Any:
    """onlinesm's Triton online softmax (zeros for a fully masked row)."""
    # the module, then its function: importing the module may have shadowed the package's
    # lazy attribute of the same name
    return importlib.import_module("onlinesm.kernels.softmax").softmax(x)


def triton_attention(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                     scale: float | None = None, return_lse: bool = False) -> Any:
    """onlinesm's Triton FlashAttention-style forward (top-left causal, as SDPA)."""
    return importlib.import_module("onlinesm.kernels.attention").attention(q, k, v, mask=mask, causal=causal, scale=scale, return_lse=return_lse)


def sdpa_math(q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
              scale: float | None = None) -> Any:
    """``torch.nn.functional.scaled_dot_product_attention`` with the math backend forced.

    The math backend is the same code on CPU and GPU, so CPU and GPU reports compare the same
    algorithm; it rounds P to the input dtype before P·V and gives zeros for a fully masked
    query.
    """
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                              scale=scale)


# ---------------------------------------------------------------------------------------------


_HERE = "onlinesm.report.builtin"
_ACCURATE = Numerics(accumulate="float32", exp="accurate")


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def builtin_kernels(op: str, *, device: str, include_triton: bool = True,
                    interpreted_max_seq: int = 64) -> list[ReportKernel]:
    """The built-in kernels for ``op`` ("softmax" or "attention") on ``device``.

    On the CPU the Triton kernels run under the interpreter (the caller must have chosen it
    before any kernel import: ``onlinesm.kernels.use_interpreter(True)``); interpreted
    attention is limited to ``interpreted_max_seq`` queries and keys.
    """
    if op not in ("softmax", "attention"):
        raise ValueError(f"op={op!r} is not supported; use 'softmax' or 'attention'")
    include_triton = include_triton and _triton_available()
    interpreted = device == "cpu"
    kernels: list[ReportKernel] = []
    if op == "softmax":
        for short, fn in (("offline", reference_softmax_offline),
                          ("online_scalar", reference_softmax_online_scalar),
                          ("online_tiled", reference_softmax_online_tiled)):
            kernels.append(ReportKernel(
                f"reference.{short}", op, fn, Conventions(numerics=_ACCURATE),
                target=f"{_HERE}:{fn.__name__}",
                note="numpy, float32 accumulation, numpy's exp (accurate)"))
        if include_triton:
            sm_mod = importlib.import_module("onlinesm.kernels.softmax")  # the module

            num = Numerics(accumulate=sm_mod.ACCUMULATE, exp=sm_mod.EXP)
            kernels.append(ReportKernel(
                "triton", op, triton_softmax, Conventions(fully_masked="zeros", numerics=num),
                target=f"{_HERE}:triton_softmax",
                note=("Triton interpreter (numpy exp2), declared exp class "
                      f"{sm_mod.EXP!r}" if interpreted else f"compiled Triton, exp class {sm_mod.EXP!r}")))
        kernels.append(ReportKernel(
            "torch.softmax", op, torch_softmax, Conventions(fully_masked="nan", numerics=_ACCURATE),
            target=f"{_HERE}:torch_softmax",
            note="declared fully_masked='nan'; float32 accumulation, accurate exp"))
        return kernels
    kernels.append(ReportKernel(
        "reference.online", op, reference_attention_online,
        Conventions(numerics=Numerics(accumulate="float32", exp="accurate", p_dtype=None)),
        target=f"{_HERE}:reference_attention_online",
        note="numpy (m, d, o) recurrence, KV tile 64, P kept in float32"))
    if include_triton:
        at_mod = importlib.import_module("onlinesm.kernels.attention")

        num = Numerics(accumulate=at_mod.ACCUMULATE, exp=at_mod.EXP,
                       allow_tf32=bool(at_mod.ALLOW_TF32),
                       p_dtype=at_mod.P_DTYPE)
        kernels.append(ReportKernel(
            "triton", op, triton_attention,
            Conventions(fully_masked=at_mod.FULLY_MASKED, lse_base=at_mod.LSE_BASE, numerics=num),
            target=f"{_HERE}:triton_attention",
            max_seq=interpreted_max_seq if interpreted else None,
            note=(f"Triton interpreter, Sq and Sk <= {interpreted_max_seq}" if interpreted
                  else "compiled Triton") + f"; P rounded to {at_mod.P_DTYPE}"))
    kernels.append(ReportKernel(
        "torch.sdpa", op, sdpa_math,
        Conventions(fully_masked="zeros",
                    numerics=Numerics(accumulate="float32", exp="accurate", p_dtype="input")),
        target=f"{_HERE}:sdpa_math",
        note="SDPA math backend: P rounded to the input dtype; zeros for a fully masked query"))
    return kernels


def user_kernel(target: str, fn: Callable[..., Any], op: str, conventions: Conventions, *,
                backend: str | None = None, p_input: bool = False,
                domain: Domain | None = None) -> ReportKernel:
    """A user's TARGET as a :class:`ReportKernel`, with the conventions (and the domain) given
    on the CLI or in its table."""
    declared = declared_fields(domain) if domain is not None else {}
    note = "user kernel" + ("; declared domain: " + ", ".join(f"{k}={v}" for k, v in declared.items())
                            + " (the grid's cases outside it are not run)" if declared else "")
    return ReportKernel(target, op, fn, conventions, target=target, backend=backend,
                        note=note, p_input=p_input, domain=domain)


def declared_fields(domain: Domain) -> dict[str, Any]:
    """The fields of ``domain`` that differ from ``Domain()``'s: what a kernel declared (the
    record's other values are sizes for the check's draws, not limits of the kernel).

    >>> declared_fields(Domain(len_multiple=128, dtypes="bf16"))
    {'dtypes': ('bfloat16',), 'len_multiple': 128}
    """
    base = Domain()
    return {f.name: getattr(domain, f.name) for f in dataclasses.fields(Domain)
            if getattr(domain, f.name) != getattr(base, f.name)}


def declared_domain(domain: Domain, head_dim: int) -> Domain:
    """``domain`` with the limits it does not declare opened up (any length, the report's
    ``head_dim``): the domain the report's grid is held to."""
    declared = declared_fields(domain)
    wide: dict[str, Any] = dict(min_len=1, max_len=2**31, min_seq_q=1, max_seq_q=2**31,
                                min_seq_k=1, max_seq_k=2**31, head_dims=(head_dim,))
    return dataclasses.replace(domain, **{k: v for k, v in wide.items() if k not in declared})
