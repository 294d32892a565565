"""``onlinesm check`` on the kernel matrix, and ``--workers N`` (pytest + pytest-xdist).

What: :func:`run` is called first by ``onlinesm check``. It handles

- no TARGET, with a ``[tool.onlinesm]`` table found (:func:`onlinesm.config.find_config`): every
  kernel of the table, each one's table, then the summary;
- ``NAME`` (no ':'): the table's kernel of that name;
- ``--workers N`` (N >= 2), for the matrix or a TARGET: the (kernel, property, dtype) items run
  by ``pytest -n N`` with onlinesm's plugin; each item writes its result as JSON into a run
  folder (``.onlinesm/runs/...``), merged here into the same tables and exit code;

and returns None for everything else (a TARGET without ``--workers``: the plain check).
Command-line flags override the table's keys for every kernel. Exit codes: 0 every property
held, 1 one failed, 2 a configuration or usage error (one line).

Why pytest: xdist already shares items among processes, and the items are the same ones a
user's ``pytest -n N`` runs. With GPUs, each worker is started with one GPU in its
``CUDA_VISIBLE_DEVICES`` (:mod:`onlinesm.gpus`).

Example::

    onlinesm check                     # every kernel in [tool.onlinesm.kernels]
    onlinesm check my_softmax --seed 0
    onlinesm check --workers 2 --profile ci
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from onlinesm.errors import print_usage_error as _error

__all__ = ["run", "add_arguments"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workers N``, added to ``onlinesm check``."""
    from onlinesm.options import _positive_int

    parser.add_argument("--workers", type=_positive_int, metavar="N",
                        help="run the (kernel, property, dtype) items in N processes with pytest-xdist "
                             "(one GPU each when there are GPUs) [1]")


def _plugin_installed() -> bool:
    """Whether pytest loads onlinesm's plugin by itself (the package's pytest11 entry point)."""
    from importlib.metadata import entry_points

    return any(ep.name == "onlinesm" for ep in entry_points(group="pytest11"))


def run(args: argparse.Namespace) -> int | None:
    """The exit code when the matrix (or ``--workers``) handles this check, else None."""
    from onlinesm.config import ConfigError, KernelEntry, find_config, load_config
    from onlinesm.errors import UsageError
    from onlinesm.options import check_op, keywords

    workers = getattr(args, "workers", None) or 1
    target = args.target
    kw = keywords(args, "check")
    if target is not None and ":" in target or (target is None and kw.get("convention") == "sdpa"):
        if workers < 2:
            return None  # the plain check
        from onlinesm.adapters import SDPA_TARGET

        target = target or SDPA_TARGET
        try:
            op = check_op(args.op, kw.get("convention"))
        except UsageError as err:
            return _error(str(err))
        kinds = kw.pop("mask_kinds", None) or []
        if len(kinds) > 1:
            return _error("--workers checks one mask kind; run one command per kind (--mask-kinds KIND)")
        if kinds:
            kw["mask_kind"] = kinds[0]
        entries = [KernelEntry(target, target, op, kw, Path.cwd())]
        return _run_entries(entries, {}, workers, args, matrix=False)
    path = find_config()
    if path is None:
        if target is not None:
            return _error(f"target {target!r} must look like package.module:function or path/to/file.py:function, "
                          "or name a kernel of a [tool.onlinesm] table (none found in pyproject.toml or onlinesm.toml)")
        return None  # the plain check says what is missing
    try:
        entries = load_config(path).select([target] if target else [])
        if not entries:
            raise ConfigError(f"{path}: [tool.onlinesm.kernels] declares no kernel; add "
                              "[tool.onlinesm.kernels.NAME] with target = \"pkg.mod:fn\"")
        if args.op and any(e.op != args.op for e in entries):
            raise UsageError(f"--op {args.op} differs from the table's op for "
                             f"{next(e.name for e in entries if e.op != args.op)}; leave --op out")
        kinds = kw.pop("mask_kinds", None) or []
        if len(kinds) > 1:
            raise UsageError("a matrix run checks one mask kind per kernel; declare one entry per kind")
        if kinds:
            kw["mask_kind"] = kinds[0]
        if "profile" in kw:
            from onlinesm.check import profile_name

            kw["profile"] = profile_name(kw["profile"])
    except (UsageError, ValueError) as err:
        return _error(str(err))
    return _run_entries(entries, kw, workers, args, matrix=True)


def _run_entries(entries: list[Any], overrides: dict[str, Any], workers: int,
                 args: argparse.Namespace, *, matrix: bool) -> int:
    from onlinesm.matrix import entry_json, merge, summary

    if args.report:
        from onlinesm.report.schema import ensure_writable

        try:
            ensure_writable(args.report)
        except OSError as err:
            return _error(f"cannot write the report to {args.report}: {err.strerror or err}; "
                          "choose another --report DIR")
    try:
        specs = [{**entry_json(e, overrides), "root": str(Path(e.path).resolve().parent
                                                          if Path(e.path).is_file() else Path(e.path))}
                 for e in entries]
    except ValueError as err:
        return _error(str(err))
    start = time.monotonic()
    log = None
    if workers >= 2:
        ran = _run_pytest(specs, workers, quiet=args.quiet)
        if isinstance(ran, int):
            return ran
        records, log = ran
    else:
        records = _run_here(specs, quiet=args.quiet)
    rows, codes, results = [], [], []
    for spec in specs:
        mine = [r for r in records if r["kernel"] == spec["name"]]
        expected = len(spec["dtypes"]) * len(spec["properties"])
        errors = [r for r in mine if r["status"] == "error"]
        if errors or len(mine) < expected:
            why = errors[0]["error"] if errors else (
                f"{expected - len(mine)} of {expected} items gave no result"
                + (f" (the workers' output: {log})" if log else ""))
            print(f"onlinesm: error: {spec['name']}: {why}", file=sys.stderr)
            rows.append((spec["name"], spec["op"], "ERROR", why.replace("|", "/")))
            codes.append(2)
            continue
        result = merge(spec, mine, spec["keywords"].get("seed"))
        if result.nothing_tested:
            why = "nothing could be tested: every property is n/a"
            print(f"onlinesm: error: {spec['name']}: {why}", file=sys.stderr)
            rows.append((spec["name"], spec["op"], "ERROR", why))
            codes.append(2)
            continue
        if matrix:
            print(f"== {spec['name']} ({spec['target']})")
        print(result.report())
        print()
        results.append((spec["name"], result))
        failed = sum(1 + len(f.also) for f in result.failures)
        rows.append((spec["name"], spec["op"], "PASSED" if result.passed else "FAILED",
                     f"{len(mine)} items" + (f", {failed} falsified" if failed else "")))
        codes.append(0 if result.passed else 1)
    code = 2 if 2 in codes else (1 if 1 in codes else 0)
    if matrix:
        print(summary(rows))
        verdict = {0: "PASSED", 1: "FAILED", 2: "ERROR"}[code]
        print(f"\n{verdict}: {len(specs)} kernel{'s' if len(specs) != 1 else ''}, {sum(len(s['dtypes']) * len(s['properties']) for s in specs)} "
              f"items, {workers} worker{'s' if workers > 1 else ''}, {time.monotonic() - start:.1f} s")
    if args.report and results:
        from onlinesm.report.schema import write_check_report

        try:
            for name, result in results:
                where = Path(args.report) / _safe(name) if matrix else Path(args.report)
                print(f"report written to {write_check_report(result, where)}")
        except OSError as err:
            print(f"onlinesm: error: cannot write the report to {args.report}: {err}", file=sys.stderr)
            return code or 2
    return code


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _run_here(specs: list[dict[str, Any]], *, quiet: bool) -> list[dict[str, Any]]:
    """Every item in this process, in order (the same seeds and modules as the workers')."""
    from onlinesm.matrix import run_item, warm_modules, warm_targets

    warm_modules()
    warm_targets(specs)
    records = []
    for spec in specs:
        progress = None if quiet else (
            lambda msg, n=spec["name"]: print(f"  {n}: {msg}", file=sys.stderr, flush=True))
        for dtype in spec["dtypes"]:
            for prop in spec["properties"]:
                records.append(run_item(spec, prop, dtype, progress=progress))
    return records


class _Tee:
    """A text stream that writes to several (pytest's output: the terminal and a log file)."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def isatty(self) -> bool:
        return False


def _dist_mode() -> str:
    """pytest-xdist's ``worksteal`` scheduling where this xdist has it (3.2+), else ``load``.

    >>> _dist_mode() in ("worksteal", "load")
    True
    """
    import xdist

    parts = tuple(int(p) for p in xdist.__version__.split(".")[:2] if p.isdigit())
    return "worksteal" if parts >= (3, 2) else "load"


def _run_pytest(specs: list[dict[str, Any]], workers: int, *,
                quiet: bool) -> tuple[list[dict[str, Any]], Path] | int:
    """The items run by ``pytest -n workers``: their records and the log of pytest's output
    (kept whatever happens: a worker that crashes says why only there), or exit code 2."""
    try:
        import pytest
        import xdist  # noqa: F401
    except ImportError:
        return _error("--workers needs pytest and pytest-xdist: pip install pytest-xdist")
    from onlinesm.gpus import tx_specs, visible_devices
    from onlinesm.matrix import read_records

    run_dir = Path(".onlinesm") / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    results = run_dir / "items"
    results.mkdir(parents=True, exist_ok=True)
    (run_dir / "kernels.json").write_text(json.dumps(specs, indent=1))
    (run_dir / "pytest.ini").write_text("[pytest]\n")  # the user's pytest settings do not apply
    argv = [str(run_dir), "-c", str(run_dir / "pytest.ini"), "--rootdir", os.getcwd(),
            "--confcutdir", str(run_dir), "-p", "no:cacheprovider", "--tb=no", "-q",
            "--onlinesm-spec", str(run_dir / "kernels.json"), "--onlinesm-results", str(results)]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        argv += ["-p", "xdist", "-p", "onlinesm"]
    elif not _plugin_installed():  # onlinesm run from a source tree: name the plugin's module
        argv += ["-p", "onlinesm.pytest_plugin"]
    devices = visible_devices()
    on_cpu = all(s["keywords"].get("device") == "cpu" for s in specs)
    # worksteal: items differ in cost by 100x (a thorough statistical item against a 2-example
    # property), so idle workers take items from busy ones instead of waiting at the tail.
    argv += ["--dist", _dist_mode()]
    if devices and not on_cpu:
        argv += [a for tx in tx_specs(workers, devices) for a in ("--tx", tx)]
    else:
        argv += ["-n", str(workers)]
    log = run_dir / "pytest.log"
    with open(log, "w") as log_file:
        streams = (log_file,) if quiet else (log_file, sys.stderr)
        with contextlib.redirect_stdout(_Tee(*streams)):  # type: ignore[type-var]
            code = pytest.main(argv)
    if code not in (0, 1):
        return _error(f"pytest could not run the items (exit {int(code)}); its output: {log}")
    return read_records(results), log
