"""The library-absence cell this process runs in: the rows it accepts are exactly the ones the table predicts.

ci/absence_matrix runs the whole suite once per cell (RAPID_LLM_HIDE_LIBS=<libraries>); these tests are
the cell's own assertions. The prediction is made from the table's data alone: a row is predicted
eligible when every library it requires is present here in its version range and its capability
accepts this device. Loading the row (a plan forcing it, with every layout tag its contract names)
is the observation. A row whose eligibility also rests on a load-time probe with no library behind it
(the CUDA extension's aot/ and jit/ rows) is predicted absent when the cell hides `cuda_extension`
and is otherwise not predicted.

Failures caught: a hidden library whose rows still serve (the blocker missed a module, a row forgot
its `libraries` entry); a present library whose rows are refused for a reason the table does not
state; an op left without a serving row in some cell; a hidden library imported anyway.
"""

from __future__ import annotations

import sys

import pytest

from conformance.rows_here import TABLE, planner_forcing
from rapid_llm.kernels.dispatcher import NoEligibleKernel, dispatch, probe_environment
from rapid_llm.kernels.dispatcher.spec import KNOWN_LIBRARIES


def _predicted(row, env):
    """True/False from the table's data and this environment; None when a probe alone decides."""
    for requirement in row.libraries:
        ok, _ = requirement.check(env.libs.get(requirement.name))
        if not ok:
            return False
    if row.capability and not any(c.accepts(env.device) for c in row.capability):
        return False
    if row.backend in ("aot", "jit"):
        return False if "cuda_extension" in env.hidden_libs else None
    return True


def _rows():
    return [pytest.param(row, id=row.name) for op in TABLE.ops for row in TABLE.rows(op)]


@pytest.mark.parametrize("row", _rows())
def test_row_is_eligible_exactly_when_the_table_predicts(row):
    env = probe_environment()
    predicted = _predicted(row, env)
    if predicted is None:
        pytest.skip(f"{row.name}: eligibility rests on its load-time probe ({row.available}), not on table data")
    dtype = "bf16" if "bf16" in row.dtypes else sorted(row.dtypes)[0]
    contract = TABLE.contracts[row.op]
    try:
        planner_forcing(row.op, row.name, env).plan(row.op, dtype=dtype, shape={}, layout=frozenset(contract.layouts))
        refusals = []
    except NoEligibleKernel as error:
        # Only what an absence cell changes counts: libraries, the device, the load (import + probe). The
        # query here names no shape, so a row's shape conditions fail by design and are not the cell's.
        refusals = [check.render() for check in error.explanation.verdict(row.name).failures
                    if check.condition.startswith(("library", "device", "load"))]
    cell = f"this cell (hidden: {sorted(env.hidden_libs)})"
    if predicted:
        assert not refusals, f"{row.name}: predicted eligible in {cell}, refused: {refusals}"
    else:
        assert refusals, f"{row.name}: predicted refused in {cell}, but it loads"


@pytest.mark.parametrize("op", TABLE.ops)
def test_every_op_resolves_in_this_cell(op):
    env = probe_environment()
    contract = TABLE.contracts[op]
    for dtype in sorted(contract.dtypes):
        selection = dispatch(op, device=env.device, dtype=dtype, layout=frozenset(contract.layouts), libs=env.libs,
                             table=TABLE, deny=env.deny)
        assert selection.row is not None, f"{op} {dtype}: no row serves in this cell"


@pytest.mark.parametrize("op", TABLE.ops)
def test_every_op_computes_correctly_in_this_cell(op):
    """The row this cell selects (the default plan) against the reference row, on the op's first case that
    is not a large one, for each dtype the case covers (bf16 only on a GPU: the interpreter truncates it)."""
    import torch

    from conformance.cases import CASES, OUTPUT_MASKS, TORCH_DTYPES
    from conformance.tolerances import tolerance
    from rapid_llm.kernels.dispatcher import Planner

    env = probe_environment()
    device = "cuda" if env.device.kind == "cuda" else "cpu"
    case = next(c for c in CASES[op] if not c.gpu_only)
    for dtype in sorted(case.dtypes):
        if dtype == "bf16" and device == "cpu":
            continue
        args, shape, layout = case.make(TORCH_DTYPES[dtype], device, torch.Generator().manual_seed(11))
        selected = Planner(env, TABLE).plan(op, dtype=dtype, shape=shape, layout=layout)
        reference = planner_forcing(op, TABLE.reference(op).name, env).plan(op, dtype=dtype, shape=shape,
                                                                             layout=layout)
        got = selected(*args)
        want = reference(*case.make(TORCH_DTYPES[dtype], device, torch.Generator().manual_seed(11))[0])
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        masks = OUTPUT_MASKS[op](*args) if op in OUTPUT_MASKS else None
        for index, (out, expected) in enumerate(zip(got, want)):
            if masks is not None:
                mask = masks[index] if isinstance(masks, tuple) else masks
                out, expected = out[mask], expected[mask]
            atol, rtol = tolerance(op, dtype, index)
            torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol, equal_nan=True,
                                       msg=lambda m: f"{op} {dtype} via {selected.row.name}: {m}")


def test_hidden_extension_is_refused_by_both_probes(monkeypatch):
    """In the cell that hides the CUDA extension, the aot/ and jit/ probes refuse with that reason (even with
    the JIT opted in), whatever the machine has built."""
    from rapid_llm.kernels import aot, jit

    env = probe_environment()
    if "cuda_extension" not in env.hidden_libs:
        pytest.skip("this cell does not hide the CUDA extension")
    monkeypatch.setenv("RAPID_LLM_JIT", "1")
    for probe in (aot.available, jit.available):
        ok, reason = probe()
        assert not ok and "RAPID_LLM_HIDE_LIBS=cuda_extension" in reason, reason


def test_hidden_libraries_cannot_be_imported():
    env = probe_environment()
    for name in env.hidden_libs:
        for module in KNOWN_LIBRARIES[name].modules:
            assert module not in sys.modules or sys.modules[module] is None, (
                f"{module} ({name}) is hidden in this cell but was imported")
