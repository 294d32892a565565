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
import sys
from typing import Any, Sequence

__all__ = ["main"]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _exp_class(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 60")
    return value


def _add_check(sub: Any) -> None:
    p = sub.add_parser("check", help="run the property suite on a kernel",
                       description="Run onlinesm's property suite on TARGET.")
    p.add_argument("target", help="package.module:function or path/to/file.py:function")
    p.add_argument("--op", required=True, choices=["softmax", "attention"])
    p.add_argument("--dtypes", type=_csv, default=["float32", "bfloat16", "float16"],
                   help="comma-separated dtypes to generate [float32,bfloat16,float16]")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--backend", choices=["torch", "numpy"], help="what the kernel takes [torch]")
    p.add_argument("--max-examples", type=int, help="examples per property and dtype")
    p.add_argument("--profile", default="quick",
                   help="quick, ci or thorough (onlinesm-quick etc. also accepted) [quick]")
    p.add_argument("--deadline", type=_seconds, metavar="SECONDS",
                   help="seconds one kernel call may take before it counts as a hang [cuda 30, cpu 120]")
    p.add_argument("--strict", action="store_true",
                   help="fail bf16 misses of one ulp that Triton's interpreter's truncation may cause")
    p.add_argument("--compile-allowance", type=_seconds, metavar="SECONDS",
                   help="extra seconds for the first call of each compiled variant [cuda 240, cpu 0]")
    p.add_argument("--seed", type=int, help="make the run reproducible")
    p.add_argument("--fully-masked", choices=["zeros", "nan", "any"], default="zeros")
    p.add_argument("--causal-align", choices=["top-left", "bottom-right"], default="top-left")
    p.add_argument("--lse-base", choices=["e", "2"], default="e")
    p.add_argument("--empty-lse", choices=["-inf", "inf"], default="-inf")
    p.add_argument("--require", type=_csv, default=[],
                   help="extra guarantees to check: batch-invariant")
    p.add_argument("--nondeterministic", action="store_true", help="waive the bitwise determinism check")
    p.add_argument("--accumulate", default="float32", help="the kernel's accumulation dtype [float32]")
    p.add_argument("--exp", type=_exp_class, default="fast",
                   help="exp accuracy class: fast (tl.exp), exp2, accurate, exact, or ulps [fast]")
    p.add_argument("--allow-tf32", action="store_true")
    p.add_argument("--p-dtype", default="input", help="attention: dtype P is rounded to before P·V [input]")
    p.add_argument("--families", type=_csv, help="only these strategy families")
    p.add_argument("--properties", type=_csv, help="only these properties")
    p.add_argument("--skip", action="append", default=[], metavar="PROPERTY=REASON",
                   help="waive a property, with the reason shown in the output")
    p.add_argument("--min-len", type=int, default=1)
    p.add_argument("--max-len", type=int, default=1024)
    p.add_argument("--max-rows", type=int, default=8)
    p.add_argument("--head-dims", type=lambda t: [int(v) for v in _csv(t)], default=[16, 32, 64])
    p.add_argument("--max-batch", type=int, default=2)
    p.add_argument("--max-heads", type=int, default=4)
    p.add_argument("--max-seq-q", type=int, default=64)
    p.add_argument("--max-seq-k", type=int, default=96)
    p.add_argument("--allow-gqa", action="store_true")
    p.add_argument("--no-mask", action="store_true", help="the kernel takes no mask")
    p.add_argument("--no-causal", action="store_true", help="the kernel has no causal mode")
    p.add_argument("--same-seq", action="store_true", help="the kernel needs Sq == Sk")
    p.add_argument("--report", metavar="DIR", help="also write the results (JSON + Markdown) to DIR")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _skips(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, reason = item.partition("=")
        if not sep or not reason.strip():
            raise ValueError(f"--skip {item!r} needs a reason: --skip PROPERTY=REASON")
        out[name.strip()] = reason.strip()
    return out


def _error(message: str) -> int:
    print(f"onlinesm: error: {message}", file=sys.stderr)
    return 2


def _run_check(args: argparse.Namespace) -> int:
    from onlinesm.check import check_attention, check_softmax, profile_name
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.targets import TargetError, load_target

    try:
        device = select_device(args.device)
        profile = profile_name(args.profile)
        skip = _skips(args.skip)
        if args.report:
            from onlinesm.report.schema import ensure_writable

            try:
                ensure_writable(args.report)
            except OSError as err:
                raise UsageError(f"cannot write the report to {args.report}: {err.strerror or err}; "
                                 "choose another --report DIR") from None
        fn = load_target(args.target)
    except (TargetError, UsageError, ValueError) as err:
        return _error(str(err))
    unknown = set(args.require) - {"batch-invariant"}
    if unknown:
        return _error(f"--require {','.join(sorted(unknown))} is not a guarantee onlinesm checks; "
                      "use batch-invariant")
    progress = None if args.quiet else (lambda msg: print("  " + msg, file=sys.stderr, flush=True))
    common: dict[str, Any] = dict(
        dtypes=args.dtypes, fully_masked=args.fully_masked, deterministic=not args.nondeterministic,
        accumulate=args.accumulate, exp=args.exp, families=args.families, properties=args.properties,
        skip=skip, profile=profile, max_examples=args.max_examples, seed=args.seed,
        device=device, backend=args.backend, name=args.target, target=args.target,
        deadline=args.deadline, compile_allowance=args.compile_allowance, strict=args.strict,
        raise_on_failure=False, progress=progress,
    )
    try:
        if args.op == "softmax":
            result = check_softmax(fn, batch_invariant="batch-invariant" in args.require,
                                   min_len=args.min_len, max_len=args.max_len,
                                   max_rows=args.max_rows, **common)
        else:
            result = check_attention(
                fn, causal_align=args.causal_align, lse_base=args.lse_base,
                empty_lse=float(args.empty_lse), allow_tf32=args.allow_tf32,
                p_dtype=None if args.p_dtype == "none" else args.p_dtype, head_dims=args.head_dims,
                max_batch=args.max_batch, max_heads=args.max_heads,
                max_seq_q=args.max_seq_q, max_seq_k=args.max_seq_k, allow_mask=not args.no_mask,
                allow_causal=not args.no_causal, allow_gqa=args.allow_gqa, same_seq=args.same_seq,
                **common)
    except (UsageError, ValueError, TypeError) as err:
        return _error(str(err))
    print(result.report())
    if args.report:
        from onlinesm.report.schema import write_check_report

        try:
            path = write_check_report(result, args.report)
        except OSError as err:
            print(f"onlinesm: error: cannot write the report to {args.report}: {err}", file=sys.stderr)
            return 1 if not result.passed else 2
        print(f"\nreport written to {path}")
    return 0 if result.passed else 1


def _run_replay(args: argparse.Namespace) -> int:
    from onlinesm.counterexample import replay
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.targets import TargetError, load_target

    try:
        device = select_device(args.device)
        fn = load_target(args.target) if args.target else None
        holds, message = replay(args.file, fn, device=device)
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
    parser = argparse.ArgumentParser(prog="onlinesm", description="Property testing for softmax and attention kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_check(sub)
    rp = sub.add_parser("replay", help="re-run one saved counterexample")
    rp.add_argument("file")
    rp.add_argument("--target", help="the kernel, when the file names none or another")
    rp.add_argument("--device", choices=["cpu", "cuda"])
    try:
        from onlinesm.report import cli as report_cli
    except ImportError:
        report_cli = None
    if report_cli is not None:
        report_cli.add_parser(sub)
    args = parser.parse_args(argv)
    from onlinesm.harness import hung_call_count

    before = hung_call_count()
    if args.command == "check":
        return _finish(_run_check(args), before)
    if args.command == "replay":
        return _finish(_run_replay(args), before)
    return _finish(int(report_cli.run(args)), before)  # type: ignore[union-attr]


if __name__ == "__main__":
    sys.exit(main())
