"""The command line: ``onlinesm check | report | replay``.

Exit codes (docs/conventions.md): 0 every property held; 1 a property was falsified (each
failure printed with its minimal counterexample and a replay command), including a kernel that
raised, exited or hung on some input; 2 usage error, an environment that cannot run the request
(``--device cuda`` without CUDA), a target that cannot be imported, a damaged replay file, or a
kernel that fails on the simplest input.

After a hang the process ends with ``os._exit`` once the report is written: the hung call's
thread cannot be stopped, and a normal exit could wait for it forever.

Examples::

    onlinesm check mypkg.kernels:softmax --op softmax --dtypes float32,bfloat16
    onlinesm check kernels.py:attn --op attention --causal-align bottom-right --report out/
    onlinesm replay .onlinesm/failures/softmax-accuracy-....json
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Sequence

from onlinesm.errors import did_you_mean
from onlinesm.errors import print_usage_error as _error

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (what was wrong, the flag or command meant where
    one is close, and where the help is), exit 2."""

    #: the command line being parsed (set on the top-level parser by :func:`main`): which
    #: subcommand a flag was for
    argv: Sequence[str] = ()

    def error(self, message: str) -> Any:  # type: ignore[override]
        # "onlinesm: error:" from every subcommand, as the errors found after parsing begin
        self.exit(2, f"{self.prog.split()[0]}: error: {_explained(self, message)}\n")


def _explained(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's ``message``, with a close spelling of a misspelt flag or command, and the
    help that lists the options of the command given (not the top level's)."""
    commands: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its subparsers there
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            commands = dict(action.choices)
    command = next((a for a in getattr(parser, "argv", ()) if a in commands), None)
    target = commands.get(command, parser) if command else parser
    help_at = f"{parser.prog} {command}" if command else target.prog
    hint = ""
    own = re.match(r"argument ([^:]+): (.*)", message)
    if own and own.group(2).startswith(own.group(1).split("/")[-1] + " "):
        message = own.group(2)  # the message names its flag already: not twice
    number = re.search(r"invalid (int|float) value: ", message)
    if number:
        hint = "; give a whole number, e.g. 0" if number.group(1) == "int" else \
            "; give a number, e.g. 0.5, inf or -inf"
    bad = re.match(r"unrecognized arguments: (\S+)", message)
    if bad and bad.group(1).startswith("-"):
        flags = [o for a in target._actions for o in a.option_strings]  # noqa: SLF001
        flag = bad.group(1).split("=")[0].replace("_", "-")
        hint = did_you_mean(flag, flags, cutoff=0.8, quote=False)
    choice = re.search(r"invalid choice: '([^']*)'", message)
    if choice and commands and not command:
        hint = did_you_mean(choice.group(1), commands)
    return f"{message}{hint} (`{help_at} --help` lists the options)"


def _add_check(sub: Any) -> None:
    from onlinesm.options import add_options

    p = sub.add_parser("check", help="run the property suite on a kernel",
                       description="Run onlinesm's property suite on TARGET.")
    p.add_argument("target", nargs="?", help="package.module:function or path/to/file.py:function "
                   "(with --convention sdpa: torch's SDPA when omitted), or the NAME of a kernel "
                   "in [tool.onlinesm.kernels]; omitted with such a table: every kernel there")
    p.add_argument("--op", choices=["softmax", "attention"],
                   help="the op (implied by --convention)")
    add_options(p, "check")
    p.add_argument("--report", metavar="DIR", help="also write the results (JSON + Markdown) to DIR")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    from onlinesm.matrix_cli import add_arguments

    add_arguments(p)  # --workers N


def _run_check(args: argparse.Namespace) -> int:
    from onlinesm.adapters import SDPA_TARGET
    from onlinesm.check import check
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.options import check_op, keywords, refuse_moot
    from onlinesm.targets import TargetError, load_target

    from onlinesm.matrix_cli import run as run_matrix

    code = run_matrix(args)  # no TARGET with a [tool.onlinesm] table, a kernel NAME, --workers N
    if code is not None:
        return code
    kw = keywords(args, "check")
    try:  # flags that do nothing beside others (not in a table's runs: an entry may hold the rest)
        refuse_moot(kw)
    except ValueError as err:
        return _error(str(err))
    convention = kw.get("convention")
    target = args.target or (SDPA_TARGET if convention == "sdpa" else None)
    try:
        if target is None:
            raise UsageError("TARGET is needed: package.module:function or path/to/file.py:function "
                             "(e.g. onlinesm check mypkg.kernels:softmax --op softmax)")
        op = check_op(args.op, convention)
        kw["device"] = select_device(kw.get("device"))
        if "profile" in kw:
            from onlinesm.check import profile_name

            kw["profile"] = profile_name(kw["profile"])
        if args.report:
            from onlinesm.report.schema import ensure_writable

            try:
                ensure_writable(args.report)
            except OSError as err:
                raise UsageError(f"cannot write the report to {args.report}: {err.strerror or err}; "
                                 "choose another --report DIR") from None
        fn = load_target(target)
    except (TargetError, UsageError, ValueError) as err:
        return _error(str(err))
    progress = None if args.quiet else (lambda msg: print("  " + msg, file=sys.stderr, flush=True))
    kinds = kw.pop("mask_kinds", None) or [None]
    results = []
    for kind in kinds:
        run_kw = dict(kw, **({"mask_kind": kind} if kind else {}))
        if kind and len(kinds) > 1:
            print(f"== mask kind {kind}")
        try:
            result = check(fn, op, name=target, target=target, raise_on_failure=False,
                           progress=progress, **run_kw)
        except (UsageError, ValueError, TypeError) as err:
            return _error(str(err))
        print(result.report())
        results.append(result)
    passed = all(r.passed for r in results)
    if args.report:
        from onlinesm.report.schema import write_check_report

        # one report per mask kind (DIR/KIND) when several kinds ran, so none is lost
        folders = [args.report] if len(results) == 1 else [os.path.join(args.report, k) for k in kinds]
        for result, folder in zip(results, folders):
            try:
                path = write_check_report(result, folder)
            except OSError as err:
                print(f"onlinesm: error: cannot write the report to {folder}: {err}", file=sys.stderr)
                return 1 if not passed else 2
            print(f"\nreport written to {path}")
    return 0 if passed else 1


def _run_replay(args: argparse.Namespace) -> int:
    from onlinesm.counterexample import replay
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.targets import TargetError, load_target

    from onlinesm.options import keywords

    kw = keywords(args, "replay")
    try:
        device = select_device(kw.get("device"))
        fn = load_target(args.target) if args.target else None
        holds, message = replay(args.file, fn, device=device, deadline=kw.get("deadline"),
                                name=args.target)
    except (TargetError, UsageError, ValueError) as err:
        return _error(str(err))
    print(("PASSED: " if holds else "FAILED: ") + message)
    return 0 if holds else 1


def _finish(code: int, hung_before: int) -> int:
    """Return the exit code, or end the process at once when a call of this run still hangs."""
    from onlinesm.harness import hung_threads_alive

    if hung_threads_alive(since=hung_before):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onlinesm`` command; returns the exit code."""
    parser = _Parser(prog="onlinesm", description="Property testing for softmax and attention kernels.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_check(sub)
    rp = sub.add_parser("replay", help="re-run one saved counterexample")
    rp.add_argument("file")
    rp.add_argument("--target", help="the kernel, when the file names none or another")
    from onlinesm.options import add_options

    add_options(rp, "replay")
    try:
        from onlinesm.report import cli as report_cli
    except ImportError:
        report_cli = None
    if report_cli is not None:
        report_cli.add_parser(sub)
    parser.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad flag (2, one line already printed)
        return int(exc.code or 0)
    from onlinesm.harness import hung_call_count

    before = hung_call_count()
    if args.command == "check":
        return _finish(_run_check(args), before)
    if args.command == "replay":
        return _finish(_run_replay(args), before)
    return _finish(int(report_cli.run(args)), before)  # type: ignore[union-attr]


if __name__ == "__main__":
    sys.exit(main())
