"""PNG plots of a report (matplotlib, Agg backend, imported only here).

What: for each softmax dtype, bound use and ulp error per row against the row length, and
bound use against the spread max - min, one panel per family, one colour per kernel; a
histogram of ulp errors per kernel and dtype (one figure per op); attention error (bound use
and RMSE) against the key length Sk.

Why these: bound use (error / allowed bound) is what decides pass/fail, so the dashed line at
1 is the verdict; ulps are what kernel authors are used to; the spread is the quantity the
softmax bound grows with (Blanchard, Higham & Higham). Zeros cannot sit on a log axis: they
are drawn at the floor the axis label names.

Example:
    >>> make_plots(collection, Path("reports/cpu"))   # doctest: +SKIP
    ['softmax-float32-length.png', ...]
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["make_plots", "DPI"]

DPI = 64
_USE_FLOOR = 1e-4
_ULP_FLOOR = 1e-2
_SPREAD_FLOOR = 1e-3


def _log_axes(ax: Any, x: bool = True, y: bool = True) -> None:
    """Log scales with few ticks and no minor ticks: readable, and fast to lay out."""
    from matplotlib.ticker import LogLocator, NullLocator

    for on, axis, setter in ((x, ax.xaxis, ax.set_xscale), (y, ax.yaxis, ax.set_yscale)):
        if on:
            setter("log")
            axis.set_major_locator(LogLocator(base=10, numticks=5))
            axis.set_minor_locator(NullLocator())


def _colours(names: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {n: cmap(i % 10) for i, n in enumerate(names)}


def _grid(n: int) -> tuple[int, int]:
    cols = min(4, n)
    return math.ceil(n / cols), cols


def _family_figure(points: list[dict[str, Any]], kernels: list[str], families: list[str],
                   x_key: str, y_key: str, title: str, xlabel: str, ylabel: str,
                   path: Path) -> None:
    rows, cols = _grid(len(families))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.7 * rows), squeeze=False)
    colour = _colours(kernels)
    floor_y = _USE_FLOOR if y_key == "bound_use" else _ULP_FLOOR
    floor_x = _SPREAD_FLOOR if x_key == "spread" else 1.0
    for ax, fam in zip(axes.ravel(), families):
        ps = [p for p in points if p["family"] == fam]
        for i, k in enumerate(kernels):
            kp = [p for p in ps if p["kernel"] == k]
            if not kp:
                continue
            x = np.array([p[x_key] for p in kp], dtype=float)
            y = np.array([p[y_key] for p in kp], dtype=float)
            y = np.where(np.isfinite(y), y, 1e6)
            # a small horizontal offset per kernel so coincident points stay visible
            jitter = 1.0 + 0.04 * (i - len(kernels) / 2) if x_key == "length" else 1.0
            ax.scatter(np.maximum(x, floor_x) * jitter, np.maximum(y, floor_y), s=9,
                       alpha=0.6, color=colour[k], label=k)
        if y_key == "bound_use":
            ax.axhline(1.0, color="red", ls="--", lw=1)
        _log_axes(ax)
        ax.set_title(fam, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(families):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    for ax in axes.ravel():
        h, lab = ax.get_legend_handles_labels()
        if len(lab) > len(labels):
            handles, labels = h, lab
    fig.legend(handles, labels, loc="upper right", fontsize=8, markerscale=2)
    fig.suptitle(title, fontsize=11)
    fig.subplots_adjust(left=0.06, right=0.86, bottom=0.07, top=0.92, hspace=0.45, wspace=0.25)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _histograms(coll: Any, op: str, path: Path) -> bool:
    dtypes = list(coll.settings.dtypes)
    kernels = [k.name for k in coll.kernels if k.op == op]
    if not any((k, op, d) in coll.ulps for k in kernels for d in dtypes):
        return False
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.6 * len(dtypes), 3.4), squeeze=False)
    colour = _colours(kernels)
    for ax, d in zip(axes[0], dtypes):
        samples = {k: np.concatenate(coll.ulps[(k, op, d)]) for k in kernels if (k, op, d) in coll.ulps}
        top = max((float(s.max()) for s in samples.values() if s.size), default=1.0)
        bins = np.logspace(math.log10(_ULP_FLOOR), math.log10(max(top, 1.0)) + 0.1, 40)
        for k, s in samples.items():
            if s.size:
                ax.hist(np.maximum(s, _ULP_FLOOR), bins=bins, histtype="step", lw=1.4,
                        color=colour[k], label=k, density=False)
        _log_axes(ax)
        ax.set_title(f"{op}, {d}", fontsize=10)
        ax.set_xlabel(f"ulp error of {d} (0 counted at {_ULP_FLOOR:g})", fontsize=8)
        ax.set_ylabel("elements (sampled)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{op}: histogram of ulp errors per kernel and dtype", fontsize=11)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.17, top=0.83, wspace=0.3)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def _attention_vs_seq(coll: Any, path: Path) -> bool:
    points = [p for p in coll.points if p["op"] == "attention"]
    if not points:
        return False
    dtypes = list(coll.settings.dtypes)
    kernels = [k.name for k in coll.kernels if k.op == "attention"]
    colour = _colours(kernels)
    fig, axes = plt.subplots(2, len(dtypes), figsize=(4.6 * len(dtypes), 6.2), squeeze=False)
    for j, d in enumerate(dtypes):
        for i, k in enumerate(kernels):
            kp = [p for p in points if p["kernel"] == k and p["dtype"] == d]
            if not kp:
                continue
            x = np.array([p["length"] for p in kp], float) * (1.0 + 0.05 * (i - 1))
            use = np.array([p["bound_use"] for p in kp], float)
            err = np.array([p["rmse"] for p in kp], float)
            axes[0][j].scatter(x, np.maximum(np.where(np.isfinite(use), use, 1e6), _USE_FLOOR),
                               s=10, alpha=0.6, color=colour[k], label=k)
            axes[1][j].scatter(x, np.maximum(np.where(np.isfinite(err), err, 1e6), 1e-12),
                               s=10, alpha=0.6, color=colour[k], label=k)
        axes[0][j].axhline(1.0, color="red", ls="--", lw=1)
        axes[0][j].set_title(f"attention, {d}", fontsize=10)
        for r, label in enumerate(("max bound use (error / bound)", "RMSE of o vs exact")):
            ax = axes[r][j]
            _log_axes(ax)
            ax.set_ylabel(label, fontsize=8)
            ax.set_xlabel("key length Sk", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("attention error against sequence length (all families; one point per call)",
                 fontsize=11)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.08, top=0.9, hspace=0.35, wspace=0.3)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return True


def make_plots(coll: Any, directory: Path) -> list[str]:
    """Write the report's PNGs into ``directory``; return their file names."""
    written: list[str] = []
    sm_kernels = [k.name for k in coll.kernels if k.op == "softmax"]
    sm_points = [p for p in coll.points if p["op"] == "softmax"]
    for d in coll.settings.dtypes:
        pts = [p for p in sm_points if p["dtype"] == d]
        if not pts:
            continue
        fams = list(dict.fromkeys(p["family"] for p in pts))
        specs = [
            ("length", "bound_use", f"softmax {d}: bound use per row against row length",
             "row length", f"max bound use (0 at {_USE_FLOOR:g})", "length"),
            ("length", "max_ulp", f"softmax {d}: ulp error per row against row length",
             "row length", f"max ulp error (0 at {_ULP_FLOOR:g})", "length-ulp"),
            ("spread", "bound_use", f"softmax {d}: bound use per row against spread max - min",
             f"spread max - min of the finite entries (0 at {_SPREAD_FLOOR:g})",
             "max bound use", "spread"),
        ]
        for xk, yk, title, xl, yl, suffix in specs:
            name = f"softmax-{d}-{suffix}.png"
            _family_figure(pts, sm_kernels, fams, xk, yk, title, xl, yl, directory / name)
            written.append(name)
    for op in ("softmax", "attention"):
        name = f"{op}-ulp-histogram.png"
        if _histograms(coll, op, directory / name):
            written.append(name)
    if _attention_vs_seq(coll, directory / "attention-vs-seq.png"):
        written.append("attention-vs-seq.png")
    return written
