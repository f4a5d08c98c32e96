"""The moe family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import ALIGN, FUSED_MOE, TOPK_ROUTING

__all__ = ["topk_routing", "align", "fused_moe"]


def topk_routing(
    logits,
    top_k: int,
    renormalize: bool = True,
    scoring: str = "softmax",
    correction_bias=None,
    num_expert_groups: int = 1,
    topk_groups: int = 1,
    routed_scaling_factor: float = 1.0,
):
    """(weights [T, top_k] fp32, ids [T, top_k] int32): each token's top_k experts by softmax or sigmoid
    scores (DeepSeek-V3: correction bias, expert groups, scaling). Contract: moe.topk_routing."""
    return _call(
        TOPK_ROUTING,
        (logits, top_k, renormalize, scoring, correction_bias, num_expert_groups, topk_groups, routed_scaling_factor),
    )


def align(topk_ids, num_experts: int, block_size: int, expert_start: int = 0, num_local_experts=None):
    """(sorted_ids, block_experts, padded_count, counts): the token slots grouped by local expert, each
    expert's run padded to a multiple of block_size. Contract: moe.align."""
    return _call(ALIGN, (topk_ids, num_experts, block_size, expert_start, num_local_experts))


def fused_moe(
    x,
    w13,
    w2,
    topk_weights,
    topk_ids,
    activation: str = "silu",
    w13_scale=None,
    w2_scale=None,
    num_shared_experts: int = 0,
    out=None,
):
    """sum_j topk_weights[t, j] * expert(topk_ids[t, j], x[t]) (+ shared experts): SwiGLU experts, float or
    fp8 block-scaled weights [E, 2I, H] / [E, H, I]. Contract: moe.fused_moe."""
    return _call(
        FUSED_MOE, (x, w13, w2, topk_weights, topk_ids, activation, w13_scale, w2_scale, num_shared_experts, out)
    )
