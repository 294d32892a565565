"""Running a kernel matrix item by item: one check per (kernel, property, dtype), then merged.

What: :func:`run_item` runs one item (``check(fn, op, properties=[prop], dtypes=[dtype],
seed=item_seed(...), ...)``) and returns a JSON-ready record; :func:`merge` turns a kernel's
records back into one :class:`~onlinesm.results.CheckResult` (a contract breach met by several
properties is reported once, as a single check would); :func:`summary` is the table after the
per-kernel tables. The CLI (:mod:`onlinesm.matrix_cli`) and the pytest items
(:mod:`onlinesm.pytest_items`) both run items through here, so a verdict does not depend on how
many processes ran the matrix.

Why items with their own seeds: an item's Hypothesis seed is a hash of its id (kernel,
property, dtype) and the user's seed, so an item run alone, in a different order or on another
worker draws the same inputs. Hypothesis also mixes constants of the "local" modules loaded in
the process into its draws (onlinesm is one when installed editable), so :func:`warm_modules`
loads the same set of onlinesm modules in every process before an item runs.

Example:
    >>> item_id("my_softmax", "accuracy", "bfloat16")
    'my_softmax::accuracy[bfloat16]'
    >>> item_seed("my_softmax", "accuracy", "bfloat16", 0) == item_seed("my_softmax", "accuracy", "bfloat16", 0)
    True
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from onlinesm.results import CheckResult, Failure, PropertyOutcome

__all__ = ["item_id", "item_seed", "warm_modules", "run_item", "merge", "summary", "entry_json",
           "write_record", "read_records", "warm_targets", "NA_PREFIX"]

#: The start of check's message when the one property of an item cannot be tested in the domain.
NA_PREFIX = "nothing could be tested: every property is n/a ("

#: The onlinesm modules every process loads before an item runs (see the module docstring).
_WARM = ("onlinesm.adapters", "onlinesm.capture", "onlinesm.check", "onlinesm.cli",
         "onlinesm.compiles", "onlinesm.config", "onlinesm.counterexample", "onlinesm.declarations",
         "onlinesm.devices", "onlinesm.dtypes", "onlinesm.engine", "onlinesm.errors",
         "onlinesm.failures", "onlinesm.gpus", "onlinesm.harness", "onlinesm.interpreter",
         "onlinesm.kernels.pinning", "onlinesm.matrix", "onlinesm.matrix_cli", "onlinesm.metrics",
         "onlinesm.minimize", "onlinesm.options", "onlinesm.oracle", "onlinesm.properties",
         "onlinesm.pytest_items", "onlinesm.pytest_plugin", "onlinesm.reference",
         "onlinesm.results", "onlinesm.strategies", "onlinesm.targets", "onlinesm.tolerance",
         "onlinesm.report.schema", "onlinesm.report.markdown")

#: Kernels that hung in this process: their later items are not run (a hung call cannot be stopped).
_HUNG: dict[str, str] = {}


def item_id(kernel: str, prop: str, dtype: str) -> str:
    """The item's id, as the pytest item is named after the ``onlinesm::`` prefix."""
    return f"{kernel}::{prop}[{dtype}]"


def item_seed(kernel: str, prop: str, dtype: str, base: int | None) -> int:
    """The item's Hypothesis seed: a hash of its id and the user's seed (None: no user seed)."""
    text = f"{item_id(kernel, prop, dtype)}|{'' if base is None else int(base)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def warm_modules() -> None:
    """Import the same onlinesm modules in every process (Hypothesis harvests their constants)."""
    for name in _WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional dependency is missing: missing in every process alike


#: Kernels loaded by :func:`warm_targets`, by target.
_LOADED: dict[str, Callable[..., Any]] = {}


def warm_targets(specs: list[dict[str, Any]]) -> None:
    """Import every kernel of the matrix before any item runs, so that each item runs with the
    same modules loaded whichever items ran before it in this process (errors surface in the
    items themselves)."""
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.targets import TargetError, load_target

    for spec in specs:
        if spec["target"] in _LOADED:
            continue
        root = spec.get("root")
        if root and root not in sys.path:
            sys.path.insert(0, root)
        try:
            select_device(spec["keywords"].get("device"))
            _LOADED[spec["target"]] = load_target(spec["target"])
        except (UsageError, TargetError):
            pass


def entry_json(entry: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """An entry (:class:`onlinesm.config.KernelEntry`) as JSON, with ``overrides`` applied."""
    return {"name": entry.name, "target": entry.target, "op": entry.op,
            "keywords": {**entry.keywords, **(overrides or {})},
            "dtypes": list(_dtypes(entry, overrides)), "properties": _properties(entry, overrides)}


def _dtypes(entry: Any, overrides: dict[str, Any] | None) -> tuple[str, ...]:
    from onlinesm.declarations import Domain

    if overrides and "dtypes" in overrides:
        return Domain(dtypes=overrides["dtypes"]).dtypes
    return entry.dtypes


def _properties(entry: Any, overrides: dict[str, Any] | None) -> list[str]:
    if overrides and overrides.get("properties"):
        return list(overrides["properties"])
    return entry.properties()


def _digest(text: str) -> str:
    """A short file-name-safe name for ``text`` (an item id, a kernel name)."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _hung_note(directory: str | os.PathLike[str], kernel: str) -> Path:
    return Path(directory) / f"hung-{_digest(kernel)}.txt"


def run_item(spec: dict[str, Any], prop: str, dtype: str, *, fn: Callable[..., Any] | None = None,
             progress: Callable[[str], None] | None = None,
             shared: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Run one item of ``spec`` (:func:`entry_json`); its record (JSON-ready).

    ``record["status"]`` is an outcome status (``passed``, ``failed``, ``na``, ...) or
    ``"error"``: nothing could be tested (``record["error"]`` says why, in one line).
    ``shared`` is the run folder the workers share: a kernel that hung in one worker is not
    called again by another (the hang is noted there), as it is not in one process.
    """
    if shared is not None and spec["name"] not in _HUNG and _hung_note(shared, spec["name"]).exists():
        _HUNG[spec["name"]] = _hung_note(shared, spec["name"]).read_text() or "an input"
    from onlinesm.check import check
    from onlinesm.devices import select_device
    from onlinesm.errors import UsageError
    from onlinesm.targets import TargetError, load_target

    name, kw = spec["name"], dict(spec["keywords"])
    base = kw.pop("seed", None)
    seed = item_seed(name, prop, dtype, base)
    record: dict[str, Any] = {"kernel": name, "target": spec["target"], "op": spec["op"],
                              "property": prop, "dtype": dtype, "seed": seed, "base_seed": base,
                              "error": None, "failure": None, "hung": None,
                              "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    if name in _HUNG:
        record.update(status="not_run", reason=f"kernel hung on {_HUNG[name]}", device=kw.get("device", ""))
        return record
    kw.pop("properties", None)
    kw.pop("dtypes", None)
    try:
        kw["device"] = select_device(kw.get("device"))
        root = spec.get("root")
        if root and root not in sys.path:
            sys.path.insert(0, root)
        if fn is None:
            fn = _LOADED.get(spec["target"]) or load_target(spec["target"])
        result = check(fn, spec["op"], name=name, target=spec["target"], raise_on_failure=False,
                       progress=progress, properties=[prop], dtypes=[dtype], seed=seed, **kw)
    except (UsageError, TargetError, ValueError, TypeError) as err:
        text = str(err)
        if text.startswith(NA_PREFIX):  # the property cannot be tested inside the domain
            record.update(status="na", reason=text[len(NA_PREFIX):].rstrip(")"), device=kw.get("device", ""))
        else:
            record.update(status="error", error=text.splitlines()[0] if text else type(err).__name__)
        return record
    out = next((o for o in result.outcomes if o.property == prop and o.dtype == dtype), None)
    record.update(device=result.device, conventions=result.conventions, hung=result.hung,
                  compiles=result.compiles)
    if out is None:
        record.update(status="error", error=f"the check gave no outcome for {item_id(name, prop, dtype)}")
        return record
    record.update(status=out.status, examples=out.examples, seconds=round(out.seconds, 3),
                  reason=out.reason, rejected=out.rejected,
                  rejected_by_family=dict(out.rejected_by_family), untested=out.untested)
    if out.failure is not None:
        f = out.failure
        record["failure"] = {"message": f.message, "family": f.family, "replay": f.replay_path,
                             "breach": list(f.breach) if f.breach else None}
    if result.hung:
        _HUNG[name] = result.hung
        if shared is not None:
            Path(shared).mkdir(parents=True, exist_ok=True)
            _hung_note(shared, name).write_text(result.hung)
    return record


def merge(spec: dict[str, Any], records: list[dict[str, Any]], seed: int | None) -> CheckResult:
    """One kernel's records as one result, ordered like a single check (dtype, then property)."""
    dtypes, props = list(spec["dtypes"]), list(spec["properties"])

    def order(r: dict[str, Any]) -> tuple[int, int]:
        return (dtypes.index(r["dtype"]) if r["dtype"] in dtypes else len(dtypes),
                props.index(r["property"]) if r["property"] in props else len(props))

    outcomes: list[PropertyOutcome] = []
    breaches: dict[tuple[str, str], Failure] = {}
    hung = None
    for r in sorted(records, key=order):
        o = PropertyOutcome(r["property"], r["dtype"], r["status"], examples=r.get("examples", 0),
                            seconds=r.get("seconds", 0.0), reason=r.get("reason", "") or "",
                            rejected=r.get("rejected", 0),
                            rejected_by_family=dict(r.get("rejected_by_family") or {}),
                            untested=r.get("untested", 0))
        f = r.get("failure")
        if f is not None:
            breach = tuple(f["breach"]) if f.get("breach") else None
            if breach is not None and breach in breaches and breach[0] != "hung":
                first = breaches[breach]
                first.also.append(f"{o.property} [{o.dtype}]")
                o.reason = f"the same breach as {first.property} [{first.dtype}]"
            else:
                o.failure = Failure(o.property, o.dtype, f["message"], {}, f.get("family", ""),
                                    f.get("replay"), breach=breach)  # type: ignore[arg-type]
                if breach is not None:
                    breaches[breach] = o.failure
        hung = hung or r.get("hung")
        outcomes.append(o)
    first = next((r for r in records if r.get("conventions")), records[0] if records else {})
    return CheckResult(spec["op"], spec["name"], first.get("conventions", {}), outcomes, seed,
                       first.get("device", ""), hung=hung)


def summary(rows: list[tuple[str, str, str, str]]) -> str:
    """The matrix's summary: one row per kernel (name, op, verdict, detail), as Markdown."""
    lines = ["| kernel | op | verdict | detail |", "|---|---|---|---|"]
    lines += [f"| {n} | {op} | {verdict} | {detail} |" for n, op, verdict, detail in rows]
    return "\n".join(lines)


def write_record(directory: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write one item's record into the run folder, atomically, under a name unique to the item."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    ident = item_id(record["kernel"], record["property"], record["dtype"])
    path = folder / f"item-{_digest(ident)}.json"
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return path


def read_records(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every item record written into the run folder."""
    return [json.loads(p.read_text()) for p in sorted(Path(directory).glob("item-*.json"))]
