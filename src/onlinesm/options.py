"""The command-line options, once: one table that ``check``, ``report``, ``replay`` and the
pytest plugin read.

Each :class:`Option` names its flag, the keyword of :func:`onlinesm.check.check` it sets (a field
of :class:`~onlinesm.declarations.Conventions`, :class:`~onlinesm.declarations.Numerics`,
:class:`~onlinesm.declarations.Domain` or :class:`~onlinesm.declarations.RunOptions`, or an
adapter keyword), how its text is parsed, and the commands that take it. A flag the user does
not give sets nothing: the records' defaults apply, and so do the conventions an adapter implies
(``--convention flash_attn`` means bottom-right causal unless ``--causal-align`` says otherwise).

Adding a declaration: a field in :mod:`onlinesm.declarations`, a row here, and its use where it
is checked (docs/INTERNALS.md).

Example:
    >>> import argparse
    >>> p = argparse.ArgumentParser(); add_options(p, "check")
    >>> sorted(keywords(p.parse_args(["--fully-masked", "nan", "--max-len", "64"]), "check").items())
    [('fully_masked', 'nan'), ('max_len', 64)]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable

__all__ = ["Option", "OPTIONS", "add_options", "keywords", "as_flags", "refuse_moot",
           "check_op", "add_pytest_options", "pytest_keywords"]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    try:
        return [int(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, "
                                         "e.g. 64,128") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer, e.g. 64")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 60")
    return value


def _exp_class(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _p_dtype(text: str) -> str | None:
    return None if text == "none" else text


def _skip(text: str) -> tuple[str, str]:
    name, sep, reason = text.partition("=")
    if not sep or not reason.strip():
        raise argparse.ArgumentTypeError(f"--skip {text!r} needs a reason: --skip PROPERTY=REASON")
    return name.strip(), reason.strip()


def _refusal(text: str) -> str:
    if ":" not in text:
        raise argparse.ArgumentTypeError(f"--unsupported {text!r} must look like ExceptionType:regex, "
                                         "e.g. 'RuntimeError:No available kernel'")
    return text


def _kwarg(text: str) -> tuple[str, Any]:
    from onlinesm.adapters import parse_kwarg

    try:
        return parse_kwarg(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


@dataclasses.dataclass(frozen=True)
class Option:
    """One command-line option: ``flag`` sets keyword ``key`` on the commands in ``commands``.

    ``kind``: "value" (parsed by ``parse``), "flag" (store ``const`` when given), "append"
    (repeatable, collected in a list), "map" (repeatable NAME=VALUE pairs, collected in a dict).
    """

    flag: str
    key: str
    help: str
    commands: tuple[str, ...]
    kind: str = "value"
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    const: Any = True
    metavar: str | None = None
    pytest: bool = False  # also an option of the pytest plugin, as --onlinesm-FLAG


_C, _R, _P, _T = "check", "report", "replay", "pytest"
_CR = (_C, _R)

OPTIONS: tuple[Option, ...] = (
    # where and how hard
    Option("--device", "device", "cpu or cuda [cuda when available]", (_C, _R, _P), choices=("cpu", "cuda"), pytest=True),
    Option("--backend", "backend", "what the kernel takes: torch or numpy [torch]", _CR, choices=("torch", "numpy")),
    Option("--profile", "profile", "quick, ci or thorough (onlinesm-quick etc. too) [quick]", (_C,), pytest=True),
    Option("--max-examples", "max_examples", "generated examples per property and dtype (the "
           "explicit inputs of each family come on top: a table may count more)", (_C,),
           parse=_positive_int, metavar="N", pytest=True),
    Option("--seed", "seed", "make the run reproducible", (_C,), parse=int, metavar="N", pytest=True),
    Option("--deadline", "deadline", "seconds one kernel call may take before it counts as a hang "
           "[cuda 30, cpu 120]", (_C, _P), parse=_seconds, metavar="SECONDS", pytest=True),
    Option("--compile-allowance", "compile_allowance", "extra seconds for the first call of each "
           "compiled variant [cuda 240, cpu 0]", (_C,), parse=_seconds, metavar="SECONDS"),
    Option("--strict", "strict", "fail bf16 misses of one ulp that Triton's interpreter may cause",
           (_C,), kind="flag"),
    Option("--no-statistical", "statistical", "skip accuracy_statistical (typical error vs a "
           "simulated correct kernel, once per dtype)", (_C,), kind="flag", const=False),
    Option("--baseline", "baseline", "regression mode: compare the kernel's RMSE with this older "
           "kernel's (package.module:function or path/to/file.py:function)", (_C,), metavar="OLD_TARGET"),
    Option("--regression-factor", "regression_factor", "with --baseline: fail when the RMSE ratio "
           "new/old exceeds this with confidence [1.25]", (_C,), parse=float, metavar="F"),
    Option("--properties", "properties", "only these properties (comma-separated)", (_C,), parse=_csv),
    Option("--skip", "skip", "waive a property, with the reason shown", (_C,), kind="map",
           parse=_skip, metavar="PROPERTY=REASON"),
    # the domain: nothing outside it is generated
    Option("--dtypes", "dtypes", "dtypes to generate [float32,bfloat16,float16]", _CR, parse=_csv),
    Option("--families", "families", "only these strategy families", (_C,), parse=_csv),
    Option("--allow-nonfinite", "allow_nonfinite", "also generate rows holding NaN or +inf", (_C,), kind="flag"),
    Option("--min-len", "min_len", "softmax: shortest row [1]", _CR, parse=_positive_int),
    Option("--max-len", "max_len", "softmax: longest row", _CR, parse=_positive_int),
    Option("--max-rows", "max_rows", "softmax: rows per batch [16]", (_C,), parse=_positive_int),
    Option("--len-multiple", "len_multiple", "softmax: row lengths are multiples of M", _CR,
           parse=_positive_int, metavar="M"),
    Option("--head-dims", "head_dims", "attention: head dims, e.g. 64,128", (_C,), parse=_ints),
    Option("--max-batch", "max_batch", "attention: largest batch", (_C,), parse=_positive_int),
    Option("--max-heads", "max_heads", "attention: most heads", (_C,), parse=_positive_int),
    Option("--min-seq-q", "min_seq_q", "attention: fewest queries", (_C,), parse=_positive_int),
    Option("--max-seq-q", "max_seq_q", "attention: most queries", (_C,), parse=_positive_int),
    Option("--min-seq-k", "min_seq_k", "attention: fewest keys", (_C,), parse=_positive_int),
    Option("--max-seq-k", "max_seq_k", "attention: most keys", (_C,), parse=_positive_int),
    Option("--seq-multiple", "seq_multiple", "attention: Sq and Sk are multiples of M", _CR,
           parse=_positive_int, metavar="M"),
    Option("--allow-gqa", "allow_gqa", "attention: grouped-query heads (Hkv < H)", _CR, kind="flag"),
    Option("--no-mask", "allow_mask", "attention: the kernel takes no mask", _CR, kind="flag", const=False),
    Option("--no-causal", "allow_causal", "attention: the kernel has no causal mode", _CR, kind="flag", const=False),
    Option("--same-seq", "same_seq", "attention: the kernel needs Sq == Sk", _CR, kind="flag"),
    Option("--unsupported", "unsupported", "a declared refusal: inputs the kernel refuses with this "
           "exception are outside its domain (repeatable)", _CR, kind="append", parse=_refusal,
           metavar="ExceptionType:regex"),
    # conventions
    Option("--fully-masked", "fully_masked", "a row with no finite input / no visible key gives",
           _CR, choices=("zeros", "nan", "uniform", "any")),
    Option("--nonfinite", "nonfinite", "a row holding NaN or +inf gives NaN, or anything", _CR,
           choices=("nan", "any")),
    Option("--causal-align", "causal_align", "attention: causal alignment", _CR,
           choices=("top-left", "bottom-right")),
    Option("--lse-base", "lse_base", "attention: base of lse", _CR, choices=("e", "2")),
    Option("--empty-lse", "empty_lse", "attention: lse of a fully masked row", _CR,
           parse=float, choices=None, metavar="-inf|inf"),
    Option("--require", "batch_invariant", "extra guarantees to check: batch-invariant", (_C,),
           parse=lambda t: _require(t)),
    Option("--nondeterministic", "deterministic", "waive the bitwise determinism check", (_C,),
           kind="flag", const=False),
    # numerics: they set the bound's terms
    Option("--accumulate", "accumulate", "the kernel's accumulation dtype [float32]", _CR),
    Option("--exp", "exp", "exp accuracy class: fast (tl.exp), exp2, accurate, exact, or ulps [fast]",
           _CR, parse=_exp_class),
    Option("--allow-tf32", "allow_tf32", "fp32 matmuls may use tf32", _CR, kind="flag"),
    Option("--p-dtype", "p_dtype", "attention: dtype P is rounded to before P·V, 'input' or 'none' "
           "[input]", _CR, parse=_p_dtype),
    Option("--tier", "tier", "which bound decides: worst-case (rigorous, sums grow like n·u) or "
           "probabilistic (sums like λ·sqrt(n)·u, holds with probability 1-δ per sum) [worst-case]",
           _CR, choices=("worst-case", "probabilistic")),
    Option("--delta", "delta", "with --tier probabilistic: failure probability per summation "
           "[1e-6]", _CR, parse=float, metavar="P"),
    # calling conventions (attention)
    Option("--convention", "convention", "the kernel's calling convention [onlinesm]", _CR,
           choices=("onlinesm", "sdpa", "flash_attn", "xformers")),
    Option("--sdpa-backend", "sdpa_backend", "with --convention sdpa: pin this backend", _CR,
           choices=("flash", "cudnn", "efficient", "math")),
    Option("--layout", "layout", "tensor layout the kernel takes: bhsd or bshd", _CR,
           choices=("bhsd", "bshd")),
    Option("--kwarg", "fixed_kwargs", "a keyword argument passed on every call (repeatable)", _CR,
           kind="map", parse=_kwarg, metavar="NAME=VALUE"),
    Option("--mask-kinds", "mask_kinds", "mask encodings to check, each in its own run: bool, "
           "additive, additive-f32, finite-min", (_C,), parse=_csv),
)


def _require(text: str) -> bool:
    unknown = set(_csv(text)) - {"batch-invariant"}
    if unknown:
        raise argparse.ArgumentTypeError(f"--require {','.join(sorted(unknown))} is not a guarantee "
                                         "onlinesm checks; use batch-invariant")
    return True


def _dest(opt: Option) -> str:
    return "opt_" + opt.flag.lstrip("-").replace("-", "_")


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Add every option of ``command`` to ``parser``; unset options stay None."""
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        kw: dict[str, Any] = dict(dest=_dest(opt), help=opt.help, default=None)
        if opt.kind == "flag":
            kw.update(action="store_const", const=opt.const)
        else:
            metavar = opt.metavar or (None if opt.choices else opt.flag.lstrip("-").upper().replace("-", "_"))
            kw.update(action="append" if opt.kind in ("append", "map") else "store",
                      type=opt.parse, choices=opt.choices, metavar=metavar)
        parser.add_argument(opt.flag, **kw)


def keywords(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The keywords of the options the user gave on ``command`` (``{"fully_masked": "nan"}``)."""
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        if command not in opt.commands:
            continue
        value = getattr(args, _dest(opt), None)
        if value is None:
            continue
        out[opt.key] = dict(value) if opt.kind == "map" else value
    return out


def as_flags(message: str) -> str:
    """An API error message in the CLI's words: each ``key=`` of an option taking a value
    becomes its flag (``min_seq_q=10 is above max_seq_q=5`` -> ``--min-seq-q 10 is above
    --max-seq-q 5``); a message that names the API itself ("in the API") or a config file's
    entry (``onlinesm.toml: [kernels.a] dtypes='x' ...``, in the file's own words) is left as
    it is.

    >>> as_flags("regression_factor=-1.0 must be a number >= 1")
    '--regression-factor -1.0 must be a number >= 1'
    """
    if "in the API" in message or ".toml:" in message:
        return message
    flags = {o.key: o.flag for o in OPTIONS if o.kind != "flag"}
    pattern = re.compile(r"(?<![\w.])(?:domain\.)?(" + "|".join(map(re.escape, flags)) + r")=")
    return pattern.sub(lambda m: flags[m.group(1)] + " ", message)


def refuse_moot(kw: dict[str, Any]) -> None:
    """ValueError (one line) for an option given beside one that makes it do nothing, so that
    a user who believes it applied learns it did not: ``--mask-kinds`` with ``--no-mask``,
    ``--causal-align`` with ``--no-causal``, ``--delta`` without ``--tier probabilistic``,
    ``--regression-factor`` without ``--baseline``."""
    moot = (("mask_kinds", kw.get("allow_mask") is False, "--mask-kinds",
             "--no-mask says the kernel takes no mask; drop one of them"),
            ("causal_align", kw.get("allow_causal") is False, "--causal-align",
             "--no-causal says the kernel has no causal mode; drop one of them"),
            ("delta", kw.get("tier") != "probabilistic", "--delta",
             "it is the probabilistic tier's failure probability; add --tier probabilistic"),
            ("regression_factor", "baseline" not in kw, "--regression-factor",
             "it applies to the comparison with --baseline OLD_TARGET; add that"))
    for key, idle, flag, why in moot:
        if key in kw and idle:
            raise ValueError(f"{flag} does nothing here: {why}")


def check_op(op: str | None, convention: str | None) -> str:
    """The operation ``onlinesm check`` tests: ``--op``, else attention where a ``--convention``
    other than onlinesm's names an attention layout; a one-line UsageError where neither says.

    >>> check_op(None, "sdpa")
    'attention'
    """
    from onlinesm.errors import UsageError

    if op is not None:
        return op
    if convention not in (None, "onlinesm"):
        return "attention"
    raise UsageError("--op softmax or --op attention is needed (or a --convention, which "
                     "implies attention)")


def add_pytest_options(group: Any) -> None:
    """The plugin's options: the shared ones marked ``pytest``, spelled ``--onlinesm-FLAG``."""
    for opt in OPTIONS:
        if opt.pytest:
            group.addoption("--onlinesm-" + opt.flag.lstrip("-"), dest="onlinesm_" + _dest(opt),
                            default=None, help=opt.help, type=opt.parse, choices=opt.choices)


def pytest_keywords(config: Any) -> dict[str, Any]:
    """The keywords of the plugin options given on pytest's command line."""
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.pytest:
            value = config.getoption("onlinesm_" + _dest(opt), None)
            if value is not None:
                out[opt.key] = value
    return out
