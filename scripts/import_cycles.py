#!/usr/bin/env python3
"""Count the import cycles inside a package (agent/ by default), from its source.

Every import counts: top-level, inside a function, and under `if TYPE_CHECKING:` (a cycle held
together by type hints is still two modules that cannot be understood apart). `from pkg import
name` counts as an import of `pkg.name` when that is a module, else of `pkg`. Strongly connected
components of two or more modules (or a module importing itself) are cycles.

Prints one line per cycle and a summary line; exits 1 when there is any (`make lint` runs it).

    python scripts/import_cycles.py [--root agent] [--quiet]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (under `root`) by dotted name; a package by its __init__."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The innermost known module a dotted name lies in (`agent.x.Y` -> `agent.x`)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules `module` imports, wherever in the file the import is."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import name`: the submodule when it is one, else the package itself
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
        for target in targets:
            hit = _resolve(target, known)
            if hit is not None and hit != module:
                found.add(hit)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="agent", help="the package to check (default: agent)")
    parser.add_argument("--quiet", action="store_true", help="the summary line only")
    args = parser.parse_args(argv)
    known = modules_of(PROJECT, args.root)
    graph = {m: imports_of(m, p, known) for m, p in known.items()}
    found = cycles(graph)
    if not args.quiet:
        for component in found:
            print(f"import cycle of {len(component)}: {' '.join(component)}")
    root_modules = sorted(m for m, p in known.items() if m.count(".") == 1 and p.name != "__init__.py")
    print(
        f"{args.root}: {len(known)} modules, {len(found)} import cycles "
        f"({sum(len(c) for c in found)} modules in them), {len(root_modules)} modules at its root"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
