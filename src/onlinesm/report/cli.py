"""``onlinesm report``: the numerics report of the built-in kernels, or of the user's TARGETs.

What: :func:`add_parser` adds the ``report`` subcommand to ``onlinesm``'s parser and
:func:`run` executes it: pick the device (the Triton interpreter on the CPU, chosen before any
kernel is imported), load the kernels, run the grid (:mod:`onlinesm.report.collect`), write
DIR atomically (:mod:`onlinesm.report.schema`). Exit codes: 0 every kernel x dtype passes,
1 some fails, 2 usage error (a bad TARGET or option, an unwritable DIR, a kernel that fails on
the simplest input), always as one line ``onlinesm: error: ...``.

Examples::

    onlinesm report --out reports/cpu                        # built-in kernels, a few minutes
    onlinesm report mypkg.kernels:softmax --op softmax --fully-masked nan --out out/
    onlinesm report --op attention --device cuda --thorough --html --out reports/h200
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from onlinesm.errors import print_usage_error as _error
from onlinesm.options import _csv, _ints

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Add ``report`` to ``onlinesm``'s subcommands."""
    p = subparsers.add_parser(
        "report", help="write a numerics report (tables, plots, JSON) of kernels",
        description="Run kernels over every strategy family x dtype and write index.md, "
                    "summary.json and PNG plots to DIR. No TARGET: the built-in kernels.")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="package.module:function or path/to/file.py:function (needs --op)")
    p.add_argument("--op", choices=["softmax", "attention"],
                   help="the op of the TARGETs; without TARGET, only this op's built-ins")
    p.add_argument("--out", default="onlinesm-report", metavar="DIR",
                   help="the report folder, replaced atomically [onlinesm-report]")
    p.add_argument("--seeds", type=int, help="seeds per case [2; --thorough 6]")
    p.add_argument("--seed", type=int, default=0, help="base seed [0]")
    p.add_argument("--thorough", action="store_true",
                   help="more seeds, lengths (up to 65536) and sequence lengths")
    p.add_argument("--lengths", type=_ints, help="softmax row lengths, e.g. 16,65,1025")
    p.add_argument("--seqs", type=_ints, help="attention key lengths, e.g. 16,80,256")
    p.add_argument("--rows", type=int, default=4, help="rows per softmax case [4]")
    p.add_argument("--families", type=_csv, help="only these softmax families")
    p.add_argument("--attention-families", type=_csv, help="only these attention families")
    p.add_argument("--head-dim", type=int,
                   help="attention head dim [64; a kernel that declares head dims without 64: "
                        "the nearest of them]")
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--html", action="store_true", help="also write a self-contained index.html")
    p.add_argument("--no-triton", action="store_true", help="leave the Triton built-ins out")
    p.add_argument("--no-fa3", action="store_true", help="skip FlashAttention-3's error table")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--fa3-seq", type=int, help="sequence length of the FA3 table [cpu 128, cuda 2048]")
    # the conventions a TARGET declares, and where it runs: the same options as `onlinesm check`
    from onlinesm.options import add_options

    add_options(p, "report")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--builtin", action="store_true",
                   help="report the built-in kernels even when a [tool.onlinesm] table exists")


class _NothingTested(ValueError):
    """No case of the grid reached some kernel (its declared domain excludes them all)."""


def _settings(args: argparse.Namespace, device: str) -> Any:
    from onlinesm.dtypes import resolve
    from onlinesm.report.collect import THOROUGH_LENGTHS, THOROUGH_SEQS, Settings
    from onlinesm.strategies import ATTENTION_FAMILIES, SOFTMAX_FAMILIES

    dtypes = tuple(resolve(d).name for d in (args.opt_dtypes or ["float32", "bfloat16", "float16"]))
    if not dtypes:
        raise ValueError("--dtypes is empty; give at least one of float32,bfloat16,float16")
    for fam in args.families or []:
        if fam not in SOFTMAX_FAMILIES:
            raise ValueError(f"--families {fam!r} is not a softmax family; choose from "
                             f"{', '.join(SOFTMAX_FAMILIES)}")
    for fam in args.attention_families or []:
        if fam not in ATTENTION_FAMILIES:
            raise ValueError(f"--attention-families {fam!r} is not an attention family; choose "
                             f"from {', '.join(ATTENTION_FAMILIES)}")
    seeds = args.seeds if args.seeds is not None else (6 if args.thorough else 2)
    # "is None", not "or": 0 is an error, not the default
    head_dim = 64 if args.head_dim is None else args.head_dim
    fa3_seq = (128 if device == "cpu" else 2048) if args.fa3_seq is None else args.fa3_seq
    for name, value in (("--seeds", seeds), ("--rows", args.rows), ("--heads", args.heads),
                        ("--head-dim", head_dim), ("--fa3-seq", fa3_seq)):
        if value < 1:
            raise ValueError(f"{name}={value} must be at least 1")
    kw: dict[str, Any] = dict(dtypes=dtypes, seeds=seeds, seed=args.seed, rows=args.rows,
                              families=tuple(args.families) if args.families else None,
                              attention_families=(tuple(args.attention_families)
                                                  if args.attention_families else None),
                              heads=args.heads, head_dim=head_dim, device=device,
                              fa3=not args.no_fa3)
    if args.thorough:
        kw.update(lengths=THOROUGH_LENGTHS, seqs=THOROUGH_SEQS, fa3_seeds=3)
    if args.lengths:
        if min(args.lengths) < 1:
            raise ValueError(f"--lengths {args.lengths} must all be >= 1")
        kw["lengths"] = tuple(args.lengths)
    if args.seqs:
        if min(args.seqs) < 1:
            raise ValueError(f"--seqs {args.seqs} must all be >= 1")
        kw["seqs"] = tuple(args.seqs)
    kw["fa3_shape"] = (1, 2, fa3_seq, 64) if device == "cpu" else (1, 8, fa3_seq, 128)
    return Settings(**kw)


def _own_grids(kernels: list[Any], settings: Any, args: argparse.Namespace) -> Any:
    """Each user kernel's own grid, from what it declares (``ReportKernel.lengths``, ``seqs``,
    ``head_dim``): the report's row lengths rounded up to its ``len_multiple``, key lengths to
    two of its ``seq_multiple`` (causal cases take Sq = Sk / 2), unless --lengths / --seqs give
    the grid; an attention kernel whose head dims leave out the report's (and no --head-dim)
    takes the nearest of them.

    Returns the settings whose grid is the union of the kernels' (what inputs are made for).
    """
    import dataclasses

    from onlinesm.report.builtin import declared_fields

    def up(values: tuple[int, ...], m: int) -> tuple[int, ...]:  # rounded up to multiples of m
        return tuple(sorted({-(-n // m) * m for n in values}))

    for rk in kernels:
        declared = declared_fields(rk.domain) if rk.domain is not None else {}
        rk.lengths, rk.seqs = settings.lengths, settings.seqs
        if "len_multiple" in declared and not args.lengths:
            rk.lengths = up(settings.lengths, declared["len_multiple"])
        if "seq_multiple" in declared and not args.seqs:
            rk.seqs = up(settings.seqs, 2 * declared["seq_multiple"])
        dims = declared.get("head_dims")
        if rk.op == "attention" and dims and args.head_dim is None and settings.head_dim not in dims:
            rk.head_dim = min(dims, key=lambda d: (abs(d - settings.head_dim), d))
            rk.note += f"; its grid's head dim: {rk.head_dim}"
    grids = {op: [getattr(rk, field) for rk in kernels if rk.op == op]
             for op, field in (("softmax", "lengths"), ("attention", "seqs"))}
    return dataclasses.replace(
        settings, lengths=tuple(sorted(set().union(*grids["softmax"]))) or settings.lengths,
        seqs=tuple(sorted(set().union(*grids["attention"]))) or settings.seqs)


def _user_kernels(args: argparse.Namespace) -> list[Any]:
    from onlinesm.options import keywords
    from onlinesm.report.matrix import report_kernel
    from onlinesm.targets import load_target

    kw = keywords(args, "report")
    for key in ("device", "dtypes"):  # where it runs and what is generated
        kw.pop(key, None)
    return [report_kernel(t, load_target(t), args.op, kw) for t in args.targets]


def _smoke(rk: Any, device: str, settings: Any) -> None:
    """The check's first call (the simplest input inside the kernel's declared domain, in the
    report's dtypes); ValueError when nothing could be tested, or when no case of the grid lies
    inside the domain."""
    import dataclasses

    from onlinesm.declarations import Domain
    from onlinesm.engine import first_call, inside
    from onlinesm.errors import UsageError
    from onlinesm.harness import Kernel
    from onlinesm.report.builtin import declared_domain

    declared = rk.domain or Domain()
    dtypes = tuple(d for d in settings.dtypes if d in declared.dtypes)
    if not dtypes:
        raise ValueError(f"{rk.name} declares dtypes {','.join(declared.dtypes)}, and the report "
                         f"runs {','.join(settings.dtypes)}: choose --dtypes among the first")
    held = declared_domain(dataclasses.replace(declared, dtypes=dtypes),
                           rk.head_dim or settings.head_dim)
    if rk.op == "softmax" and rk.domain is not None:
        import numpy as np

        lengths = rk.lengths or settings.lengths
        if not any(inside("softmax", np.empty((1, n)), held) for n in lengths):
            raise ValueError(f"no row length of the report's grid ({', '.join(map(str, lengths))}) "
                             f"lies inside {rk.name}'s declared domain (len_multiple="
                             f"{held.len_multiple}, {held.min_len}..{held.max_len}); choose "
                             "them with --lengths")
    kernel = Kernel(rk.fn, op=rk.op, backend=rk.backend, device=device, name=rk.name)
    try:
        first_call(kernel, rk.op, held, command="report")
    except UsageError as err:
        raise ValueError(str(err)) from None


def _select_device(requested: str | None) -> str:
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError

    try:
        device = select_device(requested)
    except UsageError as err:
        raise ValueError(str(err)) from None
    try:
        from onlinesm import kernels

        kernels.use_interpreter(device == "cpu")
    except ImportError:
        pass
    return device


def run(args: argparse.Namespace) -> int:
    """Execute ``onlinesm report``; returns the exit code (0 pass, 1 a kernel fails, 2 usage)."""
    from onlinesm.report.builtin import builtin_kernels
    from onlinesm.report.collect import Progress, collect
    from onlinesm.report.markdown import verdict_table
    from onlinesm.report.schema import atomic_directory, ensure_writable, write_report
    from onlinesm.targets import TargetError

    try:
        from onlinesm.report.matrix import matrix_kernels

        table_kernels = None if args.builtin else matrix_kernels(args)
    except (TargetError, ValueError) as err:
        return _error(str(err).splitlines()[0] if str(err) else type(err).__name__)
    if table_kernels is None and args.targets and args.op is None:
        return _error(f"TARGET {args.targets[0]!r} needs --op softmax or --op attention")
    out = Path(args.out)
    try:
        ensure_writable(out)
    except OSError as err:
        return _error(f"cannot write the report to {out}: {err.strerror or err}; choose another --out DIR")
    try:
        device = _select_device(args.opt_device)
        settings = _settings(args, device)
        if table_kernels is not None or args.targets:
            kernels = table_kernels if table_kernels is not None else _user_kernels(args)
            settings = _own_grids(kernels, settings, args)
            for rk in kernels:
                _smoke(rk, device, settings)
        else:
            ops = [args.op] if args.op else ["softmax", "attention"]
            kernels = [k for op in ops for k in builtin_kernels(
                op, device=device, include_triton=not args.no_triton,
                interpreted_max_seq=80)]
    except (TargetError, ValueError, RuntimeError) as err:
        return _error(str(err).splitlines()[0] if str(err) else type(err).__name__)
    sm = [k for k in kernels if k.op == "softmax"]
    at = [k for k in kernels if k.op == "attention"]
    command = "onlinesm report " + " ".join(shlex.quote(a) for a in (args.argv or [])) \
        if getattr(args, "argv", None) else None
    progress = Progress(0, quiet=args.quiet)
    try:
        with atomic_directory(out) as tmp:
            coll = collect(sm, at, settings, progress=progress,
                           counterexample_dir=tmp / "counterexamples", replay_dir=str(out))
            untested = [rk.name for rk in kernels if not any(c.kernel == rk.name for c in coll.cases)]
            if untested:  # a kernel no case reached passes nothing: no report, exit 2
                raise _NothingTested(f"nothing could be tested: no case of the report's grid lies "
                                     f"inside the declared domain of {', '.join(untested)}; choose "
                                     "the grid with --lengths / --seqs / --head-dim")
            progress.say("writing the report" + ("" if args.no_plots else " and its plots"))
            write_report(coll, tmp, html=args.html, plots=not args.no_plots, command=command)
    except OSError as err:
        return _error(f"cannot write the report to {out}: {err}")
    except _NothingTested as err:
        return _error(str(err))
    from onlinesm.report.schema import report_summary

    doc = report_summary(coll)
    print("\n".join(verdict_table(doc)))
    print(f"\n{'PASSED' if coll.passed else 'FAILED'}: report written to {out / 'index.md'} "
          f"({coll.seconds:.0f} s)")
    return 0 if coll.passed else 1
