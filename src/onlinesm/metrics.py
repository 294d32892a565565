"""Error metrics against the exact answer, and the verdict (:class:`Comparison`) with its message.

Every metric is elementwise and vectorised, and treats IEEE special values the same way:

- a NaN where the exact value is finite (or the reverse) is an *infinite* error;
- NaN against NaN, and +inf against +inf (-inf against -inf), is a *zero* error: the kernel
  reproduced the special value it had to;
- zeros and subnormals are ordinary values: ``ulp_error`` measures in the ulps of the output
  dtype *at the exact value*, and below the smallest normal that ulp is the subnormal spacing.

:func:`compare` turns the elementwise errors and a :class:`Bound` into a
:class:`Comparison`, whose :meth:`Comparison.message` is the failure text: how many elements
failed, the worst one (largest error / bound), actual vs exact, its error in ulps and relative,
the bound split into its named terms, the numerics assumed, and the input row, shortened.

Example:
    >>> import numpy as np
    >>> float(ulp_error(np.float32(1.0) + np.float32(2**-23), 1.0, "float32"))
    1.0
    >>> float(bound_use(np.array([0.5]), np.array([0.5]), np.array([0.0]))[0])
    0.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from onlinesm.declarations import Numerics
from onlinesm.dtypes import resolve, ulp
from onlinesm.oracle import visible_keys

__all__ = [
    "Bound",
    "abs_error",
    "ulp_error",
    "rel_error",
    "rmse",
    "bound_use",
    "Comparison",
    "compare",
    "same_dtype_baseline_check",
    "format_row",
]


@dataclasses.dataclass
class Bound:
    """The allowed absolute error per element, and its named terms (which sum to ``abs``).

    ``exact`` is the float64 exact value the bound was computed at (when the bound computed it),
    so ``compare(actual, bound.exact, bound)`` needs no second oracle call.
    """

    abs: np.ndarray
    terms: dict[str, np.ndarray]
    numerics: Numerics
    what: str
    exact: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.abs = np.asarray(self.abs, dtype=np.float64)

    def at(self, index: tuple[int, ...]) -> dict[str, float]:
        """The terms at one element, as floats (broadcast where a term is per row)."""
        return {k: float(np.broadcast_to(t, self.abs.shape)[index]) for k, t in self.terms.items()}

    def describe(self, index: tuple[int, ...] | None = None) -> str:
        """``bound 2.3e-07 = exp 1.2e-07 + sum 8.0e-08 + ...`` at ``index`` (default: the max)."""
        if index is None:
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(self.abs)),
                                                           self.abs.shape))
        total = float(self.abs[index])
        parts = [f"{k} {v:.2g}" for k, v in self.at(index).items() if v > 0 and v >= 1e-3 * total]
        return f"bound {total:.3g}" + (" = " + " + ".join(parts) if parts else "")


def _pair(actual: Any, exact: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(exact).astype(np.float64)
    return np.broadcast_arrays(a, e)


def abs_error(actual: Any, exact: Any) -> np.ndarray:
    """|actual - exact| as float64, with special values matched (see the module docstring).

    >>> abs_error(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, np.nan])).tolist()
    [0.0, 0.0, inf]
    """
    a, e = _pair(actual, exact)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - e)
    same_special = (np.isnan(a) & np.isnan(e)) | (np.isinf(a) & (a == e))
    one_special = ~same_special & ~(np.isfinite(a) & np.isfinite(e))
    err = np.where(same_special, 0.0, err)
    return np.where(one_special, np.inf, err)


def ulp_error(actual: Any, exact: Any, dtype: Any) -> np.ndarray:
    """The error in units of the last place of ``dtype`` at the exact value.

    ``ulp(0)`` and ulps below the smallest normal are the subnormal spacing, so a flushed
    subnormal shows up as a (legitimately) large ulp count: the bound, not this metric, decides.

    >>> ulp_error(np.array([0.0, 1.0 + 2**-7]), np.array([0.0, 1.0]), "bfloat16").tolist()
    [0.0, 1.0]
    """
    a, e = _pair(actual, exact)
    err = abs_error(a, e)
    spacing = ulp(np.where(np.isfinite(e), e, 0.0), dtype)
    with np.errstate(invalid="ignore"):
        return np.where(err == 0.0, 0.0, err / spacing)


def rel_error(actual: Any, exact: Any, *, floor: float = 0.0) -> np.ndarray:
    """|actual - exact| / max(|exact|, floor); 0/0 = 0 and x/0 = inf.

    Pass ``floor`` (for example the output dtype's smallest normal) so that underflowed values
    do not report an infinite relative error.

    >>> rel_error(np.array([0.0, 1e-30, 2.0]), np.array([0.0, 0.0, 1.0])).tolist()
    [0.0, inf, 1.0]
    """
    a, e = _pair(actual, exact)
    err = abs_error(a, e)
    den = np.maximum(np.where(np.isfinite(e), np.abs(e), 0.0), floor)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = err / den
    return np.where(err == 0.0, 0.0, np.where(den == 0.0, np.inf, r))


def rmse(actual: Any, exact: Any, *, axis: int | tuple[int, ...] | None = None) -> np.ndarray:
    """Root mean square of :func:`abs_error` (inf if any element is an infinite error).

    >>> float(rmse(np.array([1.0, 3.0]), np.array([0.0, 2.0])))
    1.0
    """
    err = abs_error(actual, exact)
    with np.errstate(over="ignore"):
        return np.sqrt(np.mean(err * err, axis=axis))


def bound_use(actual: Any, exact: Any, bound: Any) -> np.ndarray:
    """abs_error / bound, elementwise: 0/0 = 0, x/0 = inf. A value above 1 is a failure.

    ``bound`` is an array or a :class:`Bound`.
    """
    allowed = np.asarray(getattr(bound, "abs", bound), dtype=np.float64)
    err = abs_error(actual, exact)
    allowed = np.broadcast_to(allowed, err.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        use = err / allowed
    return np.where(err == 0.0, 0.0, np.where(allowed == 0.0, np.inf, use))


# ---------------------------------------------------------------------------------------------
# The verdict


@dataclasses.dataclass
class Comparison:
    """The outcome of comparing a kernel's output with the exact answer under a bound.

    ``worst_*`` describe the element with the largest bound use (ties: the largest absolute
    error); ``terms_at_worst`` is the bound's split at that element. ``max_*`` are over all
    checked elements. ``ok`` is True when no element exceeds its bound.
    """

    ok: bool
    n_checked: int
    n_failed: int
    worst_index: tuple[int, ...]
    worst_actual: float
    worst_exact: float
    max_ulp: float
    max_rel: float
    max_abs: float
    rmse: float
    max_bound_use: float
    terms_at_worst: dict[str, float]
    out_dtype: str = "float32"
    numerics: str = ""
    what: str = ""
    tier: str = "worst-case"  # the bound's tier (Numerics.tier): the failure hint depends on it
    worst_bound: float = 0.0
    worst_ulp: float = 0.0
    worst_rel: float = 0.0
    max_abs_index: tuple[int, ...] = ()
    max_rel_index: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        """One line: ok/FAIL, mismatches, worst bound use, max ulp."""
        state = "ok" if self.ok else "FAIL"
        return (
            f"{state}: {self.n_failed} / {self.n_checked} elements over the bound, "
            f"max bound use {_g(self.max_bound_use)}, max error {_g(self.max_ulp)} ulp "
            f"({self.out_dtype}), max rel {_g(self.max_rel)}"
        )

    def message(self, *, inputs: Any = None, name: str = "softmax") -> str:
        """The failure text (also useful on success, as a report line).

        ``inputs`` is shown shortened around the worst element: an array whose last axis is the
        row (softmax: ``x``), or a mapping of names to arrays. For attention, a mapping with
        ``q`` and ``k`` (optionally ``mask``, ``causal``, ``scale``, ``causal_align``) shows the
        worst query's score row ``scale·q·kᵀ`` with masked keys as -inf.
        """
        pct = 100.0 * self.n_failed / max(self.n_checked, 1)
        verdict = "within the bound" if self.ok else "not within the bound"
        lines = [
            f"{name}: output {verdict} ({self.out_dtype} output; {self.what}).",
            f"Numerics assumed: {self.numerics}.",
            f"Mismatched elements: {self.n_failed} / {self.n_checked} ({pct:.1f}%)",
        ]
        if self.n_checked:
            idx = _idx(self.worst_index)
            terms = _terms_text(self.worst_bound, self.terms_at_worst)
            lines += [
                f"Greatest bound use: {_g(self.max_bound_use)} at index {idx} "
                f"(error / allowed; above 1 fails)",
                f"  actual {_v(self.worst_actual)}, exact {_v(self.worst_exact)}",
                f"  error {_g(abs(_diff(self.worst_actual, self.worst_exact)))} abs, "
                f"{_g(self.worst_rel)} rel, {_g(self.worst_ulp)} ulp of {self.out_dtype}",
                f"  {terms}",
                f"Greatest absolute difference: {_g(self.max_abs)} at index "
                f"{_idx(self.max_abs_index)}",
                f"Greatest relative difference: {_g(self.max_rel)} at index "
                f"{_idx(self.max_rel_index)}",
                f"Greatest error in ulps: {_g(self.max_ulp)}; RMSE {_g(self.rmse)}",
            ]
        if inputs is not None and self.n_checked:
            lines += _inputs_text(inputs, self.worst_index, name)
        if not self.ok and np.isfinite(self.max_bound_use) and self.tier == "probabilistic":
            lines.append("The probabilistic bound holds for a correct kernel whose rounding errors "
                         "do not all lean one way. A kernel that adds one element at a time to a "
                         "running sum can exceed it on near-equal terms and still be correct "
                         "(calibration: a scalar online softmax, up to 1.17x the bound); the "
                         "worst-case tier (the default) tells the two apart.")
        elif not self.ok and np.isfinite(self.max_bound_use):
            lines.append("A correct kernel with the numerics above stays within the bound. If "
                         "this one legitimately computes in lower precision, declare it "
                         "(accumulate=..., exp=..., allow_tf32=..., p_dtype=...).")
        elif not self.ok:
            lines.append("A NaN or infinity where a finite value was due (or the reverse) "
                         "fails whatever the numerics.")
        return "\n".join(lines)


def _g(x: float) -> str:
    if x is None:
        return "-"
    if np.isnan(x) or np.isinf(x):
        return str(float(x))
    return f"{x:.3g}"


def _v(x: float) -> str:
    if not np.isfinite(x):
        return str(float(x))
    return f"{x:.9g}"


def _diff(a: float, e: float) -> float:
    return float(abs_error(np.float64(a), np.float64(e)))


def _idx(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def _terms_text(total: float, terms: Mapping[str, float]) -> str:
    shown = [(k, v) for k, v in terms.items() if v > 0.0 and v >= 1e-3 * total]
    if not shown:
        return f"bound {_g(total)}"
    return f"bound {_g(total)} = " + " + ".join(f"{k} {v:.2g}" for k, v in shown)


def format_row(row: Any, focus: int | None = None, *, edge: int = 4, around: int = 2,
               limit: int = 24) -> str:
    """A row as ``[i: value, ...]``, shortened when longer than ``limit``.

    Long rows keep the first and last ``edge`` entries, the row max and ``focus`` with
    ``around`` neighbours each side; gaps are shown as ``…``. -inf and NaN are written as such.

    >>> format_row(np.array([1.0, -np.inf, np.nan]))
    '[0: 1, 1: -inf, 2: nan]'
    """
    r = np.asarray(row).astype(np.float64).ravel()
    n = r.size
    if n <= limit:
        keep = list(range(n))
    else:
        keep_set = set(range(min(edge, n))) | set(range(max(n - edge, 0), n))
        finite = np.where(np.isnan(r), -np.inf, r)
        if n:
            keep_set.add(int(np.argmax(finite)))
        if focus is not None:
            keep_set |= set(range(max(focus - around, 0), min(focus + around + 1, n)))
        keep = sorted(keep_set)
    parts, prev = [], -1
    for i in keep:
        if i != prev + 1:
            parts.append("…")
        mark = "*" if focus is not None and i == focus and n > 1 else ""
        parts.append(f"{mark}{i}: {r[i]:.6g}")
        prev = i
    if keep and keep[-1] != n - 1:
        parts.append("…")
    return "[" + ", ".join(parts) + "]"


def _row_summary(r: np.ndarray) -> str:
    r = np.asarray(r).astype(np.float64).ravel()
    finite = r[np.isfinite(r)]
    text = f"length {r.size}"
    if finite.size:
        text += f", finite range [{finite.min():.6g}, {finite.max():.6g}]"
    for label, count in (("-inf", np.isneginf(r).sum()), ("+inf", np.isposinf(r).sum()),
                         ("NaN", np.isnan(r).sum())):
        if count:
            text += f", {int(count)} × {label}"
    return text


def _inputs_text(inputs: Any, index: tuple[int, ...], name: str) -> list[str]:
    lines: list[str] = []
    if isinstance(inputs, Mapping) and "q" in inputs and "k" in inputs:
        row = _score_row(inputs, index)
        lines.append(f"Scores of query {_idx(index[:-1])} (scale·q·kᵀ, hidden keys -inf; "
                     f"{_row_summary(row)}):")
        lines.append("  " + format_row(row))
        return lines
    items = inputs.items() if isinstance(inputs, Mapping) else [("input", inputs)]
    for label, arr in items:
        arr = np.asarray(arr)
        if arr.ndim == 0:
            continue
        lead = tuple(index[: arr.ndim - 1])
        try:
            row = arr[lead]
        except IndexError:
            continue
        focus = index[arr.ndim - 1] if len(index) >= arr.ndim else None
        where = f" row {_idx(lead)}" if lead else ""
        lines.append(f"{label.capitalize()}{where} ({arr.dtype}, {_row_summary(row)}; "
                     f"* marks the worst element):")
        lines.append("  " + format_row(row, focus))
    return lines


def _score_row(inputs: Mapping[str, Any], index: tuple[int, ...]) -> np.ndarray:
    q = np.asarray(inputs["q"]).astype(np.float64)
    k = np.asarray(inputs["k"]).astype(np.float64)
    b, h, i = (int(t) for t in index[:3])
    d = q.shape[3]
    hk = h // (q.shape[1] // k.shape[1])
    scale = inputs.get("scale") or 1.0 / np.sqrt(d)
    s = scale * (k[b, hk] @ q[b, h, i])
    visible = visible_keys(q.shape[:3] + (k.shape[2],), mask=inputs.get("mask"),
                           causal=bool(inputs.get("causal")),
                           causal_align=inputs.get("causal_align", "top-left"))[b, h, i]
    return np.where(visible, s, -np.inf)


def compare(actual: Any, exact: Any, bound: Any, *, out_dtype: Any = None) -> Comparison:
    """Compare ``actual`` with ``exact`` under ``bound`` (a :class:`Bound`).

    Vectorised over all elements. An element fails when its :func:`abs_error` exceeds
    ``bound.abs`` (so a NaN where a number was due always fails, and a bound of 0 demands the
    exact value bit for bit, as for -inf inputs and fully masked rows).

    >>> from onlinesm.tolerance import softmax_bound
    >>> x = np.array([[0.0, 1.0]], np.float32); b = softmax_bound(x)
    >>> compare(np.array([[0.26894143, 0.7310586]], np.float32), b.exact, b).ok
    True
    """
    a = np.asarray(actual)
    fmt = resolve(out_dtype if out_dtype is not None else a.dtype)
    e = np.asarray(exact, dtype=np.float64)
    a64, e64 = _pair(a, e)
    allowed = np.broadcast_to(np.asarray(bound.abs, dtype=np.float64), a64.shape)
    err = abs_error(a64, e64)
    use = bound_use(a64, e64, allowed)
    ulps = ulp_error(a64, e64, fmt)
    rel = rel_error(a64, e64, floor=fmt.tiny)
    n = int(a64.size)
    numerics = getattr(bound, "numerics", None)
    described = numerics.describe() if hasattr(numerics, "describe") else str(numerics or "")
    tier = getattr(numerics, "tier", "worst-case")
    if n == 0:
        return Comparison(True, 0, 0, (), np.nan, np.nan, 0.0, 0.0, 0.0, 0.0, 0.0, {},
                          out_dtype=fmt.name, numerics=described, what=getattr(bound, "what", ""),
                          tier=tier)
    failed = err > allowed
    # the worst element: largest bound use, ties broken by the absolute error
    key = np.where(np.isnan(use), np.inf, use)
    top = np.flatnonzero(key.ravel() == key.max())
    flat = top[np.argmax(np.where(np.isnan(err.ravel()[top]), np.inf, err.ravel()[top]))]
    worst = tuple(int(i) for i in np.unravel_index(flat, a64.shape))
    terms = {}
    for k, t in getattr(bound, "terms", {}).items():
        t = np.broadcast_to(np.asarray(t, dtype=np.float64), a64.shape)
        terms[k] = float(t[worst])

    def _arg(v: np.ndarray) -> tuple[int, ...]:
        return tuple(int(i) for i in np.unravel_index(int(np.argmax(v)), v.shape))

    return Comparison(
        ok=not bool(failed.any()),
        n_checked=n,
        n_failed=int(failed.sum()),
        worst_index=worst,
        worst_actual=float(a64[worst]),
        worst_exact=float(e64[worst]),
        max_ulp=float(ulps.max()),
        max_rel=float(rel.max()),
        max_abs=float(err.max()),
        rmse=float(rmse(a64, e64)),
        max_bound_use=float(key.max()),
        terms_at_worst=terms,
        out_dtype=fmt.name,
        numerics=described,
        what=getattr(bound, "what", ""),
        tier=tier,
        worst_bound=float(allowed[worst]),
        worst_ulp=float(ulps[worst]),
        worst_rel=float(rel[worst]),
        max_abs_index=_arg(err),
        max_rel_index=_arg(rel),
    )


def same_dtype_baseline_check(actual: Any, exact: Any, baseline: Any, *, factor: float = 2.0,
                              atol: float | None = None, out_dtype: Any = None) -> Comparison:
    """FlashAttention's second opinion: max error <= factor × the baseline's max error + atol.

    ``baseline`` is a same-dtype implementation's output (for example torch's math attention
    in bf16), ``exact`` the oracle's. ``atol`` defaults to twice the output dtype's rounding
    error at 0.3, as FlashAttention's tests take it. A kernel wrong in the same way as the
    baseline passes this check: use it next to :func:`compare`, not instead of it.

    >>> e = np.array([0.3, 0.7]); b = e + 1e-3
    >>> same_dtype_baseline_check(e + 1.5e-3, e, b).ok, same_dtype_baseline_check(e + 3e-3, e, b).ok
    (True, False)
    """
    a = np.asarray(actual)
    fmt = resolve(out_dtype if out_dtype is not None else a.dtype)
    if atol is None:
        atol = float(ulp(0.3, fmt))  # 2 × half an ulp at 0.3
    base_err = abs_error(baseline, exact)
    base_max = float(base_err.max()) if base_err.size else 0.0
    allowed = factor * base_max + atol
    shape = np.broadcast_shapes(a.shape, np.shape(exact))
    b = Bound(
        abs=np.full(shape, allowed),
        terms={"baseline": np.full(shape, factor * base_max), "atol": np.full(shape, atol)},
        numerics=Numerics(),
        what=f"{factor:g} × the baseline's max error {base_max:.3g} + atol {atol:.3g}",
    )
    comp = compare(a, exact, b, out_dtype=fmt)
    comp.numerics = "none (baseline rule)"
    return comp
