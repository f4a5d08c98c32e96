"""The package's import graph: no cycles, and no import upward from a library adapter into the ops.

Static (AST), so it sees imports inside functions too (a lazy import still makes two modules depend on
each other). An edge A -> B for every `import B`, `from B import x` (and B.x where that is a module) in A,
with relative imports resolved; a package's own parents are not counted (importing `a.b.c` runs `a/__init__`
and `a/b/__init__`, which is how Python works, not a dependency the code chose).
Catches: two modules that import each other directly or through others (dispatcher/plan.py <-> select.py
was one; prefill.py -> prefill_tma.py -> prefill_gluon.py -> prefill.py another), and a library adapter
(rapid_llm/kernels/backends/) importing from rapid_llm/kernels/ops/, whose rows import the adapters'
requirements: the layers would depend on each other.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rapid_llm"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _edges(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module) if node.level else node.module
            targets.add(source)
            targets |= {f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in MODULES}
    own_parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    return {target for target in targets if target in MODULES and target != module and target not in own_parents}


GRAPH = {module: _edges(module) for module in MODULES}


def _cycles():
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in GRAPH[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
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

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    cycles = _cycles()
    assert not cycles, "modules that import each other (directly or through others):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("rapid_llm.kernels.backends.")))
def test_library_adapters_do_not_import_the_ops(module):
    upward = sorted(target for target in GRAPH[module] if target.startswith("rapid_llm.kernels.ops"))
    assert not upward, f"{module} imports {upward}: the ops' rows import the adapters' requirements"


def test_the_walk_finds_a_planted_cycle(monkeypatch):
    monkeypatch.setitem(
        GRAPH,
        "rapid_llm.kernels.dispatcher.plan",
        GRAPH["rapid_llm.kernels.dispatcher.plan"] | {"rapid_llm.kernels.dispatcher.select"},
    )
    monkeypatch.setitem(
        GRAPH,
        "rapid_llm.kernels.dispatcher.select",
        GRAPH["rapid_llm.kernels.dispatcher.select"] | {"rapid_llm.kernels.dispatcher.plan"},
    )
    assert any(
        {"rapid_llm.kernels.dispatcher.plan", "rapid_llm.kernels.dispatcher.select"} <= set(cycle)
        for cycle in _cycles()
    )
