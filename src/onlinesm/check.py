"""``check_softmax`` and ``check_attention``: the property suites, as two faces of one engine.

Both take the kernel and flat keywords, which :func:`onlinesm.declarations.split_keywords`
sorts into the declarations (:class:`~onlinesm.declarations.Conventions` with its
:class:`~onlinesm.declarations.Numerics`, :class:`~onlinesm.declarations.Domain`) and the run's
:class:`~onlinesm.declarations.RunOptions`; records may also be passed whole
(``conventions=``, ``domain=``, ``options=``). The driver is :func:`onlinesm.engine.run_check`.

Example:
    >>> import torch, onlinesm
    >>> result = onlinesm.check_softmax(lambda x: torch.softmax(x, -1), fully_masked="nan",
    ...                                 raise_on_failure=False)            # doctest: +SKIP
    >>> print(result.table())                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from onlinesm.declarations import PROFILES, Conventions, Domain, RunOptions, split_keywords
from onlinesm.engine import STATE_DIR, run_check
from onlinesm.errors import UsageError
from onlinesm.results import CheckResult, Failure, PropertyOutcome

__all__ = [
    "check_softmax",
    "check_attention",
    "check",
    "CheckResult",
    "PropertyOutcome",
    "Failure",
    "UsageError",
    "PROFILES",
    "STATE_DIR",
    "profile_name",
]

#: The attention defaults that differ from the records' own: P is rounded to the input dtype
#: before P·V, as FlashAttention kernels do.
_ATTENTION_DEFAULTS = {"p_dtype": "input"}


def profile_name(profile: str) -> str:
    """The registered name of a profile: ``"quick"`` and ``"onlinesm-quick"`` are the same.

    >>> profile_name("quick"), profile_name("onlinesm-thorough")
    ('onlinesm-quick', 'onlinesm-thorough')
    """
    try:
        return RunOptions(profile=profile).profile
    except ValueError as err:
        raise UsageError(str(err)) from None


def check(fn: Callable[..., Any] | None, op: str, *, conventions: Conventions | None = None,
          domain: Domain | None = None, options: RunOptions | None = None, name: str | None = None,
          target: str | None = None, raise_on_failure: bool = True,
          progress: Callable[[str], None] | None = None, **keywords: Any) -> CheckResult:
    """Run ``op``'s suite on ``fn``; keywords fill the records (or override the given ones).

    Attention kernels of another calling convention take ``convention`` ("sdpa", "flash_attn",
    "xformers"), ``layout`` ("bshd"), ``fixed_kwargs`` (always passed), ``mask_kind`` ("bool",
    "additive", "additive-f32", "finite-min") and ``sdpa_backend``, or a whole ``adapter``
    (:class:`onlinesm.adapters.AdapterSpec`); the conventions the calling convention implies
    (flash_attn: bottom-right causal, no mask, bf16/fp16) are defaults that keywords override.

    Raises ``AssertionError`` with the full report when a property is falsified (unless
    ``raise_on_failure=False``), and :class:`UsageError` when nothing could be tested.
    """
    old, old_name = _baseline_kernel(keywords.pop("baseline", None), op, keywords)
    fn, keywords = _adapted(fn, op, target, keywords)
    if op == "attention" and conventions is None and not any(
            k in keywords for k in ("numerics", "p_dtype")):
        keywords = {**_ATTENTION_DEFAULTS, **keywords}
    try:
        conv, dom, opts = split_keywords(keywords)
        conv = _merged(conventions, conv, keywords, Conventions)
        dom = _merged(domain, dom, keywords, Domain)
        opts = _merged(options, opts, keywords, RunOptions)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return run_check(fn, op, conv, dom, opts, name=name, target=target,
                     raise_on_failure=raise_on_failure, progress=progress, baseline=old,
                     baseline_name=old_name)


def _baseline_kernel(baseline: Any, op: str, keywords: dict[str, Any]
                     ) -> tuple[Callable[..., Any] | None, str | None]:
    """Regression mode's older kernel: a callable or a target string, in the same calling
    convention as the kernel under test."""
    if baseline is None:
        return None, None
    name = baseline if isinstance(baseline, str) else getattr(baseline, "__name__", "baseline")
    if isinstance(baseline, str):
        from onlinesm.targets import TargetError, load_target

        try:
            baseline = load_target(baseline)
        except TargetError as err:
            raise UsageError(f"baseline={name!r}: {err}") from None
    if not callable(baseline):
        raise UsageError(f"baseline={baseline!r} is not a kernel; pass the older kernel or its "
                         "target, e.g. baseline='old_kernels.py:softmax'")
    return _adapted(baseline, op, None, dict(keywords))[0], name


#: Keywords that choose how the kernel is called (:mod:`onlinesm.adapters`), not what it declares.
_ADAPTER_KEYS = ("convention", "layout", "fixed_kwargs", "mask_kind", "sdpa_backend")


def _adapted(fn: Callable[..., Any] | None, op: str, target: str | None,
             keywords: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The kernel wrapped in its calling convention's adapter, and the keywords with the
    conventions that convention implies filled in where the user gave none."""
    from onlinesm import adapters

    keywords = dict(keywords)
    spec = keywords.pop("adapter", None)
    chosen = {k: keywords.pop(k) for k in _ADAPTER_KEYS if k in keywords}
    if spec is None and not chosen:
        if fn is None:
            raise UsageError("no kernel given; pass the kernel, or convention='sdpa' for torch's SDPA")
        return fn, keywords
    if op != "attention":
        if spec is None and set(chosen) == {"fixed_kwargs"} and fn is not None:
            import functools  # a softmax with fixed keywords: torch.softmax with dim=-1

            wrapped = functools.wraps(fn)(functools.partial(fn, **chosen["fixed_kwargs"]))
            return wrapped, keywords
        raise UsageError(f"{' and '.join(chosen) or 'adapter'} "
                         f"{'applies' if len(chosen) <= 1 else 'apply'} to attention kernels only "
                         f"(a softmax kernel takes --kwarg only), not op={op!r}")
    try:
        if spec is not None:
            adapted = adapters.Adapted.from_json(spec.to_dict() if hasattr(spec, "to_dict") else spec, fn=fn)
        else:
            adapted = adapters.adapt(fn, convention=chosen.get("convention", "onlinesm"),
                                     layout=chosen.get("layout"), kwargs=chosen.get("fixed_kwargs"),
                                     mask_kind=chosen.get("mask_kind"),
                                     sdpa_backend=chosen.get("sdpa_backend"), target=target)
    except (ValueError, TypeError) as err:
        raise UsageError(str(err)) from None
    return adapted, {**adapted.implied, **keywords}


def _merged(given: Any, built: Any, keywords: dict[str, Any], cls: type) -> Any:
    """A record passed whole, with the flat keywords that belong to it applied on top."""
    if given is None:
        return built
    own = {f.name for f in dataclasses.fields(cls)}
    return dataclasses.replace(given, **{k: getattr(built, k) for k in keywords if k in own})


def check_softmax(fn: Callable[..., Any], **keywords: Any) -> CheckResult:
    """Run the softmax property suite on ``fn(x) -> softmax(x, dim=-1)``.

    Keywords (docs/conventions.md has them all, with defaults):

    - conventions: ``fully_masked`` ("zeros", "nan" like torch.softmax, or "any"),
      ``nonfinite`` ("nan" or "any"), ``batch_invariant``, ``deterministic``;
    - numerics (the bound's terms): ``accumulate``, ``exp``;
    - domain: ``dtypes``, ``min_len``, ``max_len``, ``max_rows``, ``families``,
      ``allow_nonfinite``, ``unsupported=[(RuntimeError, "regex")]`` (declared refusals);
    - run: ``profile`` ("quick", "ci", "thorough"), ``max_examples``, ``seed``, ``device``,
      ``backend``, ``deadline`` (seconds a call may take: 30 on a GPU, 120 on the CPU),
      ``compile_allowance``, ``strict``, ``properties``, ``skip={"property": "reason"}``,
      ``database``, ``save_failures``, ``statistical`` (False: no ``accuracy_statistical``),
      ``regression_factor``;
    - ``baseline``: an older kernel (or its target string): adds the ``regression``
      property, which fails when this kernel's RMSE is ``regression_factor`` (1.25) times
      the old one's with confidence;
    - ``name``, ``target``, ``raise_on_failure``, ``progress``; or whole records:
      ``conventions=``, ``domain=``, ``options=``.

    Raises ``AssertionError`` with the full report when a property is falsified (unless
    ``raise_on_failure=False``), and :class:`UsageError` when nothing could be tested (a bad
    option, ``device="cuda"`` without CUDA, a kernel that fails on the simplest input).

    >>> import torch, onlinesm
    >>> onlinesm.check_softmax(lambda x: torch.softmax(x, -1), fully_masked="nan").passed  # doctest: +SKIP
    True
    """
    return check(fn, "softmax", **keywords)


def check_attention(fn: Callable[..., Any], **keywords: Any) -> CheckResult:
    """Run the attention property suite on ``fn(q, k, v, *, mask, causal, scale)``.

    The kernel returns ``o`` or ``(o, lse)``; when it accepts ``return_lse`` the harness asks
    for lse and checks it. Keywords as :func:`check_softmax`, plus conventions
    ``causal_align``, ``lse_base``, ``empty_lse``; numerics ``allow_tf32``, ``p_dtype``
    ("input", the default: P is rounded to the input dtype before P·V; None: kept in float32);
    domain ``head_dims``, ``max_batch``, ``max_heads``, ``min_seq_q``, ``max_seq_q``,
    ``min_seq_k``, ``max_seq_k``, ``seq_multiple``, ``allow_mask``, ``allow_causal``,
    ``allow_gqa``, ``same_seq``; calling conventions ``convention``, ``layout``,
    ``fixed_kwargs``, ``mask_kind``, ``sdpa_backend`` (see :func:`check`).

    >>> import onlinesm
    >>> onlinesm.check_attention(my_attention, causal_align="bottom-right")  # doctest: +SKIP
    """
    return check(fn, "attention", **keywords)
