"""Shared fixtures for conformance/.

The process-wide environment is probed once (RAPID_LLM_* variables apply:
RAPID_LLM_TRITON_INTERPRET=1 makes native Triton rows eligible on the CPU,
RAPID_LLM_HIDE_LIBS hides libraries for an absence cell).

With RAPID_LLM_CELL_SCOPE=1 (ci/absence_matrix), only the tests an absence
cell can change are kept (conformance/cell_scope.py); the rest is deselected.

With RAPID_LLM_PARITY_REPORT=<path>, every parity measurement (row, case,
dtype, device, max |diff|) is written there as JSON at the end of the
session: the evidence behind GoldenRecord.max_abs_diff.
"""

from __future__ import annotations

import datetime
import json
import os
import platform

import pytest

from conformance.parity_log import PARITY_MEASUREMENTS

INTERPRETER_ROUNDING_NOTE = (
    "CPU run: Triton's interpreter truncates fp32 -> bf16 (toward zero) and rounds fp8 "
    "differently from the GPU, so native rows' bf16/fp8 parity here is not evidence (and "
    "rows whose kernels use tl.dot are not eligible for bf16 here: the interpreter "
    "computes bf16 products wrongly); bf16 golden evidence comes from the H200"
)


def pytest_configure(config):
    """Probe the process-wide environment before any test imports a kernel module: Triton picks interpreter or
    compiler when a kernel is decorated, so a module imported first (test_table_invariants imports every row's
    target) would otherwise miss RAPID_LLM_TRITON_INTERPRET=1 for the whole session."""
    from rapid_llm.kernels.dispatcher import probe_environment

    probe_environment()


def pytest_collection_modifyitems(session, config, items):
    """RAPID_LLM_CELL_SCOPE=1 (ci/absence_matrix): keep only what this absence cell can change
    (conformance/cell_scope.py says what that is); the rest is deselected, and a header line says why."""
    if not parse_cell_scope():
        return
    from conformance.cell_scope import Scope, in_scope
    from rapid_llm.kernels.dispatcher import build_tables, probe_environment

    table = build_tables()
    scope = Scope.of(device=probe_environment().device, table=table)
    kept, dropped = [], []
    for item in items:
        (kept if in_scope(item, scope, table) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    config._rapid_llm_cell_scope = f"{scope.summary()}; {len(kept)} of {len(kept) + len(dropped)} tests in scope"


def pytest_report_header(config):
    if parse_cell_scope():
        return "RAPID_LLM_CELL_SCOPE=1: only the tests this absence cell can change run (conformance/cell_scope.py)"
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    line = getattr(config, "_rapid_llm_cell_scope", None)
    if line:
        terminalreporter.write_line(line)


def parse_cell_scope() -> bool:
    from rapid_llm.kernels.dispatcher.environment import parse_flag

    return parse_flag("RAPID_LLM_CELL_SCOPE", os.environ.get("RAPID_LLM_CELL_SCOPE"))


@pytest.fixture(scope="session")
def env():
    from rapid_llm.kernels.dispatcher import probe_environment

    return probe_environment()


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("RAPID_LLM_PARITY_REPORT")
    if not path or not PARITY_MEASUREMENTS:
        return
    import torch

    from rapid_llm.kernels.dispatcher import probe_environment

    env = probe_environment()
    worst: dict[str, float] = {}
    for m in PARITY_MEASUREMENTS:
        worst[m["row"]] = max(worst.get(m["row"], 0.0), m["max_abs_diff"])
    document = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "device": str(env.device),
        "device_name": env.device_name or platform.processor(),
        "torch": torch.__version__,
        "libs": env.libs.as_dict(),
        "command": "RAPID_LLM_PARITY_REPORT=... python -m pytest " + " ".join(session.config.invocation_params.args),
        # CPU-interpreter parity is no bf16/fp8 evidence: Triton's interpreter truncates fp32 -> bf16 (and
        # rounds fp8 differently) where the GPU rounds to nearest even; those dtypes are verified on the GPU.
        "note": None if env.device.kind == "cuda" else INTERPRETER_ROUNDING_NOTE,
        "exit_status": int(exitstatus),
        "max_abs_diff_by_row": worst,
        "measurements": PARITY_MEASUREMENTS,
    }
    with open(path, "w") as handle:
        json.dump(document, handle, indent=1)
