"""PyTorch references of the moe family (arguments checked by moe/checks.py; contracts in moe/__init__.py).

topk_routing: fp32 scores and choices, the unkept groups' experts and NaNs ranked last by a stable
descending sort (ties to the lower index, as the contract states), then the first top_k.
align: counts by scatter_add, each slot's place from a stable sort of the slots by local expert; no host
read of a device value (CUDA-graph safe).
fused_moe: a loop over the experts that have slots (their slots found on the host), each expert's rows
through gate_up, silu_and_mul and down with fp32 products, added into an fp32 [T, H] sum with the
routing weights, rounded once. fp8 weights: x quantized once per 1 x 128 group (quantizing is per token,
so quantizing the selected rows is quantizing x and selecting), then the gemm family's fp8 reference.
"""

from __future__ import annotations

import torch

from ..activation.reference import silu_and_mul
from ..gemm.reference import fp8_block_mm
from ..quantization.reference import per_token_group_fp8
from . import SCALE_BLOCK
from .checks import local_range


def _choices(logits32, scoring: str, correction_bias):
    """(scores, choices) [T, E] fp32: choices rank the experts (logits without a bias), NaN as -inf."""
    scores = torch.softmax(logits32, dim=-1) if scoring == "softmax" else torch.sigmoid(logits32)
    choices = logits32 if correction_bias is None else scores + correction_bias.float()
    return scores, torch.nan_to_num(choices, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))


def _kept_experts(choices, num_expert_groups: int, topk_groups: int, biased: bool):
    """[T, E] bool: the experts of each token's kept groups."""
    tokens, experts = choices.shape
    if num_expert_groups == 1:
        return torch.ones_like(choices, dtype=torch.bool)
    grouped = choices.view(tokens, num_expert_groups, experts // num_expert_groups)
    if biased:
        scores = torch.sort(grouped, dim=-1, descending=True).values[..., :2].sum(dim=-1)
    else:
        scores = grouped.amax(dim=-1)
    kept_groups = torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :topk_groups]
    kept = torch.zeros((tokens, num_expert_groups), dtype=torch.bool, device=choices.device)
    kept.scatter_(1, kept_groups, True)
    return kept.repeat_interleave(experts // num_expert_groups, dim=1)


def topk_routing(
    logits,
    top_k,
    renormalize=True,
    scoring="softmax",
    correction_bias=None,
    num_expert_groups=1,
    topk_groups=1,
    routed_scaling_factor=1.0,
):
    scores, choices = _choices(logits.float(), scoring, correction_bias)
    kept = _kept_experts(choices, num_expert_groups, topk_groups, correction_bias is not None)
    # Two stable sorts make one lexicographic order: kept first, then by descending choice, then by index.
    by_choice = torch.sort(choices, dim=-1, descending=True, stable=True).indices
    by_kept = torch.sort(kept.gather(1, by_choice).to(torch.int8), dim=-1, descending=True, stable=True).indices
    ids = by_choice.gather(1, by_kept)[:, :top_k]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * routed_scaling_factor
    return weights.contiguous(), ids.to(torch.int32).contiguous()


def align_capacity(slots: int, local_experts: int, block_size: int) -> int:
    """sorted_ids' length: the least multiple of block_size >= slots + min(slots, L) * (block_size - 1)."""
    bound = slots + min(slots, local_experts) * (block_size - 1)
    return -(-bound // block_size) * block_size


def align(topk_ids, num_experts, block_size, expert_start=0, num_local_experts=None):
    local_experts = local_range(num_experts, expert_start, num_local_experts)
    device = topk_ids.device
    slots = topk_ids.numel()
    capacity = align_capacity(slots, local_experts, block_size)
    local = topk_ids.reshape(-1).long() - expert_start
    # other experts' slots (and ids outside [0, E)) take key L: counted in a bin that is dropped
    keys = torch.where((local >= 0) & (local < local_experts), local, local_experts)
    counts = torch.zeros(local_experts + 1, dtype=torch.int64, device=device)
    counts.scatter_add_(0, keys, torch.ones_like(keys))
    counts = counts[:local_experts]
    padded = (counts + block_size - 1) // block_size * block_size
    ends = torch.cumsum(padded, dim=0)
    starts = torch.cat([ends.new_zeros(1), ends])  # L + 1 entries: key L's "start" is the padded total
    firsts = torch.cat([counts.new_zeros(1), torch.cumsum(counts, dim=0)])
    order = torch.argsort(keys, stable=True)  # slots by local expert, ascending slot within one
    sorted_keys = keys[order]
    rank = torch.arange(slots, device=device) - firsts[sorted_keys]
    # a left-out slot goes to the spare last entry, dropped below
    destination = torch.where(sorted_keys < local_experts, starts[sorted_keys] + rank, capacity)
    sorted_ids = torch.full((capacity + 1,), slots, dtype=torch.int32, device=device)
    sorted_ids.scatter_(0, destination, order.to(torch.int32))
    total = ends[-1] if local_experts else ends.new_zeros(())
    block_starts = torch.arange(0, capacity, block_size, device=device)
    block_experts = torch.searchsorted(ends, block_starts, right=True)
    block_experts = torch.where(block_starts < total, block_experts, -1).to(torch.int32)
    return sorted_ids[:capacity], block_experts, total.reshape(1).to(torch.int32), counts.to(torch.int32)


def expert_float(rows, w13, w2, expert: int):
    """One float expert on its rows: y [rows, H] fp32 (h and a rounded to x's dtype, as the contract says)."""
    h = (rows.float() @ w13[expert].float().T).to(rows.dtype)
    return silu_and_mul(h).float() @ w2[expert].float().T


def expert_slots(topk_ids, topk_weights, num_experts, num_shared_experts):
    """Each expert some slot names, with its slots: yields (expert, token of each slot [S] int64, weight of
    each slot [S] fp32). Routed slots outside [0, E) add nothing; the S shared experts are every token's,
    weight 1. num_experts: E + S (w13's first dimension). The experts are found on the host."""
    tokens = topk_ids.shape[0]
    routed = num_experts - num_shared_experts
    ids = topk_ids.long()
    ids = torch.where((ids >= 0) & (ids < routed), ids, -1)
    weights = topk_weights.float()
    if num_shared_experts:
        shared = torch.arange(routed, num_experts, device=ids.device)
        ids = torch.cat([ids, shared.expand(tokens, num_shared_experts)], dim=1)
        weights = torch.cat([weights, weights.new_ones(tokens, num_shared_experts)], dim=1)
    slot_tokens = torch.arange(tokens, device=ids.device).repeat_interleave(ids.shape[1])
    flat_ids, flat_weights = ids.reshape(-1), weights.reshape(-1)
    for expert in torch.unique(flat_ids[flat_ids >= 0]).tolist():
        selected = (flat_ids == expert).nonzero().squeeze(1)
        yield expert, slot_tokens[selected], flat_weights[selected]


def _expert_fp8(rows_q, rows_scale, w13, w2, w13_scale, w2_scale, expert: int):
    """One fp8 block-scaled expert on its quantized rows: y [rows, H] fp32."""
    h = fp8_block_mm(rows_q, rows_scale, w13[expert], w13_scale[expert])
    a_q, a_scale = per_token_group_fp8(silu_and_mul(h), SCALE_BLOCK)
    y = torch.empty((rows_q.shape[0], w2.shape[1]), dtype=torch.float32, device=rows_q.device)
    return fp8_block_mm(a_q, a_scale, w2[expert], w2_scale[expert], out=y)


def fused_moe(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    tokens, hidden = x.shape
    fp8 = w13.dtype == torch.float8_e4m3fn
    if fp8:
        x_q, x_scale = per_token_group_fp8(x, SCALE_BLOCK)
    total = torch.zeros((tokens, hidden), dtype=torch.float32, device=x.device)
    for expert, token_rows, slot_weights in expert_slots(topk_ids, topk_weights, w13.shape[0], num_shared_experts):
        if fp8:
            y = _expert_fp8(x_q[token_rows], x_scale[token_rows], w13, w2, w13_scale, w2_scale, expert)
        else:
            y = expert_float(x[token_rows], w13, w2, expert)
        total.index_add_(0, token_rows, y * slot_weights[:, None])
    result = total.to(x.dtype)
    if out is None:
        return result
    out.copy_(result)
    return out
