"""The public functional ops go through the same table and planner cache as Planner.plan.

Catches: a second code path that bypasses the table (a public op whose row
differs from what dispatch selects), the plan cache not being used (a new
plan per call), environment overrides (RAPID_LLM_DENY / RAPID_LLM_FORCE)
being ignored by the public ops, and the lazy exports breaking.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

import rapid_llm.kernels as kernels
from rapid_llm.kernels import Planner, default_planner, dispatch, probe_environment
from rapid_llm.kernels.ops.norm.reference import rms_norm as rms_norm_reference


def test_lazy_exports_resolve_every_name():
    """Catches a name listed in _EXPORTS that its module does not define."""
    for name in kernels.__all__:
        assert getattr(kernels, name) is not None, name


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
    planned = planner.plan("norm.rms_norm", dtype="fp32", shape={"num_tokens": 5, "hidden": 96}, layout={"x:rows"},
                           device=env.device)
    selection = dispatch("norm.rms_norm", device=planned.selection.explanation.query.device, dtype="fp32",
                         shape={"num_tokens": 16, "hidden": 96}, layout={"x:rows"}, libs=env.libs,
                         force=env.forced_row("norm.rms_norm"), deny=env.deny)
    assert planned.row.name == selection.row.name


def test_planner_plan_and_public_op_agree():
    env = probe_environment()
    plan = Planner(env).plan("elementwise.scale", dtype="fp32", shape={"num_elements": 1000},
                             layout={"x:contiguous"})
    x = torch.randn(1000, device="cuda" if env.device.kind == "cuda" else "cpu")
    torch.testing.assert_close(plan(x, 0.5), kernels.scale(x, 0.5), atol=0, rtol=0)


def _run_with_envs(code: str, *variable_sets) -> list[str]:
    """Run `code` once per set of variables, in concurrent processes (the probe reads them once per process)."""
    processes = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **variables},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for variables in variable_sets]
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
        {"RAPID_LLM_TRITON_INTERPRET": "1", "RAPID_LLM_DENY": "native"})
    assert forced == "['native/rms_norm']"
    assert denied == "['torch/rms_norm']"
