"""bench/<name>.py imported from its file, for tests of the benches' helpers (bench/ is not a
package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def bench_module(name: str) -> ModuleType:
    """bench/<name>.py as a module named ``onlinesm_bench_<name>``."""
    spec = importlib.util.spec_from_file_location(
        f"onlinesm_bench_{name}", Path(__file__).parents[1] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
