"""deep_gemm/fused_moe_contiguous and deep_gemm/fused_moe_masked: moe.fused_moe with fp8 block-scaled
weights composed of our ops and DeepGEMM's m-grouped GEMMs (tokenspeed-deepgemm 2.5, sm90), as engines drive
DeepGEMM: the contiguous layout in prefill, the masked one (a fixed buffer per expert) in decode.

The contiguous composition:

    xq, xs  = quantization.per_token_group_fp8(x, 128)
    layout  = moe.align(ids, E + S, 128)             the slots (shared experts as S more per token) by expert,
                                                     each expert's run padded to 128 rows
    a       = xq[token of each sorted entry]         (index_select; padding entries read token 0)
    m_indices[r] = the expert of row r's block, -1 on padding entries
    h       = m_grouped_fp8_gemm_nt_contiguous(a, w13)        [capacity, 2I] bf16
    act     = activation.silu_and_mul(h); aq, as = per_token_group_fp8(act, 128)
    y       = m_grouped_fp8_gemm_nt_contiguous(aq, w2)        [capacity, H] bf16
    out[t]  = sum_j weight_j * y[row of slot (t, j)] in fp32, slots in order, rounded once to bf16

A routed id outside [0, E) goes to expert 0 with weight 0 (it adds nothing, as the contract says).
Every step is a device op of a size fixed by the shapes (the layout's capacity bound, no host read of
a count): CUDA-graph capturable once DeepGEMM has compiled its kernels for these shapes (warm up before
capture). The padding rows cost DeepGEMM whole 128-row blocks: at decode sizes each touched expert
computes a 128-row tile for its few rows (its weights are still read once).

The masked composition (decode, T <= 128): the same slots, a token's repeated expert folded into one row,
moe.align with block 1 giving each slot's expert and rank there, x's rows scattered into a [G, 128, H]
buffer (masked_m = the counts), and only the used rows through SiLU-and-mul and the quantizer.
"""

from __future__ import annotations

import torch

from .gemm import m_grouped_contiguous, m_grouped_masked

#: DeepGEMM's sm90 row alignment of the contiguous layout (gemm.M_ALIGNMENT), and the masked layout's
#: per-expert capacity step.
ALIGNMENT = 128


def _slots(topk_weights, topk_ids, experts: int, shared: int, dropped: int | None):
    """(ids [T, top_k + S] int32, weights fp32): the routed slots, then the shared experts' (weight 1). A
    routed id outside [0, E) adds nothing: it takes the id `dropped` (None: expert 0) and weight 0."""
    tokens = topk_ids.shape[0]
    ids = topk_ids.to(torch.int32)
    inside = (ids >= 0) & (ids < experts)
    weights = torch.where(inside, topk_weights.float(), 0.0)
    ids = torch.where(inside, ids, 0 if dropped is None else dropped)
    if shared:
        shared_ids = torch.arange(experts, experts + shared, dtype=torch.int32, device=ids.device)
        ids = torch.cat([ids, shared_ids.expand(tokens, shared)], dim=1)
        weights = torch.cat([weights, weights.new_ones(tokens, shared)], dim=1)
    return ids, weights


def _combine(rows_in_order, order, valid, weights, out):
    """out[t] = sum_j weights[t, j] * the row of slot (t, j), in fp32, rounded once. rows_in_order [P, H]: the
    rows of the entries of `order` (slot ids; `valid` marks the real ones); a slot in no entry adds nothing."""
    tokens, per_token = weights.shape
    slots = tokens * per_token
    targets = torch.where(valid, order, slots).long()
    row_of_slot = torch.zeros(slots + 1, dtype=torch.long, device=out.device)
    row_of_slot.scatter_(0, targets, torch.arange(order.shape[0], device=out.device))
    present = torch.zeros(slots + 1, dtype=torch.bool, device=out.device).scatter_(0, targets, True)[:slots]
    # a slot in no entry reads no row (row 0 may be a buffer row nobody wrote)
    rows = torch.where(present[:, None], rows_in_order.index_select(0, row_of_slot[:slots]), 0.0)
    out.copy_((rows.float().view(tokens, per_token, -1) * weights[..., None]).sum(dim=1))
    return out


def fused_moe_contiguous(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked target (moe.fused_moe's check ran: fp8 weights, bf16 x, the layout tags DeepGEMM needs)."""
    from rapid_llm import kernels

    tokens = x.shape[0]
    out = torch.empty_like(x) if out is None else out
    if tokens == 0:
        return out
    shared = num_shared_experts
    experts = w13.shape[0] - shared
    ids, weights = _slots(topk_weights, topk_ids, experts, shared, None)
    slots = ids.numel()

    x_q, x_scale = kernels.per_token_group_fp8(x, ALIGNMENT)
    sorted_ids, block_experts, _, _ = kernels.align(ids, experts + shared, ALIGNMENT)
    capacity = sorted_ids.shape[0]
    valid = sorted_ids < slots
    token_rows = torch.where(valid, sorted_ids // ids.shape[1], 0).long()
    m_indices = torch.where(valid, block_experts.repeat_interleave(ALIGNMENT, output_size=capacity), -1)

    h = m_grouped_contiguous(
        x_q.index_select(0, token_rows), x_scale.index_select(0, token_rows), w13, w13_scale, m_indices
    )
    act_q, act_scale = kernels.per_token_group_fp8(kernels.silu_and_mul(h), ALIGNMENT)
    y = m_grouped_contiguous(act_q, act_scale, w2, w2_scale, m_indices)
    return _combine(y, sorted_ids, valid, weights, out)


def fused_moe_masked(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked target of deep_gemm/fused_moe_masked (the check ran; T <= 128 by the row's shape).

    DeepGEMM's masked layout: a fixed buffer of M_max = 128 rows per expert, masked_m[e] of them used. A
    token naming one expert twice would give that expert more rows than tokens: its later slots fold into
    the first (weights added; both slots' y are the same), so an expert never has more than T <= M_max
    rows. Only the used rows go through SiLU-and-mul and the quantizer (gathered, then scattered back)."""
    from rapid_llm import kernels

    tokens, hidden = x.shape
    out = torch.empty_like(x) if out is None else out
    if tokens == 0:
        return out
    shared = num_shared_experts
    groups = w13.shape[0]
    experts = groups - shared
    # left-out slots (ids outside [0, E), a token's repeated expert) take the id `groups`: past the local range
    ids, weights = _slots(topk_weights, topk_ids, experts, shared, groups)
    per_token = ids.shape[1]
    columns = torch.arange(per_token, device=x.device)
    same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, None, :] < groups)
    earlier = same & (columns[None, None, :] < columns[None, :, None])
    repeated = earlier.any(dim=2)
    merged = ((same & ~repeated[:, :, None]).float() @ weights[..., None]).squeeze(2)
    weights = torch.where(repeated, 0.0, merged)
    ids = torch.where(repeated, groups, ids)
    slots = ids.numel()

    sorted_ids, group_of, _, counts = kernels.align(ids, groups + 1, 1, 0, groups)
    valid = sorted_ids < slots
    group_of = torch.where(valid, group_of, groups).long()  # invalid entries write the spare group
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(sorted_ids.shape[0], device=x.device) - torch.cat([starts, starts.new_zeros(1)])[group_of]
    rank = torch.where(valid, rank, 0).long()
    token_rows = torch.where(valid, sorted_ids // per_token, 0).long()

    x_q, x_scale = kernels.per_token_group_fp8(x, ALIGNMENT)
    a = torch.empty((groups + 1, ALIGNMENT, hidden), dtype=x_q.dtype, device=x.device)
    a_scale = torch.ones((groups + 1, ALIGNMENT, hidden // ALIGNMENT), dtype=torch.float32, device=x.device)
    a[group_of, rank], a_scale[group_of, rank] = x_q[token_rows], x_scale[token_rows]
    expected_m = max(1, -(-slots // groups))
    h = m_grouped_masked(a[:groups], a_scale[:groups], w13, w13_scale, counts, expected_m)
    rows = h[group_of.clamp(max=groups - 1), rank]
    act_q, act_scale = kernels.per_token_group_fp8(kernels.silu_and_mul(rows), ALIGNMENT)
    intermediate = act_q.shape[1]
    a2 = torch.empty((groups + 1, ALIGNMENT, intermediate), dtype=act_q.dtype, device=x.device)
    a2_scale = torch.ones((groups + 1, ALIGNMENT, intermediate // ALIGNMENT), dtype=torch.float32, device=x.device)
    a2[group_of, rank], a2_scale[group_of, rank] = act_q, act_scale
    y = m_grouped_masked(a2[:groups], a2_scale[:groups], w2, w2_scale, counts, expected_m)
    return _combine(y[group_of.clamp(max=groups - 1), rank], sorted_ids, valid, weights, out)
