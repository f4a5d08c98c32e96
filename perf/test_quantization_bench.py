"""GPU benchmarks of the fp8 activation quantization ops: every row of the table.

    test_per_token_group_fp8[native/per_token_group_fp8-tokens=32768-hidden=7168-bf16]
    test_per_token_fp8[torch/per_token_fp8-tokens=64-hidden=4096-bf16]

x: [tokens, hidden] bf16 with hidden from the model presets (Llama-3-8B 4096, DeepSeek-V3 7168: the
input of a block-scaled fp8 GEMM), groups of 128 with column-major TMA-aligned scales (DeepGEMM's
activation format) and per-token scales. Bytes = x read once + q (one byte per element) and the
fp32 scales written once. Each arm is checked against the reference row before timing, called
through its PlannedOp, at conformance's tolerances (q: one e4m3 step; scales: one fp32 ulp) with the
scales' strides equal; whether q and the scales are bitwise equal (the contract's arithmetic is
exact to reproduce) is recorded as `bitwise_equal`. The reference row is the torch
eager peer; FlashInfer has no kernel with this contract. Skipped without CUDA: "needs a CUDA device";
the native rows need sm89+ (explain() says so in the skip).
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

GROUP_OP = "quantization.per_token_group_fp8"
TOKEN_OP = "quantization.per_token_fp8"
GROUP_SIZE = 128
CASES = [(tokens, hidden) for hidden in (4096, 7168) for tokens in (1, 16, 64, 512, 4096, 16384, 32768)]


def _inputs(tokens, hidden):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(tokens * 3 + hidden)
    return (torch.randn((tokens, hidden), device="cuda", generator=generator) * 4).bfloat16()


def _check_and_time(benchmark, gpu_session, op, arm, planned, x, args, groups_per_token):
    import torch

    tokens, hidden = x.shape
    case = f"tokens={tokens}-hidden={hidden}-bf16"
    reference_name, reference = reference_row(op)
    want_q, want_scale = reference(x, *args)
    got_q, got_scale = planned(x, *args)
    torch.cuda.synchronize()
    # The scales' layout is part of the contract (column-major TMA-aligned for the group op).
    assert got_scale.stride() == want_scale.stride(), (
        f"{arm}: scale strides {got_scale.stride()}, {reference_name} {want_scale.stride()}"
    )
    check = check_against_reference(
        op, "bf16", (got_q, got_scale), (want_q, want_scale), arm=arm, reference=reference_name, case=case
    )
    del got_q, got_scale, want_q, want_scale
    bytes_moved = x.numel() * (2 + 1) + tokens * groups_per_token * 4
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        tokens=tokens,
        hidden=hidden,
        dtype="bf16",
        shape=[tokens, hidden],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="x read (2 B/element) + q written (1 B/element) + fp32 scales written",
    )
    fn = planned.impl
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(x, *args), bytes_moved=bytes_moved, graph_safe=planned.row.graph_safe
    )


@pytest.mark.parametrize(
    "arm,tokens,hidden",
    [
        pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
        for arm in table_arms(GROUP_OP)
        for tokens, hidden in CASES
    ],
)
def test_per_token_group_fp8(benchmark, gpu_session, arm, tokens, hidden):
    planned, _ = load_row(
        GROUP_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden}, layout=frozenset({"x:rows"})
    )
    _check_and_time(
        benchmark,
        gpu_session,
        GROUP_OP,
        arm,
        planned,
        _inputs(tokens, hidden),
        (GROUP_SIZE, True),
        hidden // GROUP_SIZE,
    )


@pytest.mark.parametrize(
    "arm,tokens,hidden",
    [
        pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
        for arm in table_arms(TOKEN_OP)
        for tokens, hidden in CASES
    ],
)
def test_per_token_fp8(benchmark, gpu_session, arm, tokens, hidden):
    planned, _ = load_row(
        TOKEN_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden}, layout=frozenset({"x:rows"})
    )
    _check_and_time(benchmark, gpu_session, TOKEN_OP, arm, planned, _inputs(tokens, hidden), (), 1)
