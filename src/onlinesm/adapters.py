"""Calling attention kernels that follow another calling convention than onlinesm's.

onlinesm calls an attention kernel as ``fn(q, k, v, *, mask=None, causal=False, scale=None)``
with q ``[B, H, Sq, D]``, k and v ``[B, Hkv, Sk, D]``, a bool mask (True = may attend) and an
optional ``return_lse=True``. Real kernels are called otherwise: torch's
``scaled_dot_product_attention`` (``attn_mask``, ``is_causal``, ``enable_gqa``), flash-attn's
``flash_attn_func`` (``[B, S, H, D]``, ``softmax_scale``, bottom-right causal, lse through
``return_attn_probs``), xformers' ``memory_efficient_attention`` (``[B, M, H, K]``, an additive
``attn_bias``). :func:`adapt` wraps such a kernel into a callable that follows onlinesm's
contract, so the property suite runs on it unchanged, and says which conventions its calling
convention implies (``causal_align``, ``allow_mask``, ``dtypes``, ...) as plain data the engine
uses as defaults. The description (:class:`AdapterSpec`) is JSON, so a replay file can call the
kernel the same way again.

Example:
    >>> import torch
    >>> from onlinesm.adapters import adapt
    >>> sdpa = adapt(convention="sdpa", sdpa_backend="math")   # torch's SDPA, math backend pinned
    >>> q = k = v = torch.ones(1, 2, 3, 4)
    >>> sdpa(q, k, v, causal=True).shape
    torch.Size([1, 2, 3, 4])
    >>> sdpa.implied["causal_align"], sdpa.spec.target
    ('top-left', 'torch.nn.functional:scaled_dot_product_attention')

Mask kinds (``mask_kind=``, :func:`to_mask_kind`): ``bool`` (True = attend), ``additive``
(0 / -inf in the query dtype), ``additive-f32`` (0 / -inf in float32 whatever the query dtype)
and ``finite-min`` (0 / ``torch.finfo(q.dtype).min``). Measured with torch 2.13.0+cpu, SDPA
(math and CPU flash backends), q ``[1, 2, 4, 16]``, k and v ``[1, 2, 6, 16]``, ``randn``, seed 0
(``python -m onlinesm.adapters`` prints the table again):

- ``bool`` and ``additive`` on a fully masked row: **zeros** (not NaN) in float32, bfloat16 and
  float16, with both backends; so :func:`implied_fully_masked` gives ``"zeros"`` for them.
- ``additive-f32`` with bfloat16 / float16 queries: accepted by both backends (output in the
  query dtype); -inf is -inf in any dtype, so it masks exactly as ``additive`` does.
- ``finite-min`` on a fully masked row: every score becomes ``finfo.min`` (the scores are
  absorbed: |s| is far below one ulp of finfo.min), so the softmax is uniform and o = mean(V)
  over the keys: max |o - mean(V)| = 1.4e-7 (float32), 3.9e-3 (bfloat16, its rounding), while
  the unmasked softmax is 0.74 away. Exact arithmetic would cancel the common offset and give the
  unmasked softmax instead. float16 is the exception: its finfo.min is only -65504 and SDPA
  computes the scores in float32 on the CPU, where -65504 + s keeps s to 2^-8, so the "fully
  masked" row gives the unmasked softmax (max error 1.4e-3) and mean(V) is 0.75 away; no
  convention holds for every kernel there (``implied_fully_masked("finite-min", "float16")`` is
  ``"any"``). A partially masked row is masked exactly by all four kinds (exp(finfo.min - m)
  underflows to 0).

SDPA backends on torch 2.13.0+cpu (``sdpa_backend=``): ``math`` and ``flash`` run (flash takes
float32 too on the CPU, accepts an ``attn_mask``, and accepts ``attn_mask`` with
``is_causal=True``, which ``math`` refuses with ``RuntimeError: _scaled_dot_product_attention:
Explicit attn_mask should not be set when is_causal=True``; the adapter never sends both).
``efficient`` and ``cudnn`` are refused on every call with ``RuntimeError: No viable backend
for scaled_dot_product_attention was found. This is likely due to turning off both the math
kernel and the fused kernels.``, the refusal the engine treats as declared. The CPU flash
backend refuses K/V with fewer heads than q unless ``enable_gqa=True`` (``RuntimeError: No
available kernel.  Aborting execution.``), while math broadcasts them silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
from typing import Any, Callable, Mapping

from onlinesm.harness import accepts_keyword

__all__ = [
    "adapt",
    "Adapted",
    "AdapterSpec",
    "to_mask_kind",
    "implied_fully_masked",
    "parse_kwarg",
    "CONVENTIONS",
    "LAYOUTS",
    "MASK_KINDS",
    "SDPA_BACKENDS",
    "SDPA_TARGET",
    "SCHEMA",
]

#: The calling conventions :func:`adapt` knows.
CONVENTIONS = ("onlinesm", "sdpa", "flash_attn", "xformers")
#: Tensor layouts: ``bhsd`` = [B, H, S, D] (onlinesm, SDPA), ``bshd`` = [B, S, H, D] (flash-attn, xformers).
LAYOUTS = ("bhsd", "bshd")
#: How a mask reaches the kernel (see the module docstring for how they differ).
MASK_KINDS = ("bool", "additive", "additive-f32", "finite-min")
#: ``sdpa_backend`` names and the ``torch.nn.attention.SDPBackend`` member each pins.
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
#: The target the ``sdpa`` convention calls when no function is given.
SDPA_TARGET = "torch.nn.functional:scaled_dot_product_attention"
#: Schema name recorded by :meth:`AdapterSpec.to_json`.
SCHEMA = "onlinesm.adapter/1"

_DEFAULT_LAYOUT = {"onlinesm": "bhsd", "sdpa": "bhsd", "flash_attn": "bshd", "xformers": "bshd"}
_DEFAULT_MASK_KIND = {"onlinesm": "bool", "sdpa": "bool", "flash_attn": "bool", "xformers": "additive"}
# Keywords each convention sets on every call: a fixed kwarg may not set them too.
_SET_BY_ADAPTER = {
    "onlinesm": ("mask", "causal", "scale", "return_lse"),
    "sdpa": ("attn_mask", "is_causal", "scale", "enable_gqa"),
    "flash_attn": ("softmax_scale", "causal", "return_attn_probs"),
    "xformers": ("attn_bias", "scale"),
}
_ALL_DTYPES = ("float32", "bfloat16", "float16")


def _choice(name: str, value: Any, valid: tuple[str, ...] | Mapping[str, Any]) -> str:
    if value not in valid:
        raise ValueError(f"{name}={value!r} is unknown; use one of {', '.join(repr(v) for v in valid)}")
    return value


def _tuples(value: Any) -> Any:
    """JSON arrays as tuples, recursively, so a spec equals itself after a JSON round trip."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _tuples(v) for k, v in value.items()}
    return value


def implied_fully_masked(kind: str, dtype: Any = None) -> str:
    """The fully-masked-row convention a mask kind implies for SDPA-like kernels.

    ``bool`` and ``additive`` (either width): ``"zeros"``, measured with torch 2.13 SDPA (math
    and CPU flash) in float32, bfloat16 and float16. ``finite-min``: ``"uniform"`` (o = mean(V)
    over the keys: every score is absorbed into finfo.min), except for float16, where a kernel
    that adds the mask in float32 gives the unmasked softmax and one in float16 the mean:
    ``"any"``.

    >>> implied_fully_masked("finite-min"), implied_fully_masked("bool")
    ('uniform', 'zeros')
    """
    _choice("mask_kind", kind, MASK_KINDS)
    if kind != "finite-min":
        return "zeros"
    if dtype is not None:
        from onlinesm.dtypes import resolve

        if resolve(dtype).name == "float16":
            return "any"
    return "uniform"


def to_mask_kind(bool_mask: Any, kind: str, dtype: Any) -> Any:
    """A bool mask (True = may attend) as the mask of ``kind`` for queries of ``dtype``.

    ``bool``: unchanged; ``additive``: 0 / -inf in ``dtype``; ``additive-f32``: 0 / -inf in
    float32; ``finite-min``: 0 / ``torch.finfo(dtype).min`` in ``dtype``. ``dtype`` is a torch
    dtype or a name ("bf16", "float16", ...).

    >>> import torch
    >>> to_mask_kind(torch.tensor([True, False]), "finite-min", "float16").tolist()
    [0.0, -65504.0]
    """
    import torch

    _choice("mask_kind", kind, MASK_KINDS)
    if not isinstance(bool_mask, torch.Tensor) or bool_mask.dtype != torch.bool:
        raise TypeError(f"to_mask_kind takes a bool torch tensor (True = may attend), got "
                        f"{getattr(bool_mask, 'dtype', type(bool_mask).__name__)}; convert it with "
                        "torch.as_tensor(mask, dtype=torch.bool)")
    if kind == "bool":
        return bool_mask
    if not isinstance(dtype, torch.dtype):
        from onlinesm.dtypes import resolve

        dtype = resolve(dtype).torch
    out_dtype = torch.float32 if kind == "additive-f32" else dtype
    fill = torch.finfo(dtype).min if kind == "finite-min" else float("-inf")
    return torch.zeros(bool_mask.shape, dtype=out_dtype, device=bool_mask.device).masked_fill(~bool_mask, fill)


def parse_kwarg(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` (a ``--kwarg`` flag) as (name, value); VALUE is JSON when it parses.

    >>> parse_kwarg("causal_align=bottom-right"), parse_kwarg("window_size=[-1, -1]")
    (('causal_align', 'bottom-right'), ('window_size', (-1, -1)))
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"--kwarg {text!r} must look like NAME=VALUE, e.g. causal_align=bottom-right")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return name, _tuples(value)


@dataclasses.dataclass(frozen=True)
class AdapterSpec:
    """How a kernel is called: convention, layout, fixed kwargs, mask kind, SDPA backend, target.

    Serialisable (:meth:`to_json` / :meth:`from_json`), so a replay file records it and calls the
    kernel the same way. ``target`` (``pkg.mod:fn`` or ``file.py:fn``) is where the kernel can
    be loaded from; None when unknown (a lambda, a local function).

    >>> s = AdapterSpec("flash_attn", kwargs={"window_size": (-1, -1)})
    >>> AdapterSpec.from_json(s.to_json()) == s, s.layout
    (True, 'bshd')
    """

    convention: str = "onlinesm"
    layout: str | None = None
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    mask_kind: str | None = None
    sdpa_backend: str | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        conv = _choice("convention", self.convention, CONVENTIONS)
        layout = _DEFAULT_LAYOUT[conv] if self.layout is None else _choice("layout", self.layout, LAYOUTS)
        kind = _DEFAULT_MASK_KIND[conv] if self.mask_kind is None else _choice("mask_kind", self.mask_kind, MASK_KINDS)
        if conv == "xformers" and kind == "bool":
            raise ValueError("mask_kind='bool' does not fit convention='xformers': attn_bias is added to "
                             "the scores; use 'additive', 'additive-f32' or 'finite-min'")
        if self.sdpa_backend is not None:
            _choice("sdpa_backend", self.sdpa_backend, SDPA_BACKENDS)
        if self.sdpa_backend is not None and conv != "sdpa":
            raise ValueError(f"sdpa_backend={self.sdpa_backend!r} applies to convention='sdpa' only, "
                             f"not {conv!r}; drop it or use convention='sdpa'")
        kwargs = dict(self.kwargs or {})
        clash = sorted(set(kwargs) & set(_SET_BY_ADAPTER[conv]))
        if clash:
            raise ValueError(f"kwargs {clash} are set by the {conv} adapter on every call "
                             f"({', '.join(_SET_BY_ADAPTER[conv])}); drop them from kwargs")
        try:
            json.dumps(kwargs, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(f"kwargs={kwargs!r} must be JSON data (str, number, bool, None, lists, "
                             f"dicts) so a replay file can record them: {err}") from None
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "mask_kind", kind)
        object.__setattr__(self, "kwargs", _tuples(kwargs))

    # -- what the convention implies --------------------------------------------------------------

    @property
    def returns_lse(self) -> bool | None:
        """Whether the convention can give lse (None: the onlinesm-convention kernel decides)."""
        return {"sdpa": False, "xformers": False, "flash_attn": True}.get(self.convention)

    @property
    def implied(self) -> dict[str, Any]:
        """Conventions and domain the calling convention implies, keyed like ``check_attention``'s
        keywords (defaults the user may override).

        ``fully_masked`` may be ``"uniform"`` (o = mean(V)), which the ``finite-min`` mask kind
        implies; ``empty_lse`` is a float.
        """
        c, kind = self.convention, self.mask_kind
        out: dict[str, Any] = {}
        if c == "onlinesm":
            if isinstance(self.kwargs.get("causal_align"), str):  # onlinesm's built-in kernel's keyword
                out["causal_align"] = self.kwargs["causal_align"]
            if kind == "finite-min":
                out["fully_masked"] = implied_fully_masked(kind)
        elif c == "sdpa":
            out.update(causal_align="top-left", allow_mask=True, allow_gqa=True,
                       fully_masked=implied_fully_masked(kind), dtypes=_ALL_DTYPES)
            if self.sdpa_backend in ("flash", "cudnn"):
                out["dtypes"] = ("bfloat16", "float16")  # the CUDA kernels (the CPU flash takes fp32 too)
            if self.sdpa_backend == "flash":
                out["allow_mask"] = False  # the CUDA flash kernel takes no attn_mask
        elif c == "flash_attn":
            out.update(causal_align="bottom-right", allow_mask=False, allow_gqa=True,
                       dtypes=("bfloat16", "float16"), fully_masked="zeros", empty_lse=float("inf"))
        else:  # xformers
            out.update(causal_align="top-left", allow_mask=True, allow_gqa=False, dtypes=_ALL_DTYPES)
            if kind == "finite-min":
                out["fully_masked"] = implied_fully_masked(kind)
        return out

    # -- JSON ---------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data, with ``"schema": "onlinesm.adapter/1"``."""
        return {"schema": SCHEMA, "convention": self.convention, "layout": self.layout,
                "kwargs": json.loads(json.dumps(dict(self.kwargs))), "mask_kind": self.mask_kind,
                "sdpa_backend": self.sdpa_backend, "target": self.target}

    def to_json(self) -> str:
        """The spec as a JSON string (:meth:`to_dict`, keys sorted)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> "AdapterSpec":
        """The spec from :meth:`to_json`'s string or :meth:`to_dict`'s dict."""
        if isinstance(data, (str, bytes)):
            data = json.loads(data)
        if not isinstance(data, Mapping):
            raise ValueError(f"an adapter spec must be a JSON object, got {type(data).__name__}")
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise ValueError(f"adapter spec schema {schema!r} is not {SCHEMA!r}; this onlinesm cannot read it")
        unknown = sorted(set(data) - {"schema", "convention", "layout", "kwargs", "mask_kind",
                                      "sdpa_backend", "target"})
        if unknown:
            raise ValueError(f"adapter spec has unknown fields {unknown}")
        return cls(convention=data.get("convention", "onlinesm"), layout=data.get("layout"),
                   kwargs=data.get("kwargs") or {}, mask_kind=data.get("mask_kind"),
                   sdpa_backend=data.get("sdpa_backend"), target=data.get("target"))

    def load(self) -> Callable[..., Any]:
        """The kernel named by ``target`` (torch's SDPA for ``sdpa`` without a target)."""
        target = self.target or (SDPA_TARGET if self.convention == "sdpa" else None)
        if target is None:
            raise ValueError(f"this {self.convention} adapter records no target; pass the kernel: "
                             "Adapted.from_json(data, fn=my_kernel)")
        from onlinesm.targets import load_target

        return load_target(target)


def _target_of(fn: Callable[..., Any]) -> str | None:
    """``module:qualname`` when ``fn`` can be imported again by that name, else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    if module == "torch._C._nn" or module.startswith("torch.nn.functional"):
        import torch.nn.functional as F

        if fn is F.scaled_dot_product_attention:
            return SDPA_TARGET
    return f"{module}:{qualname}"


class Adapted:
    """A kernel of another calling convention, callable with onlinesm's attention contract.

    ``adapted(q, k, v, *, mask=None, causal=False, scale=None[, return_lse=False])`` with q
    ``[B, H, Sq, D]`` and k, v ``[B, Hkv, Sk, D]`` returns ``o`` (``[B, H, Sq, D]``, the
    kernel's dtype and device) or ``(o, lse)``. Its signature (``inspect.signature``) lists
    ``return_lse`` only when the convention can give lse and ``mask`` only when it takes one,
    so the harness asks for exactly what the kernel can do. ``spec`` is the
    :class:`AdapterSpec`, ``implied`` its implied conventions, ``fn`` the wrapped kernel.
    """

    def __init__(self, fn: Callable[..., Any], spec: AdapterSpec) -> None:
        if not callable(fn):
            raise TypeError(f"the kernel must be callable, got {fn!r}")
        self.fn = fn
        self.spec = spec
        fn_name = getattr(fn, "__name__", None) or type(fn).__name__
        self.__name__ = fn_name if spec.convention == "onlinesm" else f"{fn_name}[{spec.convention}]"
        self.__doc__ = f"{fn_name} called through the {spec.convention} convention ({spec.to_json()})"
        if spec.convention == "onlinesm":
            takes_mask = accepts_keyword(fn, "mask") is not False
            takes_causal = accepts_keyword(fn, "causal") is not False
            self.returns_lse = accepts_keyword(fn, "return_lse") is True
        else:
            takes_mask, takes_causal = spec.convention != "flash_attn", True
            self.returns_lse = bool(spec.returns_lse)
        kw = inspect.Parameter.KEYWORD_ONLY
        pos = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter(n, pos) for n in ("q", "k", "v")]
        params += [inspect.Parameter(n, kw, default=d) for n, d, on in (
            ("mask", None, takes_mask), ("causal", False, takes_causal), ("scale", None, True),
            ("return_lse", False, self.returns_lse)) if on]
        self.__signature__ = inspect.Signature(params)

    @property
    def implied(self) -> dict[str, Any]:
        """See :attr:`AdapterSpec.implied`."""
        return self.spec.implied

    def to_json(self) -> str:
        """The spec as JSON (see :meth:`AdapterSpec.to_json`)."""
        return self.spec.to_json()

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any], fn: Callable[..., Any] | None = None) -> "Adapted":
        """The adapter a spec describes, calling ``fn`` or the spec's target."""
        spec = AdapterSpec.from_json(data)
        return cls(spec.load() if fn is None else fn, spec)

    def __repr__(self) -> str:
        return f"Adapted({self.__name__}, {self.spec.to_json()})"

    # -- the call ---------------------------------------------------------------------------------

    def __call__(self, q: Any, k: Any, v: Any, *, mask: Any = None, causal: bool = False,
                 scale: float | None = None, return_lse: bool = False) -> Any:
        import torch

        spec = self.spec
        if return_lse and not self.returns_lse:
            raise ValueError(f"return_lse=True, but the {spec.convention} convention of {self.__name__} "
                             "gives no lse; call it without return_lse")
        if mask is not None and spec.convention == "flash_attn":
            raise ValueError("the flash_attn convention takes no mask (flash_attn_func has no mask "
                             "argument); declare allow_mask=False (--no-mask) or use convention "
                             "'sdpa' or 'xformers'")
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
            raise TypeError(f"mask must be a bool tensor (True = may attend), got "
                            f"{getattr(mask, 'dtype', type(mask).__name__)}")
        bshd = spec.layout == "bshd"
        sent = [_to_layout(t, bshd) for t in (q, k, v)]
        try:
            with _pinned(spec.sdpa_backend):
                result = getattr(self, "_call_" + spec.convention)(
                    *sent, mask=mask, causal=bool(causal), scale=scale, return_lse=return_lse)
        finally:
            if bshd:  # an in-place write by the kernel stays visible to the caller
                for original, copy in zip((q, k, v), sent):
                    if isinstance(original, torch.Tensor) and isinstance(copy, torch.Tensor):
                        original.copy_(copy.transpose(1, 2))
        if not return_lse:
            return self._from_layout(result, q, bshd)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return result  # not (o, lse): the harness reports what came back
        return self._from_layout(result[0], q, bshd), result[1]

    def _from_layout(self, out: Any, q: Any, bshd: bool) -> Any:
        """The output in [B, H, Sq, D]; a tensor of another shape than the layout's is an error."""
        import torch

        if not isinstance(out, torch.Tensor) or not isinstance(q, torch.Tensor):
            return out  # the harness reports the type
        b, h, sq, d = q.shape
        expected = [b, sq, h, d] if bshd else [b, h, sq, d]
        if list(out.shape) != expected:
            name = "[B, S, H, D]" if bshd else "[B, H, S, D]"
            other = "bhsd" if bshd else "bshd"
            raise ValueError(f"{self.__name__} returned o of shape {list(out.shape)}, expected {expected} "
                             f"= {name} in layout {self.spec.layout!r}; if the kernel returns "
                             f"{'[B, H, S, D]' if bshd else '[B, S, H, D]'}, use layout={other!r}")
        return out.transpose(1, 2).contiguous() if bshd else out

    def _keywords(self, q: Any, *, mask: tuple[str, Any], causal: tuple[str, bool], scale: Any,
                  fixed: bool = True) -> dict[str, Any]:
        """The call's keywords in this convention's names: the fixed kwargs (``fixed``), the mask
        in the declared kind, the causal flag and the scale, each only when given."""
        kwargs: dict[str, Any] = dict(self.spec.kwargs) if fixed else {}
        if mask[1] is not None:
            kwargs[mask[0]] = to_mask_kind(mask[1], self.spec.mask_kind, q.dtype)
        if causal[1]:
            kwargs[causal[0]] = True
        if scale is not None:
            kwargs["scale"] = scale
        return kwargs

    def _call_onlinesm(self, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: Any,
                       return_lse: bool) -> Any:
        kwargs = self._keywords(q, mask=("mask", mask), causal=("causal", causal), scale=scale)
        if return_lse:
            kwargs["return_lse"] = True
        return self.fn(q, k, v, **kwargs)

    def _call_sdpa(self, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: Any,
                   return_lse: bool) -> Any:
        kwargs: dict[str, Any] = dict(self.spec.kwargs)
        heads_dim = 2 if self.spec.layout == "bshd" else 1
        if mask is not None and causal:
            # SDPA refuses attn_mask with is_causal: send the combined mask (top-left)
            mask, causal = mask & _tril(q, k, heads_dim), False
        kwargs.update(self._keywords(q, mask=("attn_mask", mask), causal=("is_causal", causal),
                                     scale=scale, fixed=False))
        if k.shape[heads_dim] != q.shape[heads_dim]:
            kwargs["enable_gqa"] = True
        return self.fn(q, k, v, **kwargs)

    def _call_flash_attn(self, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: Any,
                         return_lse: bool) -> Any:
        kwargs: dict[str, Any] = dict(self.spec.kwargs)
        if scale is not None:
            kwargs["softmax_scale"] = scale
        if causal:
            kwargs["causal"] = True
        if return_lse:
            kwargs["return_attn_probs"] = True
        result = self.fn(q, k, v, **kwargs)
        if not return_lse:
            return result
        if not isinstance(result, (tuple, list)) or len(result) < 2:
            raise ValueError(f"{self.__name__} returned {type(result).__name__} with return_attn_probs=True, "
                             "expected (out, softmax_lse, S_dmask) as flash_attn_func does")
        return result[0], result[1]

    def _call_xformers(self, q: Any, k: Any, v: Any, *, mask: Any, causal: bool, scale: Any,
                       return_lse: bool) -> Any:
        import torch

        kwargs: dict[str, Any] = dict(self.spec.kwargs)
        heads_dim = 2 if self.spec.layout == "bshd" else 1
        b, h = q.shape[0], q.shape[heads_dim]
        sq, sk = q.shape[3 - heads_dim], k.shape[3 - heads_dim]
        if k.shape[heads_dim] != h:  # BMHK takes equal heads: repeat each K/V head for its group
            k, v = (t.repeat_interleave(h // t.shape[heads_dim], dim=heads_dim) for t in (k, v))
        if causal:
            causal_mask = _tril(q, k, heads_dim)
            mask = causal_mask if mask is None else mask & causal_mask
        if mask is not None:
            bias = to_mask_kind(torch.broadcast_to(mask, (b, h, sq, sk)), self.spec.mask_kind, q.dtype)
            # xformers wants the bias rows 8-aligned: pad the storage, then slice (its own recipe)
            padded = torch.empty((b, h, sq, -(-sk // 8) * 8), dtype=bias.dtype, device=bias.device)
            padded[..., :sk] = bias
            kwargs["attn_bias"] = padded[..., :sk]
        if scale is not None:
            kwargs["scale"] = scale
        return self.fn(q, k, v, **kwargs)


def _tril(q: Any, k: Any, heads_dim: int) -> Any:
    """Top-left causal visibility [Sq, Sk]: key j visible to query i when j <= i."""
    import torch

    sq, sk = q.shape[3 - heads_dim], k.shape[3 - heads_dim]
    return torch.ones((sq, sk), dtype=torch.bool, device=q.device).tril()


def _to_layout(t: Any, bshd: bool) -> Any:
    """[B, H, S, D] -> [B, S, H, D] (a contiguous copy, as callers of such kernels pass)."""
    import torch

    if not bshd or not isinstance(t, torch.Tensor):
        return t
    return t.transpose(1, 2).contiguous()


@contextlib.contextmanager
def _pinned(backend: str | None) -> Any:
    if backend is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[backend])):
        yield


def adapt(
    fn: Callable[..., Any] | None = None,
    *,
    convention: str = "onlinesm",
    layout: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    mask_kind: str | None = None,
    sdpa_backend: str | None = None,
    target: str | None = None,
) -> Adapted:
    """Wrap ``fn`` (called in ``convention``) into a callable with onlinesm's attention contract.

    - ``convention``: ``"onlinesm"`` (the default: only ``layout``, ``kwargs`` and
      ``mask_kind`` apply), ``"sdpa"`` (``fn`` defaults to torch's
      ``scaled_dot_product_attention``), ``"flash_attn"`` (``flash_attn_func``) or
      ``"xformers"`` (``memory_efficient_attention``).
    - ``layout``: ``"bhsd"`` or ``"bshd"`` (the kernel's q/k/v/o are [B, S, H, D]); defaults to
      the convention's (bshd for flash_attn and xformers).
    - ``kwargs``: fixed keyword arguments passed on every call (JSON data), e.g.
      ``{"causal_align": "bottom-right"}``.
    - ``mask_kind``: ``"bool"`` (default; ``"additive"`` for xformers), ``"additive"``,
      ``"additive-f32"`` or ``"finite-min"``.
    - ``sdpa_backend``: ``"flash"``, ``"cudnn"``, ``"efficient"`` or ``"math"``: the call runs
      inside ``torch.nn.attention.sdpa_kernel`` with that one backend.
    - ``target``: where the kernel can be imported from, recorded for replays (found from
      ``fn`` when it is a module-level function).

    >>> from onlinesm.check import check_attention                      # doctest: +SKIP
    >>> a = adapt(flash_attn_func, convention="flash_attn")             # doctest: +SKIP
    >>> check_attention(a, **{**a.implied, "dtypes": ["bfloat16"]})     # doctest: +SKIP
    """
    if fn is None:
        if convention != "sdpa":
            raise ValueError(f"adapt() needs the kernel for convention={convention!r}; only "
                             "convention='sdpa' defaults to torch's scaled_dot_product_attention")
        import torch.nn.functional as F

        fn = F.scaled_dot_product_attention
    spec = AdapterSpec(convention=convention, layout=layout, kwargs=dict(kwargs or {}),
                       mask_kind=mask_kind, sdpa_backend=sdpa_backend,
                       target=target if target is not None else _target_of(fn))
    return Adapted(fn, spec)


def _measure() -> str:  # pragma: no cover - a measurement, printed by ``python -m onlinesm.adapters``
    """The SDPA backend and mask-kind table of the module docstring, measured on this machine."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    mask = torch.ones(1, 1, 4, 6, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 sees no key
    lines = [f"torch {torch.__version__}; q [1, 2, 4, 16], k, v [1, 2, 6, 16], query 1 fully masked"]
    for backend in SDPA_BACKENDS:
        for dtype in _ALL_DTYPES:
            for kind in MASK_KINDS:
                qd, kd, vd = (t.to(getattr(torch, dtype)) for t in (q, k, v))
                try:
                    with _pinned(backend):
                        o = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=to_mask_kind(mask, kind, qd.dtype))
                except RuntimeError as err:
                    lines.append(f"{backend:9} {dtype:8} {kind:12} refused: {type(err).__name__}: {err}")
                    continue
                row = o[0, :, 1].double()
                mean_v = vd.double().mean(2)[0]
                lines.append(f"{backend:9} {dtype:8} {kind:12} fully masked row: max|o| {row.abs().max():.3g}, "
                             f"max|o - mean(V)| {(row - mean_v).abs().max():.3g}, "
                             f"nan {bool(row.isnan().any())}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(_measure())
