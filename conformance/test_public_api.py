"""The public op functions: one per op contract, declared by its family, through the planner cache.

Catches: a second code path that bypasses the table (a public op whose row
differs from what dispatch selects), the plan cache not being used (a new
plan per call), environment overrides (RAPID_LLM_DENY / RAPID_LLM_FORCE)
being ignored by the public ops, the lazy exports breaking, and the exports
drifting from the contracts (each family's `ops/<family>/api.py` declares
one function per contract of the family, and `rapid_llm.kernels` exports
exactly those plus the dispatch API).
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

import rapid_llm.kernels as kernels
import rapid_llm.kernels.dispatcher as dispatcher
from rapid_llm.kernels import Planner, default_planner, dispatch, probe_environment
from rapid_llm.kernels.dispatcher import table as table_module
from rapid_llm.kernels.dispatcher.table import FAMILIES, family_contracts
from rapid_llm.kernels.ops.norm.reference import rms_norm as rms_norm_reference

CONTRACTS = family_contracts()


def _api(family: str):
    return importlib.import_module(f"rapid_llm.kernels.ops.{family}.api")


def _declared_functions(module) -> dict:
    """The public functions a module defines itself (imported names excluded)."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and not name.startswith("_")
    }


def test_lazy_exports_resolve_every_name():
    """Catches a name in rapid_llm.kernels.__all__ that does not resolve (its declaring module lacks it)."""
    for name in kernels.__all__:
        assert getattr(kernels, name) is not None, name


@pytest.mark.parametrize("op", sorted(CONTRACTS))
def test_every_contract_has_a_public_function_in_its_family_api(op):
    """Catches a contract without its public function, or with the function declared elsewhere than its
    family's api module (another family's, or a module the exports do not read)."""
    family, _, name = op.partition(".")
    api = _api(family)
    assert name in api.__all__, f"{op}: add `{name}` to rapid_llm/kernels/ops/{family}/api.py and its __all__"
    assert getattr(api, name).__module__ == api.__name__
    assert getattr(kernels, name) is getattr(api, name)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_api_function_is_an_op_of_its_family(family):
    """Catches an api function whose name is no contract of its family (a misspelt or removed op, or a
    helper exported as an op), and a public function left out of __all__ (never exported)."""
    api = _api(family)
    ops = {op.partition(".")[2] for op in CONTRACTS if op.partition(".")[0] == family}
    assert len(api.__all__) == len(set(api.__all__)), api.__all__
    assert set(api.__all__) == set(_declared_functions(api))
    assert set(api.__all__) <= ops, f"not ops of {family}: {sorted(set(api.__all__) - ops)}"


def test_package_exports_are_the_dispatch_api_and_the_family_declarations():
    """Catches rapid_llm.kernels exporting a name no family declares (a hand-kept list, a stale name) or
    one that resolves to another object than its declaration, and exports missing from dir()."""
    declared = {name: _api(family) for family in FAMILIES for name in _api(family).__all__}
    assert set(declared) == {op.partition(".")[2] for op in CONTRACTS}
    for name in kernels.__all__:
        if name in declared:
            assert getattr(kernels, name) is getattr(declared[name], name), name
        else:
            assert name in dispatcher.__all__, f"rapid_llm.kernels.{name}: no family declares it"
            assert getattr(kernels, name) is getattr(dispatcher, name), name
    assert set(declared) <= set(kernels.__all__)
    assert dir(kernels) == kernels.__all__


def _fake_api(family: str, *names: str) -> types.ModuleType:
    module = types.ModuleType(f"rapid_llm.kernels.ops.{family}.api")
    for name in names:
        function = lambda: None  # noqa: E731
        function.__module__ = module.__name__
        setattr(module, name, function)
    module.__all__ = list(names)
    return module


@pytest.mark.parametrize("clash", ["shared_op", "dispatch"])
def test_a_name_declared_twice_is_an_error_naming_both_declarers(monkeypatch, clash):
    """Catches a second declaration silently shadowing the first (which family's op runs would depend on
    the family order): two families, or a family and the dispatch API, declaring one name."""
    fakes = {"fake_first": _fake_api("fake_first", "shared_op")} if clash == "shared_op" else {}
    fakes["fake_second"] = _fake_api("fake_second", clash)
    for family, module in fakes.items():
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(table_module, "FAMILIES", (*FAMILIES, *fakes))
    monkeypatch.setattr(kernels, "_OP_MODULES", None)
    monkeypatch.delitem(vars(kernels), "rms_norm", raising=False)
    first = "fake_first.api" if clash == "shared_op" else "rapid_llm.kernels.dispatcher"
    for access in (lambda: kernels.rms_norm, lambda: kernels.__all__, lambda: kernels.shared_op):
        with pytest.raises(ImportError, match=clash) as error:
            access()
        assert first in str(error.value) and "fake_second.api" in str(error.value)


TORCH_FREE_EXPORTS = """
    import sys

    class _NoTorch:
        def find_spec(self, fullname, path=None, target=None):
            if fullname.partition(".")[0] in ("torch", "triton"):
                raise ImportError(f"torch-free test: import of {fullname} blocked")
            return None

    sys.meta_path.insert(0, _NoTorch())
    import rapid_llm.kernels as kernels

    functions = [getattr(kernels, name) for name in kernels.__all__]
    print(len(functions), sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "triton")))
"""


def test_fetching_every_export_imports_neither_torch_nor_triton():
    """Catches a family api module importing torch, triton or a kernel module at import: fetching
    `rapid_llm.kernels.rms_norm` must stay as cheap as importing the package (the kernel loads on the
    first call, through its row's lazy target)."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAPID_LLM_") and key != "TRITON_INTERPRET"
    }
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TORCH_FREE_EXPORTS)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 1) == [str(len(kernels.__all__)), "[]\n"]


def test_dispatch_stays_the_function_after_its_submodule_is_imported():
    """Catches the package attribute `dispatch` turning into the dispatch.py module once anything
    imports the submodule (Python sets submodules as package attributes): the CLI then crashed."""
    import importlib

    import rapid_llm.kernels.dispatcher as dispatcher

    module = importlib.import_module("rapid_llm.kernels.dispatcher.select")
    assert callable(dispatcher.dispatch) and dispatcher.dispatch is module.dispatch
    from rapid_llm.kernels.dispatcher import dispatch as imported

    assert imported is module.dispatch and kernels.dispatch is module.dispatch


def test_public_rms_norm_uses_the_planner_cache_and_the_dispatched_row():
    env = probe_environment()
    x = torch.randn(5, 96)
    w = torch.randn(96)
    out = kernels.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(out, rms_norm_reference(x, w, 1e-6), atol=1e-5, rtol=1e-5)
    planner = default_planner()
    before = planner.cached_plans
    for _ in range(3):
        kernels.rms_norm(x, w, 1e-6)
    assert planner.cached_plans == before, "repeated calls of one shape must reuse the plan"
    planned = planner.plan(
        "norm.rms_norm", dtype="fp32", shape={"num_tokens": 5, "hidden": 96}, layout={"x:rows"}, device=env.device
    )
    selection = dispatch(
        "norm.rms_norm",
        device=planned.selection.explanation.query.device,
        dtype="fp32",
        shape={"num_tokens": 16, "hidden": 96},
        layout={"x:rows"},
        libs=env.libs,
        force=env.forced_row("norm.rms_norm"),
        deny=env.deny,
    )
    assert planned.row.name == selection.row.name


def test_planner_plan_and_public_op_agree():
    env = probe_environment()
    plan = Planner(env).plan("elementwise.scale", dtype="fp32", shape={"num_elements": 1000}, layout={"x:contiguous"})
    x = torch.randn(1000, device="cuda" if env.device.kind == "cuda" else "cpu")
    torch.testing.assert_close(plan(x, 0.5), kernels.scale(x, 0.5), atol=0, rtol=0)


def _run_with_envs(code: str, *variable_sets) -> list[str]:
    """Run `code` once per set of variables, in concurrent processes (the probe reads them once per process)."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            env={**os.environ, **variables},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for variables in variable_sets
    ]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        outputs.append(out.strip())
    return outputs


PROBE_PUBLIC_ROW = """
    import torch, rapid_llm.kernels as k
    k.rms_norm(torch.randn(4, 64), torch.randn(64), 1e-6)
    plans = k.default_planner()._plans.values()
    print(sorted({p.row.name for p in plans}))
"""


def test_public_op_honours_force_and_deny_from_the_environment():
    if probe_environment().libs.get("triton") is None:
        import pytest

        pytest.skip("triton is not installed or hidden (RAPID_LLM_HIDE_LIBS): native/rms_norm cannot be forced")
    forced, denied = _run_with_envs(
        PROBE_PUBLIC_ROW,
        {"RAPID_LLM_TRITON_INTERPRET": "1", "RAPID_LLM_FORCE": "norm.rms_norm=native/rms_norm"},
        {"RAPID_LLM_TRITON_INTERPRET": "1", "RAPID_LLM_DENY": "native"},
    )
    assert forced == "['native/rms_norm']"
    assert denied == "['torch/rms_norm']"
