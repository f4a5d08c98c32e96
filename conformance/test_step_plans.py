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
    policies = decode_module._PLANS
    original = policies.policy

    def counting(*sizes):
        calls.append(sizes)
        return original(*sizes)

    monkeypatch.setattr(policies, "policy", counting)
    monkeypatch.setattr(policies, "_cache", {})
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


# -- next steps and CUDA graphs --------------------------------------------------------------------------

#: Decode cases with room to change: a later step's lengths (shorter, inside every sequence's pages).
UPDATE_PARAMS = [
    pytest.param(op, row.name, CASE_IDS[op][0], id=f"{row.name}-{CASE_IDS[op][0]}")
    for op in (DECODE, MLA_DECODE)
    for row in TABLE.rows(op)
]


def _next_contents(args, seed):
    """The same tensors with a later step's contents, in place: new q and cache values, each length cut by up to
    a third (still inside its pages, at least 1)."""
    generator = torch.Generator().manual_seed(seed)
    fresh = _layer(args, seed)
    args[0].copy_(fresh[0])
    args[1].copy_(fresh[1])
    lengths = args[3].cpu()
    cut = (torch.rand(lengths.shape, generator=generator) * (lengths.float() / 3)).to(lengths.dtype)
    args[3].copy_((lengths - cut).clamp(min=1).to(args[3].device))


def _bitwise_equal(a, b) -> bool:
    return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(a.nan_to_num(), b.nan_to_num())


def _planned_step(op, row, args, **kwargs):
    dtype = "fp32" if "fp32" in TABLE.rows_by_name[row].dtypes else "bf16"
    if DEVICE == "cpu" and dtype == "bf16" and not TABLE.rows_by_name[row].is_reference:
        pytest.skip("the CPU interpreter computes tl.dot on bf16 wrongly: GPU only")
    try:
        return StepPlan(planner_forcing(op, row), op, *args, **kwargs)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


def _case_args(op, row, case_id):
    dtype = "fp32" if "fp32" in TABLE.rows_by_name[row].dtypes else "bf16"
    return _make(op, case_id, dtype=dtype)


@pytest.mark.parametrize("op, row, case_id", UPDATE_PARAMS)
def test_an_updated_step_gives_what_a_fresh_step_gives(op, row, case_id):
    """Catches a step kept for a later step whose metadata stays the old one's (FlashInfer's plan or FlashMLA's
    schedule not refreshed by update(), or refreshed into other buffers than the kernel reads): after new
    contents of the same tensors and update(), the step equals a step planned fresh on those contents."""
    args = _case_args(op, row, case_id)
    step = _planned_step(op, row, args)
    step(*args)
    _next_contents(args, seed=7)
    step.update()
    fresh = StepPlan(planner_forcing(op, row), op, *args)
    assert _bitwise_equal(step(*args), fresh(*args))


@pytest.mark.parametrize("op, row, case_id", UPDATE_PARAMS)
def test_a_captured_step_replays_for_the_next_steps_contents(op, row, case_id):
    """Catches a row called graph-safe through its step plan whose captured call replays stale metadata or reads
    buffers the refresh moved: a step planned graph_safe_only, captured once, replayed after new contents and
    update() equals a step planned fresh on the new contents (bitwise); a row capturable neither on its own nor
    through its step plan is not selected (skipped with its explain() reason)."""
    if DEVICE != "cuda":
        pytest.skip("CUDA graphs need a CUDA device")
    args = _case_args(op, row, case_id)
    step = _planned_step(op, row, args, graph_safe_only=True)
    step(*args)  # first call outside the capture: compiles and loads
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step.impl(*args)
    for seed in (7, 8):
        _next_contents(args, seed=seed)
        step.update()
        graph.replay()
        torch.cuda.synchronize()
        fresh = StepPlan(planner_forcing(op, row), op, *args, graph_safe_only=True)
        assert _bitwise_equal(captured, fresh(*args)), seed


def test_graph_safe_through_a_step_plan_is_its_own_selection():
    """Catches a row capturable only through its step plan (FlashInfer's decode: plain calls plan on the host)
    served to a plain graph_safe_only plan, or refused to a step plan's."""
    from rapid_llm.kernels.dispatcher.select import THROUGH_STEP_PLAN, dispatch

    contract = TABLE.contracts[DECODE]
    query = {
        "device": "cuda:sm90",
        "dtype": "bf16",
        "shape": {"num_tokens": 8, "head_dim": 128, "page_size": 16},
        "layout": contract.tags,
        "libs": {"flashinfer": "0.6.0", "triton": "3.6.0", "torch": "2.11.0"},
        "table": TABLE,
    }
    plain = dispatch(DECODE, **query, graph_safe=True).explanation.verdict("flashinfer/paged_decode")
    through_step = dispatch(DECODE, **query, graph_safe=THROUGH_STEP_PLAN).explanation.verdict(
        "flashinfer/paged_decode"
    )
    assert [check.condition for check in plain.failures] == ["graph_safe"]
    assert "graph_safe" not in [check.condition for check in through_step.failures]


def test_a_recorder_keeps_a_step_plan_and_refreshes_it_once_per_step(monkeypatch):
    """Catches a forward step that plans its attention again in every step (or never refreshes a kept plan):
    the recorder keeps the step plan while the page table and lengths are the same tensors, refreshes it once
    per step however many layers call it, and plans anew for another page table."""
    from rapid_llm.step.recorder import Recorder

    args = _make(DECODE, "ragged_page16")
    recorder = Recorder(Planner(probe_environment()))
    updates = []
    monkeypatch.setattr(StepPlan, "update", lambda self: updates.append(self))
    for _ in range(2):
        recorder.begin_step()
        for _ in range(3):
            recorder.op(DECODE, "paged decode", *args)
    kept = recorder.steps[DECODE]
    assert len(updates) == 1 and updates[0] is kept
    other = list(args)
    other[2] = args[2].clone()
    recorder.begin_step()
    recorder.op(DECODE, "paged decode", *other)
    assert recorder.steps[DECODE] is not kept and len(updates) == 1


def test_a_frozen_recorder_plans_nothing_inside_a_capture():
    """Catches a captured step that would build a step plan (host syncs of FlashInfer's plan) inside the
    capture: a frozen recorder without the op's plan refuses, naming the op."""
    from rapid_llm.step.recorder import Recorder

    recorder = Recorder(Planner(probe_environment()), frozen=True)
    with pytest.raises(RuntimeError, match="attention.decode: no step plan"):
        recorder.op(DECODE, "paged decode", *_make(DECODE, "ragged_page16"))
