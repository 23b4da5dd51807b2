"""The layers of docs/architecture.md hold: import-linter's contracts (pyproject.toml) are kept,
and no two modules of recipectl import each other, directly or round a circle, function-level
imports included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def _cycles() -> list[list[str]]:
    graph = grimp.build_graph("recipectl", include_external_packages=False, exclude_type_checking_imports=True)
    adj = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles() == []


def test_the_layer_contracts_are_kept():
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
