"""GPU benchmarks of the moe family at the MoE presets' shapes: every row of moe.topk_routing, moe.align and
moe.fused_moe, beside the torch loop over experts an engine without a fused kernel runs.

    test_fused_moe[native/fused_moe-qwen3-30b-a3b-tokens=64-bf16]
    test_fused_moe[peer/torch.expert_loop-qwen3-30b-a3b-tokens=64-bf16]
    test_topk_routing[native/topk_routing-deepseek-v3-tokens=4096-fp32]
    test_align[native/align-qwen3-30b-a3b-tokens=4096-block=64]

Routing is random logits through the reference router (every expert about equally likely, as a trained
router's load balancing aims for). fused_moe's bytes are the weights of the experts the step's slots touch
(each read once: the floor a fused kernel can reach at decode sizes) plus x and out; its FLOPs are
2 * slots * 3 * H * I. Every arm is checked against the reference row before timing (conformance's
tolerance). On a machine without CUDA every case is skipped with "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

#: (preset, hidden, expert intermediate, experts, top_k, shared experts, dtype): the MoE presets' experts
#: (DeepSeek-V3: a layer's 256 routed experts and its shared one, fp8 with 128 x 128 block scales).
FUSED_PRESETS = (
    ("qwen3-30b-a3b", 2048, 768, 128, 8, 0, "bf16"),
    ("mixtral-8x7b", 4096, 14336, 8, 2, 0, "bf16"),
    ("deepseek-v3", 7168, 2048, 256, 8, 1, "fp8_e4m3"),
)
FUSED_TOKENS = (1, 16, 64, 512, 4096)
#: (preset, experts, top_k, scoring, groups, kept groups, scaling): the routers.
ROUTERS = (
    ("mixtral-8x7b", 8, 2, "softmax", 1, 1, 1.0),
    ("qwen3-30b-a3b", 128, 8, "softmax", 1, 1, 1.0),
    ("deepseek-v3", 256, 8, "sigmoid", 8, 4, 2.5),
)
ROUTING_TOKENS = (1, 64, 4096)
PEER_LOOP = "peer/torch.expert_loop"


def _routing(tokens, experts, top_k, seed):
    import torch

    from rapid_llm.kernels.ops.moe.reference import topk_routing

    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn((tokens, experts), device="cuda", generator=generator)
    return topk_routing(logits, top_k)


def _expert_loop(x, w13, w2, topk_weights, topk_ids):
    """What an engine without a fused kernel runs: per expert with slots, its rows through F.linear (bf16),
    SiLU-and-mul, F.linear, the weighted rows added back (one host sync per step for the slot lists)."""
    import torch
    import torch.nn.functional as F

    intermediate = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    flat = topk_ids.reshape(-1)
    tokens = torch.arange(x.shape[0], device=x.device).repeat_interleave(topk_ids.shape[1])
    for expert in torch.unique(flat).tolist():
        slots = (flat == expert).nonzero().squeeze(1)
        h = F.linear(x[tokens[slots]], w13[expert])
        y = F.linear(F.silu(h[:, :intermediate]) * h[:, intermediate:], w2[expert])
        out.index_add_(0, tokens[slots], y.float() * topk_weights.reshape(-1)[slots, None])
    return out.to(x.dtype)


def _fused_cases():
    for preset in FUSED_PRESETS:
        for tokens in FUSED_TOKENS:
            yield (*preset, tokens)


def _weights(experts, rows, columns, dtype, generator):
    """[experts, rows, columns] weights of unit-variance products, and fp8's block scales (or None), drawn one
    expert at a time (DeepSeek-V3's w13 in fp32 at once would be 30 GB)."""
    import torch

    stored = torch.bfloat16 if dtype == "bf16" else torch.float8_e4m3fn
    weights = torch.empty((experts, rows, columns), dtype=stored, device="cuda")
    for expert in range(experts):
        values = torch.randn((rows, columns), device="cuda", generator=generator)
        if dtype == "bf16":
            weights[expert] = values / columns**0.5
        else:
            weights[expert] = (values * 64).clamp(-448, 448)
    if dtype == "bf16":
        return weights, None
    blocks = (experts, -(-rows // 128), columns // 128)
    scales = (torch.rand(blocks, device="cuda", generator=generator) + 0.5) / (64 * columns**0.5)
    return weights, scales


#: The one preset's expert weights alive at a time, shared by every arm and token count of that preset:
#: pytest-benchmark keeps each case's timed closure (and the tensors it holds) to the end of the session.
_WEIGHTS = {}


def _preset_weights(preset, experts, hidden, intermediate, dtype):
    """(w13, w13_scale, w2, w2_scale) of the preset, drawn once (seeded by the preset's sizes)."""
    import torch

    key = (preset, dtype)
    if key not in _WEIGHTS:
        _WEIGHTS.clear()
        torch.cuda.empty_cache()
        generator = torch.Generator(device="cuda").manual_seed(experts + hidden)
        w13, w13_scale = _weights(experts, 2 * intermediate, hidden, dtype, generator)
        w2, w2_scale = _weights(experts, hidden, intermediate, dtype, generator)
        _WEIGHTS[key] = (w13, w13_scale, w2, w2_scale)
    return _WEIGHTS[key]


@pytest.mark.parametrize(
    "arm,preset,hidden,intermediate,experts,top_k,shared,dtype,tokens",
    [
        pytest.param(arm, *case, id=f"{arm}-{case[0]}-tokens={case[-1]}-{case[-2]}")
        for case in _fused_cases()  # a preset's cases together: its weights are drawn once (_preset_weights)
        for arm in table_arms("moe.fused_moe") + [PEER_LOOP]
        if not (arm == PEER_LOOP and case[-2] != "bf16")
    ],
)
def test_fused_moe(benchmark, gpu_session, arm, preset, hidden, intermediate, experts, top_k, shared, dtype, tokens):
    import torch

    from rapid_llm.kernels.ops.moe.checks import check_fused_moe

    op = "moe.fused_moe"
    generator = torch.Generator(device="cuda").manual_seed(tokens + experts)
    x = torch.randn((tokens, hidden), device="cuda", generator=generator).to(torch.bfloat16)
    w13, w13_scale, w2, w2_scale = _preset_weights(preset, experts + shared, hidden, intermediate, dtype)
    topk_weights, topk_ids = _routing(tokens, experts, top_k, seed=tokens)
    args = (x, w13, w2, topk_weights, topk_ids, "silu", w13_scale, w2_scale, shared, None)
    if arm == PEER_LOOP:
        fn, graph_safe = (lambda: _expert_loop(*args[:5])), False
        got = _expert_loop(*args[:5])
    else:
        shape = {"num_tokens": tokens, "hidden": hidden, "intermediate": intermediate}
        shape.update(num_experts=experts, top_k=top_k)
        checked, row = load_row(op, arm, dtype=dtype, shape=shape, layout=check_fused_moe(*args)[1])
        fn, graph_safe = (lambda: checked.impl(*args)), row.graph_safe
        got = checked(*args)
    reference_name, reference = reference_row(op)
    expected = reference(*args)
    case = f"{preset}-tokens={tokens}-{dtype}"
    if arm == PEER_LOOP:
        # the loop rounds h and the activation as bf16 torch ops do (the contract's rounding points), and y:
        # recorded, not held to the tolerance
        max_abs_diff = (got.float() - expected.float()).abs().max().item()
        correctness = f"vs {reference_name}: max_abs_diff={max_abs_diff:.3g} (not held to a tolerance: rounds y)"
    else:
        check = check_against_reference(
            op, dtype, got, expected, arm=arm, reference=reference_name, case=case, args=args
        )
        max_abs_diff, correctness = check["max_abs_diff"], describe_check(check, reference_name)
    touched = int(torch.unique(topk_ids).numel()) + shared
    weight_bytes = touched * 3 * hidden * intermediate * w13.element_size()
    bytes_moved = weight_bytes + 2 * tokens * hidden * x.element_size()
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        preset=preset,
        tokens=tokens,
        hidden=hidden,
        intermediate=intermediate,
        experts=experts,
        shared_experts=shared,
        top_k=top_k,
        experts_touched=touched,
        dtype=dtype,
        phase="decode" if tokens <= 64 else "prefill",
        correctness=correctness,
        max_abs_diff=max_abs_diff,
        bytes_formula="the touched experts' w13 and w2 read once + x read + out written",
    )
    flops = 2.0 * tokens * (top_k + shared) * 3 * hidden * intermediate
    gpu_timing.record_case(
        benchmark, gpu_session, fn, bytes_moved=bytes_moved, graph_safe=graph_safe, flops=flops, graph=tokens <= 64
    )


@pytest.mark.parametrize(
    "arm,router,tokens",
    [
        pytest.param(arm, router, tokens, id=f"{arm}-{router[0]}-tokens={tokens}-fp32")
        for arm in table_arms("moe.topk_routing")
        for router in ROUTERS
        for tokens in ROUTING_TOKENS
    ],
)
def test_topk_routing(benchmark, gpu_session, arm, router, tokens):
    import torch

    op, dtype = "moe.topk_routing", "fp32"
    preset, experts, top_k, scoring, groups, kept, scaling = router
    generator = torch.Generator(device="cuda").manual_seed(tokens + experts)
    logits = torch.randn((tokens, experts), device="cuda", generator=generator)
    bias = torch.rand((experts,), device="cuda", generator=generator) * 0.1 if scoring == "sigmoid" else None
    args = (logits, top_k, True, scoring, bias, groups, kept, scaling)
    shape = {"num_tokens": tokens, "num_experts": experts, "top_k": top_k}
    extra = {
        "tokens": tokens,
        "experts": experts,
        "top_k": top_k,
        "bytes_formula": "logits read + weights, ids written",
    }
    bytes_moved = tokens * experts * 4 + tokens * top_k * 8
    _check_and_time(
        benchmark, gpu_session, op, arm, dtype, shape, args, f"{preset}-tokens={tokens}", bytes_moved, extra
    )


def _check_and_time(benchmark, gpu_session, op, arm, dtype, shape, args, case, bytes_moved, extra):
    """A small op's case: its row checked against the reference row, then timed (graph replay included)."""
    checked, _ = load_row(op, arm, dtype=dtype, shape=shape, layout=())
    reference_name, reference = reference_row(op)
    check = check_against_reference(
        op, dtype, checked(*args), reference(*args), arm=arm, reference=reference_name, case=case
    )
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        dtype=dtype,
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        **extra,
    )
    gpu_timing.record_case(benchmark, gpu_session, lambda: checked.impl(*args), bytes_moved=bytes_moved, graph=True)


@pytest.mark.parametrize(
    "arm,preset,experts,top_k,tokens,block",
    [
        pytest.param(arm, preset, experts, top_k, tokens, block, id=f"{arm}-{preset}-tokens={tokens}-block={block}")
        for arm in table_arms("moe.align")
        for preset, experts, top_k in (("qwen3-30b-a3b", 128, 8), ("deepseek-v3", 256, 8), ("mixtral-8x7b", 8, 2))
        for tokens, block in ((1, 16), (64, 16), (4096, 64), (4096, 128))
    ],
)
def test_align(benchmark, gpu_session, arm, preset, experts, top_k, tokens, block):
    op, dtype = "moe.align", "int32"
    _, topk_ids = _routing(tokens, experts, top_k, seed=tokens + block)
    args = (topk_ids, experts, block, 0, None)
    shape = {"num_tokens": tokens, "top_k": top_k, "num_experts": experts, "block_size": block}
    extra = {"tokens": tokens, "experts": experts, "top_k": top_k, "block_size": block}
    extra["bytes_formula"] = "ids read + sorted ids written"
    case = f"{preset}-tokens={tokens}-block={block}"
    _check_and_time(benchmark, gpu_session, op, arm, dtype, shape, args, case, tokens * top_k * 8, extra)
