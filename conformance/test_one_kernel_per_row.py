"""Every kernel is a row: a row's target launches exactly one kernel entry (plus its own split merge).

The walk is static (no GPU needed, every cell runs it): from each native or extension row's target it
follows the calls into this package's modules (functions of the same module, also where one is passed to a
helper as an argument, names imported from rapid_llm modules, attributes of imported rapid_llm modules) and
collects the kernels it can launch:
a @triton.jit / @gluon.jit function launched as `kernel[grid](...)` or through
`launch_fitting(kernel, grid, ...)`, and a CUDA-extension op taken as `aot.op(name)` / `jit.op(name)`.
Catches a target that chooses between kernels with an if/elif (two entries reachable: the choice is
invisible to explain(), the golden records and the parity matrix) and a target that launches nothing
the walk can see (an entry this test would not guard).
"""

from __future__ import annotations

import ast
import functools
import importlib.util

import pytest

from conformance.rows_here import TABLE

#: Kernels a row may launch beside its one entry: the split-K merge of its own partial outputs.
SPLIT_MERGE_KERNELS = frozenset({"_merge_kernel"})
_JIT_DECORATORS = frozenset({"jit"})  # triton.jit, gluon.jit


@functools.lru_cache(maxsize=None)
def _module_ast(module: str):
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"module {module} does not exist (a broken import in a row's target)"
    with open(spec.origin, encoding="utf-8") as source:
        return ast.parse(source.read()), spec.submodule_search_locations is not None


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


@functools.lru_cache(maxsize=None)
def _scope(module: str):
    """(functions {name: FunctionDef}, imported names {local: (module, attribute or None)})."""
    tree, is_package = _module_ast(module)
    functions, imported = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            functions[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module
            for alias in node.names:
                imported[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
    return functions, imported


def _is_jit(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr in _JIT_DECORATORS:
            return True
    return False


def _as_module(source: str, attribute: str | None) -> str | None:
    """The rapid_llm module a name refers to when it is a module (`from . import launch`), else None."""
    if not source.startswith("rapid_llm"):
        return None
    candidate = f"{source}.{attribute}" if attribute else source
    try:
        return candidate if importlib.util.find_spec(candidate) is not None else None
    except ModuleNotFoundError:
        return None


def _launches(module: str, function: str, seen=None) -> set[str]:
    """Kernel entries reachable from module:function, as 'module:kernel' or 'extension:op'."""
    seen = set() if seen is None else seen
    if (module, function) in seen:
        return set()
    seen.add((module, function))
    functions, imported = _scope(module)
    node = functions.get(function)
    if node is None:
        return set()
    found = set()

    def kernel_named(name):
        target = functions.get(name)
        if target is not None and _is_jit(target):
            return f"{module}:{name}"
        if name in imported:
            source, attribute = imported[name]
            if source.startswith("rapid_llm") and attribute and _as_module(source, attribute) is None:
                defs, _ = _scope(source)
                if attribute in defs and _is_jit(defs[attribute]):
                    return f"{source}:{attribute}"
        return None

    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        callee = call.func
        # a function of this module handed to a helper (fp8's block_entry(ROW, launch, ...)) runs there
        for argument in call.args:
            if isinstance(argument, ast.Name) and argument.id in functions and not _is_jit(functions[argument.id]):
                found |= _launches(module, argument.id, seen)
        if isinstance(callee, ast.Subscript) and isinstance(callee.value, ast.Name):  # kernel[grid](...)
            kernel = kernel_named(callee.value.id)
            if kernel:
                found.add(kernel)
            continue
        if (
            isinstance(callee, ast.Name)
            and callee.id == "launch_fitting"
            and call.args
            and isinstance(call.args[0], ast.Name)
        ):
            kernel = kernel_named(call.args[0].id)
            if kernel:
                found.add(kernel)
            continue
        if (
            isinstance(callee, ast.Attribute)
            and callee.attr == "op"
            and isinstance(callee.value, ast.Name)
            and callee.value.id in ("aot", "jit")
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            found.add(f"extension:{call.args[0].value}")
            continue
        if isinstance(callee, ast.Name):
            if callee.id in functions:
                found |= _launches(module, callee.id, seen)
            elif callee.id in imported:
                source, attribute = imported[callee.id]
                if source.startswith("rapid_llm") and attribute and _as_module(source, attribute) is None:
                    found |= _launches(source, attribute, seen)
        elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id in imported:
            source, attribute = imported[callee.value.id]
            target_module = _as_module(source, attribute)
            if target_module:
                found |= _launches(target_module, callee.attr, seen)
    return found


_OWN_ROWS = [row for op in TABLE.ops for row in TABLE.rows(op) if row.backend in ("native", "aot", "jit")]


def _declared_stages(module: str):
    """A pipeline row's STAGES (module-level tuple of 'module:kernel' strings), or None."""
    tree, _ = _module_ast(module)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "STAGES" for t in node.targets):
            return tuple(
                element.value
                if isinstance(element, ast.Constant)
                # f"{__name__}:_kernel"
                else module + "".join(part.value for part in element.values if isinstance(part, ast.Constant))
                for element in node.value.elts
            )
    return None


@pytest.mark.parametrize("row", _OWN_ROWS, ids=[row.name for row in _OWN_ROWS])
def test_a_row_target_reaches_exactly_one_kernel_entry(row):
    """One kernel entry per row; a pipeline row (moe.fused_moe's: align, two GEMMs, a combine) declares its
    fixed sequence in STAGES, and must reach exactly those kernels: one per stage, no choice among them."""
    module, _, function = row.target.partition(":")
    entries = sorted(
        entry for entry in _launches(module, function) if entry.rpartition(":")[2] not in SPLIT_MERGE_KERNELS
    )
    stages = _declared_stages(module)
    if stages is not None:
        assert len(set(stages)) == len(stages), f"{row.name}: STAGES names a kernel twice: {stages}"
        assert entries == sorted(stages), (
            f"{row.name}: its target {row.target} reaches {entries}, its pipeline declares {sorted(stages)}"
        )
        return
    assert len(entries) == 1, (
        f"{row.name}: its target {row.target} reaches {len(entries)} kernel entries "
        f"{entries}; one kernel per row (make each kernel its own row)"
    )


def test_the_walk_sees_a_choice_between_kernels(monkeypatch):
    """The walk itself: a planted target that picks one of two kernels by an if must show both entries."""
    planted = ast.parse("""
import triton
from rapid_llm.kernels.ops.launch_fitting import launch_fitting

@triton.jit
def _first(x):
    pass

@triton.jit
def _second(x):
    pass

def target(x, fast):
    if fast:
        _first[(1,)](x)
    else:
        launch_fitting(_second, (1,), None, x)
""")
    name = "rapid_llm.planted_two_kernels"
    real = _module_ast
    monkeypatch.setitem(globals(), "_module_ast", lambda module: (planted, False) if module == name else real(module))
    _scope.cache_clear()
    try:
        assert _launches(name, "target") == {f"{name}:_first", f"{name}:_second"}
    finally:
        _scope.cache_clear()


def test_the_walk_follows_a_function_handed_to_a_helper(monkeypatch):
    """The walk itself: a target that passes its launch function to an imported helper (the helper calls it)
    must reach the kernel that function launches."""
    planted = ast.parse("""
import triton
from rapid_llm.kernels.ops.gemm.fp8 import block_entry

@triton.jit
def _kernel(x):
    pass

def launch(x):
    _kernel[(1,)](x)

def target(x):
    return block_entry("row", launch, x)
""")
    name = "rapid_llm.planted_handed_launch"
    real = _module_ast
    monkeypatch.setitem(globals(), "_module_ast", lambda module: (planted, False) if module == name else real(module))
    _scope.cache_clear()
    try:
        assert _launches(name, "target") == {f"{name}:_kernel"}
    finally:
        _scope.cache_clear()


def test_the_walk_holds_a_pipeline_to_its_declared_stages(monkeypatch):
    """The walk itself: a pipeline row declaring two stages whose target chooses its second kernel by an
    if reaches three kernels, which differ from its STAGES (the choice shows)."""
    planted = ast.parse("""
import triton

STAGES = (f"{__name__}:_first", f"{__name__}:_second")

@triton.jit
def _first(x):
    pass

@triton.jit
def _second(x):
    pass

@triton.jit
def _second_fast(x):
    pass

def target(x, fast):
    _first[(1,)](x)
    if fast:
        _second_fast[(1,)](x)
    else:
        _second[(1,)](x)
""")
    name = "rapid_llm.planted_pipeline"
    real = _module_ast
    monkeypatch.setitem(globals(), "_module_ast", lambda module: (planted, False) if module == name else real(module))
    _scope.cache_clear()
    try:
        assert _declared_stages(name) == (f"{name}:_first", f"{name}:_second")
        assert sorted(_launches(name, "target")) != sorted(_declared_stages(name))
    finally:
        _scope.cache_clear()
