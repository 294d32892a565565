"""The import graph of the onlinesm package, and its cycles (there must be none).

Module-level imports only: an import inside a function runs when it is called (the lazy imports
of torch, triton and the kernels), so it cannot make a circle at import time.

    python bench/import_graph.py          # prints module -> imports, then the cycles (none)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules() -> dict[str, Path]:
    """Every module of the package: its dotted name -> its file."""
    found = {}
    for base, prefix in ((ROOT / "src" / "onlinesm", "onlinesm"), (ROOT / "strategies", "onlinesm.strategies")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def graph() -> dict[str, set[str]]:
    """module -> the package modules it imports at module level."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.parse(path.read_text()).body:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods and t != name:
                    edges[name].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by depth-first search (each reported once)."""
    found, seen = [], set()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges[n]):
            if state.get(m) == 1:
                cyc = stack[stack.index(m):]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    found.append(cyc + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    return found


def main() -> int:
    edges = graph()
    for name in sorted(edges):
        print(f"{name} -> {', '.join(sorted(edges[name])) or '-'}")
    found = cycles(edges)
    print("\ncycles: " + ("none" if not found else "; ".join(" -> ".join(c) for c in found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
