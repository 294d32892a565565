"""Numerics reports: ``onlinesm report`` and ``onlinesm check --report DIR``.

Light on import (nothing heavy until used): the submodules each do one job.

- :mod:`~onlinesm.report.builtin`: the built-in kernels and their declared numerics;
- :mod:`~onlinesm.report.collect`: run kernels over families x dtypes x lengths x seeds,
  collect error statistics and verdicts;
- :mod:`~onlinesm.report.fa3`: FlashAttention-3's numerical-error table;
- :mod:`~onlinesm.report.plots` (matplotlib), :mod:`~onlinesm.report.markdown`,
  :mod:`~onlinesm.report.html`: the outputs;
- :mod:`~onlinesm.report.schema`: the JSON schema ``onlinesm.report/1``, its validator and the
  atomic writers;
- :mod:`~onlinesm.report.cli`: the ``report`` subcommand.

Example:
    >>> from onlinesm.report import SCHEMA
    >>> SCHEMA
    'onlinesm.report/1'
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SCHEMA", "validate", "write_check_report", "collect", "Settings"]

_LAZY = {
    "SCHEMA": "onlinesm.report.schema",
    "validate": "onlinesm.report.schema",
    "write_check_report": "onlinesm.report.schema",
    "collect": "onlinesm.report.collect",
    "Settings": "onlinesm.report.collect",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onlinesm.report' has no attribute {name!r}")
