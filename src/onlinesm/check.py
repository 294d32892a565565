"""``check_softmax`` and ``check_attention``: run the property suites on a kernel.

The flow (docs/INTERNALS.md): a strategy draws an adversarial batch; the harness calls the
kernel under the contract; each property compares against the oracle under the tolerance
model. Hypothesis drives one ``@given`` per (property, dtype), so every falsified property is
reported, not only the first; a failure is then reduced by onlinesm's own minimiser
(:mod:`onlinesm.minimize`) and saved as a portable JSON counterexample that
``onlinesm replay FILE`` re-runs.

Before anything else the kernel is called on the simplest input (a short float32 row): if that
fails, nothing can be tested and :class:`UsageError` says so in one line. Determinism is
checked first among the properties, since a non-deterministic kernel would otherwise confuse
Hypothesis's replay.

A run never lies about what it did not test. A contract breach that recurs in several
properties (the kernel raises, exits, returns the wrong dtype, writes into its input) is
reported once, with the list of properties it broke. A hang ends the run: the kernel is not
called again, and every property that did not run is reported as ``not run``, never as a pass.

Example:
    >>> import torch, onlinesm
    >>> result = onlinesm.check_softmax(torch.softmax_fn, fully_masked="nan")  # doctest: +SKIP
    >>> print(result.table())                                                   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from hypothesis import HealthCheck, Verbosity, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.database import DirectoryBasedExampleDatabase

from onlinesm import counterexample
from onlinesm.dtypes import resolve
from onlinesm.errors import UsageError
from onlinesm.harness import AttentionInputs, Kernel, KernelError, accepts_keyword
from onlinesm.minimize import minimise_rows
from onlinesm.properties import ATTENTION_PROPERTIES, SOFTMAX_PROPERTIES, Conventions, PropertyFailure
from onlinesm.tolerance import Numerics

__all__ = [
    "check_softmax",
    "check_attention",
    "CheckResult",
    "PropertyOutcome",
    "Failure",
    "UsageError",
    "PROFILES",
    "profile_name",
]

#: Settings profiles, prefixed so they never collide with a user's own. They derive from
#: Hypothesis's defaults, not from whatever profile the user's test run loaded, so a seeded
#: onlinesm run draws the same examples everywhere.
PROFILES: dict[str, int] = {"onlinesm-quick": 20, "onlinesm-ci": 10, "onlinesm-thorough": 200}
for _name, _n in PROFILES.items():
    settings.register_profile(_name, parent=settings.get_profile("default"), max_examples=_n,
                              deadline=None)

DEFAULT_DTYPES = ("float32", "bfloat16", "float16")
STATE_DIR = Path(".onlinesm")


def profile_name(profile: str) -> str:
    """The registered name of a profile: ``"quick"`` and ``"onlinesm-quick"`` are the same.

    >>> profile_name("quick"), profile_name("onlinesm-thorough")
    ('onlinesm-quick', 'onlinesm-thorough')
    """
    name = profile if profile.startswith("onlinesm-") else f"onlinesm-{profile}"
    if name not in PROFILES:
        short = ", ".join(p.removeprefix("onlinesm-") for p in PROFILES)
        raise UsageError(f"profile={profile!r} is unknown; use one of {short}")
    return name


@dataclasses.dataclass
class Failure:
    """One falsified property: the minimal input, the message, and how to replay it."""

    property: str
    dtype: str
    message: str
    inputs: dict[str, Any]
    family: str = ""
    replay_path: str | None = None
    #: (kind, detail) when the failure is a breach of the call contract, else None
    breach: tuple[str, str] | None = None
    #: other (property, dtype) where the same breach was met: reported once, here
    also: list[str] = dataclasses.field(default_factory=list)

    def text(self) -> str:
        head = f"FAILED {self.property} [{self.dtype}]" + (f" (family {self.family})" if self.family else "")
        if self.also:
            head += f": the same breach in {len(self.also) + 1} properties ({', '.join(self.also)} too)"
        tail = f"\n  replay: onlinesm replay {self.replay_path}" if self.replay_path else ""
        body = "\n".join("  " + line for line in self.message.splitlines())
        return f"{head}\n{body}{tail}"


@dataclasses.dataclass
class PropertyOutcome:
    """The verdict of one property on one dtype."""

    property: str
    dtype: str
    status: str  # passed | failed | waived | not_run | suspect (interpreter truncation)
    examples: int = 0
    seconds: float = 0.0
    reason: str = ""
    failure: Failure | None = None


@dataclasses.dataclass
class CheckResult:
    """What a check found: one outcome per (property, dtype), and the failures."""

    op: str
    kernel: str
    conventions: dict[str, Any]
    outcomes: list[PropertyOutcome]
    seed: int | None
    device: str
    #: the input the kernel hung on, when it did (the run stopped there)
    hung: str | None = None

    @property
    def passed(self) -> bool:
        return not any(o.status in ("failed", "not_run") for o in self.outcomes)

    @property
    def failures(self) -> list[Failure]:
        """Every distinct failure (a breach met by several properties is listed once)."""
        return [o.failure for o in self.outcomes if o.failure is not None]

    def table(self) -> str:
        """Properties x dtypes, each cell pass / FAIL / waived, as a Markdown table."""
        dtypes = list(dict.fromkeys(o.dtype for o in self.outcomes))
        props = list(dict.fromkeys(o.property for o in self.outcomes))
        cell = {(o.property, o.dtype): o for o in self.outcomes}
        lines = ["| property | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
        for p in props:
            row = []
            for d in dtypes:
                o = cell.get((p, d))
                row.append("-" if o is None else {"passed": f"pass ({o.examples})",
                                                  "failed": "**FAIL**", "waived": "waived",
                                                  "not_run": "not run",
                                                  "suspect": "interpreter-suspect"}[o.status])
            lines.append(f"| {p} | " + " | ".join(row) + " |")
        return "\n".join(lines)

    def report(self) -> str:
        """The full text: the table, every failure, and the waivers with their reasons."""
        falsified = sum(1 + len(f.also) for f in self.failures)
        verdict = "PASSED" if self.passed else f"FAILED ({falsified} properties falsified)"
        if self.hung:
            verdict = f"FAILED (the kernel hung on {self.hung}; the run stopped there)"
        parts = [f"onlinesm check {self.op}: {self.kernel} on {self.device}: {verdict}", "", self.table()]
        waived = {(o.property, o.reason) for o in self.outcomes if o.status == "waived"}
        for prop, reason in sorted(waived):
            parts.append(f"waived {prop}: {reason}")
        for o in self.outcomes:
            if o.status == "suspect":
                parts.append(f"interpreter-suspect {o.property} [{o.dtype}]: {o.reason}")
        not_run = [f"{o.property} [{o.dtype}]" for o in self.outcomes if o.status == "not_run"]
        if not_run:
            reason = next(o.reason for o in self.outcomes if o.status == "not_run")
            parts.append(f"not run ({reason}): {', '.join(not_run)}")
        for f in self.failures:
            parts += ["", f.text()]
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in the results schema shared with ``onlinesm report``."""
        return {
            "op": self.op,
            "kernel": self.kernel,
            "device": self.device,
            "seed": self.seed,
            "passed": self.passed,
            "conventions": self.conventions,
            "outcomes": [
                {"property": o.property, "dtype": o.dtype, "status": o.status,
                 "examples": o.examples, "seconds": round(o.seconds, 3), "reason": o.reason,
                 "failure": None if o.failure is None else {
                     "message": o.failure.message, "family": o.failure.family,
                     "replay": o.failure.replay_path}}
                for o in self.outcomes
            ],
        }


# ---------------------------------------------------------------------------------------------
# Options


def _numerics(accumulate: str, exp: Any, allow_tf32: bool, p_dtype: str | None) -> Numerics:
    resolve(accumulate)  # a clear error for a bad name
    return Numerics(accumulate=resolve(accumulate).name, exp=exp, allow_tf32=allow_tf32, p_dtype=p_dtype)


def _dtypes(dtypes: Iterable[Any]) -> list[str]:
    if isinstance(dtypes, str):
        dtypes = [d for d in dtypes.split(",") if d.strip()]
    names = [resolve(d).name for d in dtypes]
    if not names:
        raise UsageError("dtypes is empty; give at least one of float32, bfloat16, float16")
    return names


def _selected(registry: dict[str, Any], properties: Sequence[str] | None, skip: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    skip = dict(skip or {})
    names = list(registry) if properties is None else list(properties)
    for n in list(names) + list(skip):
        if n not in registry:
            raise UsageError(f"unknown property {n!r}; the properties are: {', '.join(registry)}")
    return names, skip


def _db_path(kernel: Kernel, op: str, prop: str, dtype: str) -> Path:
    key = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{kernel.name}")[:80]
    return STATE_DIR / "examples" / key / f"{op}-{prop}-{dtype}"


class _Hung(BaseException):
    """Raised inside a Hypothesis run when the kernel hung: a BaseException, so Hypothesis
    stops at once instead of shrinking (every later call would only report the same hang)."""


def _run_given(
    strategy: Any,
    body: Callable[[Any], None],
    *,
    examples: Sequence[Any] = (),
    profile: str,
    max_examples: int | None,
    seed: int | None,
    database: Path | None,
) -> tuple[int, Any, BaseException | None]:
    """Run Hypothesis over ``strategy``; (examples run, failing case or None, its error)."""
    count = [0]
    last: dict[str, Any] = {}

    def test(case: Any) -> None:
        count[0] += 1
        try:
            body(case)
        except KernelError as err:
            last["case"], last["error"] = case, err
            if err.kind == "hung":
                raise _Hung() from err
            raise
        except PropertyFailure as err:
            last["case"], last["error"] = case, err
            raise

    opts: dict[str, Any] = dict(
        deadline=None, verbosity=Verbosity.quiet, report_multiple_bugs=False, print_blob=False,
        suppress_health_check=list(HealthCheck),
        database=None if database is None else DirectoryBasedExampleDatabase(str(database)),
    )
    if max_examples is not None:
        opts["max_examples"] = max_examples
    if seed is not None:
        opts["derandomize"] = False
    for case in reversed(examples):  # explicit examples run first, in order
        test = example(case)(test)
    wrapped = settings(settings.get_profile(profile), **opts)(given(strategy)(test))
    if seed is not None:
        wrapped = hypothesis_seed(seed)(wrapped)
    try:
        wrapped()
    except (PropertyFailure, KernelError, _Hung):
        return count[0], last.get("case"), last.get("error")
    return count[0], None, None


# ---------------------------------------------------------------------------------------------
# Softmax


# Contract breaches that still leave a kernel testable: reported as property failures, not exit 2.
_TESTABLE = ("modified_input", "dtype", "device")


def _softmax_family_batch(dtype: str, min_len: int, max_len: int, families: Sequence[str] | None,
                          allow_nonfinite: bool) -> list[Any]:
    """Explicit batches holding a row of every selected family, so that each property sees
    every family at least once whatever Hypothesis draws (random draws may miss a family, and
    Hypothesis's draws depend on the code it has loaded, so a seed alone cannot promise it)."""
    from onlinesm.strategies import DEFAULT_FAMILIES, SoftmaxCase, generate_row

    names = list(families) if families is not None else list(DEFAULT_FAMILIES) + (
        ["nonfinite"] if allow_nonfinite else [])
    rng = np.random.default_rng(0)
    cases = []
    # just past a 128 tile, and a long row (many tiles), where the domain allows
    for length in sorted({int(np.clip(n, min_len, max_len)) for n in (130, 1000)}):
        # the gaussian row at scale 1, the typical row: the random draws cover other scales
        rows = [generate_row(f, length, dtype, rng, scale=1.0 if f == "gaussian" else None)
                for f in names]
        cases.append(SoftmaxCase(x=np.stack(rows), families=tuple(names), dtype=dtype))
    return cases


def _smoke_softmax(kernel: Kernel) -> None:
    x = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
    try:
        y = kernel.softmax(x)
    except KernelError as err:
        if err.kind in _TESTABLE:
            return  # the kernel runs: the properties will report this breach with its input
        raise UsageError(f"nothing could be tested: {err}") from None
    if not np.all(np.isfinite(y.astype(np.float64))):
        raise UsageError(f"nothing could be tested: {kernel.name} returned {y.tolist()} for the "
                         "simplest input [[0, 1, 2, 3]] (float32)")


def check_softmax(
    fn: Callable[..., Any],
    *,
    dtypes: Iterable[Any] = DEFAULT_DTYPES,
    fully_masked: str = "zeros",
    batch_invariant: bool = False,
    deterministic: bool = True,
    accumulate: str = "float32",
    exp: Any = "fast",
    min_len: int = 1,
    max_len: int = 1024,
    max_rows: int = 8,
    families: Sequence[str] | None = None,
    properties: Sequence[str] | None = None,
    skip: dict[str, str] | None = None,
    allow_nonfinite: bool = False,
    profile: str = "onlinesm-quick",
    max_examples: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    backend: str | None = None,
    name: str | None = None,
    target: str | None = None,
    deadline: float | None = None,
    compile_allowance: float | None = None,
    strict: bool = False,
    database: bool = True,
    save_failures: bool = True,
    raise_on_failure: bool = True,
    progress: Callable[[str], None] | None = None,
) -> CheckResult:
    """Run the softmax property suite on ``fn(x) -> softmax(x, dim=-1)``.

    Keywords declare the kernel's conventions and domain (DESIGN.md section 3):
    ``fully_masked`` ("zeros", "nan" like torch.softmax, or "any"), ``batch_invariant``,
    ``deterministic``, ``accumulate`` and ``exp`` (they set the bound's terms), the dtypes and
    row lengths to generate, ``skip={"property": "reason"}`` to waive a property.
    ``deadline`` is the seconds one kernel call may take before it counts as a hang (default
    from the device: 30 s on a GPU, 120 s on the CPU); the first call of each compiled variant
    may take ``compile_allowance`` more (default 240 s on a GPU, 0 on the CPU). ``strict``
    fails bf16 misses of one ulp that Triton's interpreter may cause (reported as
    ``interpreter-suspect`` otherwise, only when the interpreter's rounding cannot be fixed).
    ``profile`` is
    ``"quick"``, ``"ci"`` or ``"thorough"`` (``"onlinesm-quick"`` etc. work too). Raises
    ``AssertionError`` with the full report when a property is falsified (unless
    ``raise_on_failure=False``), and :class:`UsageError` when nothing could be tested (a bad
    option, ``device="cuda"`` without CUDA, a kernel that fails on the simplest input).

    >>> import torch, onlinesm
    >>> onlinesm.check_softmax(lambda x: torch.softmax(x, -1), fully_masked="nan").passed  # doctest: +SKIP
    True
    """
    conv = Conventions(fully_masked=fully_masked, batch_invariant=batch_invariant,
                       deterministic=deterministic, numerics=_numerics(accumulate, exp, False, None))
    dts = _dtypes(dtypes)
    names, waive = _selected(SOFTMAX_PROPERTIES, properties, skip)
    profile = profile_name(profile)
    if not (1 <= min_len <= max_len):
        raise UsageError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    from onlinesm.strategies import softmax_cases

    kernel = Kernel(fn, op="softmax", backend=backend, device=device, name=name, target=target,
                    deadline=deadline, compile_allowance=compile_allowance)
    _smoke_softmax(kernel)
    say = progress or (lambda _msg: None)
    outcomes: list[PropertyOutcome] = []
    state = _RunState(strict=strict)
    for dtype in dts:
        strategy = softmax_cases(dtype=dtype, min_len=min_len, max_len=max_len, max_rows=max_rows,
                                 families=families, allow_nonfinite=allow_nonfinite)
        explicit = _softmax_family_batch(dtype, min_len, max_len, families, allow_nonfinite)
        outcomes += _run_properties(
            kernel, "softmax", SOFTMAX_PROPERTIES, names, waive, dtype, strategy, explicit,
            lambda c: c.x, conv, profile=profile, max_examples=max_examples, seed=seed,
            database=database, save_failures=save_failures, say=say, state=state)
    result = CheckResult("softmax", kernel.name, _conventions_dict(conv, dts), outcomes, seed,
                         kernel.device, hung=state.hung)
    if raise_on_failure and not result.passed:
        raise AssertionError(result.report())
    return result


@dataclasses.dataclass
class _RunState:
    """What one check run has learnt so far, across properties and dtypes."""

    breaches: dict[tuple[str, str], Failure] = dataclasses.field(default_factory=dict)
    hung: str | None = None
    strict: bool = False


def _interpreter_suspect(err: BaseException | None, dtype: str, strict: bool) -> bool:
    """A bf16 bound failure that Triton's interpreter may have caused by truncating fp32 -> bf16.

    Only when the rounding patch could not be applied (a Triton version whose internals
    changed) and the worst element misses its bound by at most one bf16 ulp toward zero.
    """
    from onlinesm import interpreter

    if strict or dtype != "bfloat16" or not interpreter.interpreted() or interpreter.patch_works():
        return False
    m = getattr(err, "measurement", None)
    if m is not None and m.allowed is not None:  # every compared element
        return interpreter.interpreter_suspect(m.actual, m.exact, dtype, allowed=m.allowed)
    cmp = getattr(err, "comparison", None)
    if cmp is None:
        return False
    return interpreter.interpreter_suspect(cmp.worst_actual, cmp.worst_exact, dtype,
                                           allowed=cmp.worst_bound)


def _run_properties(
    kernel: Kernel, op: str, registry: dict[str, Callable[..., None]], names: list[str],
    waive: dict[str, str], dtype: str, strategy: Any, explicit: list[Any],
    unpack: Callable[[Any], Any], conv: Conventions, *, profile: str, max_examples: int | None,
    seed: int | None, database: bool, save_failures: bool, say: Callable[[str], None],
    state: _RunState,
) -> list[PropertyOutcome]:
    """One Hypothesis run per property on one dtype; each failure minimised and saved.

    A contract breach already met in an earlier property is not minimised or saved again: the
    first failure lists the later properties. After a hang nothing more is run.
    """
    outcomes = []
    for prop_name in names:
        if prop_name in waive:
            outcomes.append(PropertyOutcome(prop_name, dtype, "waived", reason=waive[prop_name]))
            continue
        if state.hung is not None:
            outcomes.append(PropertyOutcome(prop_name, dtype, "not_run",
                                            reason=f"kernel hung on {state.hung}"))
            continue
        prop = registry[prop_name]
        start = time.monotonic()
        n, case, err = _run_given(
            strategy, lambda c, p=prop: p(kernel, unpack(c), conv), examples=explicit,
            profile=profile, max_examples=max_examples, seed=seed,
            database=_db_path(kernel, op, prop_name, dtype) if database else None)
        outcome = PropertyOutcome(prop_name, dtype, "passed", n)
        if case is not None:
            outcome.status = "failed"
            breach = err.breach if isinstance(err, KernelError) else None
            if _interpreter_suspect(err, dtype, state.strict):
                outcome.status = "suspect"
                outcome.reason = ("within one bf16 ulp of the bound, as the interpreter's truncation "
                                  "of fp32 -> bf16 gives; run on a GPU or with --strict to fail it")
            elif isinstance(err, KernelError) and err.kind == "hung":
                state.hung = err.what or "an input"
                # no minimiser and no re-run: the kernel cannot be called again
                outcome.failure = _hang_failure(kernel, op, prop_name, conv, case, unpack, err,
                                                save_failures)
            elif breach is not None and breach in state.breaches:
                first = state.breaches[breach]
                first.also.append(f"{prop_name} [{dtype}]")
                outcome.reason = f"the same breach as {first.property} [{first.dtype}]"
            else:
                build = _softmax_failure if op == "softmax" else _attention_failure
                outcome.failure = build(kernel, prop_name, prop, conv, case, err, save_failures)
                state.hung = kernel.hung  # a hang while minimising also ends the run
                if breach is not None:
                    outcome.failure.breach = breach
                    state.breaches[breach] = outcome.failure
        outcome.seconds = time.monotonic() - start
        label = outcome.status if outcome.failure is not None or outcome.status != "failed" else "failed (same breach)"
        say(f"{prop_name:<18} {dtype:<9} {label:<7} {n:>4} examples {outcome.seconds:6.1f}s")
        outcomes.append(outcome)
    return outcomes


def _hang_failure(kernel: Kernel, op: str, prop_name: str, conv: Conventions, case: Any,
                  unpack: Callable[[Any], Any], err: KernelError, save: bool) -> Failure:
    """The input the kernel hung on, saved as it is (a hung kernel cannot be minimised)."""
    if op == "softmax":
        inputs: dict[str, Any] = {"x": unpack(case)}
        dtype = resolve(inputs["x"].dtype).name
    else:
        inputs = dataclasses.asdict(unpack(case))
        dtype = resolve(inputs["q"].dtype).name
    failure = Failure(prop_name, dtype, str(err), inputs, _family_of(case), breach=err.breach)
    if save:
        failure.replay_path = counterexample.save(
            op=op, prop=prop_name, kernel=kernel, conventions=conv, inputs=inputs,
            message=str(err), directory=STATE_DIR / "failures")
    return failure


def _family_of(case: Any) -> str:
    fams = getattr(case, "families", None)
    return str(fams[0]) if fams and len(set(fams)) == 1 else str(getattr(case, "family", "") or "")


def _attention_failure(kernel: Kernel, prop_name: str, prop: Callable[..., None], conv: Conventions,
                       case: Any, err: BaseException | None, save: bool) -> Failure:
    """The failing attention input as Hypothesis shrank it (its recipe: batch, heads, lengths)."""
    inputs = dataclasses.asdict(_inputs(case))
    failure = Failure(prop_name, resolve(case.q.dtype).name, str(err), inputs, getattr(case, "family", ""))
    if save:
        failure.replay_path = counterexample.save(
            op="attention", prop=prop_name, kernel=kernel, conventions=conv, inputs=inputs,
            message=str(err), directory=STATE_DIR / "failures")
    return failure


def _softmax_failure(kernel: Kernel, prop_name: str, prop: Callable[..., None], conv: Conventions,
                     case: Any, err: BaseException | None, save: bool) -> Failure:
    x = case.x

    def fails(candidate: np.ndarray) -> bool:
        if kernel.hung is not None:
            return False  # the kernel can no longer be called: keep what we have
        try:
            prop(kernel, candidate, conv)
        except (PropertyFailure, KernelError):
            return kernel.hung is None
        return False

    worst = getattr(err, "worst_row", None)
    small = minimise_rows(x, fails, worst_row=worst)
    message = str(err)
    try:
        prop(kernel, small, conv)
    except (PropertyFailure, KernelError) as final:
        message = str(final)
    else:  # the minimiser ran out of budget in a state that passes: report the original
        small = x
    row = worst if worst is not None and small.shape[0] == 1 and x.shape[0] > 1 else 0
    family = case.families[row] if getattr(case, "families", None) and row < len(case.families) else ""
    failure = Failure(prop_name, resolve(x.dtype).name, message, {"x": small}, family)
    if save:
        failure.replay_path = counterexample.save(
            op="softmax", prop=prop_name, kernel=kernel, conventions=conv, inputs={"x": small},
            message=message, directory=STATE_DIR / "failures")
    return failure


def _conventions_dict(conv: Conventions, dtypes: list[str]) -> dict[str, Any]:
    d = dataclasses.asdict(conv)
    d["empty_lse"] = "inf" if conv.empty_lse > 0 else "-inf"
    d["numerics"] = dataclasses.asdict(conv.numerics)
    d["dtypes"] = dtypes
    return d


# ---------------------------------------------------------------------------------------------
# Attention


_MASK_FAMILIES = ("key_padding", "masked_leading_tiles")  # these always carry a mask


def _attention_family_cases(dtype: str, *, head_dims: Sequence[int], max_seq_q: int, max_seq_k: int,
                            families: Sequence[str] | None, allow_mask: bool, allow_causal: bool,
                            allow_gqa: bool, same_seq: bool, max_heads: int) -> list[Any]:
    """One explicit case per attention family the kernel's domain admits (see the softmax twin)."""
    from onlinesm.strategies import ATTENTION_FAMILIES, generate_attention

    names = list(families) if families is not None else list(ATTENTION_FAMILIES)
    rng = np.random.default_rng(0)
    cases = []
    for fam in names:
        if (fam == "gqa" and (not allow_gqa or max_heads < 2)) or (fam == "decode" and same_seq):
            continue
        sq = 1 if fam == "decode" else min(max_seq_q, 20)
        sk = 1 if fam == "one_key" else min(max_seq_k, 80)
        if same_seq:
            sq = sk = min(sq, sk) if fam != "one_key" else 1
        if fam == "masked_leading_tiles" and sk < 65:
            continue
        try:
            # gqa: H = 4 over Hkv = 2 where allowed (with Hkv = 1 every head map agrees)
            heads = (4 if max_heads >= 4 else 2) if fam == "gqa" else 1
            case = generate_attention(fam, dtype, rng, batch=2 if fam == "key_padding" else 1,
                                      heads=heads, kv_heads=heads // 2 if fam == "gqa" else None,
                                      seq_q=sq, seq_k=sk,
                                      head_dim=int(head_dims[-1]),
                                      masked=None if fam in _MASK_FAMILIES else False)
        except ValueError:
            continue  # the family cannot be built under these limits: Hypothesis covers the rest
        if (case.mask is not None and not allow_mask) or (case.causal and not allow_causal):
            continue
        cases.append(case)
    return cases


def _check_keywords(fn: Callable[..., Any], *, allow_mask: bool, allow_causal: bool) -> None:
    """A kernel whose signature lacks a keyword the declared domain uses: say which flag fits."""
    for keyword, allowed, flag, api in (("mask", allow_mask, "--no-mask", "allow_mask=False"),
                                        ("causal", allow_causal, "--no-causal", "allow_causal=False")):
        if allowed and accepts_keyword(fn, keyword) is False:
            name = getattr(fn, "__name__", repr(fn))
            raise UsageError(f"{name} takes no {keyword!r} keyword, but the domain includes "
                             f"{keyword}s; declare it with {flag} ({api} in the API)")


def _smoke_attention(kernel: Kernel) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, s, 16)).astype(np.float32) for s in (4, 4, 4))
    try:
        o, _ = kernel.attention(AttentionInputs(q, k, v))
    except KernelError as err:
        if err.kind in _TESTABLE:
            return
        raise UsageError(f"nothing could be tested: {err}") from None
    if not np.all(np.isfinite(o.astype(np.float64))):
        raise UsageError(f"nothing could be tested: {kernel.name} returned non-finite values for "
                         "the simplest input (q, k, v of shape [1, 1, 4, 16], float32)")


def check_attention(
    fn: Callable[..., Any],
    *,
    dtypes: Iterable[Any] = DEFAULT_DTYPES,
    fully_masked: str = "zeros",
    causal_align: str = "top-left",
    lse_base: str = "e",
    empty_lse: float = -np.inf,
    deterministic: bool = True,
    accumulate: str = "float32",
    exp: Any = "fast",
    allow_tf32: bool = False,
    p_dtype: str | None = "input",
    head_dims: Sequence[int] = (16, 32, 64),
    max_batch: int = 2,
    max_heads: int = 4,
    max_seq_q: int = 64,
    max_seq_k: int = 96,
    allow_mask: bool = True,
    allow_causal: bool = True,
    allow_gqa: bool = False,
    same_seq: bool = False,
    families: Sequence[str] | None = None,
    properties: Sequence[str] | None = None,
    skip: dict[str, str] | None = None,
    profile: str = "onlinesm-quick",
    max_examples: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    backend: str | None = None,
    name: str | None = None,
    target: str | None = None,
    deadline: float | None = None,
    compile_allowance: float | None = None,
    strict: bool = False,
    database: bool = True,
    save_failures: bool = True,
    raise_on_failure: bool = True,
    progress: Callable[[str], None] | None = None,
) -> CheckResult:
    """Run the attention property suite on ``fn(q, k, v, *, mask, causal, scale)``.

    The kernel returns ``o`` or ``(o, lse)``; when it accepts ``return_lse`` the harness asks
    for lse and checks it. Declared conventions: ``fully_masked``, ``causal_align``,
    ``lse_base``, ``empty_lse``, ``deterministic``; numerics: ``accumulate``, ``exp``,
    ``allow_tf32``, ``p_dtype`` ("input": P is rounded to the input dtype before P·V, as
    FlashAttention kernels do; None: kept in float32); domain: ``head_dims``, sizes,
    ``allow_mask``, ``allow_causal``, ``allow_gqa``, ``same_seq``.

    >>> import onlinesm
    >>> onlinesm.check_attention(my_attention, causal_align="bottom-right")  # doctest: +SKIP
    """
    dts = _dtypes(dtypes)
    numerics = _numerics(accumulate, exp, allow_tf32, None)
    conv = Conventions(fully_masked=fully_masked, causal_align=causal_align, lse_base=lse_base,
                       empty_lse=float(empty_lse), deterministic=deterministic, numerics=numerics)
    names, waive = _selected(ATTENTION_PROPERTIES, properties, skip)
    profile = profile_name(profile)
    _check_keywords(fn, allow_mask=allow_mask, allow_causal=allow_causal)
    from onlinesm.strategies import attention_inputs

    kernel = Kernel(fn, op="attention", backend=backend, device=device, name=name, target=target,
                    deadline=deadline, compile_allowance=compile_allowance)
    _smoke_attention(kernel)
    say = progress or (lambda _msg: None)
    outcomes: list[PropertyOutcome] = []
    state = _RunState(strict=strict)
    for dtype in dts:
        pd = resolve(dtype).name if p_dtype == "input" else p_dtype
        dconv = dataclasses.replace(conv, numerics=dataclasses.replace(numerics, p_dtype=pd))
        strategy = attention_inputs(dtype=dtype, max_batch=max_batch, max_heads=max_heads,
                                    max_seq_q=max_seq_q, max_seq_k=max_seq_k,
                                    head_dims=tuple(head_dims), families=families,
                                    allow_mask=allow_mask, allow_causal=allow_causal,
                                    allow_gqa=allow_gqa, same_seq=same_seq)
        explicit = _attention_family_cases(
            dtype, head_dims=head_dims, max_seq_q=max_seq_q, max_seq_k=max_seq_k, families=families,
            allow_mask=allow_mask, allow_causal=allow_causal, allow_gqa=allow_gqa,
            same_seq=same_seq, max_heads=max_heads)
        outcomes += _run_properties(
            kernel, "attention", ATTENTION_PROPERTIES, names, waive, dtype, strategy, explicit,
            _inputs, dconv, profile=profile, max_examples=max_examples, seed=seed,
            database=database, save_failures=save_failures, say=say, state=state)
    result = CheckResult("attention", kernel.name, _conventions_dict(conv, dts), outcomes, seed,
                         kernel.device, hung=state.hung)
    if raise_on_failure and not result.passed:
        raise AssertionError(result.report())
    return result


def _inputs(case: Any) -> AttentionInputs:
    return AttentionInputs(q=case.q, k=case.k, v=case.v, mask=case.mask, causal=bool(case.causal),
                           scale=case.scale)
