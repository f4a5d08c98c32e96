"""The torch.library custom ops (rapid_llm/kernels/torch_ops.py): every public op, usable in a compiled model.

For every op contract, on the op's parity cases (conformance/cases/): the first case of each call form
(`out=` given or None, `return_lse` on or off, fp8 scales or None, ...), in fp32 where the op takes it.
Catches: a public op without its custom op, or a custom op whose parameters drifted from the contract's;
a schema that hides a write or returns an input (opcheck's test_schema runs the op under a mode that
sees every write and alias); a fake implementation whose outputs differ from the real ones in shape,
dtype or strides, also with symbolic sizes (test_faketensor, test_aot_dispatch_dynamic); a missing
autograd registration (test_autograd_registration); a custom op computing something else than the
public op; a graph break where a compiled model calls the ops; a namespace clash with the CUDA extension.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, COMPARED_OUTPUTS, OUTPUT_MASKS, TORCH_DTYPES
from conformance.rows_here import TABLE, torch_device
from rapid_llm import kernels
from rapid_llm.kernels import aot, jit
from rapid_llm.kernels.torch_ops import CUSTOM_OPS, NAMESPACE, OUT_SUFFIX, custom_op_arguments, register

# torch's opcheck itself uses the deprecated torch.jit.script_method: its warning says nothing about our ops.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

OPS = register()
DEVICE = torch_device()
SEED = 0


def _dtype(case) -> str:
    """fp32 where the case runs in it (the interpreter's bf16 products are wrong), else the op's dtype (fp8 GEMMs)."""
    return "fp32" if "fp32" in case.dtypes else min(case.dtypes)


def _make(case):
    """The case's arguments, fresh: each call builds the same values from the same seed."""
    generator = torch.Generator().manual_seed(SEED)
    return case.make(TORCH_DTYPES[_dtype(case)], DEVICE, generator)[0]


def _form(args) -> tuple:
    """What selects a call form: which arguments are None, and the flags' values."""
    return tuple(arg if isinstance(arg, bool) or arg is None else type(arg).__name__ for arg in args)


def _custom_call(op: str, args: tuple) -> tuple[str, tuple]:
    """(custom op name, its arguments) for the public call op(*args): a given `out` selects <name>_out,
    an `out` of None is dropped (the functional op allocates)."""
    contract = TABLE.contracts[op]
    args = custom_op_arguments(args)
    if "out" not in contract.parameters:
        return contract.name, args
    position = contract.parameters.index("out")
    if position < len(args) and args[position] is not None:
        return contract.name + OUT_SUFFIX, args
    return contract.name, args[:position] + args[position + 1 :]


def _calls():
    for op in TABLE.ops:
        forms = set()
        for case in CASES[op]:
            if case.gpu_only:  # past 2**31 elements: sizes, not call forms
                continue
            form = _form(_make(case))
            if form not in forms:
                forms.add(form)
                yield pytest.param(op, case, id=f"{op}-{case.id}-{_dtype(case)}")


CALLS = list(_calls())


def test_every_public_op_has_its_custom_ops_with_the_contract_parameters():
    """Catches a new op (or a new parameter of an op) without its custom op: each contract has
    rapid_llm_ops::<name> over its parameters, and, with an `out` parameter, <name>_out over all of them
    (`out` written) while <name> takes them without `out`; no custom op lacks a contract."""
    expected = {}
    for contract in TABLE.contracts.values():
        parameters = contract.parameters
        if "out" in parameters:
            expected[contract.name + OUT_SUFFIX] = (parameters, ("out",))
            parameters = tuple(name for name in parameters if name != "out")
        expected[contract.name] = (parameters, None)
    assert {op.name for op in CUSTOM_OPS} == set(expected)
    for name, (parameters, writes) in expected.items():
        schema = getattr(OPS, name).default._schema
        assert tuple(argument.name for argument in schema.arguments) == parameters, name
        if writes is not None:
            written = tuple(a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write)
            assert written == writes and not schema.returns, f"{name}: {schema}"
    assert {contract.name for contract in TABLE.contracts.values()} <= set(kernels.__all__)


def test_every_call_form_of_every_op_is_exercised():
    """Catches an op (or its `out=` form) left out of the opcheck runs below: no case of it runs here."""
    exercised = {_custom_call(op, _make(case))[0] for op, case in (call.values for call in CALLS)}
    assert exercised == {op.name for op in CUSTOM_OPS}


#: All of opcheck's tests. Its schema test compares each argument before and after the call with
#: torch.allclose, which has no fp8 kernel ("mul_cpu_reduced_float" not implemented for 'Float8_e4m3fn'):
#: calls with fp8 arguments skip it, and test_custom_op_gives_the_public_ops_result's own write and alias
#: checks stand in for it.
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("op, case", CALLS)
def test_opcheck(op, case):
    """torch.library.opcheck's four tests (schema: writes and aliases as declared; autograd registration;
    fake tensors; AOT dispatch with dynamic shapes) on the case's arguments. An op whose contract leaves
    output elements unspecified (OUTPUT_MASKS: e.g. rows past masked_m, which DeepGEMM's row leaves as they
    were) skips the AOT test, which compares whole outputs: test_unspecified_outputs_trace_under_aot
    compares the specified elements instead."""
    name, args = _custom_call(op, _make(case))
    fp8 = any(isinstance(arg, torch.Tensor) and arg.dtype == torch.float8_e4m3fn for arg in args)
    tests = OPCHECK_TESTS[1:] if fp8 else OPCHECK_TESTS
    if op in OUTPUT_MASKS:
        tests = tuple(test for test in tests if test != "test_aot_dispatch_dynamic")
    torch.library.opcheck(getattr(OPS, name).default, args, test_utils=tests)


def _output_masks(op: str, args: tuple, count: int) -> list:
    """Per output, the bool mask of the elements its contract specifies, or None (every element)."""
    masks = OUTPUT_MASKS.get(op)
    if masks is None:
        return [None] * count
    specified = masks(*args)
    specified = specified if isinstance(specified, tuple) else (specified,)
    return list(specified) + [None] * (count - len(specified))


def _masked(value, mask):
    return value if mask is None else value[mask]


@pytest.mark.parametrize("op, case", [call for call in CALLS if call.values[0] in OUTPUT_MASKS])
def test_unspecified_outputs_trace_under_aot(op, case):
    """Catches an op with unspecified output elements whose custom op computes something else once traced by
    AOTAutograd with dynamic shapes (what opcheck's AOT test checks for every other op), on the elements
    its contract specifies."""
    name, args = _custom_call(op, _make(case))
    custom = getattr(OPS, name)
    eager = _tensors(custom(*args))
    traced = _tensors(torch.compile(custom, backend="aot_eager", dynamic=True, fullgraph=True)(*args))
    for got, expected, mask in zip(traced, eager, _output_masks(op, args, len(eager))):
        torch.testing.assert_close(
            _masked(got, mask).float(), _masked(expected, mask).float(), rtol=0, atol=0, equal_nan=True
        )


def _tensors(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _assert_same(got, expected, what: str) -> None:
    """Bit for bit: one dispatch serves both calls (values compared as fp32: exact for every dtype here)."""
    assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype, expected.stride()), what
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=0, equal_nan=True, msg=what)


def _shares_memory(a, b) -> bool:
    return a.untyped_storage().nbytes() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("op, case", CALLS)
def test_custom_op_gives_the_public_ops_result(op, case):
    """Catches a custom op computing something else than the public op (every argument after the call and
    every tensor it returns equal the public op's), writing an argument its schema does not declare, or
    returning a tensor that shares memory with an argument."""
    public_args = _make(case)
    public = getattr(kernels, TABLE.contracts[op].name)(*public_args)
    if op in COMPARED_OUTPUTS:
        public = COMPARED_OUTPUTS[op](public)
    name, custom_args = _custom_call(op, _make(case))
    schema = getattr(OPS, name).default._schema
    custom = getattr(OPS, name)(*custom_args)
    untouched = _custom_call(op, _make(case))[1]
    for argument, got, before in zip(schema.arguments, custom_args, untouched):
        if isinstance(got, torch.Tensor) and not (argument.alias_info and argument.alias_info.is_write):
            _assert_same(got, before, f"{name} wrote {argument.name}, which its schema does not declare")
    public_by_name = dict(zip(TABLE.contracts[op].parameters, public_args))
    for argument, got in zip(schema.arguments, custom_args):
        if isinstance(got, torch.Tensor):
            _assert_same(got, public_by_name[argument.name], f"{name}: argument {argument.name}")
    if custom is not None:
        assert len(_tensors(custom)) == len(_tensors(public)), name
        masks = _output_masks(op, public_args, len(_tensors(public)))
        for position, (got, expected) in enumerate(zip(_tensors(custom), _tensors(public))):
            assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype, expected.stride()), name
            # unspecified output elements (rows past masked_m) may differ between two calls
            _assert_same(
                _masked(got, masks[position]), _masked(expected, masks[position]), f"{name}: output {position}"
            )
            assert not any(_shares_memory(got, arg) for arg in custom_args if isinstance(arg, torch.Tensor)), name


def _first_case(op: str, case_id: str) -> tuple:
    return _make(next(case for case in CASES[op] if case.id == case_id))


def test_a_compiled_step_calling_the_ops_has_no_graph_break():
    """Catches a graph break (fullgraph=True raises on one) or a wrong compiled result where a model calls
    the custom ops: an in-place norm (its writes reach the caller's tensors), a norm and an activation
    that allocate, and decode, compiled by inductor."""
    x, residual, weight, eps = _first_case("norm.fused_add_rms_norm", "hidden_1000")
    decode_args = _first_case("attention.decode", "ragged_page16")[:6]

    def step(x, residual, weight, *decode_args):
        OPS.fused_add_rms_norm(x, residual, weight, eps)
        return OPS.silu_and_mul(OPS.rms_norm(residual, weight, eps)), OPS.decode(*decode_args)[0]

    eager_x, eager_residual = x.clone(), residual.clone()
    eager = step(eager_x, eager_residual, weight, *decode_args)
    compiled = torch.compile(step, fullgraph=True)(x, residual, weight, *decode_args)
    for what, got, expected in zip(
        ("x", "residual", "silu_and_mul", "decode"), (x, residual, *compiled), (eager_x, eager_residual, *eager)
    ):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=what)


def test_the_namespace_does_not_clash_with_the_cuda_extension():
    """Catches a custom op taking a name the CUDA extension defines (rapid_llm::scale, update_kv_buffer,
    decode, or their rapid_llm_jit:: twins of the JIT build): the extension, or ours, would fail to define
    it in a process that has both. Also defines the extension's names as it does (where a loaded extension
    has not already) and checks ours still serve."""
    extension = {f"{namespace}::{name}" for namespace in (aot.NAMESPACE, jit.NAMESPACE) for name in aot.extension_ops()}
    assert not extension & {f"{NAMESPACE}::{op.name}" for op in CUSTOM_OPS}
    libraries = []
    try:
        for namespace in (aot.NAMESPACE, jit.NAMESPACE):
            libraries.append(torch.library.Library(namespace, "FRAGMENT"))
            for name in aot.extension_ops():
                if not aot._has_schema(namespace, name):
                    libraries[-1].define(f"{name}(Tensor(a!) out) -> ()")
        x = torch.randn(5, device=DEVICE)
        torch.testing.assert_close(OPS.scale(x, 2.0), x * 2.0)
    finally:
        for library in libraries:
            library._destroy()


def test_the_plans_a_compiled_step_ran_are_printable_and_agree_with_dispatch():
    """Catches dispatch disappearing inside compiled code: after a compiled step, the default planner lists
    the plan of every op the step called, and each listed row is what dispatch (what `rapid-llm explain`
    runs) selects for that plan's query."""
    from rapid_llm.kernels import default_planner, dispatch
    from rapid_llm.kernels.dispatcher import Device

    x = torch.randn(3, 64, device=DEVICE)
    weight = torch.randn(64, device=DEVICE)

    def step(x, weight):
        return OPS.silu_and_mul(OPS.rms_norm(x, weight, 1e-6))

    torch.compile(step, fullgraph=True)(x, weight)
    planner = default_planner()
    entries = {entry["op"]: entry for entry in planner.describe()}
    assert {"norm.rms_norm", "activation.silu_and_mul"} <= set(entries)
    for op in ("norm.rms_norm", "activation.silu_and_mul"):
        entry = entries[op]
        expected = dispatch(
            op,
            device=Device.parse(entry["device"]),
            dtype=entry["dtype"],
            shape={name: high for name, (_, high) in entry["bucket"].items()},
            layout=frozenset(entry["layout"]),
            libs=planner.env.libs,
            deny=planner.env.deny,
        )
        assert entry["row"] == expected.row.name
        assert f"{op}  {entry['dtype']}" in planner.describe_text()


#: A decode layer of the custom ops (norms, rotary, the KV write, paged decode, SwiGLU) and torch GEMMs, compiled
#: fullgraph with the batch dynamic, in a fresh interpreter: its first call compiles before any op ran.
_COLD_LAYER = r"""
import sys, torch, torch._dynamo.testing
from rapid_llm.kernels.torch_ops import register
ops = register()
device = sys.argv[1]
hq, hk, d, hidden, page, pages_per_seq = 4, 2, 16, 64, 4, 4
g = torch.Generator().manual_seed(0)
def rand(*shape):
    return torch.randn(*shape, generator=g).to(device)
w = {"norm": rand(hidden), "post": rand(hidden), "qkv": rand((hq + 2 * hk) * d, hidden) / 8,
     "o": rand(hidden, hq * d) / 8, "gate_up": rand(256, hidden) / 8, "down": rand(hidden, 128) / 8}
cos_sin = torch.cat([torch.ones(64, d // 2), torch.zeros(64, d // 2)], 1).to(device)

def layer(x, residual, positions, loc, kv, table, lens):
    ops.fused_add_rms_norm(x, residual, w["norm"], 1e-6)
    qkv = x @ w["qkv"].T
    q, k = qkv[:, : hq * d], qkv[:, hq * d : (hq + hk) * d]
    ops.rotary(positions, q, k, d, cos_sin, True)
    ops.update_kv_buffer(qkv[:, hq * d :].reshape(-1, 2 * hk, d), loc, kv)
    (attended,) = ops.decode(q.reshape(-1, hq, d), kv, table, lens, page, d ** -0.5)
    x = attended.reshape(-1, hq * d) @ w["o"].T
    ops.fused_add_rms_norm(x, residual, w["post"], 1e-6)
    return ops.silu_and_mul(x @ w["gate_up"].T) @ w["down"].T, residual

counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
compiled = torch.compile(layer, backend=counter, fullgraph=True, dynamic=True)
for batch in (5, 6, 7):
    lens = torch.full((batch,), 9, dtype=torch.int32)
    table = torch.randperm(batch * pages_per_seq, generator=g).view(batch, pages_per_seq).int()
    args = [rand(batch, hidden), rand(batch, hidden), (lens - 1).long(), None,
            rand(batch * pages_per_seq * page, 2 * hk, d), table, lens]
    args[3] = (table[:, 2].long() * page + 0)
    args = [a.to(device) for a in args]
    eager_args = [a.clone() for a in args]
    got, expected = compiled(*args), layer(*eager_args)
    for a, b in zip((*got, args[4]), (*expected, eager_args[4])):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
print("frames", counter.frame_count)
"""


def test_a_decoder_layer_compiles_from_a_cold_process_once_for_every_batch():
    """Catches a graph break in a decoder layer of our ops compiled fullgraph from a fresh interpreter (no op
    called before: the fake implementations alone must trace), a compiled result or cache write that differs
    from eager, and a recompile across batch sizes (a fake implementation or schema that specialises on the
    token count): three batch sizes, one compiled frame."""
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _COLD_LAYER, DEVICE], capture_output=True, text=True, timeout=600, env={**os.environ}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "frames 1", result.stdout
