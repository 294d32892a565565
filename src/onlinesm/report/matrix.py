"""``onlinesm report`` on the kernel matrix: the table's kernels as the report's user kernels.

What: :func:`matrix_kernels` returns the :class:`~onlinesm.report.builtin.ReportKernel` of each
kernel in the ``[tool.onlinesm]`` table (all of them without TARGET; the named ones, by NAME or
by target, otherwise), with the conventions the table declares (flags given to ``report``
override them), or None when there is no table or a TARGET is not in it (then the report runs
as without a table). Why: the report must hold a kernel to the same declarations as its check.

Example::

    onlinesm report --out reports/mine        # every kernel of [tool.onlinesm.kernels]
    onlinesm report my_softmax --out out/      # one of them
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["matrix_kernels", "report_kernel"]

#: Keywords that say how a kernel is called (onlinesm.adapters), not what it declares.
_ADAPTER_KEYS = ("convention", "layout", "fixed_kwargs", "mask_kind", "sdpa_backend")


def matrix_kernels(args: argparse.Namespace) -> list[Any] | None:
    """The report kernels of the table, or None (no table, or a TARGET that is not in it)."""
    from onlinesm.config import find_config, load_config

    path = find_config()
    if path is None:
        return None
    matrix = load_config(path)
    if args.targets:
        chosen = []
        for t in args.targets:
            entry = matrix.entries.get(t) or next(
                (e for e in matrix.entries.values() if e.target == t), None)
            if entry is None:
                if ":" not in t:
                    matrix.select([t])  # a NAME that is not in the table: ConfigError
                return None
            chosen.append(entry)
    else:
        chosen = list(matrix.entries.values())
    if args.op:
        chosen = [e for e in chosen if e.op == args.op]
    return [_kernel(e, args) for e in chosen]


def _kernel(entry: Any, args: argparse.Namespace) -> Any:
    from onlinesm.options import keywords
    from onlinesm.targets import load_target

    given = keywords(args, "report")
    given.pop("dtypes", None)  # the report's --dtypes picks the grid's dtypes, not the kernel's
    rk = report_kernel(entry.target, load_target(entry.target), entry.op,
                       {**entry.keywords, **given})
    return dataclasses.replace(rk, name=entry.name) if dataclasses.is_dataclass(rk) else rk


def report_kernel(target: str, fn: Any, op: str, kw: dict[str, Any]) -> Any:
    """The :class:`~onlinesm.report.builtin.ReportKernel` of ``fn`` from check's keywords:
    called through its calling convention (``convention``, ``layout``, ``fixed_kwargs``,
    ``mask_kind``, ``sdpa_backend``), holding its conventions, numerics and domain (what the
    convention implies, then what ``kw`` says)."""
    from onlinesm import adapters
    from onlinesm.declarations import Conventions, Domain, Numerics, split_keywords
    from onlinesm.report.builtin import user_kernel

    kw = dict(kw)
    chosen = {k: kw.pop(k) for k in _ADAPTER_KEYS if k in kw}
    if chosen:
        fn = adapters.adapt(fn, convention=chosen.get("convention", "onlinesm"), layout=chosen.get("layout"),
                            kwargs=chosen.get("fixed_kwargs"), mask_kind=chosen.get("mask_kind"),
                            sdpa_backend=chosen.get("sdpa_backend"), target=target)
        kw = {**fn.implied, **kw}
    own = {f.name for cls in (Conventions, Numerics, Domain) for f in dataclasses.fields(cls)}
    declared = {k: v for k, v in kw.items() if k in own}
    if op == "attention":
        declared.setdefault("p_dtype", "input")
    conv, domain, _ = split_keywords(declared)
    conv.numerics.exp_model()  # a clear error for a bad exp class, now rather than mid-run
    return user_kernel(target, fn, op, conv, backend=kw.get("backend"), domain=domain)
