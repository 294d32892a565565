"""The property catalogue (``docs/conventions.md``): one small function per property.

Each property takes the :class:`~onlinesm.harness.Kernel`, one generated input and the
kernel's declared :class:`Conventions`, and raises :class:`PropertyFailure` (an
``AssertionError``) with a readable message when the kernel breaks it. Bitwise properties
(determinism, batch invariance, "-inf gives exactly 0", inputs unchanged) compare bits;
properties that relate two rounded results (shift, permutation, split/merge, a row alone vs in
a batch) allow the sum of both results' bounds.

The registries :data:`SOFTMAX_PROPERTIES` and :data:`ATTENTION_PROPERTIES` map each name to
its raising function; the docstring's first line says what bug it catches. Each property also
has a non-raising *measure* form (:data:`SOFTMAX_MEASURES`, :data:`ATTENTION_MEASURES`)
returning a :class:`Measurement` (the verdict, the message, and for the bounded properties the
per-element bound use); the raising form is "measure, then raise if not ok". ``onlinesm
check`` calls the raising forms, ``onlinesm report`` aggregates the measure forms: one
measurement, two views.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from onlinesm import oracle
from onlinesm.dtypes import resolve, same_bits
from onlinesm.metrics import bound_use
from onlinesm.harness import AttentionInputs, Kernel
from onlinesm.declarations import Conventions
from onlinesm.tolerance import attention_bound, compare, relation_bound, rowsum_bound, softmax_bound

__all__ = [
    "Conventions",
    "Measurement",
    "PropertyFailure",
    "Untested",
    "SOFTMAX_MEASURES",
    "ATTENTION_MEASURES",
    "measure_softmax_accuracy",
    "measure_softmax_fully_masked",
    "measure_softmax_nonfinite",
    "measure_softmax_special_rows",
    "measure_attention_accuracy",
    "measure_attention_fully_masked",
    "SOFTMAX_PROPERTIES",
    "ATTENTION_PROPERTIES",
    "regular_rows",
]


class Untested(Exception):
    """The input holds nothing this property can test (no mask, no causal flag, one key, ...).

    Not a failure and not a pass: the engine counts such examples apart, so that ``pass (N)``
    counts only examples that tested something, and a property no example tested is n/a.
    """


class PropertyFailure(AssertionError):
    """A property does not hold on an input; the message says where and by how much."""

    def __init__(self, prop: str, message: str, *, worst_row: int | None = None,
                 bound_use: float = np.inf) -> None:
        super().__init__(message)
        self.prop = prop
        self.worst_row = worst_row  # which row of the batch failed (softmax), for the minimiser
        self.bound_use = bound_use
        self.comparison: Any = None  # the Comparison behind a bound failure, when there is one
        self.measurement: Any = None  # the Measurement behind it, when there is one


@dataclasses.dataclass
class Measurement:
    """What one property measured on one input, without raising: the verdict and its evidence.

    - ``ok`` and ``message`` (the exact failure text the raising form raises with);
    - ``actual``, ``exact``, ``allowed``: for a property with a bound, the compared elements
      (float64) and the allowed error of each; ``bound_use`` = error / allowed per element;
    - ``conventions``: convention verdicts, e.g. ``{"fully_masked": True}``.

    >>> Measurement("range").ok
    True
    """

    prop: str
    ok: bool = True
    message: str = ""
    worst_row: int | None = None
    max_bound_use: float = 0.0
    actual: np.ndarray | None = None
    exact: np.ndarray | None = None
    allowed: np.ndarray | None = None
    conventions: dict[str, bool] = dataclasses.field(default_factory=dict)
    #: False when the input held nothing this property tests (then ``ok`` says nothing)
    tested: bool = True

    @property
    def bound_use(self) -> np.ndarray | None:
        """error / allowed per compared element (None without a bound)."""
        if self.allowed is None:
            return None
        with np.errstate(all="ignore"):
            return bound_use(self.actual, self.exact, self.allowed)

    def raise_if_failed(self) -> None:
        """The raising form: :class:`PropertyFailure` with the message, when not ok."""
        if not self.ok:
            failure = PropertyFailure(self.prop, self.message, worst_row=self.worst_row,
                                      bound_use=self.max_bound_use)
            failure.measurement = self  # the evidence, e.g. for the interpreter-suspect test
            raise failure


def _raising(measure: Callable[..., Measurement]) -> Callable[..., None]:
    """The raising form ``prop(kernel, input, conv)`` of a measure form: measure, then raise."""
    def prop(kernel: Any, inp: Any, conv: Conventions) -> None:
        m = measure(kernel, inp, conv)
        m.raise_if_failed()
        if not m.tested:
            raise Untested(f"{m.prop}: nothing to test in this input")
    prop.__name__ = measure.__name__.replace("measure_", "")
    prop.__doc__ = measure.__doc__
    return prop


def _measured(raising: Callable[..., None], prop: str) -> Callable[..., Measurement]:
    """The measure form of a property whose checks all end in raising: its verdict as a record."""
    def measure(kernel: Any, inp: Any, conv: Conventions) -> Measurement:
        try:
            raising(kernel, inp, conv)
        except PropertyFailure as err:
            return Measurement(prop, ok=False, message=str(err), worst_row=err.worst_row,
                               max_bound_use=err.bound_use)
        except Untested:
            return Measurement(prop, tested=False)
        return Measurement(prop)
    measure.__doc__ = raising.__doc__
    return measure


def _measures(properties: dict[str, Callable[..., None]], **measure_forms: Callable[..., Measurement]
              ) -> dict[str, Callable[..., Measurement]]:
    """name -> measure form of each property: ``measure_forms`` where given, else :func:`_measured`."""
    return {name: measure_forms.get(name) or _measured(prop, name)
            for name, prop in properties.items()}


# ---------------------------------------------------------------------------------------------
# Softmax


def regular_rows(x: np.ndarray) -> np.ndarray:
    """Rows with at least one finite entry and no NaN or +inf: where accuracy is defined."""
    x64 = x.astype(np.float64)
    return np.isfinite(x64).any(axis=-1) & ~np.isnan(x64).any(axis=-1) & ~np.isposinf(x64).any(axis=-1)


def _fail_if(cmp: Any, prop: str, x: np.ndarray, *, name: str, intro: str = "") -> None:
    if not cmp.ok:
        row = cmp.worst_index[0] if cmp.worst_index else None
        text = (intro + "\n" if intro else "") + cmp.message(inputs=x, name=name)
        failure = PropertyFailure(prop, text, worst_row=row, bound_use=cmp.max_bound_use)
        failure.comparison = cmp  # the worst element, for the interpreter-suspect test
        raise failure


def _fail_at_first(bad: np.ndarray, prop: str, x: np.ndarray,
                   describe: Callable[[int, int], str]) -> None:
    """Raise for the first flagged element of a [rows, cols] mask, with its row shown."""
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0])
        raise PropertyFailure(
            prop, f"{describe(r, c)} ({int(bad.sum())} such elements)\n" + _row_text(x[r], c),
            worst_row=r)


def measure_softmax_accuracy(kernel: Kernel, x: np.ndarray, conv: Conventions, *,
                             y: np.ndarray | None = None,
                             exact: np.ndarray | None = None) -> Measurement:
    """Every element within the error-analysis bound of the exact softmax (all bug classes).

    ``y`` is the kernel's output when already at hand (one call serves several measures);
    ``exact`` the oracle's softmax of ``x``, when already at hand. The compared elements are
    those of the regular rows (:func:`regular_rows`).
    """
    y = kernel.softmax(x) if y is None else y
    rows = regular_rows(x)
    if not rows.any():
        return Measurement("accuracy", tested=False)  # no regular row to measure
    xs = x[rows]
    bound = softmax_bound(xs, out_dtype=x.dtype, numerics=conv.numerics,
                          exact=None if exact is None else exact[rows])
    cmp = compare(y[rows], bound.exact, bound, out_dtype=x.dtype)
    out = Measurement("accuracy", ok=cmp.ok, max_bound_use=cmp.max_bound_use,
                      actual=y[rows].astype(np.float64), exact=bound.exact, allowed=bound.abs)
    if not cmp.ok:
        cmp.worst_index = (int(np.flatnonzero(rows)[cmp.worst_index[0]]),) + cmp.worst_index[1:]
        out.worst_row = cmp.worst_index[0]
        out.message = cmp.message(inputs=x, name="softmax accuracy")
    return out


def softmax_row_sum(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """Each row sums to 1 within its bound (a wrong normaliser, a dropped or doubled tile)."""
    y = kernel.softmax(x)
    rows = regular_rows(x)
    if not rows.any():
        raise Untested("row_sum: no regular row")
    xs = x[rows]
    total = y[rows].astype(np.float64).sum(axis=-1)
    bound = rowsum_bound(xs, out_dtype=x.dtype, numerics=conv.numerics)
    cmp = compare(total, np.ones_like(total), bound, out_dtype=np.float64)
    if not cmp.ok:
        row = int(np.flatnonzero(rows)[cmp.worst_index[0]])
        raise PropertyFailure(
            "row_sum",
            f"softmax row sum: row {row} sums to {float(total[cmp.worst_index[0]])!r}, "
            f"|sum - 1| = {abs(total[cmp.worst_index[0]] - 1):.3g} > allowed "
            f"{cmp.worst_bound:.3g} ({cmp.n_failed} of {cmp.n_checked} rows)\n"
            + _row_text(x[row]),
            worst_row=row, bound_use=cmp.max_bound_use,
        )


def softmax_range(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """Outputs finite and in [0, 1] on regular rows (overflow, NaN from -inf - -inf, bad guards)."""
    y = kernel.softmax(x).astype(np.float64)
    rows = regular_rows(x)
    if not rows.any():
        raise Untested("range: no regular row")
    bad = rows[:, None] & ~((y >= 0) & (y <= 1))  # NaN fails both comparisons
    _fail_at_first(bad, "range", x, lambda r, c: (
        f"softmax range: y[{r}, {c}] = {float(y[r, c])!r} is not a finite value in [0, 1]"))


def softmax_masked_zero(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """A -inf input gives exactly 0 (bitwise) in rows that have a finite entry."""
    y = kernel.softmax(x).astype(np.float64)
    masked = regular_rows(x)[:, None] & np.isneginf(x.astype(np.float64))
    if not masked.any():
        raise Untested("masked_zero: no -inf entry in a row with a finite one")
    bad = masked & (y != 0)
    _fail_at_first(bad, "masked_zero", x, lambda r, c: (
        f"softmax masked entry: x[{r}, {c}] = -inf but y[{r}, {c}] = {float(y[r, c])!r}, "
        "expected exactly 0"))


def _meets(convention: str, got: np.ndarray, uniform: np.ndarray, tol: float) -> bool:
    """Whether a fully masked row's output follows the convention: zeros, NaN, or uniform
    (within ``tol`` of ``uniform``: 1/n for softmax, the mean of V for attention)."""
    if convention == "zeros":
        return bool(np.all(got == 0))
    if convention == "nan":
        return bool(np.all(np.isnan(got)))
    return bool(np.all(np.abs(got - uniform) <= tol))


def measure_softmax_fully_masked(kernel: Kernel, x: np.ndarray, conv: Conventions, *,
                                 y: np.ndarray | None = None) -> Measurement:
    """A row of only -inf follows the declared convention (zeros, or NaN like torch.softmax)."""
    x64 = x.astype(np.float64)
    empty = np.isneginf(x64).all(axis=-1)
    if not empty.any() or conv.fully_masked == "any":
        return Measurement("fully_masked", tested=False)
    y = (kernel.softmax(x) if y is None else y).astype(np.float64)
    n = x.shape[-1]
    for r in np.flatnonzero(empty):
        # uniform: 1/n, within a few units of the output's rounding
        ok = _meets(conv.fully_masked, y[r], np.full(n, 1.0 / n), 4 * resolve(x.dtype).u / n)
        if not ok:
            want = {"zeros": "zeros", "nan": "NaN", "uniform": f"1/{n} everywhere"}[conv.fully_masked]
            return Measurement(
                "fully_masked", ok=False, worst_row=int(r), max_bound_use=np.inf,
                conventions={"fully_masked": False},
                message=(f"softmax fully masked row {r} (all {x.shape[-1]} entries -inf): expected {want} "
                         f"(declared fully_masked={conv.fully_masked!r}), got {_short(y[r])}; declare "
                         f"fully_masked='nan' or 'any' if that is the kernel's convention"),
            )
    return Measurement("fully_masked", conventions={"fully_masked": True})


def measure_softmax_nonfinite(kernel: Kernel, x: np.ndarray, conv: Conventions, *,
                              y: np.ndarray | None = None) -> Measurement:
    """A row holding NaN or +inf gives NaN in every entry, unless nonfinite='any' is declared."""
    x64 = x.astype(np.float64)
    special = (np.isnan(x64) | np.isposinf(x64)).any(axis=-1)
    if not special.any() or conv.nonfinite == "any":
        return Measurement("nonfinite", tested=False)
    y = (kernel.softmax(x) if y is None else y).astype(np.float64)
    for r in np.flatnonzero(special):
        if not np.all(np.isnan(y[r])):
            return Measurement(
                "nonfinite", ok=False, worst_row=int(r), max_bound_use=np.inf,
                conventions={"nonfinite": False},
                message=(f"softmax row {r} holds NaN or +inf: expected NaN in every entry "
                         f"(declared nonfinite={conv.nonfinite!r}), got {_short(y[r])}; declare "
                         f"nonfinite='any' if that is the kernel's convention\n" + _row_text(x[r])),
            )
    return Measurement("nonfinite", conventions={"nonfinite": True})


def _exact_shift(x: np.ndarray) -> float | None:
    """A shift c such that x + c is exact in x's dtype for every entry, or None.

    Exactness is checked twice: the float64 sum has no rounding error (Knuth's TwoSum gives
    the error term exactly), and the sum is a value of x's dtype.
    """
    fmt = resolve(x.dtype)
    x64 = x.astype(np.float64)
    finite = np.isfinite(x64)
    if not finite.any():
        return None
    xf = x64[finite]
    top = float(np.max(np.abs(xf)))
    base = 2.0 ** np.floor(np.log2(top)) if top > 0 else 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        for c in (base, -base, 0.5 * base, 1.0, -1.0, 0.5, 2.0**-4):
            s = xf + c
            bv = s - xf  # TwoSum: s + err == xf + c exactly
            err = (xf - (s - bv)) + (c - bv)
            if np.all(np.isfinite(s)) and np.all(err == 0) and np.all(fmt.round(s).astype(np.float64) == s):
                return c
    return None


def softmax_shift_invariance(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """softmax(x + c) = softmax(x) within both bounds (a max taken wrongly, a shift forgotten)."""
    rows = regular_rows(x)
    if not rows.any():
        raise Untested("shift_invariance: no regular row")
    # A shift of its own for each row (softmax is row-wise): one shift for a batch that mixes
    # rows near -1e32 with rows near 1 is rarely exact for both; rows without one are left out.
    shifts = [_exact_shift(row) for row in x[rows]]
    keep = np.array([c is not None for c in shifts])
    if not keep.any():
        raise Untested("shift_invariance: no shift keeps these rows exact")
    xs = np.ascontiguousarray(x[rows][keep])
    c = np.array([c for c in shifts if c is not None])[:, None]
    shifted = (xs.astype(np.float64) + c).astype(x.dtype)
    y0, y1 = kernel.softmax(xs), kernel.softmax(shifted)
    b0 = softmax_bound(xs, out_dtype=x.dtype, numerics=conv.numerics)
    b1 = softmax_bound(shifted, out_dtype=x.dtype, numerics=conv.numerics)
    cmp = compare(y1, y0.astype(np.float64), relation_bound(b0, b1), out_dtype=x.dtype)
    what = (f"{c[0, 0]:g}" if np.all(c == c[0, 0]) else
            f"c (one exact shift per row, {float(c.min()):g} to {float(c.max()):g})")
    _fail_if(cmp, "shift_invariance", shifted, name=f"softmax(x + {what}) vs softmax(x)")


def softmax_permutation(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """softmax(x[perm]) = softmax(x)[perm] within both bounds (position-dependent tiling bugs)."""
    rows = regular_rows(x)
    xs = x[rows]
    if xs.shape[0] == 0 or xs.shape[-1] < 2:
        raise Untested("permutation: no regular row of two or more")
    perm = np.random.default_rng(xs.shape[-1]).permutation(xs.shape[-1])
    xp = np.ascontiguousarray(xs[:, perm])
    y0, y1 = kernel.softmax(xs), kernel.softmax(xp)
    b = softmax_bound(xp, out_dtype=x.dtype, numerics=conv.numerics)  # laid out like y1
    cmp = compare(y1, y0[:, perm].astype(np.float64), relation_bound(b, b), out_dtype=x.dtype)
    _fail_if(cmp, "permutation", xs[:, perm], name="softmax(x[perm]) vs softmax(x)[perm]")


def softmax_monotonic(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """x_i < x_j implies y_i <= y_j up to both bounds (a fast exp need not be ulp-monotone)."""
    rows = regular_rows(x)
    xs = x[rows]
    if xs.shape[0] == 0:
        raise Untested("monotonic: no regular row")
    y = kernel.softmax(xs).astype(np.float64)
    allowed = softmax_bound(xs, out_dtype=x.dtype, numerics=conv.numerics).abs
    x64 = xs.astype(np.float64)
    order = np.argsort(x64, axis=-1, kind="stable")
    xo = np.take_along_axis(x64, order, -1)
    yo = np.take_along_axis(y, order, -1)
    ao = np.take_along_axis(allowed, order, -1)
    # along increasing x, y may only drop by the bound: compare with the running max of y
    # over strictly smaller x (ties excluded by requiring x to increase).
    run_max = np.maximum.accumulate(np.where(np.isfinite(yo), yo, -np.inf), axis=-1)
    prev_max = np.concatenate([np.full((yo.shape[0], 1), -np.inf), run_max[:, :-1]], axis=-1)
    prev_x = np.concatenate([np.full((xo.shape[0], 1), -np.inf), xo[:, :-1]], axis=-1)
    strict = xo > prev_x
    drop = np.where(strict, prev_max - yo, 0.0)
    bad = drop > 2 * ao + 0.0
    if bad.any():
        r, j = (int(i) for i in np.argwhere(bad)[0])
        row = int(np.flatnonzero(rows)[r])
        raise PropertyFailure(
            "monotonic",
            f"softmax monotonicity: in row {row}, x = {float(xo[r, j])!r} gives y = {float(yo[r, j])!r}, "
            f"below y = {float(prev_max[r, j])!r} of a smaller x by {drop[r, j]:.3g} > allowed "
            f"{2 * ao[r, j]:.3g}\n" + _row_text(x[row]),
            worst_row=row,
        )


def softmax_row_independence(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """A row's answer does not depend on the other rows (bitwise if batch-invariant is declared).

    Without the declaration one row (chosen from the batch's shape) is run alone and compared
    within both bounds. With it, every row is run alone and must match bit for bit: a reduction
    order that depends on the batch size often changes only some rows.
    """
    if x.shape[0] < 2:
        raise Untested("row_independence: a single row")
    y = kernel.softmax(x)
    if conv.batch_invariant:
        for r in range(x.shape[0]):
            alone = kernel.softmax(np.ascontiguousarray(x[r : r + 1]))
            if not same_bits(alone, y[r : r + 1]):
                diff = np.flatnonzero(alone[0].astype(np.float64) != y[r].astype(np.float64))
                raise PropertyFailure(
                    "row_independence",
                    f"softmax batch invariance: row {r} alone differs bitwise from the same row in "
                    f"a batch of {x.shape[0]} at {diff.size} positions (first: column "
                    f"{diff[:1].tolist()}); declared batch_invariant=True\n" + _row_text(x[r]),
                    worst_row=r,
                )
        return
    r = int(np.random.default_rng(x.shape[0] * 7 + x.shape[1]).integers(x.shape[0]))
    if not regular_rows(x[r : r + 1])[0]:
        raise Untested("row_independence: the chosen row is not a regular row")
    alone = kernel.softmax(np.ascontiguousarray(x[r : r + 1]))
    b = softmax_bound(x[r : r + 1], out_dtype=x.dtype, numerics=conv.numerics)
    cmp = compare(alone, y[r : r + 1].astype(np.float64), relation_bound(b, b), out_dtype=x.dtype)
    _fail_if(cmp, "row_independence", x[r : r + 1], name=f"row {r} alone vs in the batch")


def softmax_deterministic(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """The same call twice gives the same bits (races, atomics, uninitialised memory)."""
    if not conv.deterministic:
        raise Untested("deterministic: not declared (deterministic=False)")
    y0, y1 = kernel.softmax(x), kernel.softmax(x)
    if not same_bits(y0, y1):
        diff = np.argwhere(np.ascontiguousarray(y0).view(_uint(y0)) != np.ascontiguousarray(y1).view(_uint(y1)))
        r, c = (int(i) for i in diff[0])
        raise PropertyFailure(
            "deterministic",
            f"softmax determinism: two identical calls differ at {len(diff)} elements, first "
            f"y[{r}, {c}] = {float(y0[r, c])!r} then {float(y1[r, c])!r}; declare deterministic=False if intended",
            worst_row=r,
        )


def softmax_strided(kernel: Kernel, x: np.ndarray, conv: Conventions) -> None:
    """A non-contiguous input works (same answer within the bound) or is refused clearly."""
    from onlinesm.harness import KernelError

    try:
        ys = kernel.softmax(x, strided=True)
    except KernelError as err:
        if err.kind == "raised" and len(str(err.__cause__ or "").strip()) >= 10:
            return  # refused with an explanation: allowed by the contract
        raise
    rows = regular_rows(x)
    if not rows.any():
        raise Untested("strided: no regular row")
    bound = softmax_bound(x[rows], out_dtype=x.dtype, numerics=conv.numerics)
    cmp = compare(ys[rows], bound.exact, bound, out_dtype=x.dtype)
    _fail_if(cmp, "strided", x[rows], name="softmax on a strided (non-contiguous) input")


def measure_softmax_special_rows(kernel: Kernel, x: np.ndarray, conv: Conventions, *,
                                 y: np.ndarray | None = None) -> Measurement:
    """Special rows follow the declared conventions: fully masked rows (``fully_masked``), then
    rows holding NaN or +inf (``nonfinite``). The ``fully_masked`` property of the catalogue."""
    if y is None and (np.isinf(x.astype(np.float64)) | np.isnan(x.astype(np.float64))).any():
        y = kernel.softmax(x)
    first = measure_softmax_fully_masked(kernel, x, conv, y=y)
    second = measure_softmax_nonfinite(kernel, x, conv, y=y)
    out = first if not first.ok else dataclasses.replace(second, prop="fully_masked")
    out.conventions = {**first.conventions, **second.conventions}
    out.tested = first.tested or second.tested  # a row of either kind was checked
    return out


softmax_accuracy = _raising(measure_softmax_accuracy)
softmax_fully_masked = _raising(measure_softmax_special_rows)

SOFTMAX_PROPERTIES: dict[str, Callable[[Kernel, np.ndarray, Conventions], None]] = {
    "deterministic": softmax_deterministic,
    "accuracy": softmax_accuracy,
    "row_sum": softmax_row_sum,
    "range": softmax_range,
    "masked_zero": softmax_masked_zero,
    "fully_masked": softmax_fully_masked,
    "shift_invariance": softmax_shift_invariance,
    "permutation": softmax_permutation,
    "monotonic": softmax_monotonic,
    "row_independence": softmax_row_independence,
    "strided": softmax_strided,
}

#: name -> the non-raising form ``measure(kernel, x, conv) -> Measurement`` of each property.
SOFTMAX_MEASURES: dict[str, Callable[..., Measurement]] = _measures(
    SOFTMAX_PROPERTIES, accuracy=measure_softmax_accuracy, fully_masked=measure_softmax_special_rows)


# ---------------------------------------------------------------------------------------------
# Attention


def _attention_exact(inp: AttentionInputs, conv: Conventions,
                     exact: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
    return attention_bound(inp.q, inp.k, inp.v, mask=inp.mask, causal=inp.causal, scale=inp.scale,
                           causal_align=conv.causal_align, out_dtype=inp.q.dtype,
                           numerics=conv.numerics, exact=exact)


def _attention_inputs_text(inp: AttentionInputs, conv: Conventions) -> dict[str, Any]:
    return {"q": inp.q, "k": inp.k, "mask": inp.mask, "causal": inp.causal, "scale": inp.scale,
            "causal_align": conv.causal_align}


def _lse_natural(lse: np.ndarray, conv: Conventions) -> np.ndarray:
    """The kernel's lse in natural-log units, with its empty-row convention mapped to -inf."""
    out = lse.astype(np.float64)
    if conv.lse_base == "2":
        out = out * np.log(2.0)
    if conv.empty_lse == np.inf:
        out = np.where(np.isposinf(out), -np.inf, out)
    return out


def _visible_any(inp: AttentionInputs, conv: Conventions) -> np.ndarray:
    b, h, sq, _ = inp.q.shape
    vis = oracle.visible_keys((b, h, sq, inp.k.shape[2]), mask=inp.mask, causal=inp.causal,
                              causal_align=conv.causal_align)
    return vis.any(axis=-1)


def measure_attention_accuracy(kernel: Kernel, inp: AttentionInputs, conv: Conventions, *,
                               out: tuple[Any, Any] | None = None,
                               exact: tuple[Any, Any] | None = None) -> Measurement:
    """o (and lse when returned) within the bound of the exact attention, on visible queries.

    ``out`` = the kernel's (o, lse) when already at hand; ``exact`` = the oracle's (o, lse).
    The compared elements: o of the queries that see a key, then their lse when returned.
    """
    o, lse = kernel.attention(inp) if out is None else out
    ob, lb = _attention_exact(inp, conv, exact)
    rows = _visible_any(inp, conv)
    o_sel = np.where(rows[..., None], o.astype(np.float64), ob.exact)
    cmp = compare(o_sel, ob.exact, ob, out_dtype=inp.q.dtype)
    parts = [(o.astype(np.float64)[rows], ob.exact[rows], ob.abs[rows])]
    res = Measurement("accuracy", ok=cmp.ok, max_bound_use=cmp.max_bound_use)
    if not cmp.ok:
        res.message = cmp.message(inputs=_attention_inputs_text(inp, conv), name="attention o")
    if lse is not None:
        got = np.where(rows, _lse_natural(lse, conv), lb.exact)
        parts.append((_lse_natural(lse, conv)[rows], lb.exact[rows], lb.abs[rows]))
        if res.ok:  # the message names the first failing output: o, then lse
            cmp = compare(got, lb.exact, lb, out_dtype=np.float32)
            res.ok, res.max_bound_use = cmp.ok, max(res.max_bound_use, cmp.max_bound_use)
            if not cmp.ok:
                res.message = cmp.message(inputs=_attention_inputs_text(inp, conv),
                                          name="attention lse")
    res.actual, res.exact, res.allowed = (np.concatenate([np.ravel(p[i]) for p in parts])
                                          for i in range(3))
    res.tested = bool(rows.any())  # every query fully masked: fully_masked's input, not ours
    return res


def measure_attention_fully_masked(kernel: Kernel, inp: AttentionInputs, conv: Conventions, *,
                                   out: tuple[Any, Any] | None = None) -> Measurement:
    """A query with no visible key follows the convention: zeros (lse -inf), or NaN."""
    rows = ~_visible_any(inp, conv)
    if not rows.any() or conv.fully_masked == "any":
        return Measurement("fully_masked", tested=False)  # none, or any output accepted
    o, lse = kernel.attention(inp) if out is None else out
    o64 = o.astype(np.float64)
    idx = np.argwhere(rows)
    v64 = inp.v.astype(np.float64)
    group = inp.q.shape[1] // inp.k.shape[1]
    sk = inp.k.shape[2]
    for b, h, i in idx:
        # uniform (a finite-min mask): every key weighs 1/Sk, so o is the mean of V
        mean_v = v64[b, h // group].mean(axis=0)
        tol = (4 * resolve(inp.q.dtype).u + sk * conv.numerics.working.u) * float(np.abs(v64[b, h // group]).max(initial=0.0))
        ok = _meets(conv.fully_masked, o64[b, h, i], mean_v, tol)
        if ok and lse is not None and conv.fully_masked == "zeros":
            ok = _lse_natural(lse, conv)[b, h, i] == -np.inf
        if not ok:
            got_lse = "" if lse is None else f", lse {float(lse[b, h, i])!r}"
            want = {"zeros": "zeros and lse -inf", "nan": "NaN",
                    "uniform": f"the mean of V over the keys ({_short(mean_v)})"}[conv.fully_masked]
            return Measurement(
                "fully_masked", ok=False, max_bound_use=np.inf,
                conventions={"fully_masked": False},
                message=(f"attention fully masked query [b={b}, h={h}, i={i}] (no visible key): expected "
                         f"{want} (declared fully_masked={conv.fully_masked!r}, empty_lse={conv.empty_lse}), "
                         f"got o = {_short(o64[b, h, i])}{got_lse} ({len(idx)} such queries in "
                         f"q {list(inp.q.shape)}, k {list(inp.k.shape)})"),
            )
    return Measurement("fully_masked", conventions={"fully_masked": True})


def attention_masked_invisible(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """Masked keys are invisible: poisoning masked K/V with huge finite values changes nothing."""
    if inp.mask is None:
        raise Untested("no mask")
    fmt = resolve(inp.q.dtype)
    hidden_all = ~np.broadcast_to(inp.mask, inp.q.shape[:2] + (inp.q.shape[2], inp.k.shape[2])).any(axis=(1, 2))
    # keys hidden from every query of a batch (key padding): poison them in K and V
    if not hidden_all.any():
        raise Untested("no key is hidden from every query")
    poison = min(fmt.max / 4, 3.0e4 if fmt.name == "float16" else 1.0e30)
    k, v = inp.k.copy(), inp.v.copy()
    for b, j in np.argwhere(hidden_all):
        k[b, :, j] = fmt.round(poison)
        v[b, :, j] = fmt.round(-poison)
    poisoned = dataclasses.replace(inp, k=k, v=v)
    o, _ = kernel.attention(poisoned, want_lse=False)
    ob, _ = _attention_exact(inp, conv)
    rows = _visible_any(inp, conv)
    o_sel = np.where(rows[..., None], o.astype(np.float64), ob.exact)
    cmp = compare(o_sel, ob.exact, ob, out_dtype=inp.q.dtype)
    _fail_if(cmp, "masked_invisible", _attention_inputs_text(poisoned, conv),
             name=f"attention with masked K/V poisoned by ±{poison:g}")


def _attention_relation(kernel: Kernel, inp: AttentionInputs, other: AttentionInputs,
                        conv: Conventions, prop: str, name: str) -> None:
    """Two calls that must agree within both results' bounds, on the queries that see a key."""
    o1, _ = kernel.attention(inp, want_lse=False)
    o2, _ = kernel.attention(other, want_lse=False)
    ob, _ = _attention_exact(inp, conv)
    rows = _visible_any(inp, conv)[..., None]
    o1 = np.where(rows, o1.astype(np.float64), 0.0)
    o2 = np.where(rows, o2.astype(np.float64), 0.0)
    cmp = compare(o2, o1, relation_bound(ob, ob), out_dtype=inp.q.dtype)
    _fail_if(cmp, prop, _attention_inputs_text(other, conv), name=name)


def attention_causal_mask(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """causal=True equals the explicit triangular mask of the declared alignment."""
    if not inp.causal:
        raise Untested("not causal")
    b, h, sq, _ = inp.q.shape
    tri = oracle.visible_keys((1, 1, sq, inp.k.shape[2]), causal=True, causal_align=conv.causal_align)
    mask = tri if inp.mask is None else (np.broadcast_to(inp.mask, (b, h, sq, inp.k.shape[2])) & tri)
    explicit = dataclasses.replace(inp, causal=False, mask=np.ascontiguousarray(mask))
    _attention_relation(kernel, inp, explicit, conv, "causal_mask",
                        f"causal=True vs the explicit {conv.causal_align} mask")


def attention_key_permutation(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """Permuting keys with their values and mask columns changes nothing beyond rounding."""
    sk = inp.k.shape[2]
    if sk < 2 or inp.causal:
        raise Untested("one key, or causal")
    perm = np.random.default_rng(sk).permutation(sk)
    mask = None if inp.mask is None else np.ascontiguousarray(inp.mask[..., perm])
    permuted = dataclasses.replace(inp, k=np.ascontiguousarray(inp.k[:, :, perm]),
                                   v=np.ascontiguousarray(inp.v[:, :, perm]), mask=mask)
    _attention_relation(kernel, inp, permuted, conv, "key_permutation",
                        "attention with keys permuted vs original")


def attention_split_merge(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """Two halves of the keys, merged through their (o, lse), give the whole (split-KV)."""
    from onlinesm.reference import merge_states

    sk = inp.k.shape[2]
    if sk < 2 or inp.causal or not kernel.accepts_return_lse:
        raise Untested("one key, causal, or no lse")
    # both halves must lie inside the kernel's domain: key lengths a multiple of M, >= the minimum
    domain = getattr(kernel, "domain", None)
    step = getattr(domain, "seq_multiple", 1)
    least = max(step, getattr(domain, "min_seq_k", 1))
    if getattr(domain, "same_seq", False):
        raise Untested("the kernel needs Sq == Sk, and a half has fewer keys")
    cut = (sk // 2) // step * step
    if cut < least or sk - cut < least:
        raise Untested(f"Sk={sk} cannot be split into two halves of >= {least} keys "
                       f"(multiples of {step})")
    halves = []
    for sl in (slice(0, cut), slice(cut, sk)):
        mask = None if inp.mask is None else np.ascontiguousarray(
            np.broadcast_to(inp.mask, inp.mask.shape[:-1] + (sk,))[..., sl])
        part = dataclasses.replace(inp, k=np.ascontiguousarray(inp.k[:, :, sl]),
                                   v=np.ascontiguousarray(inp.v[:, :, sl]), mask=mask)
        o, lse = kernel.attention(part)
        if lse is None:
            raise Untested("the kernel returned no lse")
        halves.append((o.astype(np.float64), _lse_natural(lse, conv)))
    (o1, l1), (o2, l2) = halves
    merged, _ = merge_states(o1, l1, o2, l2)
    ob, _ = _attention_exact(inp, conv)
    rows = _visible_any(inp, conv)
    merged = np.where(rows[..., None], merged, ob.exact)
    # each half is one rounded result; the merge adds a few float64 roundings: twice the bound
    cmp = compare(merged, ob.exact, relation_bound(ob, ob), out_dtype=inp.q.dtype)
    _fail_if(cmp, "split_merge", _attention_inputs_text(inp, conv),
             name=f"keys split at {cut} of {sk} and merged vs exact")


def attention_default_scale(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """scale=None means 1/sqrt(D): the same answer as passing that scale explicitly."""
    if inp.scale is not None:
        raise Untested("an explicit scale")
    d = inp.q.shape[-1]
    explicit = dataclasses.replace(inp, scale=float(1.0 / np.sqrt(d)))
    _attention_relation(kernel, inp, explicit, conv, "default_scale",
                        f"scale=None vs scale=1/sqrt({d})")


def attention_deterministic(kernel: Kernel, inp: AttentionInputs, conv: Conventions) -> None:
    """The same call twice gives the same bits."""
    if not conv.deterministic:
        raise Untested("deterministic: not declared (deterministic=False)")
    (o1, l1), (o2, l2) = kernel.attention(inp), kernel.attention(inp)
    same = same_bits(o1, o2) and (l1 is None or same_bits(l1, l2))
    if not same:
        n = int((o1.view(_uint(o1)) != o2.view(_uint(o2))).sum())
        raise PropertyFailure(
            "deterministic",
            f"attention determinism: two identical calls differ ({n} elements of o differ) on "
            f"q {list(inp.q.shape)}, k {list(inp.k.shape)}; declare deterministic=False if intended",
        )


attention_accuracy = _raising(measure_attention_accuracy)
attention_fully_masked = _raising(measure_attention_fully_masked)

ATTENTION_PROPERTIES: dict[str, Callable[[Kernel, AttentionInputs, Conventions], None]] = {
    "deterministic": attention_deterministic,
    "accuracy": attention_accuracy,
    "fully_masked": attention_fully_masked,
    "masked_invisible": attention_masked_invisible,
    "causal_mask": attention_causal_mask,
    "key_permutation": attention_key_permutation,
    "split_merge": attention_split_merge,
    "default_scale": attention_default_scale,
}

#: name -> the non-raising form ``measure(kernel, inp, conv) -> Measurement`` of each property.
ATTENTION_MEASURES: dict[str, Callable[..., Measurement]] = _measures(
    ATTENTION_PROPERTIES, accuracy=measure_attention_accuracy,
    fully_masked=measure_attention_fully_masked)


# ---------------------------------------------------------------------------------------------
# Message helpers


def _uint(a: np.ndarray) -> np.dtype:
    return np.dtype(f"u{a.dtype.itemsize}")


def _short(row: np.ndarray, k: int = 6) -> str:
    vals = [repr(float(v)) for v in np.ravel(row)]
    if len(vals) <= 2 * k:
        return "[" + ", ".join(vals) + "]"
    return "[" + ", ".join(vals[:k]) + f", ... ({len(vals) - 2 * k} more) ..., " + ", ".join(vals[-k:]) + "]"


def _row_text(row: np.ndarray, focus: int | None = None) -> str:
    from onlinesm.metrics import format_row

    return "  input row: " + format_row(row, focus)
