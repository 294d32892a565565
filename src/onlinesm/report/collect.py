"""Run kernels over families x dtypes x lengths x seeds and collect their error statistics.

What: :func:`collect` calls every :class:`~onlinesm.report.builtin.ReportKernel` on inputs
made by the strategy generators (:func:`onlinesm.strategies.generate_row`,
:func:`~onlinesm.strategies.generate_attention`, plain numpy: no Hypothesis), compares each
output with the float64 oracle under the kernel's own error bound
(:mod:`onlinesm.tolerance`), and returns a :class:`Collection`: per-case results, per-row
points for the plots, ulp samples for the histograms, and the verdict per kernel and dtype.

Why not ``check``: a report wants the *distribution* of errors over a fixed, reproducible grid
(every family at every length, seeded), not a search for one failing input. It checks what the
error statistics show: accuracy within the bound (element by element, -inf entries exactly 0),
and the declared fully-masked convention. The other properties (determinism, shift, ...) are
``onlinesm check``'s job.

A failing (kernel, dtype) gets one minimal counterexample: the worst failing row, reduced by
:func:`onlinesm.failures.shrink_and_save`, as ``onlinesm check`` does
(replay with ``onlinesm replay FILE``).

Example:
    >>> from onlinesm.report.builtin import builtin_kernels
    >>> ks = builtin_kernels("softmax", device="cpu", include_triton=False)[:1]
    >>> c = collect(ks, [], Settings(dtypes=("float32",), lengths=(8,), seeds=1,
    ...                              families=("gaussian",)))
    >>> c.verdicts[0]["status"]
    'pass'
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from onlinesm.harness import AttentionInputs, Kernel, KernelError
from onlinesm.metrics import ulp_error
from onlinesm.properties import regular_rows
from onlinesm.engine import inside
from onlinesm.report.builtin import ReportKernel, declared_domain

__all__ = ["Settings", "CaseResult", "Collection", "collect", "Progress", "DEFAULT_LENGTHS",
           "THOROUGH_LENGTHS", "DEFAULT_SEQS", "THOROUGH_SEQS"]

#: Softmax row lengths of the default run: short, tile edges ± 1, a vocabulary-like size.
DEFAULT_LENGTHS: tuple[int, ...] = (16, 65, 129, 257, 1000, 1025, 4097)
THOROUGH_LENGTHS: tuple[int, ...] = (1, 2, 16, 63, 64, 65, 127, 128, 129, 257, 1000, 1024, 1025,
                                     2049, 4097, 8192, 16385, 65536)
#: Attention key lengths (Sk) of the default run; Sq follows from the family.
DEFAULT_SEQS: tuple[int, ...] = (16, 40, 80, 256)
THOROUGH_SEQS: tuple[int, ...] = (1, 16, 40, 64, 80, 128, 256, 512, 1024)

_HIST_SAMPLE = 4096  # ulp errors kept per case for the histograms


@dataclasses.dataclass
class Settings:
    """What to run. Defaults are the default report (a few minutes on a 2-core CPU)."""

    dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16")
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    seqs: tuple[int, ...] = DEFAULT_SEQS
    seeds: int = 2
    seed: int = 0
    rows: int = 4
    families: tuple[str, ...] | None = None  # softmax; None: the default families
    attention_families: tuple[str, ...] | None = None
    heads: int = 2
    head_dim: int = 64
    device: str = "cpu"
    minimise: bool = True
    fa3: bool = True
    fa3_shape: tuple[int, int, int, int] = (1, 2, 128, 64)  # B, H, S, D
    fa3_seeds: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d


@dataclasses.dataclass
class CaseResult:
    """One kernel on one generated input (a batch of rows, or one attention call)."""

    kernel: str
    op: str
    dtype: str
    family: str
    length: int  # softmax: row length; attention: Sk
    seed: int
    elements: int = 0
    failed: int = 0
    max_ulp: float = 0.0
    max_bound_use: float = 0.0
    rmse: float = 0.0
    convention_ok: bool = True
    error: str | None = None
    seq_q: int = 0
    inputs: Any = dataclasses.field(default=None, repr=False)  # kept for the counterexample
    refused: bool = False  # a declared refusal: outside the kernel's domain, not a result

    @property
    def ok(self) -> bool:
        return self.error is None and self.convention_ok and self.failed == 0


@dataclasses.dataclass
class Collection:
    """Everything :func:`collect` found; :mod:`onlinesm.report.schema` serialises it."""

    settings: Settings
    kernels: list[ReportKernel]
    cases: list[CaseResult]
    points: list[dict[str, Any]]  # per row / per call: for the plots
    ulps: dict[tuple[str, str, str], list[np.ndarray]]  # (kernel, op, dtype) -> samples
    family_ulps: dict[tuple[str, str, str, str], list[np.ndarray]]
    stats: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    verdicts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    fa3: dict[str, Any] | None = None
    seconds: float = 0.0
    refused: dict[tuple[str, str, str], int] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(v["status"] == "pass" for v in self.verdicts)


class Progress:
    """A plain-text progress bar on stderr: ``[12/80] softmax triton bfloat16 masked_prefix``."""

    def __init__(self, total: int, *, quiet: bool = False, stream: Any = None) -> None:
        self.total, self.done, self.quiet = max(total, 1), 0, quiet
        self.stream = stream or sys.stderr
        self.start = time.monotonic()

    def step(self, text: str) -> None:
        self.done += 1
        if not self.quiet:
            width = len(str(self.total))
            elapsed = time.monotonic() - self.start
            print(f"[{self.done:>{width}}/{self.total}] {text}  ({elapsed:.0f}s)",
                  file=self.stream, flush=True)

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)


# ---------------------------------------------------------------------------------------------
# helpers


def _spread(x64: np.ndarray) -> np.ndarray:
    finite = np.isfinite(x64)
    hi = np.where(finite, x64, -np.inf).max(axis=-1)
    lo = np.where(finite, x64, np.inf).min(axis=-1)
    return np.where(finite.any(axis=-1), hi - lo, 0.0)


def _sample(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    a = a[np.isfinite(a)]
    if a.size > _HIST_SAMPLE:
        a = rng.choice(a, _HIST_SAMPLE, replace=False)
    return a.astype(np.float32)


def _softmax_inputs(settings: Settings, dtype: str, family: str) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
    from onlinesm import oracle
    from onlinesm.strategies import generate_row

    out = []
    for length in settings.lengths:
        for s in range(settings.seeds):
            rng = np.random.default_rng([settings.seed, s, length, _stable(family), _stable(dtype)])
            x = np.stack([generate_row(family, length, dtype, rng) for _ in range(settings.rows)])
            with np.errstate(all="ignore"):
                exact = oracle.softmax(x)
            out.append((length, s, x, exact))
    return out


def _stable(text: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(text))


def _report_domain(settings: Settings) -> Any:
    """The report grid's attention domain: every family, batch 1, ``settings.heads`` heads of
    ``settings.head_dim``, any length (the family's shape rules live in onlinesm.strategies)."""
    from onlinesm.strategies import default_domain

    longest = max(max(settings.seqs, default=1), 80)
    return default_domain(head_dims=(settings.head_dim,), max_batch=1,
                          max_heads=max(settings.heads, 1), max_seq_q=longest,
                          max_seq_k=longest, allow_gqa=True)


def _attention_inputs(settings: Settings, dtype: str, family: str) -> list[tuple[int, int, Any, Any]]:
    from onlinesm import oracle
    from onlinesm.strategies import family_shape, generate_attention

    out = []
    domain = _report_domain(settings)
    for seq in settings.seqs:
        shape = family_shape(family, domain, seq)  # None: the family has no case at this size
        if shape is None:
            continue
        for s in range(settings.seeds):
            rng = np.random.default_rng([settings.seed, s, seq, _stable(family), _stable(dtype), 7])
            case = generate_attention(family, dtype, rng, **shape)
            inp = AttentionInputs(case.q, case.k, case.v, case.mask, bool(case.causal), case.scale)
            with np.errstate(all="ignore"):
                exact = oracle.attention(inp.q, inp.k, inp.v, mask=inp.mask, causal=inp.causal,
                                         scale=inp.scale)
            out.append((seq, s, inp, exact))
    return out


# ---------------------------------------------------------------------------------------------
# one kernel on one input


def _called(res: CaseResult, call: Callable[[], Any]) -> Any:
    """The kernel's output, or None with the contract breach recorded on ``res``."""
    try:
        return call()
    except KernelError as err:
        if err.kind == "refused":
            res.refused = True
        else:
            res.error = str(err)
        return None


def _softmax_case(kernel: Kernel, rk: ReportKernel, dtype: str, family: str, length: int,
                  seed: int, x: np.ndarray, exact: np.ndarray, coll: Collection,
                  bounds: dict[Any, Any], rng: np.random.Generator) -> CaseResult:
    """One call, aggregated from the property measures: accuracy and the special-row
    conventions (fully masked, nonfinite), exactly as ``onlinesm check`` decides them."""
    from onlinesm.properties import measure_softmax_accuracy, measure_softmax_special_rows

    res = CaseResult(rk.name, "softmax", dtype, family, length, seed, inputs=x)
    y = _called(res, lambda: kernel.softmax(x))
    if y is None:
        return res
    conv = rk.conventions.for_dtype(dtype)
    res.convention_ok = measure_softmax_special_rows(kernel, x, conv, y=y).ok
    acc = measure_softmax_accuracy(kernel, x, conv, y=y, exact=exact)
    if acc.allowed is None:
        return res
    regular = regular_rows(x)
    ex, got = acc.exact, acc.actual
    with np.errstate(all="ignore"):
        ulps = ulp_error(got, ex, dtype)
        use = acc.bound_use
        err2 = np.where(np.isfinite(got), (got - ex) ** 2, np.inf)
    res.elements = int(ulps.size)
    res.failed = int((use > 1).sum())
    res.max_ulp = float(ulps.max())
    res.max_bound_use = float(use.max())
    res.rmse = float(np.sqrt(err2.mean()))
    spreads = _spread(x.astype(np.float64)[regular])
    row_ulp, row_use = ulps.max(axis=-1), use.max(axis=-1)
    for i in range(row_ulp.size):
        coll.points.append(dict(kernel=rk.name, op="softmax", dtype=dtype, family=family,
                                length=length, spread=float(spreads[i]),
                                max_ulp=float(row_ulp[i]), bound_use=float(row_use[i])))
    sample = _sample(ulps, rng)
    coll.ulps.setdefault((rk.name, "softmax", dtype), []).append(sample)
    coll.family_ulps.setdefault((rk.name, "softmax", dtype, family), []).append(sample)
    return res


def _attention_case(kernel: Kernel, rk: ReportKernel, dtype: str, family: str, seq: int,
                    seed: int, inp: AttentionInputs, exact: Any, coll: Collection,
                    rng: np.random.Generator) -> CaseResult:
    """One call, aggregated from the property measures (accuracy of o and lse, the
    fully-masked convention), exactly as ``onlinesm check`` decides them."""
    from onlinesm.properties import measure_attention_accuracy, measure_attention_fully_masked

    sq, sk = inp.q.shape[2], inp.k.shape[2]
    res = CaseResult(rk.name, "attention", dtype, family, sk, seed, seq_q=sq, inputs=inp)
    out = _called(res, lambda: kernel.attention(inp))
    if out is None:
        return res
    conv = rk.conventions.for_dtype(dtype)
    if inp.causal and conv.causal_align != "top-left":
        exact = None  # the grid's exact answer is top-left: the measure computes this kernel's
    res.convention_ok = measure_attention_fully_masked(kernel, inp, conv, out=out).ok
    o, lse = out
    n_o = int(np.count_nonzero(_live(inp, conv))) * inp.q.shape[-1]
    if n_o == 0:
        return res
    acc = measure_attention_accuracy(kernel, inp, conv, out=out, exact=exact)
    got, ex = acc.actual[:n_o], acc.exact[:n_o]
    with np.errstate(all="ignore"):
        use_all = acc.bound_use
        ulps = ulp_error(got, ex, dtype)
        err2 = np.where(np.isfinite(got), (got - ex) ** 2, np.inf)
    res.elements = int(ulps.size)
    res.failed = int((use_all > 1).sum())
    res.max_ulp = float(ulps.max())
    res.max_bound_use = float(max(use_all[:n_o].max(), use_all[n_o:].max(initial=0.0)))
    res.rmse = float(np.sqrt(err2.mean()))
    coll.points.append(dict(kernel=rk.name, op="attention", dtype=dtype, family=family,
                            length=sk, seq_q=sq, spread=0.0, max_ulp=res.max_ulp,
                            bound_use=res.max_bound_use, rmse=res.rmse))
    sample = _sample(ulps.ravel(), rng)
    coll.ulps.setdefault((rk.name, "attention", dtype), []).append(sample)
    coll.family_ulps.setdefault((rk.name, "attention", dtype, family), []).append(sample)
    return res


def _live(inp: AttentionInputs, conv: Any) -> np.ndarray:
    from onlinesm.oracle import visible_keys

    return visible_keys(inp.q.shape[:3] + (inp.k.shape[2],), mask=inp.mask, causal=inp.causal,
                        causal_align=conv.causal_align).any(axis=-1)


# ---------------------------------------------------------------------------------------------
# the driver


def _families(op: str, settings: Settings) -> list[str]:
    from onlinesm.strategies import ATTENTION_FAMILIES, DEFAULT_FAMILIES

    if op == "softmax":
        return list(settings.families or DEFAULT_FAMILIES)
    return list(settings.attention_families or ATTENTION_FAMILIES)


def collect(softmax_kernels: Iterable[ReportKernel], attention_kernels: Iterable[ReportKernel],
            settings: Settings, *, progress: Progress | None = None,
            counterexample_dir: Path | None = None, replay_dir: str | None = None) -> Collection:
    """Run the kernels over the grid of ``settings``; return the :class:`Collection`.

    ``counterexample_dir`` is where failing inputs are saved (the report's folder while it is
    being built), ``replay_dir`` the path the replay command names (the final folder).
    """
    with warnings.catch_warnings():
        # kernels computing x - m on huge rows overflow to -inf on purpose (exp gives 0)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _collect(list(softmax_kernels), list(attention_kernels), settings, progress,
                        counterexample_dir, replay_dir)


def _collect(sm: list[ReportKernel], at: list[ReportKernel], settings: Settings,
             progress: Progress | None, counterexample_dir: Path | None,
             replay_dir: str | None) -> Collection:
    start = time.monotonic()
    coll = Collection(settings, sm + at, [], [], {}, {})
    jobs = [("softmax", k, d, f) for d in settings.dtypes for f in _families("softmax", settings)
            for k in sm]
    jobs += [("attention", k, d, f) for d in settings.dtypes
             for f in _families("attention", settings) for k in at]
    fa3_steps = len(at) + 1 if (settings.fa3 and at) else 0
    progress = progress or Progress(len(jobs) + fa3_steps, quiet=True)
    progress.total = max(len(jobs) + fa3_steps, 1)
    harness = {id(rk): Kernel(rk.fn, op=rk.op, backend=rk.backend, device=settings.device,
                              name=rk.name, target=rk.target,
                              refusals=rk.domain.unsupported if rk.domain else ())
               for rk in sm + at}
    # each kernel's grid (its own head dim) and the domain it is held to, once
    grids = {id(rk): settings if rk.head_dim is None
             else dataclasses.replace(settings, head_dim=rk.head_dim) for rk in sm + at}
    helds = {id(rk): None if rk.domain is None
             else declared_domain(rk.domain, grids[id(rk)].head_dim) for rk in sm + at}
    inputs_cache: dict[tuple[str, str, str, int], list[Any]] = {}
    bounds: dict[Any, Any] = {}
    rng = np.random.default_rng(settings.seed)
    for op, rk, dtype, family in jobs:
        progress.step(f"{op} {rk.name} {dtype} {family}")
        grid, held = grids[id(rk)], helds[id(rk)]
        if held is not None and (dtype not in held.dtypes
                                 or (held.families is not None and family not in held.families)):
            continue  # no inputs made for a dtype or family the kernel does not declare
        key = (op, dtype, family, grid.head_dim)
        if key not in inputs_cache:
            bounds.clear()
            inputs_cache.clear()
            inputs_cache[key] = (_softmax_inputs if op == "softmax" else _attention_inputs)(
                grid, dtype, family)
        own = rk.lengths if op == "softmax" else rk.seqs
        for length, seed, inp, exact in inputs_cache[key]:
            if own is not None and length not in own:
                continue  # another kernel's grid
            if held is not None and not inside(op, inp, held):
                continue  # outside what the kernel declares: `onlinesm check` never calls it so
            if op == "softmax":
                if rk.max_len is not None and length > rk.max_len:
                    continue
                res = _softmax_case(harness[id(rk)], rk, dtype, family, length, seed, inp, exact,
                                    coll, bounds, rng)
            else:
                if rk.max_seq is not None and max(inp.q.shape[2], inp.k.shape[2]) > rk.max_seq:
                    continue
                res = _attention_case(harness[id(rk)], rk, dtype, family, length, seed, inp,
                                      exact, coll, rng)
            if res.refused:  # counted, as `onlinesm check` counts its rejections
                where = (rk.name, op, dtype)
                coll.refused[where] = coll.refused.get(where, 0) + 1
                continue
            coll.cases.append(res)
    inputs_cache.clear()
    _summarise(coll)
    if settings.minimise:
        _counterexamples(coll, harness, progress, counterexample_dir, replay_dir)
    if settings.fa3 and at:
        from onlinesm.report.fa3 import fa3_table

        coll.fa3 = fa3_table(at, harness, settings, progress)
    coll.seconds = time.monotonic() - start
    return coll


def _pct(samples: list[np.ndarray], q: float) -> float:
    if not samples:
        return 0.0
    a = np.concatenate(samples)
    return float(np.percentile(a, q)) if a.size else 0.0


def _summarise(coll: Collection) -> None:
    """Per-family statistics and the verdict per (kernel, dtype)."""
    groups: dict[tuple[str, str, str, str], list[CaseResult]] = {}
    for c in coll.cases:
        groups.setdefault((c.kernel, c.op, c.dtype, c.family), []).append(c)
    for (kernel, op, dtype, family), cs in groups.items():
        samples = coll.family_ulps.get((kernel, op, dtype, family), [])
        n = sum(c.elements for c in cs)
        rmse = (float(np.sqrt(sum(c.rmse ** 2 * c.elements for c in cs) / n)) if n else 0.0)
        coll.stats.append(dict(
            kernel=kernel, op=op, dtype=dtype, family=family, cases=len(cs), elements=n,
            failed_elements=sum(c.failed for c in cs),
            max_ulp=max((c.max_ulp for c in cs), default=0.0),
            p99_ulp=_pct(samples, 99.0),
            mean_ulp=float(np.concatenate(samples).mean()) if samples and n else 0.0,
            rmse=rmse,
            max_bound_use=max((c.max_bound_use for c in cs), default=0.0),
            convention_ok=all(c.convention_ok for c in cs),
            errors=sum(c.error is not None for c in cs),
            status="pass" if all(c.ok for c in cs) else "fail",
        ))
    by_kd: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for s in coll.stats:
        by_kd.setdefault((s["kernel"], s["op"], s["dtype"]), []).append(s)
    for (kernel, op, dtype), ss in by_kd.items():
        worst = max(ss, key=lambda s: (s["status"] == "fail", s["max_bound_use"]))
        failing = [s["family"] for s in ss if s["status"] == "fail"]
        coll.verdicts.append(dict(
            kernel=kernel, op=op, dtype=dtype, status="fail" if failing else "pass",
            worst_bound_use=max(s["max_bound_use"] for s in ss),
            worst_family=worst["family"], failing_families=failing,
            max_ulp=max(s["max_ulp"] for s in ss),
            cases=sum(s["cases"] for s in ss), elements=sum(s["elements"] for s in ss),
            refused=coll.refused.get((kernel, op, dtype), 0),
        ))


def _counterexamples(coll: Collection, harness: dict[int, Kernel], progress: Progress,
                     directory: Path | None, replay_dir: str | None) -> None:
    """One minimal, saved counterexample per failing (kernel, dtype)."""
    from onlinesm.failures import shrink_and_save

    by_name = {rk.name: rk for rk in coll.kernels}
    for v in coll.verdicts:
        if v["status"] != "fail":
            continue
        bad = [c for c in coll.cases if c.kernel == v["kernel"] and c.op == v["op"]
               and c.dtype == v["dtype"] and not c.ok]
        if not bad:
            continue
        case = max(bad, key=lambda c: (c.error is not None or not c.convention_ok,
                                        c.max_bound_use))
        rk = by_name[case.kernel]
        kernel = harness[id(rk)]
        conv = rk.conventions.for_dtype(case.dtype)
        prop = "fully_masked" if (case.error is None and not case.convention_ok) else "accuracy"
        progress.say(f"minimising the counterexample: {case.op} {case.kernel} {case.dtype} "
                     f"{case.family} ({prop})")
        fields = {"x": case.inputs} if case.op == "softmax" else dataclasses.asdict(case.inputs)
        inputs, message, saved = shrink_and_save(kernel, case.op, prop, conv, fields, None,
                                                 directory=directory,
                                                 budget={"max_calls": 80, "max_seconds": 30.0})
        message = message or case.error or ""
        small = inputs["x"] if case.op == "softmax" else case.inputs.q
        path = None
        if saved is not None:
            path = f"{replay_dir}/counterexamples/{Path(saved).name}" if replay_dir else saved
        coll.failures.append(dict(
            kernel=case.kernel, op=case.op, dtype=case.dtype, family=case.family,
            property=prop, length=case.length, bound_use=case.max_bound_use,
            shape=list(np.shape(small)), message=message, replay=path,
        ))
