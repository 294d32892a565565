"""The check driver: one engine behind ``check_softmax``, ``check_attention``, the CLI and pytest.

The flow (docs/INTERNALS.md): a strategy draws an adversarial input inside the declared
:class:`~onlinesm.declarations.Domain`; the harness calls the kernel under the contract; each
property measures against the oracle under the tolerance model
(:class:`~onlinesm.declarations.Numerics`) and the declared
:class:`~onlinesm.declarations.Conventions`. Hypothesis drives one ``@given`` per (property,
dtype), so every falsified property is reported; a failure is reduced and saved
(:mod:`onlinesm.failures`) for ``onlinesm replay``.

What the engine promises, beyond the properties:

- the first call is the simplest input *inside* the domain (its first dtype, a declared head
  dim, lengths in range, no mask when masks are not supported); if it fails, nothing can be
  tested and :class:`~onlinesm.errors.UsageError` says so in one line;
- a declared refusal (``Domain.unsupported``) rejects the input, as Hypothesis's ``reject()``
  does: counted per property and family, never a failure; a property that nothing reached, or
  that cannot be tested inside the domain, is ``n/a`` with the reason; when every property is
  n/a, nothing could be tested (UsageError);
- a contract breach met in several properties is reported once; a hang ends the run;
- when a convention property fails, the failing input is re-run under the other conventions,
  and one that holds is named ("the output matches causal_align='top-left'");
- after the Hypothesis runs of a dtype, ``accuracy_statistical`` judges the kernel's typical
  error on a fixed seeded sample (``RunOptions.statistical``), and with ``baseline=`` the
  ``regression`` property compares it with an older kernel
  (:mod:`onlinesm.statistical_check`).

Example:
    >>> from onlinesm.declarations import Conventions, Domain, RunOptions
    >>> result = run_check(my_softmax, "softmax", Conventions(fully_masked="nan"), Domain(),
    ...                    RunOptions(seed=0))                                  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from hypothesis import HealthCheck, Verbosity, example, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import UnsatisfiedAssumption, Unsatisfiable

from onlinesm.declarations import PROFILES, Conventions, Domain, RunOptions
from onlinesm.dtypes import resolve
from onlinesm.errors import UsageError
from onlinesm.failures import shrink_and_save
from onlinesm.harness import (AttentionInputs, Kernel, KernelError, accepts_keyword,
                              positional_arguments)
from onlinesm.properties import ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES, PropertyFailure, Untested
from onlinesm.results import CheckResult, Failure, PropertyOutcome

__all__ = ["run_check", "simplest_input", "first_call", "inside", "STATE_DIR"]

#: Settings profiles, derived from Hypothesis's defaults rather than from whatever profile the
#: user's test run loaded, so a seeded onlinesm run draws the same examples everywhere.
for _name, _n in PROFILES.items():
    settings.register_profile(_name, parent=settings.get_profile("default"), max_examples=_n,
                              deadline=None)

#: onlinesm's own state: Hypothesis's example database per kernel, failures, logs.
STATE_DIR = Path(".onlinesm")

#: Contract breaches that still leave a kernel testable: reported by the properties, not exit 2.
_TESTABLE = ("modified_input", "dtype", "device")

#: Properties that a domain can rule out, with the reason (attention).
_NEEDS: dict[str, Callable[[Domain, Conventions], str | None]] = {
    "masked_invisible": lambda d, c: None if d.allow_mask else "needs masks; the kernel takes none",
    "causal_mask": lambda d, c: (None if d.allow_mask and d.allow_causal else
                                 "needs causal=True and an explicit mask; the kernel lacks "
                                 + ("masks" if d.allow_causal else "a causal mode")),
    "split_merge": lambda d, c: ("needs Sk split in two; the kernel needs Sq == Sk" if d.same_seq
                                 else None),
    "fully_masked": lambda d, c: (None if d.allow_mask or (
        d.allow_causal and c.causal_align == "bottom-right" and not d.same_seq)
        else "needs a query with no visible key: masks, or bottom-right causal with Sq > Sk"),
}

#: The conventions a failing input is re-run under, to name the one the kernel seems to use.
_ALTERNATIVES: dict[str, tuple[Any, ...]] = {
    "fully_masked": ("zeros", "nan", "uniform"), "causal_align": ("top-left", "bottom-right"),
    "lse_base": ("e", "2"), "empty_lse": (-np.inf, np.inf),
}


# ---------------------------------------------------------------------------------------------
# The first call


def simplest_input(op: str, domain: Domain) -> Any:
    """The simplest input inside ``domain``: its first dtype, short lengths, no mask.

    Softmax: one row ``[0, 1, 2, 3, ...]`` of ``max(4, min_len)`` columns, rounded up to a
    multiple of ``len_multiple`` (at most max_len).
    Attention: B = H = 1, the smallest declared head dim, Sq = Sk = the smallest length the
    domain allows (a multiple of ``seq_multiple``, at least 4 where allowed), no mask.

    >>> simplest_input("softmax", Domain(dtypes=("bfloat16",))).dtype
    dtype(bfloat16)
    """
    fmt = resolve(domain.dtypes[0])
    if op == "softmax":
        from onlinesm.strategies.domain import fit_len

        n = fit_len(domain, 4)  # at least 4 columns, a multiple of len_multiple, in the domain
        return fmt.round((np.arange(n) % 8).astype(np.float64))[None, :]
    step = domain.seq_multiple

    def length(lo: int, hi: int) -> int:
        n = max(lo, min(4, hi))
        n = -(-n // step) * step  # round up to the multiple
        if n > hi:
            raise UsageError(f"the domain admits no sequence length: a multiple of {step} between "
                             f"{lo} and {hi}; check --seq-multiple and the min/max lengths")
        return n

    sq = length(domain.min_seq_q, domain.max_seq_q)
    sk = length(domain.min_seq_k, domain.max_seq_k)
    if domain.same_seq:
        sq = sk = max(sq, sk)
    d = min(domain.head_dims)
    rng = np.random.default_rng(0)
    q, k, v = (fmt.round(rng.standard_normal((1, 1, s, d))) for s in (sq, sk, sk))
    return AttentionInputs(q, k, v)


def _call(kernel: Kernel, op: str, inp: Any) -> np.ndarray:
    """The kernel's output for one input: y (softmax) or o (attention)."""
    return kernel.softmax(inp) if op == "softmax" else kernel.attention(inp)[0]


def first_call(kernel: Kernel, op: str, domain: Domain, *, command: str = "check") -> None:
    """Call the kernel on :func:`simplest_input`; UsageError when nothing could be tested, with
    the flags of ``command`` ("check" or "report") under which the kernel runs, if any."""
    inp = simplest_input(op, domain)
    what = (f"the simplest input ({resolve(domain.dtypes[0]).name}, "
            + (f"shape {list(inp.shape)})" if op == "softmax" else
               f"q, k, v of shape {list(inp.q.shape)}, {list(inp.k.shape)})"))
    try:
        out = _call(kernel, op, inp)
    except KernelError as err:
        if err.kind in _TESTABLE or err.kind == "refused":
            return  # it runs (the properties report the breach) or refuses: both testable
        raise UsageError(f"nothing could be tested: {err}"
                         + (_signature_hint(op, err, kernel.fn) or _other_dtypes_hint(kernel, op, domain, err)
                            or _other_shapes_hint(kernel, op, domain, err, command))) from None
    if not np.all(np.isfinite(out.astype(np.float64))):
        raise UsageError(f"nothing could be tested: {kernel.name} returned non-finite values for "
                         f"{what}")


#: The TypeErrors of a call whose arguments do not fit the function's signature
_SIGNATURE_ERRORS = re.compile(r"raised TypeError: .*(missing \d+ required|unexpected keyword "
                               r"argument|takes \d+ positional argument|positional arguments? but)")


def _signature_hint(op: str, err: KernelError, fn: Callable[..., Any]) -> str:
    """When the call itself did not fit the kernel's signature (the Triton tutorial's
    ``attention(q, k, v, causal, sm_scale)``, an ``autograd.Function.apply``): the form
    onlinesm calls, and the two ways to meet it, as a sentence to append; for a softmax
    check of a kernel that needs three tensors, that it looks like an attention kernel."""
    if err.kind != "raised" or not _SIGNATURE_ERRORS.search(err.detail):
        return ""
    takes = positional_arguments(fn)
    if op == "softmax" and takes is not None and takes[0] >= 3:
        return (f"; it needs {takes[0]} positional arguments, as an attention kernel's q, k, v "
                "do: for an attention kernel use --op attention")
    if op == "softmax":
        return ("; onlinesm calls a softmax kernel as fn(x), over x's last dim: wrap a kernel "
                "called otherwise, e.g. def sm(x): return kernel(x, -1)")
    return ("; onlinesm calls an attention kernel as fn(q, k, v, *, mask=None, causal=False, "
            "scale=None) with q, k, v of [B, H, S, D]: wrap a kernel called otherwise in a "
            "function of that form (a few lines: README, 'Other calling conventions'), or name "
            "its convention with --convention sdpa, flash_attn or xformers")


def _other_dtypes_hint(kernel: Kernel, op: str, domain: Domain, err: KernelError) -> str:
    """When the kernel raised on the first dtype but runs on others (a kernel for 16-bit inputs
    only, checked with the default dtypes): the two ways to check it, as a sentence to append.

    Never skips the dtype on its own: a kernel that crashes on an input it should take has a bug.
    """
    if err.kind != "raised" or len(domain.dtypes) < 2:
        return ""
    runs = []
    for dtype in domain.dtypes[1:]:
        try:
            _call(kernel, op, simplest_input(op, dataclasses.replace(domain, dtypes=(dtype,))))
        except KernelError:
            continue
        runs.append(resolve(dtype).name)
    if not runs:
        return ""
    names = ",".join(runs)
    # "raised TypeError: only 16-bit" -> the refusal TypeError:only 16-bit
    etype, _, message = str(getattr(err, "detail", "")).removeprefix("raised ").partition(": ")
    pattern = re.sub(r"([.^$*+?{}\[\]|()\\])", r"\\\1", message[:60])  # metacharacters only
    refusal = f"{etype}:{pattern}" if etype else "ExceptionType:regex"
    return (f"; it runs on {names}: check only those with --dtypes {names} (dtypes= in the "
            f"API), or declare the refusal with --unsupported '{refusal}' (unsupported= in the "
            "API) so that other dtypes count it as refused, not as a failure")


#: Tile sizes real kernels require of a row length or of Sq and Sk, and their head dims
#: (1: the simplest lengths, with other head dims only)
_ROW_TILES, _SEQ_TILES, _HEAD_DIMS = (16, 32, 64, 128, 256), (1, 16, 64, 128), (64, 128)


def _other_shapes_hint(kernel: Kernel, op: str, domain: Domain, err: KernelError,
                       command: str = "check") -> str:
    """When the kernel raised on the simplest input but runs on a longer one, in some dtype (a
    kernel that tiles rows by 128, or takes bf16 only with head dims 64 and 128): the flags of
    ``command`` that declare its shapes (and dtypes), as a sentence to append.

    Tries tiles of 16-256 per dtype, the smallest first; a few calls, in the error path only.
    """
    if err.kind != "raised":
        return ""
    for dtype in domain.dtypes:
        found = _runs_at_a_tile(kernel, op, dataclasses.replace(domain, dtypes=(dtype,)))
        if found is None:
            continue
        trial, shape, flags, report_flags = found
        dtypes = [d for d in domain.dtypes
                  if d == dtype or _runs(kernel, op, dataclasses.replace(trial, dtypes=(d,)))]
        if dtypes != list(domain.dtypes):
            shape += f" in {','.join(dtypes)}"
            flags = f"--dtypes {','.join(dtypes)} {flags}"
            report_flags = f"--dtypes {','.join(dtypes)} {report_flags}"
        if command == "report":
            return (f"; it runs on {shape}: if the kernel takes only such inputs, declare them "
                    f"with {report_flags}")
        return (f"; it runs on {shape}: if the kernel takes only such inputs, declare them with "
                f"{flags} (the keywords of the same names in the API)")
    return ""


def _runs_at_a_tile(kernel: Kernel, op: str, domain: Domain) -> tuple[Domain, str, str, str] | None:
    """The smallest tile at which the kernel runs on the simplest input of ``domain``'s one
    dtype: (that domain, the shape in words, the check's flags, the report's flags), or None."""
    for tile in _ROW_TILES if op == "softmax" else _SEQ_TILES:
        if op == "softmax":
            if tile <= domain.min_len:
                continue
            longest = max(domain.max_len, tile)
            trial = dataclasses.replace(domain, min_len=tile, max_len=longest, len_multiple=tile)
            if _runs(kernel, op, trial):
                wider = f" --max-len {longest}" if longest > domain.max_len else ""
                # the report rounds its grid's lengths up to the tile
                return (trial, f"a row of {tile}", f"--len-multiple {tile}{wider} (or --min-len "
                        f"{tile}{wider} if it takes every length from {tile} on)",
                        f"--len-multiple {tile}")
            continue
        longest_q, longest_k = max(domain.max_seq_q, tile), max(domain.max_seq_k, tile)
        trial = domain if tile == 1 else dataclasses.replace(
            domain, seq_multiple=tile, min_seq_q=tile, min_seq_k=tile, max_seq_q=longest_q,
            max_seq_k=longest_k)
        dims = sorted(set(domain.head_dims) | set(_HEAD_DIMS))
        runs = [d for d in dims if _runs(kernel, op, dataclasses.replace(trial, head_dims=(d,)))]
        if runs:
            seqs = "" if tile == 1 else (
                f"--seq-multiple {tile}"
                + (f" --max-seq-q {longest_q}" if longest_q > domain.max_seq_q else "")
                + (f" --max-seq-k {longest_k}" if longest_k > domain.max_seq_k else ""))
            head = f"--head-dims {','.join(map(str, runs))}" if runs != dims else ""
            shape = (f"head dims {runs}" if tile == 1 else
                     f"Sq = Sk = {tile} with head dims {runs}")
            # the report's shapes come from --seqs and --head-dim
            report = " ".join(f for f in ("" if tile == 1 else f"--seq-multiple {tile}",
                                          f"--head-dim {runs[0]}") if f)
            return (dataclasses.replace(trial, head_dims=(runs[0],)), shape,
                    " ".join(f for f in (seqs, head) if f), report)
    return None


def _runs(kernel: Kernel, op: str, domain: Domain) -> bool:
    """Whether the kernel runs on the simplest input of ``domain``."""
    try:
        _call(kernel, op, simplest_input(op, domain))
    except (KernelError, UsageError):
        return False
    return True


def _check_keywords(fn: Callable[..., Any], domain: Domain) -> None:
    """A kernel whose signature lacks a keyword the declared domain uses: say which flag fits;
    one that cannot take q, k, v: say it looks like a softmax kernel."""
    takes = positional_arguments(fn)
    if takes is not None and takes[1] is not None and takes[1] < 3:
        name = getattr(fn, "__name__", repr(fn))
        raise UsageError(f"{name} takes at most {takes[1]} positional argument"
                         f"{'s' if takes[1] != 1 else ''}, and onlinesm calls an attention kernel "
                         "as fn(q, k, v, ...): for a softmax kernel use --op softmax")
    for keyword, allowed, flag, api in (("mask", domain.allow_mask, "--no-mask", "allow_mask=False"),
                                        ("causal", domain.allow_causal, "--no-causal",
                                         "allow_causal=False")):
        if allowed and accepts_keyword(fn, keyword) is False:
            name = getattr(fn, "__name__", repr(fn))
            raise UsageError(f"{name} takes no {keyword!r} keyword, but the domain includes "
                             f"{keyword}s; declare it with {flag} ({api} in the API)")
    if accepts_keyword(fn, "scale") is False:  # the contract passes it on every call
        name = getattr(fn, "__name__", repr(fn))
        raise UsageError(f"{name} takes no 'scale' keyword, which onlinesm's calling convention "
                         "passes on every call (scale=None: 1/sqrt(D)); add scale=None to its "
                         "signature, or name its convention with --convention sdpa, flash_attn "
                         "or xformers (convention= in the API)")


# ---------------------------------------------------------------------------------------------
# Inputs: strategies and the explicit examples every property sees first


def _strategy(op: str, dtype: str, domain: Domain) -> Any:
    from onlinesm import strategies

    if op == "softmax":
        return strategies.softmax_strategy(dtype, domain)
    return strategies.attention_strategy(dtype, domain)


def _explicit(op: str, dtype: str, domain: Domain) -> list[Any]:
    """Explicit inputs holding every family, so that each property sees every family whatever
    Hypothesis draws (its draws depend on the code it has loaded: a seed cannot promise it)."""
    from onlinesm import strategies

    if op == "softmax":
        return strategies.explicit_softmax_batches(dtype, domain)
    return strategies.explicit_attention_cases(dtype, domain)


def _inside(case: Any, op: str, domain: Domain) -> bool:
    """Whether a generated case lies inside the declared domain (the generators promise it;
    this guard keeps a case that a newer generator rule lets through from reaching the kernel)."""
    return inside(op, case.x if op == "softmax" else case, domain)


def inside(op: str, inp: Any, domain: Domain) -> bool:
    """Whether an input lies inside ``domain``'s shapes: softmax rows ``x`` (an array), or
    attention inputs (anything with ``q``, ``k``, ``mask`` and ``causal``).

    >>> inside("softmax", np.zeros((2, 100)), Domain(len_multiple=128))
    False
    """
    if op == "softmax":
        n = inp.shape[-1]
        return domain.min_len <= n <= domain.max_len and n % domain.len_multiple == 0
    sq, sk, d = inp.q.shape[2], inp.k.shape[2], inp.q.shape[3]
    m = domain.seq_multiple
    return (d in domain.head_dims and domain.min_seq_q <= sq <= domain.max_seq_q
            and domain.min_seq_k <= sk <= domain.max_seq_k and sq % m == 0 and sk % m == 0
            and (sq == sk or not domain.same_seq) and (inp.mask is None or domain.allow_mask)
            and (not inp.causal or domain.allow_causal)
            and (inp.k.shape[1] == inp.q.shape[1] or domain.allow_gqa))


def _in_domain(case: Any, op: str, domain: Domain) -> bool:
    """Reject a drawn case outside the domain: the kernel never sees it (a guard: the
    strategies already draw inside it)."""
    if not _inside(case, op, domain):
        reject()
    return True


def _unpack(op: str) -> Callable[[Any], Any]:
    if op == "softmax":
        return lambda case: case.x
    return lambda case: AttentionInputs(q=case.q, k=case.k, v=case.v, mask=case.mask,
                                        causal=bool(case.causal), scale=case.scale)


def _family_of(case: Any, row: int | None = None) -> str:
    fams = getattr(case, "families", None)
    if fams:
        if row is not None and row < len(fams):
            return str(fams[row])
        return str(fams[0]) if len(set(fams)) == 1 else ""
    return str(getattr(case, "family", "") or "")


# ---------------------------------------------------------------------------------------------
# One Hypothesis run


class _Stop(BaseException):
    """Ends a Hypothesis run at once (a BaseException, so Hypothesis neither catches nor
    shrinks it): the kernel hung, or it refused every input so far."""


@dataclasses.dataclass
class _Tally:
    """What one property's run saw, besides the verdict."""

    examples: int = 0
    rejected: int = 0
    untested: int = 0
    rejected_by_family: dict[str, int] = dataclasses.field(default_factory=dict)
    case: Any = None
    error: BaseException | None = None
    unsatisfiable: bool = False
    untested_reason: str = ""
    refusal: str = ""  # the first declared refusal seen, as the kernel said it


def _run_given(strategy: Any, body: Callable[[Any], None], *, examples: Sequence[Any],
               options: RunOptions, database: Path | None) -> _Tally:
    """Run Hypothesis over ``strategy`` (explicit examples first); the tally of what it saw."""
    tally = _Tally()
    give_up = max(20, 2 * (options.max_examples or PROFILES[options.profile]))

    def test(case: Any) -> None:
        tally.examples += 1
        try:
            body(case)
        except UnsatisfiedAssumption:
            tally.examples -= 1  # drawn outside the domain: never reached the kernel
            raise
        except Untested as err:
            tally.untested += 1
            tally.untested_reason = tally.untested_reason or str(err)
        except KernelError as err:
            if err.kind == "refused":
                tally.rejected += 1
                tally.refusal = tally.refusal or str(err).split(": ", 1)[-1]
                fam = _family_of(case)
                tally.rejected_by_family[fam] = tally.rejected_by_family.get(fam, 0) + 1
                if tally.rejected >= give_up and tally.rejected == tally.examples:
                    tally.unsatisfiable = True
                    raise _Stop() from err
                reject()
            tally.case, tally.error = case, err
            if err.kind == "hung":
                raise _Stop() from err
            raise
        except PropertyFailure as err:
            tally.case, tally.error = case, err
            raise

    opts: dict[str, Any] = dict(
        deadline=None, verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False,
        suppress_health_check=list(HealthCheck),
        database=None if database is None else DirectoryBasedExampleDatabase(str(database)),
    )
    if options.max_examples is not None:
        opts["max_examples"] = options.max_examples
    if options.seed is not None:
        opts["derandomize"] = False
    for case in reversed(list(examples)):  # explicit examples run first, in order
        test = example(case)(test)
    wrapped = settings(settings.get_profile(options.profile), **opts)(given(strategy)(test))
    if options.seed is not None:
        wrapped = hypothesis_seed(options.seed)(wrapped)
    try:
        wrapped()
    except (PropertyFailure, KernelError, _Stop):
        pass
    except Unsatisfiable:
        tally.unsatisfiable = True
    return tally


# ---------------------------------------------------------------------------------------------
# The run


@dataclasses.dataclass
class _RunState:
    """What one check run has learnt so far, across properties and dtypes."""

    breaches: dict[tuple[str, str], Failure] = dataclasses.field(default_factory=dict)
    hung: str | None = None
    tables: list[str] = dataclasses.field(default_factory=list)  # regression tables


def _db_path(kernel: Kernel, op: str, prop: str, dtype: str) -> Path:
    key = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{kernel.name}")[:80]
    return STATE_DIR / "examples" / key / f"{op}-{prop}-{dtype}"


#: Properties the engine runs once per dtype on a fixed sample, after the Hypothesis runs.
_STATISTICAL = ("accuracy_statistical", "regression")


def _selected(registry: dict[str, Any], options: RunOptions,
              baseline: bool) -> tuple[list[str], dict[str, str]]:
    """The Hypothesis properties to run and the waived ones; UsageError for an unknown name,
    for ``regression`` named without a baseline, and for a selection that runs nothing."""
    names = list(registry) if options.properties is None else list(options.properties)
    known = list(registry) + list(_STATISTICAL)
    for n in names + list(options.skip):
        if n not in known:
            raise UsageError(f"unknown property {n!r}; the properties are: {', '.join(known)}")
    if baseline and options.properties is not None and "regression" not in options.properties:
        raise UsageError("a baseline is compared through the 'regression' property, which "
                         f"properties={list(options.properties)!r} leaves out; add regression")
    if "regression" in (options.properties or ()) and not baseline:
        raise UsageError("properties names 'regression', which compares with an older kernel: "
                         "give it with --baseline TARGET (baseline= in the API)")
    statistical = [n for n in names if n in _STATISTICAL
                   and (n == "regression" or options.statistical)]
    if not [n for n in names if n in registry] + statistical:
        if "accuracy_statistical" in names:
            raise UsageError("properties names only 'accuracy_statistical', which "
                             "--no-statistical (statistical=False) turns off; drop one of them")
        raise UsageError(f"properties={list(options.properties or ())!r} leaves no property to "
                         f"run; name one or more of: {', '.join(known)}")
    return [n for n in names if n in registry], dict(options.skip)


def _statistical(kernel: Kernel, old: Kernel | None, op: str, dtype: str, conv: Conventions,
                 domain: Domain, options: RunOptions, state: _RunState) -> list[PropertyOutcome]:
    """``accuracy_statistical`` and (with a baseline kernel) ``regression`` on one dtype."""
    from onlinesm.statistical_check import regression_outcome, statistical_outcome

    wanted = {"accuracy_statistical": options.statistical, "regression": old is not None}
    out: list[PropertyOutcome] = []
    for prop in _STATISTICAL:
        if not wanted[prop] or (options.properties is not None and prop not in options.properties):
            continue
        if prop in options.skip:
            out.append(PropertyOutcome(prop, dtype, "waived", reason=options.skip[prop]))
        elif state.hung is not None:
            out.append(PropertyOutcome(prop, dtype, "not_run", reason=f"kernel hung on {state.hung}"))
        elif prop == "accuracy_statistical":
            out.append(statistical_outcome(kernel, op, dtype, conv, domain, options))
        else:
            assert old is not None
            outcome, table = regression_outcome(kernel, old, op, dtype, domain, options)
            state.tables.append(f"regression [{dtype}]: {kernel.name} (new) vs {old.name} (old)\n"
                                + table if table else "")
            out.append(outcome)
        last = out[-1]
        breach = last.failure.breach if last.failure is not None else None
        if breach is not None and breach in state.breaches:  # reported once, as elsewhere
            first = state.breaches[breach]
            first.also.append(f"{prop} [{dtype}]")
            last.failure, last.reason = None, f"the same breach as {first.property} [{first.dtype}]"
        elif breach is not None:
            state.breaches[breach] = last.failure  # type: ignore[assignment]
        state.hung = state.hung or kernel.hung or (old.hung if old is not None else None)
    return out


def _interpreter_suspect(err: BaseException | None, dtype: str, strict: bool) -> bool:
    """A bf16 bound failure that Triton's interpreter may have caused by truncating fp32 -> bf16.

    Only when the rounding patch could not be applied (a Triton version whose internals
    changed) and every failing element misses its bound by at most one bf16 ulp toward zero.
    """
    from onlinesm import interpreter

    if strict or dtype != "bfloat16" or not interpreter.interpreted() or interpreter.patch_works():
        return False
    m = getattr(err, "measurement", None)
    if m is not None and m.allowed is not None:
        return interpreter.interpreter_suspect(m.actual, m.exact, dtype, allowed=m.allowed)
    cmp = getattr(err, "comparison", None)
    if cmp is None:
        return False
    return interpreter.interpreter_suspect(cmp.worst_actual, cmp.worst_exact, dtype,
                                           allowed=cmp.worst_bound)


#: A property's advice to declare some convention, when it cannot tell which one holds
_GENERIC_CONVENTION_ADVICE = re.compile(r"; declare [^;\n]* if that is the kernel's convention")


def _convention_hint(kernel: Kernel, prop: Callable[..., None], inp: Any, conv: Conventions) -> str:
    """Re-run a failing input under the other conventions; name one under which it holds."""
    for field, values in _ALTERNATIVES.items():
        for value in values:
            if value == getattr(conv, field) or kernel.hung is not None:
                continue
            try:
                other = dataclasses.replace(conv, **{field: value})
            except ValueError:
                continue  # not a value this version knows
            try:
                prop(kernel, inp, other)
            except (PropertyFailure, KernelError, Untested):
                continue
            shown = {np.inf: "inf", -np.inf: "-inf"}.get(value, value) if isinstance(value, float) else value
            return (f"\n  The output matches {field}={shown!r}; declare it if that is intended "
                    f"(--{field.replace('_', '-')} {shown}).")
    return ""


def _outcome(kernel: Kernel, op: str, prop_name: str, prop: Callable[..., None], dtype: str,
             conv: Conventions, tally: _Tally, state: _RunState, options: RunOptions,
             domain: Domain) -> PropertyOutcome:
    """The verdict of one (property, dtype) run, its failure minimised and saved."""
    tested = tally.examples - tally.rejected - tally.untested
    out = PropertyOutcome(prop_name, dtype, "passed", max(tested, 0), rejected=tally.rejected,
                          rejected_by_family=tally.rejected_by_family, untested=tally.untested)
    err = tally.error
    if tally.case is None:
        if tally.unsatisfiable or tested <= 0:
            out.status = "na"
            out.reason = (f"the kernel refused every input: {tally.refusal}" if tally.rejected
                          else f"no input had anything to test ({tally.untested_reason or 'none ran'})")
        return out
    out.status = "failed"
    breach = err.breach if isinstance(err, KernelError) else None
    unpack = _unpack(op)
    inp = unpack(tally.case)
    inputs = {"x": inp} if op == "softmax" else dataclasses.asdict(inp)
    directory = STATE_DIR / "failures" if options.save_failures else None
    if _interpreter_suspect(err, dtype, options.strict):
        out.status = "suspect"
        out.reason = ("within one bf16 ulp of the bound, as the interpreter's truncation of "
                      "fp32 -> bf16 gives; run on a GPU or with --strict to fail it")
        return out
    if breach is not None and breach in state.breaches and breach[0] != "hung":
        first = state.breaches[breach]
        first.also.append(f"{prop_name} [{dtype}]")
        out.reason = f"the same breach as {first.property} [{first.dtype}]"
        return out
    small, message, path = shrink_and_save(kernel, op, prop_name, conv, inputs, err,
                                           directory=directory, domain=domain)
    if isinstance(err, KernelError) and err.kind == "hung":
        state.hung = err.what or "an input"
    state.hung = state.hung or kernel.hung  # a hang while minimising also ends the run
    if breach is None and kernel.hung is None:
        reduced = small["x"] if op == "softmax" else AttentionInputs(**small)
        hint = _convention_hint(kernel, prop, reduced, conv)
        if hint:  # the convention the output matches replaces the property's generic advice
            message = _GENERIC_CONVENTION_ADVICE.sub("", message)
        message += hint
    row = getattr(err, "worst_row", None)
    family = _family_of(tally.case, row if op == "softmax" else None)
    out.failure = Failure(prop_name, dtype, message, small, family, path, breach=breach)
    if breach is not None:
        state.breaches[breach] = out.failure
    return out


def run_check(fn: Callable[..., Any], op: str, conventions: Conventions, domain: Domain,
              options: RunOptions, *, name: str | None = None, target: str | None = None,
              raise_on_failure: bool = False,
              progress: Callable[[str], None] | None = None,
              baseline: Callable[..., Any] | None = None,
              baseline_name: str | None = None) -> CheckResult:
    """Run ``op``'s property suite on ``fn``: one Hypothesis run per (property, dtype).

    ``baseline``: an older kernel of the same op; adds the ``regression`` property (the RMSE
    of ``fn`` against it on the statistical sample, :mod:`onlinesm.statistical_check`).

    Raises :class:`UsageError` when nothing could be tested (a bad option, an environment
    that cannot run the request, a kernel failing on the simplest input, every property n/a),
    and ``AssertionError`` with the report when ``raise_on_failure`` and a property failed.
    """
    if op not in ("softmax", "attention"):
        raise UsageError(f"op={op!r} is not supported; use 'softmax' or 'attention'")
    from onlinesm import compiles
    from onlinesm.kernels.pinning import pinned_configs

    # the built-in kernels use a fixed tile table instead of autotuning every new shape, and
    # every Triton compilation of the run is counted (each new shape bucket may compile)
    with pinned_configs(), compiles.counting() as counter:
        result = _run(fn, op, conventions, domain, options, name=name, target=target,
                      progress=progress, baseline=baseline, baseline_name=baseline_name)
    result.compiles = {"count": counter.count, "seconds": round(counter.seconds, 2),
                       "autotune_runs": counter.autotune_runs, "summary": counter.summary()}
    if raise_on_failure and not result.passed:
        raise AssertionError(result.report())
    return result


def _run(fn: Callable[..., Any], op: str, conventions: Conventions, domain: Domain,
         options: RunOptions, *, name: str | None, target: str | None,
         progress: Callable[[str], None] | None, baseline: Callable[..., Any] | None = None,
         baseline_name: str | None = None) -> CheckResult:
    registry = SOFTMAX_PROPERTIES if op == "softmax" else ATTENTION_PROPERTIES
    names, waive = _selected(registry, options, baseline is not None)
    if op == "attention":
        _check_keywords(fn, domain)
    kernel = Kernel(fn, op=op, backend=options.backend, device=options.device, name=name,
                    target=target, deadline=options.deadline,
                    compile_allowance=options.compile_allowance, refusals=domain.unsupported,
                    domain=domain)
    first_call(kernel, op, domain)
    old = None if baseline is None else Kernel(
        baseline, op=op, backend=options.backend, device=options.device,
        name=baseline_name or getattr(baseline, "__name__", "baseline"), deadline=options.deadline,
        compile_allowance=options.compile_allowance, refusals=domain.unsupported, domain=domain)
    if old is not None:  # a baseline that cannot run is a usage error, not a regression
        try:
            if op == "attention":
                _check_keywords(old.fn, domain)
            first_call(old, op, domain)
        except UsageError as err:
            why = str(err).removeprefix("nothing could be tested: ")
            raise UsageError(f"nothing could be tested: the baseline {why}") from None
    say = progress or (lambda _msg: None)
    state = _RunState()
    outcomes: list[PropertyOutcome] = []
    unpack = _unpack(op)
    for dtype in domain.dtypes:
        conv = conventions.for_dtype(dtype)
        strategy = _strategy(op, dtype, domain)
        explicit = [c for c in _explicit(op, dtype, domain) if _inside(c, op, domain)]
        for prop_name in names:
            if prop_name in waive:
                outcomes.append(PropertyOutcome(prop_name, dtype, "waived", reason=waive[prop_name]))
                continue
            if state.hung is not None:
                outcomes.append(PropertyOutcome(prop_name, dtype, "not_run",
                                                reason=f"kernel hung on {state.hung}"))
                continue
            needs = _NEEDS.get(prop_name) if op == "attention" else None
            why = needs(domain, conv) if needs else None
            if why is None and prop_name == "split_merge" and not kernel.accepts_return_lse:
                why = "needs lse to merge two halves; the kernel returns o only"
            if why:
                outcomes.append(PropertyOutcome(prop_name, dtype, "na", reason=why))
                say(f"{prop_name:<18} {dtype:<9} n/a ({why})")
                continue
            prop = registry[prop_name]
            start = time.monotonic()
            tally = _run_given(strategy, lambda c, p=prop: _in_domain(c, op, domain) and p(kernel, unpack(c), conv),
                               examples=explicit, options=options,
                               database=_db_path(kernel, op, prop_name, dtype) if options.database else None)
            outcome = _outcome(kernel, op, prop_name, prop, dtype, conv, tally, state, options,
                               domain)
            outcome.seconds = time.monotonic() - start
            extra = f", {tally.rejected} rejected" if tally.rejected else ""
            say(f"{prop_name:<18} {dtype:<9} {outcome.status:<7} {outcome.examples:>4} examples{extra} "
                f"{outcome.seconds:6.1f}s")
            outcomes.append(outcome)
        for outcome in _statistical(kernel, old, op, dtype, conv, domain, options, state):
            say(f"{outcome.property:<18} {dtype:<9} {outcome.status:<7} {outcome.seconds:6.1f}s")
            outcomes.append(outcome)
    described = {**conventions.to_dict(), "dtypes": list(domain.dtypes), "domain": domain.to_dict()}
    result = CheckResult(op, kernel.name, described, outcomes, options.seed, kernel.device, hung=state.hung)
    result.tables = [t for t in state.tables if t]
    if result.nothing_tested:
        reasons = sorted({o.reason for o in outcomes if o.status == "na"})
        raise UsageError("nothing could be tested: every property is n/a (" + "; ".join(reasons) + ")")
    return result
