"""The kernel matrix as pytest items: one item per (kernel, property, dtype).

What: :func:`matrix_specs` finds the kernels to collect (``--onlinesm-spec FILE``, written by
``onlinesm check --workers``; ``--onlinesm-config PATH``; or the ``[tool.onlinesm]`` table found
from pytest's rootdir when pytest was given no paths); :func:`collect` adds a
:class:`MatrixItem` per (kernel, property, dtype) under one collector whose node id is
``onlinesm``, so an item is ``onlinesm::my_softmax::accuracy[bfloat16]`` and ``-k``, ``-x``,
``--lf``, ``-m onlinesm`` and ``-n N`` (pytest-xdist) work as for any test.

Why items and not one test per kernel: xdist shares items out between workers, ``--lf``
re-runs only what failed, and each item's verdict is its own (its seed is derived from its id:
:func:`onlinesm.matrix.item_seed`).

Example::

    pytest -m onlinesm -k "my_softmax and bfloat16" -n 2
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MatrixCollector", "KernelCollector", "MatrixItem", "matrix_specs", "collect",
           "balanced_order", "SPECS_KEY"]

#: Where the plugin keeps the kernels it collects on ``config.stash``.
SPECS_KEY = pytest.StashKey[list]()

#: An item's cost relative to one Hypothesis property of the same run, for ordering the items
#: of a parallel run: the statistical tier runs hundreds of rows through the kernel and a
#: simulated baseline, 3-6x a property's time (measured on the CPU, ci and thorough profiles:
#: reports/scale.md).
HEAVY_PROPERTIES = {"accuracy_statistical": 5.0, "regression": 5.0}


def matrix_specs(config: pytest.Config) -> list[dict[str, Any]]:
    """The kernels to collect, as :func:`onlinesm.matrix.entry_json` dicts (may be empty).

    A configuration error is a ``pytest.UsageError`` (one line naming the file and the key).
    """
    from onlinesm.config import find_config, load_config
    from onlinesm.errors import UsageError
    from onlinesm.matrix import entry_json

    spec_file = config.getoption("onlinesm_spec", None)
    if spec_file:
        return list(json.loads(Path(spec_file).read_text()))
    path = config.getoption("onlinesm_config", None)
    if path is None:
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            return []  # paths were given: collect the matrix only when asked (--onlinesm-config)
        path = find_config(config.rootpath)
        if path is None:
            return []
    try:
        matrix = load_config(path)
        return [{**entry_json(e), "root": str(Path(path).resolve().parent)}
                for e in matrix.entries.values()]
    except UsageError as err:
        raise pytest.UsageError(str(err)) from None


class MatrixCollector(pytest.Collector):
    """The parent of every matrix item; its node id is ``onlinesm``."""

    def __init__(self, *, specs: list[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.specs = specs

    def collect(self) -> list[pytest.Item]:
        return [KernelCollector.from_parent(self, name=spec["name"], spec=spec) for spec in self.specs]


class KernelCollector(pytest.Collector):
    """One kernel of the matrix (``onlinesm::my_softmax``): its items, dtype by dtype."""

    def __init__(self, *, spec: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def collect(self) -> list[pytest.Item]:
        items: list[pytest.Item] = []
        for dtype in self.spec["dtypes"]:
            for prop in self.spec["properties"]:
                # the node id given whole, so that pytest parses "[dtype]" as for a parametrized
                # test and --lf finds the item again
                item = MatrixItem.from_parent(self, name=f"{prop}[{dtype}]", spec=self.spec,
                                              prop=prop, dtype=dtype,
                                              nodeid=f"{self.nodeid}::{prop}[{dtype}]")
                item.add_marker(pytest.mark.onlinesm)
                item.extra_keyword_matches.update({prop, dtype})
                items.append(item)
        return items


class MatrixItem(pytest.Item):
    """One (kernel, property, dtype) of the matrix; it runs :func:`onlinesm.matrix.run_item`."""

    def __init__(self, *, spec: dict[str, Any], prop: str, dtype: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.prop, self.dtype = spec, prop, dtype

    def runtest(self) -> None:
        from onlinesm.matrix import merge, run_item, write_record
        from onlinesm.options import pytest_keywords

        spec = dict(self.spec)
        spec["keywords"] = {**spec["keywords"], **pytest_keywords(self.config)}  # the command line wins
        root = spec.get("root")
        if root and root not in sys.path:
            sys.path.insert(0, root)
        results = self.config.getoption("onlinesm_results", None)
        record = run_item(spec, self.prop, self.dtype, shared=results)
        if results:
            write_record(results, record)
        status = record["status"]
        if status == "error":
            pytest.fail(f"onlinesm: error: {record['error']}", pytrace=False)
        if status in ("failed", "not_run"):
            pytest.fail(merge(spec, [record], record.get("base_seed")).report(), pytrace=False)
        if status in ("na", "waived"):
            pytest.skip(f"{status}: {record.get('reason', '')}")

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.nodeid


def collect(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Append the matrix's items (if any) to ``items``; loads the kernels' modules first."""
    specs = session.config.stash.get(SPECS_KEY, [])
    if not specs:
        return
    from onlinesm.matrix import warm_modules, warm_targets

    warm_modules()
    warm_targets(specs)
    collector = MatrixCollector.from_parent(session, name="onlinesm", nodeid="onlinesm", specs=specs)
    matrix = [item for kernel in collector.collect() for item in kernel.collect()]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    items.extend(balanced_order(matrix, workers) if workers > 1 else matrix)


def balanced_order(items: list[Any], workers: int) -> list[Any]:
    """``items`` reordered so that ``workers`` contiguous shares cost about the same, each
    share heaviest first.

    Why: pytest-xdist's ``worksteal`` first gives each worker one contiguous share of the
    collection, then moves not-yet-started items from the longest queue to an idle worker; the
    last items of a queue are never moved. Dealing the items out by cost (heaviest first, in
    turn) evens the shares, and the light items left at each share's end make a short tail.
    Every worker computes the same order (it depends only on the collection order and the
    items' properties), as xdist requires.

    >>> class I:
    ...     def __init__(self, prop): self.prop = prop
    >>> [i.prop for i in balanced_order([I("a"), I("b"), I("accuracy_statistical"), I("c")], 2)]
    ['accuracy_statistical', 'b', 'a', 'c']
    """
    ranked = sorted(items, key=lambda item: -HEAVY_PROPERTIES.get(getattr(item, "prop", ""), 1.0))
    return [item for k in range(workers) for item in ranked[k::workers]]
