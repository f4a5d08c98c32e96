"""native/topk_routing: a router's top_k experts per token (moe.topk_routing), one Triton kernel.

Per token t, in fp32 (the contract in moe/__init__.py):

    score[e]  = softmax(logits[t])[e] = exp(l[e] - max l) / sum_e' exp(l[e'] - max l)   (softmax)
              = 1 / (1 + exp(-l[e]))                                                    (sigmoid)
    choice[e] = score[e] + correction_bias[e]   with a bias, else l[e];   NaN -> -inf
    group g   = experts g * E/G ... (g + 1) * E/G - 1;   group score = max choice (no bias) or the sum of the
                two largest choices (bias); the topk_groups best groups are kept
    ids       = the top_k kept experts by descending choice;   ties -> the lower index (groups and experts)
    weights   = score[ids] (/ their sum when renormalize) * routed_scaling_factor

logits: [T, E] fp32/fp16/bf16, any strides; correction_bias: None or [E] float, any stride. Returns
weights [T, top_k] fp32 and ids [T, top_k] int32, new contiguous tensors.

A program owns BLOCK_T tokens; a token's experts sit in registers as a [BLOCK_G, BLOCK_PG] tile (group,
expert within the group; one group when no group is dropped), so group scores are reductions over the
last axis. Each choice is packed with its index into one int64 key that orders as (choice, -index): one
max reduction per pass finds the largest choice and, among equal ones, the lowest index, and a taken key
drops to TAKEN, below every key, so a pass never picks it again (even when all that is left is -inf).
Groups are kept by topk_groups passes over group keys, ids by top_k passes over the kept experts' keys;
the weights read the chosen experts' logits again (top_k loads per token, from cache) rather than one
more reduction per pass. exp is exp2 with the rounding error of x * log2(e) carried as a first-order
correction: a few ulp at any |x|, where exp2(x * log2(e)) alone (what tl.exp is on NVIDIA GPUs) loses
|x| * 2**-24 relative.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv, next_power_of_2

ROW = "native/topk_routing"
#: Experts x tokens per program: about 8 per thread at 4 warps (keys are int64: 16 registers).
TILE_ELEMENTS = 1024
#: More tokens per program would leave few programs for the SMs at small E (one program per
#: 64 tokens is 128 programs at 8192 tokens).
MAX_BLOCK_TOKENS = 64

_LOG2E = tl.constexpr(1.4426950408889634)
#: log2(e) minus its fp32 rounding: the part of x * log2(e) that the fp32 constant leaves out.
_LOG2E_TAIL = tl.constexpr(1.92596298909109e-08)
_LN2 = tl.constexpr(0.6931471805599453)
#: A key's low 32 bits hold index ^ INDEX_FLIP = 2**31 - 1 - index: of equal choices, the lower index
#: has the larger key.
_INDEX_FLIP = tl.constexpr(2**31 - 1)
#: The key of a taken (or padding, or unkept) expert or group: below every packed key.
_TAKEN = tl.constexpr(-(2**63))
#: The ordered bits of a NaN group score: above +inf (0x7F800000), as torch's descending sort ranks NaN.
_ORDERED_NAN = tl.constexpr(0x7F800001)


def launch_config(block_experts: int, token_bucket: int) -> dict:
    """BLOCK_T tokens of block_experts (padded) experts: TILE_ELEMENTS per program, no more tokens than the call
    has (token_bucket: the token count's power of two, at most MAX_BLOCK_TOKENS); a warp per 256 elements, up to
    4 (a decode token's reductions stay within one warp)."""
    block_tokens = max(1, min(token_bucket, TILE_ELEMENTS // block_experts))
    return {"BLOCK_T": block_tokens, "num_warps": max(1, min(4, block_tokens * block_experts // 256))}


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
    """Unchecked kernel entry (moe.topk_routing's check ran) -> (weights fp32 [T, top_k], ids int32 [T, top_k])."""
    num_tokens, num_experts = logits.shape
    weights = torch.empty((num_tokens, top_k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((num_tokens, top_k), dtype=torch.int32, device=logits.device)
    if num_tokens == 0:
        return weights, ids
    # Keeping every group keeps every expert: the ungrouped kernel, over one group of E.
    grouped = topk_groups < num_expert_groups
    num_groups = num_expert_groups if grouped else 1
    per_group = num_experts // num_groups
    block_groups, block_per_group = next_power_of_2(num_groups), next_power_of_2(per_group)
    config = _POLICY.get((block_groups * block_per_group, min(next_power_of_2(num_tokens), MAX_BLOCK_TOKENS)))
    has_bias = correction_bias is not None
    _topk_routing_kernel[(cdiv(num_tokens, config["BLOCK_T"]),)](
        logits,
        correction_bias if has_bias else logits,
        weights,
        ids,
        num_tokens,
        logits.stride(0),
        logits.stride(1),
        correction_bias.stride(0) if has_bias else 0,
        num_groups,
        per_group,
        topk_groups,
        top_k,
        float(routed_scaling_factor),
        SOFTMAX=scoring == "softmax",
        HAS_BIAS=has_bias,
        GROUPED=grouped,
        RENORMALIZE=renormalize,
        BLOCK_G=block_groups,
        BLOCK_PG=block_per_group,
        BLOCK_K=next_power_of_2(top_k),
        **config,
    )
    return weights, ids


@triton.jit
def _exp(x):
    """exp(x) in fp32: 2**high * 2**low, high = fp32(x * log2 e), low its rounding error (fma: exact) plus the
    constant's; 2**low = 1 + low * ln 2 to first order (|low| < 2**-16). Outside |high| < 128, 2**high is inf,
    0 or below the normal range, left as it is (inf times the correction would be NaN)."""
    high = x * _LOG2E
    low = tl.fma(x, _LOG2E, -high) + x * _LOG2E_TAIL
    power = tl.exp2(high)
    return tl.where(tl.abs(high) < 128.0, tl.fma(power, low * _LN2, power), power)


@triton.jit
def _is_nan(value):
    return value != value  # noqa: PLR0124 - NaN is the one value unequal to itself


@triton.jit
def _ordered_bits(value):
    """int32 that orders as the fp32 value does (value without NaN); -0.0 as +0.0, so that they tie."""
    bits = tl.where(value == 0.0, 0.0, value).to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _pack(ordered, index):
    """int64 key: ordered bits high, index ^ INDEX_FLIP low; a larger key is a larger value, then a lower index."""
    return (ordered.to(tl.int64) << 32) + (index ^ _INDEX_FLIP).to(tl.int64)


@triton.jit
def _key_value(key):
    """The fp32 value packed in a key (the inverse of _ordered_bits)."""
    ordered = (key >> 32).to(tl.int32)
    return (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@cached
@triton.jit
def _topk_routing_kernel(
    logits_ptr,
    bias_ptr,
    weights_ptr,
    ids_ptr,
    num_tokens,
    logits_token_stride,
    logits_expert_stride,
    bias_stride,
    num_groups,
    per_group,
    topk_groups,
    top_k,
    routed_scaling_factor,
    SOFTMAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GROUPED: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_PG: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    token_mask = tokens < num_tokens
    # int64: token * stride exceeds 2**31 for large batches, expert * stride for transposed logits.
    token_rows = tokens.to(tl.int64) * logits_token_stride
    groups = tl.arange(0, BLOCK_G)[None, :, None]
    experts = groups * per_group + tl.arange(0, BLOCK_PG)[None, None, :]
    expert_mask = (groups < num_groups) & (tl.arange(0, BLOCK_PG)[None, None, :] < per_group)
    logits = tl.load(
        logits_ptr + token_rows[:, None, None] + experts.to(tl.int64) * logits_expert_stride,
        mask=token_mask[:, None, None] & expert_mask,
        other=float("-inf"),
    ).to(tl.float32)

    if SOFTMAX:
        row_max = tl.max(tl.max(logits, axis=2), axis=1)
        exps = tl.where(expert_mask, _exp(logits - row_max[:, None, None]), 0.0)
        row_sum = tl.sum(tl.sum(exps, axis=2), axis=1)
    if HAS_BIAS:
        if SOFTMAX:
            scores = exps / row_sum[:, None, None]
        else:
            scores = 1.0 / (1.0 + _exp(-logits))
        bias = tl.load(bias_ptr + experts.to(tl.int64) * bias_stride, mask=expert_mask, other=0.0)
        choices = scores + bias.to(tl.float32)
    else:
        # the logits order the experts as the scores do, free of the scores' rounding
        choices = logits
    choices = tl.where(_is_nan(choices), float("-inf"), choices)
    keys = tl.where(expert_mask, _pack(_ordered_bits(choices), experts), _TAKEN)

    if GROUPED:
        group_index = tl.arange(0, BLOCK_G)[None, :]
        largest = tl.max(keys, axis=2)
        if HAS_BIAS:
            # the two largest choices: the second largest key is another expert, even of an equal choice
            second = tl.max(tl.where(keys == largest[:, :, None], _TAKEN, keys), axis=2)
            group_scores = _key_value(largest) + _key_value(second)
            ordered = tl.where(_is_nan(group_scores), _ORDERED_NAN, _ordered_bits(group_scores))
        else:
            ordered = (largest >> 32).to(tl.int32)
        group_keys = tl.where(group_index < num_groups, _pack(ordered, group_index), _TAKEN)
        kept = tl.zeros((BLOCK_T, BLOCK_G), dtype=tl.int1)
        for _ in range(topk_groups):
            best = tl.max(group_keys, axis=1)
            chosen = group_keys == best[:, None]
            kept = kept | chosen
            group_keys = tl.where(chosen, _TAKEN, group_keys)
        keys = tl.where(kept[:, :, None], keys, _TAKEN)

    slots = tl.arange(0, BLOCK_K)[None, :]
    chosen_ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    for slot in range(top_k):
        best = tl.max(tl.max(keys, axis=2), axis=1)
        chosen_ids = tl.where(slots == slot, (best.to(tl.int32) ^ _INDEX_FLIP)[:, None], chosen_ids)
        keys = tl.where(keys == best[:, None, None], _TAKEN, keys)

    slot_mask = token_mask[:, None] & (slots < top_k)
    chosen_logits = tl.load(
        logits_ptr + token_rows[:, None] + chosen_ids.to(tl.int64) * logits_expert_stride, mask=slot_mask, other=0.0
    ).to(tl.float32)
    if SOFTMAX:
        chosen_scores = _exp(chosen_logits - row_max[:, None]) / row_sum[:, None]
    else:
        chosen_scores = 1.0 / (1.0 + _exp(-chosen_logits))
    chosen_scores = tl.where(slots < top_k, chosen_scores, 0.0)
    if RENORMALIZE:
        chosen_scores = chosen_scores / tl.sum(chosen_scores, axis=1)[:, None]
    chosen_scores = chosen_scores * routed_scaling_factor
    outputs = tokens.to(tl.int64)[:, None] * top_k + slots
    tl.store(weights_ptr + outputs, chosen_scores, mask=slot_mask)
    tl.store(ids_ptr + outputs, chosen_ids, mask=slot_mask)


_POLICY = LaunchPolicy(ROW, launch_config)
