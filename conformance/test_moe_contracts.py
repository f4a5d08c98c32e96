"""The moe family's contracts: bad input, unchecked ids, NaN scores, and what each row promises beyond parity.

Bad input runs against a PlannedOp of every row that runs here (the reference; the native rows under the
interpreter or on a GPU) and the public functions: each must raise OpInputError naming the op, the
argument and the expectation before any kernel runs. Expert-id bounds are value checks (CPU always, CUDA
under RAPID_LLM_CHECK_BOUNDS=1); with them off (`value_checks(False)`), the contracts say every row
leaves an out-of-range id out: tested here on every row, so no row reads another expert's weights or
memory past the weights for such an id.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import TABLE, loadable_rows, planner_forcing, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.checks import OpInputError, value_checks
from rapid_llm.kernels.ops.moe import ALIGN, FUSED_MOE, TOPK_ROUTING

DEVICE = torch_device()


def _rows(op, public, dtype="fp32"):
    loadable = loadable_rows(op, dtype)
    rows = [pytest.param(fn, id=name) for name, fn in loadable]
    if op == FUSED_MOE and dtype == "fp32":  # the decode row's shape condition needs a token count
        names = {name for name, _ in loadable}
        for row in TABLE.rows(op):
            if row.name not in names:
                try:
                    fn = planner_forcing(op, row.name).plan(
                        op, dtype=dtype, shape={"num_tokens": 4}, layout=frozenset()
                    )
                except NoEligibleKernel:
                    continue
                rows.append(pytest.param(fn, id=row.name))
    return rows + [pytest.param(public, id="public")]


def _expect(error_info, argument, *words):
    error = error_info.value
    assert error.argument == argument, f"error names argument {error.argument!r}, expected {argument!r}: {error}"
    assert error.op in str(error)
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


def _logits(tokens=4, experts=16):
    return torch.randn(tokens, experts, generator=torch.Generator().manual_seed(1)).to(DEVICE)


def _experts(tokens=3, hidden=64, intermediate=32, experts=4, top_k=2, dtype=torch.float32, shared=0):
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(tokens, hidden, generator=generator).to(dtype)
    w13 = (torch.randn(experts + shared, 2 * intermediate, hidden, generator=generator) / 8).to(dtype)
    w2 = (torch.randn(experts + shared, hidden, intermediate, generator=generator) / 8).to(dtype)
    weights = torch.rand(tokens, top_k, generator=generator)
    ids = torch.randint(0, experts, (tokens, top_k), generator=generator, dtype=torch.int32)
    return [t.to(DEVICE) for t in (x, w13, w2, weights, ids)]


# ---------------------------------------------------------------------------
# moe.topk_routing


@pytest.mark.parametrize("fn", _rows(TOPK_ROUTING, kernels.topk_routing))
class TestTopkRoutingBadInput:
    def test_top_k_beyond_the_experts(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=8), 9)
        _expect(info, "top_k", "[1, 8]")

    def test_top_k_beyond_the_kept_groups(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=16), 5, True, "softmax", None, 4, 1)
        _expect(info, "top_k", "[1, 4]", "kept groups")

    def test_groups_not_dividing_the_experts(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=16), 2, True, "softmax", None, 3, 1)
        _expect(info, "num_expert_groups", "divisor of E = 16")

    def test_more_kept_groups_than_groups(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=16), 2, True, "softmax", None, 4, 5)
        _expect(info, "topk_groups", "[1, num_expert_groups = 4]")

    def test_unknown_scoring(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(), 2, True, "relu")
        _expect(info, "scoring", "softmax", "sigmoid")

    def test_bias_of_the_wrong_length(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=16), 2, True, "sigmoid", torch.zeros(15, device=DEVICE))
        _expect(info, "correction_bias", "[16]")

    def test_biased_groups_of_one_expert(self, fn):
        """A biased group scores its two largest choices: a group of one expert has no second."""
        with pytest.raises(OpInputError) as info:
            fn(_logits(experts=8), 2, True, "sigmoid", torch.zeros(8, device=DEVICE), 8, 4)
        _expect(info, "num_expert_groups", "at least 2 experts")

    def test_integer_logits(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(2, 8, dtype=torch.int32, device=DEVICE), 2)
        _expect(info, "logits", "float32")


def _nan_logits():
    logits = _logits(tokens=6, experts=16)
    logits[0, 3] = float("nan")
    logits[1] = float("nan")
    return logits


@pytest.mark.parametrize("fn", _rows(TOPK_ROUTING, kernels.topk_routing))
def test_nan_scores_rank_last_and_ids_stay_distinct_and_in_range(fn):
    """The contract: a NaN choice ranks below every number. Token 0 has one NaN logit (never chosen while
    8 numbers remain); token 1 is all NaN (every choice ties at the bottom: the lowest ids, in order).
    Catches a kernel whose argmax picks a NaN, repeats an id, or returns an id outside [0, E)."""
    _, ids = fn(_nan_logits(), 8)
    ids = ids.cpu()
    assert 3 not in ids[0].tolist()
    assert ids[1].tolist() == list(range(8))
    for row in ids.tolist():
        assert len(set(row)) == 8 and all(0 <= e < 16 for e in row)


# ---------------------------------------------------------------------------
# moe.align


@pytest.mark.parametrize("fn", _rows(ALIGN, kernels.align, "int32"))
class TestAlignBadInput:
    def test_ids_past_the_experts(self, fn):
        ids = torch.tensor([[0, 1], [2, 8]], dtype=torch.int32, device=DEVICE)
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(ids, 8, 16)
        _expect(info, "topk_ids", "[0, 8)", "8 at [1, 1]")

    def test_negative_ids_below_minus_one(self, fn):
        ids = torch.tensor([[0, -2]], dtype=torch.int32, device=DEVICE)
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(ids, 8, 16)
        _expect(info, "topk_ids", "[0, 8) or -1", "-2 at [0, 1]")

    def test_local_range_past_the_experts(self, fn):
        ids = torch.zeros(2, 2, dtype=torch.int32, device=DEVICE)
        with pytest.raises(OpInputError) as info:
            fn(ids, 8, 16, 4, 5)
        _expect(info, "num_local_experts", "[1, num_experts - expert_start = 4]")

    def test_float_ids(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(2, 2, device=DEVICE), 8, 16)
        _expect(info, "topk_ids", "int32/int64")

    def test_zero_block_size(self, fn):
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(2, 2, dtype=torch.int32, device=DEVICE), 8, 0)
        _expect(info, "block_size", "positive int")


@pytest.mark.parametrize("fn", _rows(ALIGN, kernels.align, "int32"))
def test_unchecked_ids_outside_the_experts_are_left_out(fn):
    """With value checks off, an id outside [0, E) is left out as another rank's expert (the contract):
    every row must give the layout of the valid slots alone, never place such a slot."""
    ids = torch.tensor([[0, 9], [-3, 2], [2, 0]], dtype=torch.int32, device=DEVICE)
    with value_checks(False):
        sorted_ids, block_experts, padded_count, counts = fn(ids, 8, 4)
    assert counts.cpu().tolist() == [2, 0, 2] + [0] * 5
    assert padded_count.cpu().tolist() == [8]
    assert sorted_ids.cpu().tolist()[:8] == [0, 5, 6, 6, 3, 4, 6, 6]
    assert block_experts.cpu().tolist()[:2] == [0, 2] and set(block_experts.cpu().tolist()[2:]) <= {-1}


# ---------------------------------------------------------------------------
# moe.fused_moe


@pytest.mark.parametrize("fn", _rows(FUSED_MOE, kernels.fused_moe))
class TestFusedMoeBadInput:
    def test_ids_past_the_routed_experts(self, fn):
        x, w13, w2, weights, ids = _experts(experts=4, shared=1)
        ids[1, 0] = 4  # the shared expert's index is not a routed id
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids, "silu", None, None, 1)
        _expect(info, "topk_ids", "[0, 4)", "4 at [1, 0]")

    def test_w2_of_another_intermediate(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2[:, :, :-1], weights, ids)
        _expect(info, "w2", "I = 32")

    def test_w13_of_another_hidden(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13[:, :, :-1], w2, weights, ids)
        _expect(info, "w13", "H = 64")

    def test_odd_gate_up_rows(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13[:, :-1], w2, weights, ids)
        _expect(info, "w13", "2I")

    def test_weights_of_another_dtype(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13.half(), w2, weights, ids)
        _expect(info, "w13", "float8_e4m3fn")

    def test_routing_weights_of_another_shape(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights[:, :1], ids)
        _expect(info, "topk_weights", "[3, 2]")

    def test_ids_of_another_token_count(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids[:2])
        _expect(info, "topk_ids", "T = 3")

    def test_unknown_activation(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids, "gelu")
        _expect(info, "activation", "silu")

    def test_scales_with_float_weights(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids, "silu", torch.ones(4, 1, 1, device=DEVICE))
        _expect(info, "w13_scale", "None")

    def test_every_expert_shared(self, fn):
        x, w13, w2, weights, ids = _experts(experts=4)
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids, "silu", None, None, 4)
        _expect(info, "w13", "at least one routed expert")

    def test_out_overlapping_x(self, fn):
        x, w13, w2, weights, ids = _experts()
        with pytest.raises(OpInputError) as info:
            fn(x, w13, w2, weights, ids, "silu", None, None, 0, x)
        _expect(info, "out")


@pytest.mark.parametrize("fn", _rows(FUSED_MOE, kernels.fused_moe, "fp8_e4m3"))
def test_fused_moe_fp8_scales_of_the_wrong_blocks(fn):
    x, w13, w2, weights, ids = _experts(hidden=256, intermediate=128, dtype=torch.bfloat16)
    w13, w2 = w13.to(torch.float8_e4m3fn), w2.to(torch.float8_e4m3fn)
    w13_scale = torch.ones(4, 2, 2, device=DEVICE)
    w2_scale = torch.ones(4, 2, 2, device=DEVICE)  # [E, ceil(H / 128) = 2, I / 128 = 1] expected
    with pytest.raises(OpInputError) as info:
        fn(x, w13, w2, weights, ids, "silu", w13_scale, w2_scale)
    _expect(info, "w2_scale", "[4, 2, 1]")


@pytest.mark.parametrize("fn", _rows(FUSED_MOE, kernels.fused_moe))
def test_unchecked_ids_outside_the_experts_add_nothing(fn):
    """With value checks off, a slot whose id is outside [0, E) adds nothing (the contract), on every row:
    the output equals the reference's on the same routing with those slots' weights set to 0. Catches a
    row reading past the weights, or taking a shared expert's weights for an id of E."""
    x, w13, w2, weights, ids = _experts(tokens=4, experts=4, shared=1)
    ids[0, 1], ids[2, 0], ids[3, 1] = 4, -2, 1000
    with value_checks(False):
        out = fn(x, w13, w2, weights, ids, "silu", None, None, 1)
    dropped = weights.clone()
    dropped[0, 1] = dropped[2, 0] = dropped[3, 1] = 0.0
    valid_ids = ids.clamp(0, 3)
    from rapid_llm.kernels.ops.moe.reference import fused_moe

    expected = fused_moe(x, w13, w2, dropped, valid_ids, "silu", None, None, 1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def _contiguous_with_nan_padding(a, a_scale, b, b_scale, m_indices, out=None):
    """The grouped GEMM's reference, its unspecified rows (padding) NaN: what a row may leave there."""
    from rapid_llm.kernels.ops.gemm.reference import fp8_grouped_mm_contiguous

    result = fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices)
    return result.masked_fill((m_indices < 0)[:, None], float("nan"))


def _masked_with_nan_padding(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    """The masked grouped GEMM's reference, its rows past masked_m NaN (unspecified: DeepGEMM leaves them)."""
    from rapid_llm.kernels.ops.gemm.reference import fp8_grouped_mm_masked

    result = fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m)
    unused = torch.arange(a.shape[1], device=a.device)[None, :] >= masked_m[:, None]
    return result.masked_fill(unused[..., None], float("nan"))


def _fp8_experts(tokens, experts, top_k, shared, seed):
    from conformance.cases.moe import _fused_case

    make = _fused_case(tokens, 256, 128, experts, top_k, shared=shared)
    args, _, _ = make(torch.float8_e4m3fn, DEVICE, torch.Generator().manual_seed(seed))
    return list(args)


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_deep_gemm_composition_is_the_op_with_deep_gemm_replaced_by_the_grouped_gemm_references(layout, monkeypatch):
    """DeepGEMM's composed rows (backends/deep_gemm/moe.py) with DeepGEMM's two GEMMs replaced by the gemm
    family's references of the same ops: the rest (the layout from moe.align, the gathers, the masked
    layout's folding of a repeated expert, out-of-range ids, shared experts, the combine) must give the op's
    result. Catches a slot combined with another slot's row, a repeated expert counted once or thrice, an
    out-of-range id reading an expert, a padding row added in; on the CPU, where DeepGEMM cannot run."""
    from rapid_llm.kernels.backends.deep_gemm import moe as composed
    from rapid_llm.kernels.ops.activation.reference import silu_and_mul
    from rapid_llm.kernels.ops.moe.reference import fused_moe

    monkeypatch.setattr(composed, "m_grouped_contiguous", _contiguous_with_nan_padding)
    monkeypatch.setattr(composed, "m_grouped_masked", _masked_with_nan_padding)
    # the interpreter's bf16 stores truncate (INTERPRETER_BF16 in test_parity.py): the activation's torch row
    monkeypatch.setattr(kernels, "silu_and_mul", silu_and_mul)
    target = getattr(composed, f"fused_moe_{layout}")
    x, w13, w2, weights, ids, activation, w13_scale, w2_scale, shared, _ = _fp8_experts(9, 8, 3, 1, seed=5)
    ids[0, 1] = ids[0, 0]  # a repeated expert
    ids[1, 2] = ids[1, 0] = ids[1, 1]  # named three times
    ids[2, 0], ids[3, 2] = 8, -1  # out of range (unchecked: they add nothing)
    got = target(x, w13, w2, weights, ids, activation, w13_scale, w2_scale, shared)
    dropped = weights.clone()
    dropped[2, 0] = dropped[3, 2] = 0.0
    want = fused_moe(x, w13, w2, dropped, ids.clamp(0, 7), activation, w13_scale, w2_scale, shared)
    # fp8's tolerance (conformance/cases/moe.py); y is rounded to bf16 before the sum here (the contract allows it)
    torch.testing.assert_close(got.float(), want.float(), atol=2.0**-6, rtol=2.0**-6)


def test_deep_gemm_masked_composition_with_every_slot_left_out(monkeypatch):
    """Every routed id out of range and no shared expert: nothing is computed and out is zero (catches a
    left-out slot reading a buffer row nobody wrote)."""
    from rapid_llm.kernels.backends.deep_gemm import moe as composed

    monkeypatch.setattr(composed, "m_grouped_masked", _masked_with_nan_padding)
    x, w13, w2, weights, ids, activation, w13_scale, w2_scale, _, _ = _fp8_experts(3, 4, 2, 0, seed=6)
    ids.fill_(-1)
    got = composed.fused_moe_masked(x, w13, w2, weights, ids, activation, w13_scale, w2_scale, 0)
    assert torch.equal(got, torch.zeros_like(got))


def test_routing_and_align_references_read_no_device_value_on_the_host():
    """The contracts call moe.topk_routing and moe.align CUDA-graph safe (their rows are graph_safe): every output
    size follows from the shapes and no value is read on the host. On the meta device a host read (.item(),
    .tolist(), a data-dependent size) raises, so the references running there show it. Catches a reference
    that syncs, e.g. sizing the sorted ids by the padded count read back from the device."""
    from rapid_llm.kernels.ops.moe import reference
    from rapid_llm.kernels.ops.moe.checks import local_range

    ids = torch.empty(64, 8, dtype=torch.int32, device="meta")
    sorted_ids, block_experts, padded_count, counts = reference.align(ids, 256, 16, 64, 128)
    capacity = reference.align_capacity(512, local_range(256, 64, 128), 16)
    assert (sorted_ids.shape, block_experts.shape, padded_count.shape, counts.shape) == (
        (capacity,),
        (capacity // 16,),
        (1,),
        (128,),
    )
    logits, bias = torch.empty(64, 256, device="meta"), torch.empty(256, device="meta")
    weights, chosen = reference.topk_routing(logits, 8, True, "sigmoid", bias, 8, 4, 2.5)
    assert weights.shape == chosen.shape == (64, 8) and chosen.dtype == torch.int32
