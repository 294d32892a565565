"""The package's structure: no import circle, and nothing refers outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import import_graph  # noqa: E402


def test_there_is_no_import_circle() -> None:
    edges = import_graph.graph()
    assert "onlinesm.engine" in edges and "onlinesm.strategies" in edges  # the graph is real
    assert import_graph.cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert import_graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_code_refers_to_no_document_outside_the_repository() -> None:
    for base in ("src", "strategies", "docs", "bench", "tests"):
        for path in (ROOT / base).rglob("*"):
            if path.suffix in (".py", ".md") and path.name != "test_structure.py":
                assert "DESIGN.md" not in path.read_text(), path


def test_the_docstring_examples_run() -> None:
    # Every ``>>>`` example in the package shows what it gives (CPU: kernels interpreted);
    # examples that need a user's kernel or write files say ``doctest: +SKIP``.
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--doctest-modules",
                          "src/onlinesm", "strategies"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:]
    assert " passed" in run.stdout.splitlines()[-1]
