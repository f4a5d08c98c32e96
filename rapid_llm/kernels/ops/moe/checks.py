"""Argument checks of the moe family: each op's one validation site (see ops/checks.py).

Layout tags (moe.fused_moe only): experts:tma and expert_scales:dense, what DeepGEMM's composed row needs
(the gemm family's tests of a TMA operand and of dense scales); the native rows take any strides.
Expert-id bounds are value checks (ops/checks.py: values_checked), free on the CPU, a device sync on CUDA.
"""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_bool,
    expect_disjoint,
    expect_float_tensor,
    expect_int,
    expect_real_number,
    expect_same_device,
    expect_tensor,
    tag_table,
    values_checked,
)
from ..dtypes import FLOAT_TORCH_DTYPES
from ..gemm.checks import dense_scales, tma_operand
from . import ALIGN, FUSED_MOE, SCALE_BLOCK, TOPK_ROUTING

_ID_DTYPES = (torch.int32, torch.int64)
_NO_TAGS = frozenset()
_EXPERT_TAGS = tag_table("experts:tma", "expert_scales:dense")
SCORINGS = ("softmax", "sigmoid")
ACTIVATIONS = ("silu",)


def _expect_ids(op: str, ids) -> None:
    expect_tensor(op, "topk_ids", ids)
    if ids.dtype not in _ID_DTYPES or ids.dim() != 2 or ids.shape[1] == 0:
        raise OpInputError(
            op, "topk_ids", "an int32/int64 tensor [T, top_k] with top_k >= 1", f"{ids.dtype} {list(ids.shape)}"
        )


def _expect_ids_below(op: str, ids, limit: int) -> None:
    """Every id in [0, limit) or -1, an unused slot (a host read: the caller decides whether values are
    checked)."""
    bad = (ids < -1) | (ids >= limit)
    if bool(bad.any()):
        token, column = (int(i) for i in bad.nonzero()[0])
        raise OpInputError(
            op, "topk_ids", f"expert ids in [0, {limit}) or -1", f"{int(ids[token, column])} at [{token}, {column}]"
        )


def check_topk_routing(
    logits,
    top_k,
    renormalize=True,
    scoring="softmax",
    correction_bias=None,
    num_expert_groups=1,
    topk_groups=1,
    routed_scaling_factor=1.0,
):
    """topk_routing's check: (logits, no tags, (num_tokens, num_experts, top_k))."""
    op = TOPK_ROUTING
    expect_float_tensor(op, "logits", logits)
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise OpInputError(op, "logits", "shape [T, E] with E >= 1", f"shape {list(logits.shape)}")
    experts = logits.shape[1]
    expect_bool(op, "renormalize", renormalize)
    if scoring not in SCORINGS:
        raise OpInputError(op, "scoring", f"one of {SCORINGS}", repr(scoring))
    expect_int(op, "num_expert_groups", num_expert_groups, minimum=1)
    if experts % num_expert_groups:
        raise OpInputError(op, "num_expert_groups", f"a divisor of E = {experts}", repr(num_expert_groups))
    expect_int(op, "topk_groups", topk_groups, minimum=1)
    if topk_groups > num_expert_groups:
        raise OpInputError(
            op, "topk_groups", f"an int in [1, num_expert_groups = {num_expert_groups}]", repr(topk_groups)
        )
    per_group = experts // num_expert_groups
    if correction_bias is not None:
        expect_float_tensor(op, "correction_bias", correction_bias)
        if tuple(correction_bias.shape) != (experts,):
            raise OpInputError(
                op,
                "correction_bias",
                f"None or shape [{experts}] (one per expert)",
                f"shape {list(correction_bias.shape)}",
            )
        expect_same_device(op, "correction_bias", correction_bias, "logits", logits)
        if num_expert_groups > 1 and per_group < 2:
            raise OpInputError(
                op,
                "num_expert_groups",
                "groups of at least 2 experts (a biased group scores its two largest choices)",
                f"{num_expert_groups} groups of {per_group}",
            )
    kept = topk_groups * per_group
    expect_int(op, "top_k", top_k, minimum=1)
    if top_k > kept:
        raise OpInputError(op, "top_k", f"an int in [1, {kept}] (the experts of the kept groups)", repr(top_k))
    expect_real_number(op, "routed_scaling_factor", routed_scaling_factor)
    return logits, _NO_TAGS, (("num_tokens", logits.shape[0]), ("num_experts", experts), ("top_k", top_k))


def local_range(num_experts: int, expert_start: int, num_local_experts) -> int:
    """num_local_experts as the contract resolves it: E - expert_start when None."""
    return num_experts - expert_start if num_local_experts is None else num_local_experts


def check_align(topk_ids, num_experts, block_size, expert_start=0, num_local_experts=None):
    """align's check: (topk_ids, no tags, (num_tokens, top_k, num_experts, block_size))."""
    op = ALIGN
    _expect_ids(op, topk_ids)
    expect_int(op, "num_experts", num_experts, minimum=1)
    expect_int(op, "block_size", block_size, minimum=1)
    expect_int(op, "expert_start", expert_start, minimum=0)
    if expert_start >= num_experts:
        raise OpInputError(op, "expert_start", f"an int in [0, num_experts = {num_experts})", repr(expert_start))
    if num_local_experts is not None:
        expect_int(op, "num_local_experts", num_local_experts, minimum=1)
        if expert_start + num_local_experts > num_experts:
            raise OpInputError(
                op,
                "num_local_experts",
                f"None or an int in [1, num_experts - expert_start = {num_experts - expert_start}]",
                repr(num_local_experts),
            )
    if topk_ids.numel() and values_checked(topk_ids):
        _expect_ids_below(op, topk_ids, num_experts)
    tokens, top_k = topk_ids.shape
    dims = (("num_tokens", tokens), ("top_k", top_k), ("num_experts", num_experts), ("block_size", block_size))
    return topk_ids, _NO_TAGS, dims


def _check_fp8_scale(op, name, scale, weight, rows: int, columns: int) -> None:
    expect_tensor(op, name, scale)
    expected = (weight.shape[0], -(-rows // SCALE_BLOCK), columns // SCALE_BLOCK)
    if scale.dtype != torch.float32 or tuple(scale.shape) != expected:
        raise OpInputError(
            op,
            name,
            f"float32 {list(expected)} (one scale per 128 x 128 block of each expert's weight)",
            f"{scale.dtype} {list(scale.shape)}",
        )
    expect_same_device(op, name, scale, "x", weight)


def check_fused_moe(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """fused_moe's check: (w13: the op's dtype is the weights', no tags, (num_tokens, hidden, intermediate,
    num_experts, top_k)); ids checked when values_checked(topk_ids)."""
    op = FUSED_MOE
    expect_float_tensor(op, "x", x)
    if x.dim() != 2 or x.shape[1] == 0:
        raise OpInputError(op, "x", "shape [T, H] with H >= 1", f"shape {list(x.shape)}")
    tokens, hidden = x.shape
    expect_int(op, "num_shared_experts", num_shared_experts, minimum=0)
    expect_tensor(op, "w13", w13)
    if w13.dim() != 3 or w13.shape[2] != hidden or w13.shape[1] == 0 or w13.shape[1] % 2:
        raise OpInputError(
            op, "w13", f"shape [experts, 2I, H = {hidden}] with I >= 1 (gate | up rows)", f"shape {list(w13.shape)}"
        )
    total, intermediate = w13.shape[0], w13.shape[1] // 2
    experts = total - num_shared_experts
    if experts < 1:
        raise OpInputError(
            op,
            "w13",
            f"more experts than num_shared_experts = {num_shared_experts} (at least one routed expert)",
            f"shape {list(w13.shape)}",
        )
    expect_same_device(op, "w13", w13, "x", x)
    expect_tensor(op, "w2", w2)
    if tuple(w2.shape) != (total, hidden, intermediate):
        raise OpInputError(
            op, "w2", f"shape [{total}, H = {hidden}, I = {intermediate}] (w13's experts)", f"shape {list(w2.shape)}"
        )
    expect_same_device(op, "w2", w2, "x", x)
    fp8 = w13.dtype == torch.float8_e4m3fn
    if fp8:
        if x.dtype != torch.bfloat16:
            raise OpInputError(op, "x", "dtype torch.bfloat16 (fp8 weights take bf16 activations)", str(x.dtype))
        if hidden % SCALE_BLOCK or intermediate % SCALE_BLOCK:
            raise OpInputError(
                op,
                "w13",
                f"H and I multiples of {SCALE_BLOCK} (the fp8 scale block)",
                f"H = {hidden}, I = {intermediate}",
            )
        if w2.dtype != w13.dtype:
            raise OpInputError(op, "w2", f"w13's dtype {w13.dtype}", str(w2.dtype))
        _check_fp8_scale(op, "w13_scale", w13_scale, w13, 2 * intermediate, hidden)
        _check_fp8_scale(op, "w2_scale", w2_scale, w2, hidden, intermediate)
    else:
        if w13.dtype != x.dtype:
            raise OpInputError(op, "w13", f"x's dtype {x.dtype} or torch.float8_e4m3fn", str(w13.dtype))
        if w2.dtype != x.dtype:
            raise OpInputError(op, "w2", f"x's dtype {x.dtype}", str(w2.dtype))
        for name, scale in (("w13_scale", w13_scale), ("w2_scale", w2_scale)):
            if scale is not None:
                raise OpInputError(op, name, "None (float weights carry no scales)", type(scale).__name__)
    _expect_ids(op, topk_ids)
    top_k = topk_ids.shape[1]
    if topk_ids.shape[0] != tokens:
        raise OpInputError(op, "topk_ids", f"shape [T = {tokens}, top_k]", f"shape {list(topk_ids.shape)}")
    expect_same_device(op, "topk_ids", topk_ids, "x", x)
    expect_tensor(op, "topk_weights", topk_weights)
    if topk_weights.dtype not in FLOAT_TORCH_DTYPES or tuple(topk_weights.shape) != (tokens, top_k):
        raise OpInputError(
            op,
            "topk_weights",
            f"a float tensor of topk_ids' shape {[tokens, top_k]}",
            f"{topk_weights.dtype} {list(topk_weights.shape)}",
        )
    expect_same_device(op, "topk_weights", topk_weights, "x", x)
    if activation not in ACTIVATIONS:
        raise OpInputError(op, "activation", f"one of {ACTIVATIONS}", repr(activation))
    if out is not None:
        expect_tensor(op, "out", out)
        if tuple(out.shape) != (tokens, hidden) or out.dtype != x.dtype:
            raise OpInputError(op, "out", f"None or {x.dtype} [{tokens}, {hidden}]", f"{out.dtype} {list(out.shape)}")
        expect_same_device(op, "out", out, "x", x)
        inputs = [("x", x), ("w13", w13), ("w2", w2), ("topk_weights", topk_weights), ("topk_ids", topk_ids)]
        inputs += [
            (name, scale) for name, scale in (("w13_scale", w13_scale), ("w2_scale", w2_scale)) if scale is not None
        ]
        for name, tensor in inputs:
            expect_disjoint(op, "out", out, name, tensor)
    if topk_ids.numel() and values_checked(topk_ids):
        _expect_ids_below(op, topk_ids, experts)
    dims = (
        ("num_tokens", tokens),
        ("hidden", hidden),
        ("intermediate", intermediate),
        ("num_experts", experts),
        ("top_k", top_k),
    )
    scales_dense = fp8 and dense_scales(w13_scale) and dense_scales(w2_scale)
    return w13, _EXPERT_TAGS[(tma_operand(w13) and tma_operand(w2), scales_dense)], dims
