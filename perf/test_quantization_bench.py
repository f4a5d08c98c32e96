"""GPU benchmarks of the fp8 activation quantization ops: every row of the table.

    test_per_token_group_fp8[native/per_token_group_fp8-tokens=32768-hidden=7168-bf16]
    test_per_token_fp8[torch/per_token_fp8-tokens=64-hidden=4096-bf16]

x: [tokens, hidden] bf16 with hidden from the model presets (Llama-3-8B 4096, DeepSeek-V3 7168: the
input of a block-scaled fp8 GEMM), groups of 128 with column-major TMA-aligned scales (DeepGEMM's
activation format) and per-token scales. Bytes = x read once + q (one byte per element) and the
fp32 scales written once. Each arm is checked against the reference row before timing: q bitwise
and scales exactly (the contract's arithmetic is exact to reproduce). The reference row is the torch
eager peer; FlashInfer has no kernel with this contract. Skipped without CUDA: "needs a CUDA device";
the native rows need sm89+ (explain() says so in the skip).
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

GROUP_OP = "quantization.per_token_group_fp8"
TOKEN_OP = "quantization.per_token_fp8"
GROUP_SIZE = 128
CASES = [(tokens, hidden) for hidden in (4096, 7168) for tokens in (1, 16, 64, 512, 4096, 16384, 32768)]


def _inputs(tokens, hidden):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(tokens * 3 + hidden)
    return (torch.randn((tokens, hidden), device="cuda", generator=generator) * 4).bfloat16()


def _check_and_time(benchmark, gpu_session, op, arm, fn, graph_safe, x, args, groups_per_token):
    import torch

    tokens, hidden = x.shape
    reference_name, reference = reference_row(op)
    want_q, want_scale = reference(x, *args)
    got_q, got_scale = fn(x, *args)
    torch.cuda.synchronize()
    if arm != reference_name:
        assert torch.equal(got_q.view(torch.uint8), want_q.view(torch.uint8)), f"{arm}: q differs from {reference_name}"
        assert got_scale.stride() == want_scale.stride() and torch.equal(got_scale, want_scale), (
            f"{arm}: scales differ from {reference_name}")
    del got_q, got_scale, want_q, want_scale
    bytes_moved = x.numel() * (2 + 1) + tokens * groups_per_token * 4
    case = f"tokens={tokens}-hidden={hidden}-bf16"
    benchmark.extra_info.update(
        op=op, row=arm, case=case, tokens=tokens, hidden=hidden, dtype="bf16", shape=[tokens, hidden],
        phase="decode" if tokens <= 64 else "prefill", correctness=f"vs {reference_name}: bitwise",
        bytes_formula="x read (2 B/element) + q written (1 B/element) + fp32 scales written",
    )
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(x, *args), bytes_moved=bytes_moved,
                           graph_safe=graph_safe)


@pytest.mark.parametrize("arm,tokens,hidden", [
    pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
    for arm in table_arms(GROUP_OP) for tokens, hidden in CASES
])
def test_per_token_group_fp8(benchmark, gpu_session, arm, tokens, hidden):
    fn, row = load_row(GROUP_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden},
                       layout=frozenset({"x:rows"}))
    _check_and_time(benchmark, gpu_session, GROUP_OP, arm, fn, row.graph_safe, _inputs(tokens, hidden),
                    (GROUP_SIZE, True), hidden // GROUP_SIZE)


@pytest.mark.parametrize("arm,tokens,hidden", [
    pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
    for arm in table_arms(TOKEN_OP) for tokens, hidden in CASES
])
def test_per_token_fp8(benchmark, gpu_session, arm, tokens, hidden):
    fn, row = load_row(TOKEN_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden},
                       layout=frozenset({"x:rows"}))
    _check_and_time(benchmark, gpu_session, TOKEN_OP, arm, fn, row.graph_safe, _inputs(tokens, hidden), (), 1)
