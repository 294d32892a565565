"""The results schema ``onlinesm.report/1``, shared by ``onlinesm report`` and ``check --report``.

What: the layout of ``summary.json`` (:data:`SPEC`, documented in docs/report-schema.md), a
small hand-written validator (:func:`validate`, no dependency), the builders of the document
for a full report (:func:`report_summary`) and for a check run (:func:`check_summary`), and
the writers: :func:`write_check_report` (summary.json + index.md for ``onlinesm check --report
DIR``) and :func:`write_report` (summary.json, index.md, the PNG plots, optionally index.html).

Why atomic: a report is read by people and by CI. Both writers build the whole folder in a
temporary directory next to DIR and move it into place with one rename, so DIR is either the
previous report or the new one, never half of one (:func:`atomic_directory`).

JSON has no inf or NaN: non-finite numbers are written as the strings ``"inf"``, ``"-inf"``
and ``"nan"`` (:func:`encode`), and the schema's ``number`` type accepts them.

Example:
    >>> doc = {"schema": SCHEMA}
    >>> validate(doc)[:1]
    ["$: missing key 'kind'"]
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "SCHEMA",
    "SPEC",
    "validate",
    "encode",
    "environment",
    "report_summary",
    "check_summary",
    "atomic_directory",
    "ensure_writable",
    "write_check_report",
    "write_report",
]

SCHEMA = "onlinesm.report/1"

# A tiny type language: "str", "int", "bool", "number" (finite, or "inf"/"-inf"/"nan"),
# "any", a tuple of alternatives, ("?", t) nullable, ["list", t], {"key": t} (an object with at
# least these keys; "*" adds a type for every other key), ("enum", a, b, ...).
_NUM = "number"
_VERDICT = {
    "kernel": "str", "op": ("enum", "softmax", "attention"), "dtype": "str",
    "status": ("enum", "pass", "fail"), "worst_bound_use": ("?", _NUM),
    "worst_family": ("?", "str"), "max_ulp": ("?", _NUM),
}
_STAT = {
    "kernel": "str", "op": ("enum", "softmax", "attention"), "dtype": "str", "family": "str",
    "cases": "int", "elements": "int", "failed_elements": "int", "max_ulp": _NUM,
    "p99_ulp": _NUM, "mean_ulp": _NUM, "rmse": _NUM, "max_bound_use": _NUM,
    "convention_ok": "bool", "errors": "int", "status": ("enum", "pass", "fail"),
}
_FAILURE = {
    "kernel": "str", "op": ("enum", "softmax", "attention"), "dtype": "str",
    "family": ("?", "str"), "property": "str", "message": "str", "replay": ("?", "str"),
}
_KERNEL = {
    "name": "str", "op": ("enum", "softmax", "attention"), "target": ("?", "str"),
    "fully_masked": ("enum", "zeros", "nan", "uniform", "any"), "numerics": {"accumulate": "str"},
}
_FA3_ROW = {"name": "str", "rmse": {"*": ("?", _NUM)}, "error": ("?", "str")}
#: The schema ``onlinesm.report/1``; docs/report-schema.md says what each field means.
SPEC: dict[str, Any] = {
    "schema": ("enum", SCHEMA),
    "kind": ("enum", "report", "check"),
    "created": "str",
    "command": "str",
    "passed": "bool",
    "environment": {"python": "str", "platform": "str", "numpy": "str", "torch": ("?", "str"),
                    "triton": ("?", "str"), "onlinesm": "str", "device": "str",
                    "device_name": ("?", "str")},
    "settings": {"*": "any"},
    "kernels": ["list", _KERNEL],
    "verdicts": ["list", _VERDICT],
    "stats": ["list", _STAT],
    "failures": ["list", _FAILURE],
    "properties": ("?", ["list", {"kernel": "str", "property": "str", "dtype": "str",
                                  "status": ("enum", "passed", "failed", "waived", "not_run",
                                             "suspect")}]),
    "fa3": ("?", {"shape": {"seq": "int", "head_dim": "int"}, "rows": ["list", _FA3_ROW],
                  "paper": {"rmse": {"*": _NUM}}}),
    "files": ["list", "str"],
}


def _check(value: Any, t: Any, where: str, errors: list[str]) -> None:
    if t == "any":
        return
    if isinstance(t, tuple) and t and t[0] == "?":
        if value is not None:
            _check(value, t[1], where, errors)
        return
    if isinstance(t, tuple) and t and t[0] == "enum":
        if value not in t[1:]:
            errors.append(f"{where}: {value!r} is not one of {list(t[1:])}")
        return
    if isinstance(t, list):
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, t[1], f"{where}[{i}]", errors)
        return
    if isinstance(t, dict):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected an object, got {type(value).__name__}")
            return
        for key, sub in t.items():
            if key == "*":
                continue
            if key not in value:
                errors.append(f"{where}: missing key {key!r}")
            else:
                _check(value[key], sub, f"{where}.{key}", errors)
        if "*" in t:
            for key, item in value.items():
                if key not in t:
                    _check(item, t["*"], f"{where}.{key}", errors)
        return
    ok = {
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "number": (isinstance(value, (int, float)) and not isinstance(value, bool)
                   and math.isfinite(value)) or value in ("inf", "-inf", "nan"),
    }.get(t)
    if ok is None:
        raise ValueError(f"unknown type {t!r} in the schema at {where}")
    if not ok:
        errors.append(f"{where}: expected {t}, got {value!r}")


def validate(doc: Any) -> list[str]:
    """The ways ``doc`` breaks schema ``onlinesm.report/1`` (empty list: it is valid).

    >>> validate({"schema": "other"})[0]
    "$.schema: 'other' is not one of ['onlinesm.report/1']"
    """
    errors: list[str] = []
    _check(doc, SPEC, "$", errors)
    return errors


def encode(value: Any) -> Any:
    """JSON-ready: non-finite floats as "inf"/"-inf"/"nan", numpy scalars as Python, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(device: str) -> dict[str, Any]:
    """Versions and device: what a reader needs to reproduce the numbers."""
    import numpy as np

    name = None
    if device == "cuda" and "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name()
    if name is None and device == "cpu":
        name = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "torch": _version("torch"),
        "triton": _version("triton"),
        "ml_dtypes": _version("ml_dtypes"),
        "onlinesm": _version("onlinesm") or "unknown",
        "device": device,
        "device_name": name,
    }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _command() -> str:
    return "onlinesm " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("onlinesm") \
        else " ".join(sys.argv)


# ---------------------------------------------------------------------------------------------
# The two documents


def report_summary(coll: Any, *, command: str | None = None, files: list[str] | None = None) -> dict[str, Any]:
    """summary.json for a full report, from a :class:`~onlinesm.report.collect.Collection`."""
    doc = {
        "schema": SCHEMA,
        "kind": "report",
        "created": _now(),
        "command": command or _command(),
        "passed": coll.passed,
        "environment": environment(coll.settings.device),
        "settings": {**coll.settings.to_dict(), "seconds": round(coll.seconds, 1)},
        "kernels": [k.describe() for k in coll.kernels],
        "verdicts": coll.verdicts,
        "stats": coll.stats,
        "failures": coll.failures,
        "properties": None,
        "fa3": coll.fa3,
        "files": sorted(files or []),
    }
    return encode(doc)


def check_summary(result: Any, *, command: str | None = None, files: list[str] | None = None) -> dict[str, Any]:
    """summary.json for ``onlinesm check --report``, from a :class:`onlinesm.check.CheckResult`.

    A check searches for failures rather than measuring a grid, so ``stats`` is empty and the
    verdicts carry no bound use; ``properties`` lists every (property, dtype) outcome.
    """
    d = result.to_dict()
    conv = d["conventions"]
    dtypes = list(dict.fromkeys([o["dtype"] for o in d["outcomes"]] + list(conv.get("dtypes", []))))
    verdicts = []
    for dt in dtypes:
        failed = [o for o in d["outcomes"] if o["dtype"] == dt and o["status"] == "failed"]
        fam = next((o["failure"]["family"] for o in failed if o["failure"] and o["failure"]["family"]), None)
        verdicts.append({"kernel": result.kernel, "op": result.op, "dtype": dt,
                         "status": "fail" if failed else "pass", "worst_bound_use": None,
                         "worst_family": fam, "max_ulp": None,
                         "failing_properties": [o["property"] for o in failed]})
    failures = [{"kernel": result.kernel, "op": result.op, "dtype": f.dtype,
                 "family": f.family or None, "property": f.property, "message": f.message,
                 "replay": f.replay_path} for f in result.failures]
    kernel = {"name": result.kernel, "op": result.op, "target": None,
              "fully_masked": conv.get("fully_masked", "zeros"),
              "numerics": conv.get("numerics", {"accumulate": "float32"}),
              "conventions": conv}
    doc = {
        "schema": SCHEMA,
        "kind": "check",
        "created": _now(),
        "command": command or _command(),
        "passed": bool(result.passed),
        "environment": environment(result.device),
        "settings": {"seed": result.seed, "device": result.device, "dtypes": dtypes},
        "kernels": [kernel],
        "verdicts": verdicts,
        "stats": [],
        "failures": failures,
        "properties": [{"kernel": result.kernel, **o} for o in d["outcomes"]],
        "fa3": None,
        "files": sorted(files or []),
    }
    return encode(doc)


# ---------------------------------------------------------------------------------------------
# Atomic writing


def ensure_writable(directory: str | os.PathLike[str]) -> None:
    """Raise OSError (with the reason) unless a report can be written to ``directory``.

    Called before a long run, so that a bad --out fails in a second, not after minutes.
    """
    final = Path(directory)
    if final.exists() and not final.is_dir():
        raise NotADirectoryError(f"{final} exists and is not a directory")
    parent = final.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    probe = Path(tempfile.mkdtemp(prefix=f".{final.name}.probe-", dir=parent))
    probe.rmdir()


@contextlib.contextmanager
def atomic_directory(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a fresh temporary folder next to ``directory``; on success it replaces it.

    On an exception the temporary folder is removed and ``directory`` is left as it was.
    An existing ``directory`` is moved aside first and removed after the new one is in place.
    """
    final = Path(directory)
    ensure_writable(final)
    parent = final.absolute().parent
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        tmp.chmod(0o777 & ~mask)
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    try:
        if final.exists():
            old = parent / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            final.rename(old)
        tmp.rename(final)
    except BaseException:
        if old is not None and not final.exists():
            old.rename(final)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    problems = validate(doc)
    if problems:  # a bug in onlinesm, not in the user's kernel: say where
        raise AssertionError("onlinesm bug: the summary breaks schema " + SCHEMA + ": "
                             + "; ".join(problems[:5]))
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")


def write_check_report(result: Any, directory: str | os.PathLike[str], *,
                       command: str | None = None) -> str:
    """Write summary.json and index.md of a check run to ``directory`` (atomically); its path.

    >>> write_check_report(result, "reports/my-kernel")  # doctest: +SKIP
    'reports/my-kernel/index.md'
    """
    from onlinesm.report.markdown import check_markdown

    final = Path(directory)
    with atomic_directory(final) as tmp:
        files = ["index.md", "summary.json"]
        doc = check_summary(result, command=command, files=files)
        _write_json(tmp / "summary.json", doc)
        (tmp / "index.md").write_text(check_markdown(result, doc))
    return str(final / "index.md")


def write_report(coll: Any, tmp: Path, *, html: bool = False, command: str | None = None,
                 plots: bool = True) -> list[str]:
    """Write a full report into ``tmp`` (the folder :func:`atomic_directory` yielded).

    Plots need matplotlib; without it the report says so and is written without them.
    Returns the file names written.
    """
    from onlinesm.report.markdown import report_markdown

    files: list[str] = []
    plot_note = ""
    if plots:
        try:
            from onlinesm.report.plots import make_plots
        except ImportError as err:  # matplotlib missing
            plot_note = f"No plots: {err} (pip install 'onlinesm[report]')."
        else:
            files += make_plots(coll, tmp)
    if (tmp / "counterexamples").is_dir():
        files += [f"counterexamples/{p.name}" for p in sorted((tmp / "counterexamples").iterdir())]
    names = files + ["index.md", "summary.json"] + (["index.html"] if html else [])
    doc = report_summary(coll, command=command, files=names)
    _write_json(tmp / "summary.json", doc)
    text = report_markdown(coll, doc, plot_note=plot_note)
    (tmp / "index.md").write_text(text)
    if html:
        from onlinesm.report.html import markdown_to_html

        (tmp / "index.html").write_text(markdown_to_html(text, tmp))
    return names

