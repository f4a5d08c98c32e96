"""The library-absence cell this process runs in: the rows it accepts are exactly the ones the table predicts.

ci/absence_matrix runs the suite once per cell (RAPID_LLM_HIDE_LIBS=<libraries>), scoped to what the cell
changes (conformance/cell_scope.py); these tests are the cell's own assertions, run whole in every cell
(with the broken-library cell's, and unit tests of the scope). The prediction is made from the table's
data alone: a row is predicted eligible when every library it requires is present here in its version
range and its capability accepts this device (for the dtype asked). Loading the row (a plan forcing it, with every layout tag its contract names)
is the observation. A row whose eligibility also rests on a load-time probe with no library behind it
(the CUDA extension's aot/ and jit/ rows) is predicted absent when the cell hides `cuda_extension`
and is otherwise not predicted.

Failures caught: a hidden library whose rows still serve (the blocker missed a module, a row forgot
its `libraries` entry); a present library whose rows are refused for a reason the table does not
state; an op left without a serving row in some cell; a hidden library imported anyway; a broken
library crashing the engine or failing without the loader's message; a cell scope that drops the tests
of the rows the cell changes.
"""

from __future__ import annotations

import os
import sys

import pytest

from conformance.rows_here import TABLE, planner_forcing
from rapid_llm.kernels.dispatcher import NoEligibleKernel, dispatch, probe_environment
from rapid_llm.kernels.dispatcher.libraries import known_libraries


def _query_dtype(row) -> str:
    return "bf16" if "bf16" in row.dtypes else sorted(row.dtypes)[0]


def _predicted(row, env):
    """True/False from the table's data and this environment; None when a probe alone decides."""
    for requirement in row.libraries:
        ok, _ = requirement.check(env.libs.get(requirement.name))
        if not ok:
            return False
    if row.capability and not any(c.accepts(env.device, _query_dtype(row)) for c in row.capability):
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
    dtype = _query_dtype(row)
    contract = TABLE.contracts[row.op]
    try:
        planner_forcing(row.op, row.name, env).plan(row.op, dtype=dtype, shape={}, layout=contract.tags)
        refusals = []
    except NoEligibleKernel as error:
        # Only what an absence cell changes counts: libraries, the device, the load (import + probe). The
        # query here names no shape, so a row's shape conditions fail by design and are not the cell's.
        refusals = [
            check.render()
            for check in error.explanation.verdict(row.name).failures
            if check.condition.startswith(("library", "device", "load"))
        ]
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
        selection = dispatch(
            op, device=env.device, dtype=dtype, layout=contract.tags, libs=env.libs, table=TABLE, deny=env.deny
        )
        assert selection.row is not None, f"{op} {dtype}: no row serves in this cell"


@pytest.mark.parametrize("op", TABLE.ops)
def test_every_op_computes_correctly_in_this_cell(op):
    """The row this cell selects (the default plan) against the reference row, on the op's first case that
    is not a large one, for each dtype the case covers (bf16 only on a GPU: the CPU interpreter truncates
    fp32 -> bf16, one unit in the last place beyond the bf16 tolerance; see test_parity.INTERPRETER_BF16)."""
    import torch

    from conformance.cases import CASES, COMPARED_OUTPUTS, OUTPUT_MASKS, TORCH_DTYPES
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
        reference = planner_forcing(op, TABLE.reference(op).name, env).plan(op, dtype=dtype, shape=shape, layout=layout)
        got = selected(*args)
        want = reference(*case.make(TORCH_DTYPES[dtype], device, torch.Generator().manual_seed(11))[0])
        if op in COMPARED_OUTPUTS:
            got, want = COMPARED_OUTPUTS[op](got), COMPARED_OUTPUTS[op](want)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        masks = OUTPUT_MASKS[op](*args) if op in OUTPUT_MASKS else None
        for index, (out, expected) in enumerate(zip(got, want)):
            if masks is not None:
                mask = masks[index] if isinstance(masks, tuple) else masks
                out, expected = out[mask], expected[mask]
            atol, rtol = tolerance(op, dtype, index)
            torch.testing.assert_close(
                out.float(),
                expected.float(),
                atol=atol,
                rtol=rtol,
                equal_nan=True,
                msg=lambda m: f"{op} {dtype} via {selected.row.name}: {m}",
            )


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
        for module in known_libraries()[name].modules:
            assert module not in sys.modules or sys.modules[module] is None, (
                f"{module} ({name}) is hidden in this cell but was imported"
            )


def _broken_libraries(env) -> dict[str, str]:
    """{library: the loader's message} for each library installed in its range here whose import fails."""
    import importlib

    from rapid_llm.kernels.backends import LIBRARY_PROBES

    broken = {}
    for name, module_name in LIBRARY_PROBES.items():
        backend = importlib.import_module(module_name)
        if name in env.hidden_libs or not backend.REQUIREMENT.check(env.libs.get(name))[0]:
            continue
        ok, reason = backend.available()
        if not ok:
            broken[name] = reason
    return broken


def _satisfying(constraint) -> int:
    """A value of the constraint's dim that it accepts (a query that reaches the row's other conditions)."""
    if constraint.one_of:
        return constraint.one_of[0]
    step = constraint.multiple_of or 1
    value = -(-max(constraint.min or 1, 1) // step) * step
    assert constraint.accepts(value), constraint.describe()
    return value


def _device_serving(row):
    from rapid_llm.kernels.dispatcher import Device

    requirement = row.capability[0] if row.capability else None
    if requirement is None or requirement.device == "cpu":
        return Device("cpu", triton_interpreter=bool(requirement and requirement.triton_interpreter))
    return Device("cuda", requirement.min_sm or requirement.max_sm or 90)


def test_broken_library_rows_are_rejected_with_the_loaders_message():
    """The broken-library cell (ci/absence_matrix: a library installed in its tested range whose import raises;
    RAPID_LLM_EXPECT_BROKEN_LIBS names it): each of its rows, selected where its conditions hold (a device
    described to dispatch, so no GPU is needed), is rejected at load with the loader's message, and the next
    row serves. Catches a broken optional library crashing the engine, or failing without its reason."""
    env = probe_environment()
    expected = {name for name in os.environ.get("RAPID_LLM_EXPECT_BROKEN_LIBS", "").split(",") if name}
    broken = _broken_libraries(env)
    assert expected <= set(broken), (
        f"expected broken in this cell: {sorted(expected)}; the probes found "
        f"{broken or 'none broken'} (installed: {env.libs.as_dict()})"
    )
    if not broken:
        pytest.skip("no library here is installed in range and broken")
    checked = 0
    for op in TABLE.ops:
        for row in TABLE.rows(op):
            library = next((lib.name for lib in row.libraries if lib.name in broken), None)
            if library is None or not row.golden.verified:
                continue  # an unverified row is not selected by default: its load is never attempted
            dtype = sorted(row.dtypes)[0]
            shape = {constraint.dim: _satisfying(constraint) for constraint in row.shape}
            selection = dispatch(
                op,
                device=_device_serving(row),
                dtype=dtype,
                shape=shape,
                layout=TABLE.contracts[op].tags,
                libs=env.libs,
                table=TABLE,
                # the row and the reference alone: whatever else could serve is not the point
                deny=frozenset(r.name for r in TABLE.rows(op) if r is not row and not r.is_reference),
            )
            assert selection.row is row, f"{row.name} is not selected where its conditions hold:\n{selection.explain()}"
            loaded = selection.load()
            assert loaded.row is TABLE.reference(op), loaded.selection.explain()
            load_failures = [
                check for check in loaded.selection.explanation.verdict(row.name).failures if check.condition == "load"
            ]
            assert load_failures and broken[library] in load_failures[0].observed, loaded.selection.explain()
            checked += 1
    assert checked, f"no row needs the broken libraries {sorted(broken)}"


# ---------------------------------------------------------------------------
# The scope ci/absence_matrix gives each cell (conformance/cell_scope.py): what it computes from the table.
# ---------------------------------------------------------------------------

_TRITON_HERE = {"triton": "3.9.0"}


def _scope(device, hidden=(), interpret=True, installed=None):
    from conformance.cell_scope import Scope
    from rapid_llm.kernels.dispatcher import Device

    return Scope(TABLE, Device.parse(device), _TRITON_HERE if installed is None else installed, hidden, interpret)


@pytest.mark.parametrize(
    "hidden, interpret", [(("triton",), True), ((), False)], ids=["triton-hidden", "interpreter-off"]
)
def test_scope_of_a_cpu_cell_without_native_rows_is_the_native_rows(hidden, interpret):
    """Catches a cell that loses the tests of the rows it turns off (the native ones, on a CPU), or one that
    runs the reference rows' tests, which no cell changes."""
    scope = _scope("cpu", hidden, interpret)
    assert {"native/rms_norm", "native/decode", "native/prefill"} <= scope.rows
    assert {"norm.rms_norm", "attention.decode"} <= scope.ops
    assert not any(TABLE.rows_by_name[name].is_reference for name in scope.rows)


@pytest.mark.parametrize("hidden", ["flashinfer", "flash_attn", "flash_mla", "deep_gemm", "deep_ep", "cuda_extension"])
def test_scope_of_hiding_a_cuda_only_library_on_a_cpu_is_empty(hidden):
    """Catches a cell scoped wider than it changes: every row of these libraries needs CUDA, so hiding one on
    a CPU changes no row (the cell runs its own assertions only)."""
    assert _scope("cpu", (hidden,)).rows == frozenset()


def test_scope_on_a_gpu_follows_the_hidden_library():
    """Catches a scope that ignores the device: on sm90 hiding flashinfer turns its rows off (and only
    those), and hiding the CUDA extension its aot/ and jit/ rows, whose load-time probe it hides."""
    every = {"triton": "3.6.0", "flashinfer": "0.6.0"}
    flashinfer = _scope("cuda:sm90", ("flashinfer",), installed=every)
    assert "flashinfer/rmsnorm" in flashinfer.rows and all(n.startswith("flashinfer/") for n in flashinfer.rows)
    extension = _scope("cuda:sm90", ("cuda_extension",), installed=every)
    assert "aot/scale" in extension.rows and all(n.split("/")[0] in ("aot", "jit") for n in extension.rows)


def test_scope_sees_a_capability_narrowed_to_some_dtypes():
    """Catches a reach that ignores a capability's dtypes: the interpreter turned off removes fp32/fp16 from
    native/prefill's reach (bf16 was never in it there)."""
    scope = _scope("cpu", interpret=False)
    before, after = scope.changes["native/prefill"]
    assert "bf16" not in before and {"fp32", "fp16"} <= before and after == frozenset()


def test_items_are_judged_by_the_row_or_op_they_name():
    """Catches scoped cells dropping an affected row's tests (a KernelSpec, a PlannedOp or a row name as the
    parameter), an affected op's public-function tests, or keeping tests that name nothing the cell changes."""
    import rapid_llm.kernels as kernels
    from conformance.cell_scope import item_references

    class Planned:  # what the bad-input and semantics tests parametrise by: a PlannedOp's row
        row = TABLE.rows_by_name["native/rms_norm"]

    cases = [
        (
            {"op": "norm.rms_norm", "row": TABLE.rows_by_name["torch/rms_norm"], "dtype": "fp16"},
            {"torch/rms_norm"},
            {"norm.rms_norm"},
        ),
        ({"name": "native/rms_norm", "fn": Planned()}, {"native/rms_norm"}, set()),
        ({"name": "public", "fn": kernels.rms_norm}, set(), {"norm.rms_norm"}),
        ({"name": "public:attention.decode"}, set(), {"attention.decode"}),
        ({"is_neox": True, "tokens": 5}, set(), set()),
    ]
    for params, rows, ops in cases:
        assert item_references(params, TABLE) == (rows, ops), params
