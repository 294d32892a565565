"""The statistical accuracy tier: is a kernel's *typical* error that of a correct kernel?

The worst-case bounds of :mod:`onlinesm.tolerance` grow like n·u (γ_n), while the errors of a
correct kernel grow like √n·u with high probability (Higham & Mary 2019; Ipsen & Zhou 2020).
So a kernel several times less accurate than a correct one (a bf16 accumulator between KV
tiles, a 1e-4-accurate exp on long rows) passes the worst-case check. This module compares the
kernel's error with the error distribution of a *numerics-matched baseline*: a simulated
correct kernel with the declared numerics (:mod:`onlinesm.simulate`), on a fixed, seeded
sample of long inputs.

The verdict (:func:`accuracy_statistical`). For every family x dtype cell, per *unit* (a
softmax row, an attention query: errors within one are correlated, so the unit is the sample
size):

- ``rmse``: t_r = log RMSE_kernel,r - the mean over the baseline's replicas (independent
  draws of the exp perturbation) of log RMSE_baseline,r. For a correct kernel t_r has mean
  zero, however spread one draw's RMSE is (an attention query's elements share most of their
  error, so its RMSE varies like |N(0, 1)|). The cell fails when the one-sided lower
  confidence bound of the geometric-mean ratio exp(mean t) exceeds ``min_effect`` (default
  1.5), at level 1 - alpha/m (Student t over the units; alpha = 1e-3 per run, m = the number
  of tests the run makes: Bonferroni).
- ``tail``: element errors are scaled (softmax: ulps of the exact answer; attention: units of
  u·Σ p|v|, the output's error scale, which cancellation in o = Σ p v does not shrink);
  k = the baseline's 99th percentile over the *whole cell* (units x elements x replicas, at
  least half a u for bf16/fp16, one for fp32); f_r = the fraction of the kernel's elements
  in unit r beyond k. A correct kernel has mean f = the baseline's fraction (about 0.01). The
  cell fails when the lower confidence bound of mean f exceeds ``min_effect`` x the
  baseline's fraction (at least its nominal 0.01) + 0.01: 0.025 in practice. (A per-unit
  threshold would rest on ``replicas`` independent draws only, since a unit's elements are
  correlated, and a fresh correct draw would beat it about once in replicas + 1 units.)

Magnitude only: no test on the mean signed error (a GPU's fast exp errs deterministically,
so a bias is legitimate). The minimum effect size keeps small systematic differences between
the model and a real correct kernel from alarming; the confidence bound keeps sampling noise
from alarming. The false-alarm rate is measured in bench/statistical_calibration.py
(reports/statistical.md): simulated correct kernels (the simulator with another random
stream) and real ones (references, torch.softmax, SDPA math).

Regression mode (:func:`compare_kernels`): two kernels on the same inputs; fails when the lower
confidence bound (level 1 - (1 - confidence)/cells) of the geometric-mean RMSE ratio NEW/OLD
exceeds ``factor`` (1.25). Returns a table per family and dtype: RMSE of each against the
exact answer, and of the exact answer rounded to the dtype (FlashAttention-3's reference point).

Kernel signatures are numpy: ``softmax(x) -> y`` over the last axis, and
``attention(q, k, v, mask, causal, scale) -> o``; outputs in the input dtype.

Example:
    >>> from onlinesm.reference import softmax_online_tiled
    >>> small = Settings(softmax_rows=8, softmax_length=512, replicas=2)
    >>> res = accuracy_statistical(lambda x: softmax_online_tiled(x), op="softmax",
    ...                            dtypes=("float32",), settings=small)
    >>> res.ok, len(res.cells)
    (True, 6)
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from onlinesm import oracle
from onlinesm.dtypes import resolve, to_numpy, ulp
from onlinesm.simulate import simulate_attention, simulate_softmax
from onlinesm.tolerance import Numerics

__all__ = [
    "Settings",
    "DEFAULT",
    "THOROUGH",
    "StatCell",
    "StatisticalResult",
    "RegressionRow",
    "RegressionResult",
    "softmax_sample",
    "attention_sample",
    "Baseline",
    "accuracy_statistical",
    "compare_kernels",
    "lower_bound_mean",
    "t_quantile",
]

DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The fixed sample and the test's parameters.

    Softmax: ``softmax_rows`` rows of ``softmax_length`` per family and dtype (scale of the
    finite entries 2**U(-1, 2): spread rows whose error is not a single element's). Attention:
    ``attention_shape`` = (batch, heads, seq_q, seq_k, head_dim) per family and dtype; every
    query is a unit. ``replicas`` baseline draws per input. ``alpha``: the false-alarm
    probability allowed per run (split over every test: Bonferroni). ``min_effect``: the
    ratio to the baseline that must be exceeded with confidence before a cell fails.
    """

    softmax_rows: int = 64
    softmax_length: int = 4096
    softmax_families: tuple[str, ...] = ("gaussian", "masked_scattered", "monotone")
    attention_shape: tuple[int, int, int, int, int] = (1, 2, 64, 2048, 64)
    attention_families: tuple[str, ...] = ("gaussian", "outliers", "huge_v_cancel")
    replicas: int = 4
    softmax_tile: int = 128
    attention_tile: int = 64
    seed: int = 20261130
    alpha: float = 1e-3
    min_effect: float = 1.5
    tail_quantile: float = 0.99
    tail_slack: float = 0.01

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha={self.alpha} must be in (0, 1), e.g. alpha=1e-3")
        if self.min_effect < 1:
            raise ValueError(f"min_effect={self.min_effect} must be >= 1, e.g. 1.5")
        if self.replicas < 1 or self.softmax_rows < 2:
            raise ValueError("replicas must be >= 1 and softmax_rows >= 2 (a t-interval needs "
                             f"two units); got replicas={self.replicas}, "
                             f"softmax_rows={self.softmax_rows}")


#: The default sample: ~10 s per kernel on a 2-core CPU (three dtypes, both metrics).
DEFAULT = Settings()
#: Longer rows and sequences, more queries, more families and replicas.
THOROUGH = Settings(softmax_rows=128, softmax_length=8192,
                    softmax_families=("gaussian", "masked_scattered", "monotone", "ties",
                                      "masked_prefix"),
                    attention_shape=(1, 4, 64, 4096, 128),
                    attention_families=("gaussian", "outliers", "huge_v_cancel", "causal",
                                        "gqa"),
                    replicas=8)


# ---------------------------------------------------------------------------------------------
# Statistics


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom (Cornish-Fisher expansion
    around the normal quantile; relative error below 1e-3 for df >= 10 and p <= 1 - 1e-7).

    >>> round(t_quantile(0.975, 30), 3)
    2.042
    """
    z = NormalDist().inv_cdf(p)
    v = float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


def lower_bound_mean(values: np.ndarray, level: float) -> tuple[float, float]:
    """(mean, one-sided lower confidence bound of the mean at ``level``) by a t-interval.

    >>> m, lo = lower_bound_mean(np.array([1.0, 1.2, 0.8, 1.1, 0.9]), 0.95)
    >>> round(m, 2), round(lo, 3)
    (1.0, 0.849)
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    mean = float(v.mean()) if n else math.nan
    if n < 2:
        return mean, -math.inf
    if not np.isfinite(v).all():
        return (math.inf, math.inf) if np.isposinf(v).any() and not np.isneginf(v).any() \
            else (mean, -math.inf)
    se = float(v.std(ddof=1)) / math.sqrt(n)
    return mean, mean - t_quantile(level, n - 1) * se


# ---------------------------------------------------------------------------------------------
# The fixed sample


def _rng(settings: Settings, op: str, family: str, dtype: str) -> np.random.Generator:
    key = zlib.crc32(f"{op}/{family}/{dtype}".encode())
    return np.random.default_rng([settings.seed, key])


def softmax_sample(family: str, dtype: Any, settings: Settings = DEFAULT) -> np.ndarray:
    """The fixed rows of one cell: [softmax_rows, softmax_length] of ``family`` in ``dtype``.

    >>> softmax_sample("gaussian", "bf16", Settings(softmax_rows=2, softmax_length=5)).shape
    (2, 5)
    """
    from onlinesm.strategies import generate_row

    name = resolve(dtype).name
    rng = _rng(settings, "softmax", family, name)
    rows = [generate_row(family, settings.softmax_length, name, rng,
                         scale=float(2.0 ** rng.uniform(-1, 2)))
            for _ in range(settings.softmax_rows)]
    return np.stack(rows)


def attention_sample(family: str, dtype: Any, settings: Settings = DEFAULT) -> Any:
    """The fixed :class:`~onlinesm.strategies.AttentionCase` of one cell (no random mask)."""
    from onlinesm.strategies import generate_attention

    name = resolve(dtype).name
    b, h, sq, sk, d = settings.attention_shape
    kw: dict[str, Any] = {}
    if family not in ("causal", "key_padding", "masked_leading_tiles"):
        kw["masked"] = False
    if family == "decode":
        sq = 1
    return generate_attention(family, name, _rng(settings, "attention", family, name), batch=b,
                              heads=h, seq_q=sq, seq_k=sk, head_dim=d, **kw)


# ---------------------------------------------------------------------------------------------
# Errors per unit


@dataclasses.dataclass
class _Units:
    """Per-unit errors of one output: RMSE, scaled element errors, and the exact answer's RMS."""

    rmse: np.ndarray  # [units]
    scaled: np.ndarray  # [units, elems]: |error| / the element's error scale (see _units)
    scale: np.ndarray  # [units]


def _units(actual: Any, exact: np.ndarray, out_dtype: str, width: int,
           elem_scale: np.ndarray | None = None) -> _Units:
    """Errors of ``actual`` per unit of ``width`` elements.

    ``scaled`` is the error in ulps of the exact answer (softmax: every output is positive, so
    the relative error means something), or, with ``elem_scale`` (attention: Σ_j p_j |v_j|
    per output element), in units of u·elem_scale: under cancellation (o ≪ Σ p|v|) an error
    in ulps of o measures how close o is to zero, not how accurate the kernel is.
    """
    a = to_numpy(actual).astype(np.float64).reshape(-1, width)
    e = exact.reshape(-1, width)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - e)
    err = np.where(np.isfinite(err), err, np.inf)
    with np.errstate(over="ignore"):
        rm = np.sqrt(np.mean(err * err, axis=-1))
    if elem_scale is None:
        unit = ulp(e, out_dtype)
    else:
        unit = resolve(out_dtype).u * elem_scale.reshape(-1, width)
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(err == 0, 0.0, err / unit)
    return _Units(rm, scaled, np.sqrt(np.mean(e * e, axis=-1)))


def _abs_weighted(c: Any) -> np.ndarray:
    """Σ_j p_j |v_j| per attention output element (float64): the scale of a correct kernel's
    error, which does not shrink when the signed sum o = Σ_j p_j v_j cancels."""
    return oracle.attention(c.q, c.k, np.abs(c.v.astype(np.float64)), mask=c.mask,
                            causal=c.causal, scale=c.scale)[0]


@dataclasses.dataclass
class _Cell:
    """Everything one family x dtype cell needs: exact answers and the baseline's errors."""

    family: str
    dtype: str
    run: Callable[[Callable[..., Any]], Any]  # calls a kernel on the cell's input
    exact: np.ndarray
    width: int
    elem_scale: np.ndarray | None  # attention: Σ p|v| per element (see _units)
    live: np.ndarray  # [units] units with a nonzero exact answer
    base_rmse: np.ndarray  # [units], pooled over replicas (reported)
    base_logs: np.ndarray  # [replicas, units]: log RMSE of each replica (ε as _log_rmse)
    tail_k: float  # the baseline's tail_quantile of scaled errors, over the whole cell
    base_tail: float  # fraction of the baseline's (live) elements beyond tail_k


def _make_cell(op: str, family: str, dtype: str, numerics: Numerics, settings: Settings
               ) -> _Cell:
    rng = _rng(settings, "baseline/" + op, family, dtype)
    elem_scale: np.ndarray | None = None
    if op == "softmax":
        x = softmax_sample(family, dtype, settings)
        exact = oracle.softmax(x)
        width = x.shape[-1]
        run = lambda fn: fn(x)  # noqa: E731
        sim = lambda: simulate_softmax(x, numerics=numerics, rng=rng,  # noqa: E731
                                       tile=settings.softmax_tile)
    else:
        c = attention_sample(family, dtype, settings)
        exact = oracle.attention(c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale)[0]
        elem_scale = _abs_weighted(c)
        width = c.q.shape[-1]
        run = lambda fn: fn(c.q, c.k, c.v, c.mask, c.causal, c.scale)  # noqa: E731
        sim = lambda: simulate_attention(  # noqa: E731
            c.q, c.k, c.v, mask=c.mask, causal=c.causal, scale=c.scale, numerics=numerics,
            rng=rng, tile=settings.attention_tile)
    reps = [_units(sim(), exact, dtype, width, elem_scale) for _ in range(settings.replicas)]
    live = reps[0].scale > 0
    base_rmse = np.sqrt(np.mean([r.rmse**2 for r in reps], axis=0))
    base_logs = np.stack([_log_rmse(r.rmse, r.scale, dtype) for r in reps])
    # One threshold for the whole cell (units x elements x replicas). Per unit it would rest
    # on `replicas` independent draws only: a unit's elements share most of their error (the
    # same perturbed p's weight every output element of an attention query), so a unit's own
    # p99 is the largest of a few draws, and a fresh correct draw beats it often.
    pooled = np.concatenate([r.scaled[live].ravel() for r in reps])
    k_min = 1.0 if dtype == "float32" else 0.5
    tail_k = max(float(np.quantile(pooled, settings.tail_quantile)), k_min) if pooled.size \
        else k_min
    base_tail = float(np.mean(pooled > tail_k)) if pooled.size else 0.0
    return _Cell(family, dtype, run, exact, width, elem_scale, live, base_rmse, base_logs,
                 tail_k, base_tail)


def _log_rmse(rmse: np.ndarray, scale: np.ndarray, dtype: str) -> np.ndarray:
    """log(rmse + ε), ε = 1e-3 u·scale (exact-zero errors stay finite); +inf for NaN."""
    eps = 1e-3 * resolve(dtype).u * scale
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.log(rmse + eps)
    return np.where(np.isnan(r), np.inf, r)


def _log_ratio(num: np.ndarray, den: np.ndarray, scale: np.ndarray, dtype: str) -> np.ndarray:
    """log((num + ε)/(den + ε)) with ε = 1e-3 u·scale: exact-zero errors stay finite."""
    eps = 1e-3 * resolve(dtype).u * scale
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        r = np.log((num + eps) / (den + eps))
    return np.where(np.isnan(r), np.inf, r)


# ---------------------------------------------------------------------------------------------
# The verdict


def _markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table: the header line, the separator, one line per row (cells as str())."""
    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"
    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


@dataclasses.dataclass
class StatCell:
    """One test of the statistical verdict (a family x dtype x metric)."""

    op: str
    family: str
    dtype: str
    metric: str  # "rmse" or "tail"
    units: int
    kernel: float  # rmse: geometric-mean RMSE in u·scale; tail: mean fraction beyond k
    baseline: float
    ratio: float  # kernel / baseline (rmse: geometric mean of per-unit ratios)
    lower: float  # lower confidence bound of the ratio (tail: of the kernel's fraction)
    threshold: float  # the cell fails when lower > threshold
    level: float  # one-sided confidence level of the bound
    ok: bool

    def line(self) -> str:
        state = "ok" if self.ok else "FAIL"
        if self.metric == "rmse":
            return (f"{state} {self.op} {self.family} {self.dtype} rmse: {self.ratio:.3g}x the "
                    f"baseline (lower bound {self.lower:.3g}, fails above {self.threshold:.3g}; "
                    f"{self.units} units)")
        return (f"{state} {self.op} {self.family} {self.dtype} tail: {self.kernel:.3g} of the "
                f"elements beyond the baseline's p99 ulp error (lower bound {self.lower:.3g}; "
                f"baseline {self.baseline:.3g}; fails above {self.threshold:.3g})")


@dataclasses.dataclass
class StatisticalResult:
    """The outcome of :func:`accuracy_statistical`: every cell, and the run's settings."""

    name: str
    op: str
    numerics: str
    cells: list[StatCell]
    alpha: float
    tests: int
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.cells)

    @property
    def failures(self) -> list[StatCell]:
        return [c for c in self.cells if not c.ok]

    def __bool__(self) -> bool:
        return self.ok

    def table(self) -> str:
        """A markdown table: one line per cell."""
        return _markdown_table(
            ["family", "dtype", "metric", "units", "kernel", "baseline", "ratio", "lower bound",
             "fails above", "verdict"],
            [[c.family, c.dtype, c.metric, c.units, f"{c.kernel:.3g}", f"{c.baseline:.3g}",
              f"{c.ratio:.3g}", f"{c.lower:.3g}", f"{c.threshold:.3g}", "ok" if c.ok else "FAIL"]
             for c in self.cells])

    def message(self) -> str:
        """The failure text (a summary line when every cell passed)."""
        head = (f"{self.name}: accuracy_statistical (statistical tier: typical error vs a "
                f"simulated correct kernel with {self.numerics}); {self.tests} tests, false-"
                f"alarm probability <= {self.alpha:g} per run")
        if self.ok:
            return head + ": ok"
        body = [c.line() for c in self.failures]
        return "\n".join([head + f": {len(self.failures)} FAILED"] + body + [
            "The kernel's typical error is larger than a correct kernel's with these numerics "
            "although every element may be within the worst-case bound: look for a low-"
            "precision accumulator, a partial result stored in a narrow dtype, or a less "
            "accurate exp; or declare the numerics the kernel really has (accumulate=, exp=, "
            "p_dtype=)."])


def _numerics(dtype: str, accumulate: str, exp: Any, allow_tf32: bool, p_dtype: str | None,
              op: str) -> Numerics:
    pd = None if op == "softmax" else (dtype if p_dtype == "input" else p_dtype)
    return Numerics(accumulate=accumulate, exp=exp, allow_tf32=allow_tf32, p_dtype=pd)


def _check_op(op: str) -> None:
    if op not in ("softmax", "attention"):
        raise ValueError(f"op={op!r} must be 'softmax' or 'attention'")


class Baseline:
    """The fixed sample, its exact answers and the simulated correct kernel's errors, built
    once for one op and set of declared numerics; :meth:`evaluate` judges any number of
    kernels against it (the engine can build it once per check run).

    >>> b = Baseline("softmax", dtypes=("float32",),
    ...              settings=Settings(softmax_rows=4, softmax_length=256, replicas=2))
    >>> from onlinesm.reference import softmax_offline
    >>> b.evaluate(softmax_offline).ok
    True
    """

    def __init__(self, op: str = "softmax", *, dtypes: Sequence[Any] = DTYPES,
                 accumulate: str = "float32", exp: Any = "fast", allow_tf32: bool = False,
                 p_dtype: str | None = "input", settings: Settings | None = None,
                 thorough: bool = False) -> None:
        _check_op(op)
        self.op = op
        self.settings = s = settings or (THOROUGH if thorough else DEFAULT)
        families = s.softmax_families if op == "softmax" else s.attention_families
        self.dtypes = [resolve(d).name for d in dtypes]
        self.tests = 2 * len(families) * len(self.dtypes)
        self.level = 1.0 - s.alpha / self.tests
        self.numerics = {dt: _numerics(dt, accumulate, exp, allow_tf32, p_dtype, op)
                         for dt in self.dtypes}
        self.describe = next(iter(self.numerics.values())).describe().replace(
            f"p_dtype={self.dtypes[0]}", "p_dtype=input")
        t0 = time.perf_counter()
        self.cells = [_make_cell(op, fam, dt, self.numerics[dt], s)
                      for dt in self.dtypes for fam in families]
        self.build_seconds = time.perf_counter() - t0

    def evaluate(self, fn: Callable[..., Any], name: str | None = None) -> StatisticalResult:
        """Run ``fn`` on every cell's input and test its errors against the baseline's."""
        s = self.settings
        t0 = time.perf_counter()
        out: list[StatCell] = []
        for cell in self.cells:
            dt, fam, op = cell.dtype, cell.family, self.op
            got = _units(cell.run(fn), cell.exact, dt, cell.width, cell.elem_scale)
            live = cell.live
            n = int(live.sum())
            u_sc = resolve(dt).u * got.scale[live]
            # t_r = log RMSE_kernel,r - mean over replicas of log RMSE_baseline,r: zero mean
            # for a correct kernel (another draw of the same distribution), whatever the
            # spread of one draw's RMSE (a ratio to the replicas' pooled RMSE would not be)
            with np.errstate(invalid="ignore"):
                lr = _log_rmse(got.rmse[live], got.scale[live], dt) - \
                    cell.base_logs[:, live].mean(axis=0)
            lr = np.where(np.isnan(lr), np.inf, lr)
            mean, lo = lower_bound_mean(lr, self.level)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                kern = float(np.exp(np.mean(np.log(got.rmse[live] / u_sc + 1e-3))))
                base = float(np.exp(np.mean(np.log(cell.base_rmse[live] / u_sc + 1e-3))))
            thr = s.min_effect
            out.append(StatCell(op, fam, dt, "rmse", n, kern, base, _exp(mean), _exp(lo), thr,
                                self.level, not _exp(lo) > thr))
            frac = (got.scaled[live] > cell.tail_k).mean(axis=-1)
            fm, flo = lower_bound_mean(frac, self.level)
            # the baseline's fraction is at least its nominal 1 - q: a baseline whose replicas
            # coincide (bf16 roundings that the exp model does not move) has ties at its p99
            thr_t = s.min_effect * max(cell.base_tail, 1.0 - s.tail_quantile) + s.tail_slack
            out.append(StatCell(op, fam, dt, "tail", n, fm, cell.base_tail,
                                fm / max(cell.base_tail, 1e-12), flo, thr_t, self.level,
                                not flo > thr_t))
        return StatisticalResult(name or getattr(fn, "__name__", "kernel"), self.op,
                                 self.describe, out, s.alpha, self.tests,
                                 time.perf_counter() - t0)


def _exp(v: float) -> float:
    return math.exp(min(v, 700.0))


def accuracy_statistical(
    fn: Callable[..., Any],
    *,
    op: str = "softmax",
    dtypes: Sequence[Any] = DTYPES,
    accumulate: str = "float32",
    exp: Any = "fast",
    allow_tf32: bool = False,
    p_dtype: str | None = "input",
    settings: Settings | None = None,
    thorough: bool = False,
    name: str | None = None,
) -> StatisticalResult:
    """Fail a kernel whose typical error exceeds a correct kernel's with the same numerics.

    ``fn`` is numpy: ``fn(x) -> y`` (softmax over the last axis) or ``fn(q, k, v, mask,
    causal, scale) -> o`` (attention; ``mask`` is None or bool, top-left causal alignment).
    ``accumulate``, ``exp``, ``allow_tf32`` and ``p_dtype`` ("input": P rounded to the input
    dtype; attention only) are the declared numerics, as in ``check_softmax`` /
    ``check_attention``. ``settings`` defaults to :data:`DEFAULT` (:data:`THOROUGH` with
    ``thorough=True``). See the module docstring for the test. ``seconds`` of the result
    includes building the baseline.
    """
    t0 = time.perf_counter()
    base = Baseline(op, dtypes=dtypes, accumulate=accumulate, exp=exp, allow_tf32=allow_tf32,
                    p_dtype=p_dtype, settings=settings, thorough=thorough)
    res = base.evaluate(fn, name)
    res.seconds = time.perf_counter() - t0
    return res


# ---------------------------------------------------------------------------------------------
# Regression mode


@dataclasses.dataclass
class RegressionRow:
    """One family x dtype of :func:`compare_kernels`: RMSE of each kernel against the exact
    answer (absolute, pooled over the cell), of the exact answer rounded to the dtype, and the
    geometric-mean per-unit ratio NEW/OLD with its lower confidence bound."""

    family: str
    dtype: str
    units: int
    rmse_new: float
    rmse_old: float
    rmse_rounded: float
    ratio: float
    lower: float
    ok: bool


@dataclasses.dataclass
class RegressionResult:
    """The outcome of :func:`compare_kernels`."""

    new: str
    old: str
    op: str
    rows: list[RegressionRow]
    factor: float
    confidence: float
    level: float
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def __bool__(self) -> bool:
        return self.ok

    def table(self) -> str:
        """Markdown: FlashAttention-3's error table (RMSE vs exact) plus the ratio test."""
        return _markdown_table(
            ["family", "dtype", "exact rounded", f"{self.old} (old)", f"{self.new} (new)",
             "new/old", "lower bound", "verdict"],
            [[r.family, r.dtype, f"{r.rmse_rounded:.3g}", f"{r.rmse_old:.3g}",
              f"{r.rmse_new:.3g}", f"{r.ratio:.3g}", f"{r.lower:.3g}", "ok" if r.ok else "FAIL"]
             for r in self.rows])

    def message(self) -> str:
        head = (f"{self.new} vs {self.old} ({self.op}): regression test, fails when the "
                f"{self.level:.6g} lower confidence bound of the RMSE ratio new/old exceeds "
                f"{self.factor:g}")
        bad = [r for r in self.rows if not r.ok]
        if not bad:
            return head + ": ok"
        return "\n".join([head + f": {len(bad)} FAILED"] + [
            f"FAIL {r.family} {r.dtype}: new RMSE {r.rmse_new:.3g} vs old {r.rmse_old:.3g} "
            f"({r.ratio:.3g}x, at least {r.lower:.3g}x with confidence)" for r in bad])


def compare_kernels(
    new: Callable[..., Any],
    old: Callable[..., Any],
    *,
    op: str = "softmax",
    dtypes: Sequence[Any] = DTYPES,
    settings: Settings | None = None,
    thorough: bool = False,
    factor: float = 1.25,
    confidence: float = 0.999,
    names: tuple[str, str] | None = None,
) -> RegressionResult:
    """Is NEW less accurate than OLD? Both run on the same fixed sample (see :class:`Settings`).

    Per unit (row / query) the log RMSE ratio new/old; the run fails when, for some family x
    dtype, the one-sided lower confidence bound of the geometric-mean ratio exceeds ``factor``.
    The confidence is split over the cells (Bonferroni), so the whole run's false-alarm
    probability for two equally accurate kernels is at most 1 - ``confidence``.

    >>> from onlinesm.reference import softmax_online_tiled, softmax_offline
    >>> s = Settings(softmax_rows=8, softmax_length=512, softmax_families=("gaussian",))
    >>> compare_kernels(softmax_offline, softmax_online_tiled, dtypes=("bf16",), settings=s).ok
    True
    """
    _check_op(op)
    if factor < 1 or not 0 < confidence < 1:
        raise ValueError(f"factor={factor} must be >= 1 and confidence={confidence} in (0, 1); "
                         "e.g. factor=1.25, confidence=0.999")
    s = settings or (THOROUGH if thorough else DEFAULT)
    families = s.softmax_families if op == "softmax" else s.attention_families
    dts = [resolve(d).name for d in dtypes]
    level = 1.0 - (1.0 - confidence) / (len(families) * len(dts))
    nn, on = names or (getattr(new, "__name__", "new"), getattr(old, "__name__", "old"))
    t0 = time.perf_counter()
    rows: list[RegressionRow] = []
    for dt in dts:
        for fam in families:
            if op == "softmax":
                x = softmax_sample(fam, dt, s)
                exact, width = oracle.softmax(x), x.shape[-1]
                a_new, a_old = new(x), old(x)
            else:
                c = attention_sample(fam, dt, s)
                exact = oracle.attention(c.q, c.k, c.v, mask=c.mask, causal=c.causal,
                                         scale=c.scale)[0]
                width = c.q.shape[-1]
                a_new = new(c.q, c.k, c.v, c.mask, c.causal, c.scale)
                a_old = old(c.q, c.k, c.v, c.mask, c.causal, c.scale)
            un, uo = _units(a_new, exact, dt, width), _units(a_old, exact, dt, width)
            rounded = _units(resolve(dt).round(exact), exact, dt, width)
            live = un.scale > 0
            lr = _log_ratio(un.rmse[live], uo.rmse[live], un.scale[live], dt)
            mean, lo = lower_bound_mean(lr, level)
            pool = lambda u: float(np.sqrt(np.mean(u.rmse[live] ** 2)))  # noqa: E731
            rows.append(RegressionRow(fam, dt, int(live.sum()), pool(un), pool(uo),
                                      pool(rounded), math.exp(mean), math.exp(lo),
                                      not math.exp(lo) > factor))
    return RegressionResult(nn, on, op, rows, factor, confidence, level,
                            time.perf_counter() - t0)
