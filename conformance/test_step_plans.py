"""Step plans (rapid_llm/step/plans.py): one per-step preparation, reused by every layer of the step.

Catches a step whose layers get other results than the per-call op (every row with a step hook, and every
row without one, on the cases that run here: the reference and, under the Triton interpreter, our kernels;
the library rows on the GPU), a preparation run per layer instead of once, a call that silently uses
another page table than the one the step prepared for, and a step plan for an op that has none.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from conformance.cases.attention import CASES
from conformance.rows_here import TABLE, planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel, OpInputError, Planner, probe_environment
from rapid_llm.kernels.ops.attention import DECODE, MLA_DECODE, PREFILL, PREFILL_PAGED
from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES
from rapid_llm.step.plans import LAYER_PARAMETERS, StepPlan

DEVICE = torch_device()
#: The first cases of each op that run on the CPU: small, and covering fp8 KV and return_lse.
CASE_IDS = {
    DECODE: ("ragged_page16", "page_size_64", "fp8_kv_ragged_page16"),
    MLA_DECODE: ("ragged_page64", "page_size_16"),
    PREFILL_PAGED: ("chunk_after_history", "with_lse"),
}


def _make(op, case_id, dtype="fp32"):
    case = next(case for case in CASES[op] if case.id == case_id)
    generator = torch.Generator().manual_seed(zlib.crc32(f"{op}/{case_id}".encode()))
    args, _, _ = case.make(TORCH_DTYPES[dtype], DEVICE, generator)
    return list(args)


def _layer(step_args, seed):
    """Another layer of the same step: its own q and cache (same shapes), the step's own per-step arguments."""
    args = list(step_args)
    generator = torch.Generator().manual_seed(seed)
    for position in (0, 1):
        tensor = args[position]
        fresh = torch.randn(tensor.shape, generator=generator) * tensor.float().std().cpu()
        args[position] = fresh.to(DEVICE, tensor.dtype)
    return args


PARAMS = [
    pytest.param(op, row.name, case_id, id=f"{row.name}-{case_id}")
    for op, ids in CASE_IDS.items()
    for row in TABLE.rows(op)
    for case_id in ids
]


@pytest.mark.parametrize("op, row, case_id", PARAMS)
def test_every_layer_of_a_step_gets_what_the_per_call_op_gives(op, row, case_id):
    """Catches a prepared step (FlashInfer's plan, FlashMLA's schedule, our launch policy computed once) whose
    layers differ from the per-call row, and a step that reads a stale q or cache (three layers, each its
    own q and cache, compared bitwise with the row called per call)."""
    dtype = "fp32" if "fp32" in TABLE.rows_by_name[row].dtypes else "bf16"
    args = _make(op, case_id, dtype=dtype)
    if args[1].dtype == torch.float8_e4m3fn and dtype != "fp32":
        pytest.skip("fp8 KV cases run in fp32 here")
    planner = planner_forcing(op, row)
    try:
        step = StepPlan(planner, op, *args)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))
    if DEVICE == "cpu" and dtype == "bf16" and not TABLE.rows_by_name[row].is_reference:
        pytest.skip("the CPU interpreter computes tl.dot on bf16 wrongly: GPU only")
    per_call = planner.plan_for(op, *args)
    assert step.row.name == per_call.row.name == row
    for seed in range(3):
        layer = _layer(args, seed) if seed else args
        got, expected = step(*layer), per_call(*layer)
        got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
        for a, b in zip(got, expected):
            assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(), b.nan_to_num())


def test_a_prepared_row_prepares_once_per_step(monkeypatch):
    """Catches the per-step preparation run in every layer (what a step plan exists to avoid): native/decode's
    launch policy counted over three layers of one step is computed once."""
    from rapid_llm.kernels.ops.attention.decode import triton as decode_module

    env = probe_environment()
    if not env.triton_interpret and env.device.kind != "cuda":
        pytest.skip("native/decode runs on the GPU or under RAPID_LLM_TRITON_INTERPRET=1")
    calls = []
    original = decode_module._decode_knobs

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(decode_module, "_decode_knobs", counting)
    args = _make(DECODE, "ragged_page16")
    step = StepPlan(planner_forcing(DECODE, "native/decode"), DECODE, *args)
    assert step.prepared
    for seed in range(3):
        step(*_layer(args, seed))
    assert len(calls) == 1


@pytest.mark.parametrize("op", sorted(LAYER_PARAMETERS))
def test_a_call_with_another_step_argument_is_refused_naming_it(op):
    """Catches a layer's call with another page table (or sequence lengths) running on the metadata prepared
    for the step's own: a silent wrong answer for a prepared library row."""
    args = _make(op, CASE_IDS[op][0])
    step = StepPlan(Planner(probe_environment()), op, *args)
    other = list(args)
    other[2] = args[2].clone()
    with pytest.raises(OpInputError, match=f"{op}: argument 'page_table'"):
        step(*other)


def test_only_the_paged_attention_ops_have_step_plans():
    """Catches a StepPlan built for an op whose calls share nothing per step (it would prepare nothing)."""
    with pytest.raises(ValueError, match="attention.prefill: no step plan"):
        StepPlan(Planner(probe_environment()), PREFILL)
