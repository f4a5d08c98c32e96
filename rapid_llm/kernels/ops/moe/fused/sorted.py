"""native/fused_moe (float weights) and native/fused_moe_fp8_block (fp8 e4m3 weights, 128 x 128 block scales):
moe.fused_moe over the expert-sorted layout, four launches.

    1. native/align's kernel: the token slots grouped by expert in blocks of BLOCK_M rows (BLOCK_M from the
       tile policy; moe/align.py has the layout).
    2. gate_up: program (b, j) takes block b's rows (one expert e; an empty block returns at once) and
       columns j * BLOCK_N.. of the intermediate I: gate = x[rows] @ w13[e, cols].T and up = x[rows] @
       w13[e, I + cols].T (tl.dot, fp32), each rounded to x's dtype, then a = silu(gate) * up in fp32,
       rounded, stored at each row's slot: act [N + S * T, I] (row s = t * top_k + j for a routed slot,
       N + s' * T + t for shared expert s'; N = T * top_k).
    3. down: program (b, j): y = act[rows] @ w2[e, cols].T (fp32) times the slot's routing weight (1 for a
       shared expert), stored fp32 at the slots: y [N + S * T, H].
    4. combine: out[t] = sum_j y[t * top_k + j] over the slots with an id in [0, E), then the shared rows,
       in that order, in fp32, rounded once.

Shared experts take S * ceil(T / BLOCK_M) extra blocks after the sorted ones, every token in order. Slots
whose id is outside [0, E) are in no block (native/align leaves them out) and skipped by the combine. The
weights of a block's expert are read once per block: at decode sizes (a few rows per expert) the weight
stream is the whole cost, at prefill sizes the tiles are the GEMM's. x, w13, w2, topk_weights, topk_ids
and out take any strides; act and y are this call's contiguous buffers. fp32 operands multiply in full
fp32 (tl.dot's "ieee" precision), fp16 and bf16 on the tensor cores with fp32 accumulation. fp8 (BLOCK_K =
128): each K step's [BLOCK_M, 128] activation tile is quantized per row in registers with
per_token_group_fp8's arithmetic, multiplied with the e4m3 weight tile by tl.dot, and the fp32 product,
times the rows' group scales and the weight block's scale, is added to the accumulator (fp32 every 128 of
K, as the fp8 GEMM contract's accuracy term assumes).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from ...quantization.fp8_quant import quantize_group_tile
from .. import SCALE_BLOCK, align
from . import expert_rows, output, pipeline_knobs, scale_arguments

ROW = "native/fused_moe"
FP8_ROW = "native/fused_moe_fp8_block"
#: The kernels one call launches, in order (one row, one fixed pipeline: conformance's one-kernel-per-row
#: walk checks that the target reaches exactly these).
STAGES = (
    "rapid_llm.kernels.ops.moe.align:_align_kernel",
    f"{__name__}:_gate_up_kernel",
    f"{__name__}:_down_kernel",
    f"{__name__}:_combine_kernel",
)
#: Columns of out per combine program.
_COMBINE_BLOCK = 1024


def fused_moe(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked kernel entry of native/fused_moe (float weights; the check ran)."""
    return _pipeline(ROW, x, w13, w2, None, None, topk_weights, topk_ids, num_shared_experts, out)


def fused_moe_fp8_block(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked kernel entry of native/fused_moe_fp8_block (fp8 e4m3 weights with 128 x 128 block scales, bf16
    x; the check ran: H and I are multiples of 128)."""
    return _pipeline(FP8_ROW, x, w13, w2, w13_scale, w2_scale, topk_weights, topk_ids, num_shared_experts, out)


def _pipeline(row, x, w13, w2, w13_scale, w2_scale, topk_weights, topk_ids, shared, out):
    out = output(x, out)
    tokens, hidden = x.shape
    if tokens == 0:
        return out
    top_k = topk_ids.shape[1]
    experts = w13.shape[0] - shared
    intermediate = w13.shape[1] // 2
    fp8 = w13_scale is not None
    rows = expert_rows(tokens, top_k, experts)
    gemms = {"gate_up": (rows, 2 * intermediate, hidden), "down": (rows, hidden, intermediate)}
    stages = pipeline_knobs(
        row, gemms, w13.dtype, x.device, shared=("BLOCK_M",), block_k_multiple=SCALE_BLOCK if fp8 else None
    )
    gate_up, down = stages["gate_up"], stages["down"]
    block_m = gate_up.pop("BLOCK_M")

    slots = tokens * top_k
    device = x.device
    sorted_ids, block_experts, _, _ = align.launch(topk_ids, 0, experts, block_m)

    sorted_blocks = block_experts.shape[0]
    blocks = sorted_blocks + shared * cdiv(tokens, block_m)
    act = torch.empty((slots + shared * tokens, intermediate), dtype=x.dtype, device=device)
    rows_args = (sorted_ids, block_experts, tokens, top_k, slots, sorted_blocks, experts)
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    w13_scales, w2_scales = scale_arguments(w13, w13_scale), scale_arguments(w2, w2_scale)
    _gate_up_kernel[(blocks, cdiv(intermediate, gate_up["BLOCK_N"]))](
        x,
        x.stride(0),
        x.stride(1),
        w13,
        *w13.stride(),
        *w13_scales,
        act,
        *rows_args,
        intermediate,
        hidden,
        BLOCK_M=block_m,
        PRECISION=precision,
        FP8=fp8,
        **gate_up,
    )
    y = torch.empty((slots + shared * tokens, hidden), dtype=torch.float32, device=device)
    _down_kernel[(blocks, cdiv(hidden, down["BLOCK_N"]))](
        act,
        w2,
        *w2.stride(),
        *w2_scales,
        topk_weights,
        *topk_weights.stride(),
        y,
        *rows_args,
        hidden,
        intermediate,
        PRECISION=precision,
        FP8=fp8,
        **down,
    )
    _combine_kernel[(tokens, cdiv(hidden, _COMBINE_BLOCK))](
        y, topk_ids, *topk_ids.stride(), out, *out.stride(), top_k, slots, experts, shared, hidden, BLOCK=_COMBINE_BLOCK
    )
    return out


@triton.jit
def _product(a, weight, scale_ptr, PRECISION: tl.constexpr, FP8: tl.constexpr):
    """One K step's [BLOCK_M, BLOCK_N] fp32 product of a (x's dtype) and a weight tile. FP8: a quantized per
    row of the step (BLOCK_K = 128: one 1 x 128 group, per_token_group_fp8's arithmetic), the e4m3 product
    times the group scales and the weight block's scale at scale_ptr."""
    if FP8:
        q, a_scale = quantize_group_tile(a.to(tl.float32), 1e-10, 448.0)
        product = tl.dot(q.to(weight.dtype), weight)
        return product * (a_scale[:, None] * tl.load(scale_ptr))
    else:
        return tl.dot(a, weight, input_precision=PRECISION)


@triton.jit
def _block_rows(sorted_ptr, block_experts_ptr, tokens, top_k, slots, sorted_blocks, experts, BLOCK_M: tl.constexpr):
    """Program b's rows: (expert, its rows' buffer rows, their tokens, their column j in topk_ids, valid);
    expert -1 for an empty block. Sorted block b < sorted_blocks: the layout's; after them, shared expert s'
    takes ceil(T / BLOCK_M) blocks of tokens in order."""
    block = tl.program_id(0)
    lanes = tl.arange(0, BLOCK_M)
    if block < sorted_blocks:
        expert = tl.load(block_experts_ptr + block)
        entries = tl.load(sorted_ptr + block * BLOCK_M + lanes)
        valid = entries < slots
        entries = tl.where(valid, entries, 0)
        token = entries // top_k
        column = entries - token * top_k
        buffer_row = entries
    else:
        shared_block = block - sorted_blocks
        token_blocks = tl.cdiv(tokens, BLOCK_M)
        shared = shared_block // token_blocks
        expert = experts + shared
        token = (shared_block - shared * token_blocks) * BLOCK_M + lanes
        valid = token < tokens
        token = tl.where(valid, token, 0)
        column = tl.full((BLOCK_M,), -1, dtype=tl.int32)
        buffer_row = slots + shared * tokens + token
    return expert, buffer_row.to(tl.int64), token.to(tl.int64), column, valid


@cached
@triton.jit(do_not_specialize=["tokens", "slots", "sorted_blocks"])
def _gate_up_kernel(
    x_ptr,
    stride_xt,
    stride_xh,
    w_ptr,
    stride_we,
    stride_wn,
    stride_wk,
    scale_ptr,
    stride_se,
    stride_sn,
    stride_sk,
    act_ptr,
    sorted_ptr,
    block_experts_ptr,
    tokens,
    top_k,
    slots,
    sorted_blocks,
    experts,
    intermediate,
    hidden,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    FP8: tl.constexpr,
):
    expert, buffer_row, token, column, valid = _block_rows(
        sorted_ptr, block_experts_ptr, tokens, top_k, slots, sorted_blocks, experts, BLOCK_M
    )
    if expert < 0:
        return
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    columns_ok = columns < intermediate
    steps = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + token[:, None] * stride_xt
    gate_rows = w_ptr + expert.to(tl.int64) * stride_we + columns.to(tl.int64)[None, :] * stride_wn
    up_rows = gate_rows + intermediate * stride_wn
    # fp8: the 128-row weight blocks of the gate and up tiles (BLOCK_N divides 128, I % 128 == 0)
    gate_scales = scale_ptr + expert.to(tl.int64) * stride_se + (tl.program_id(1) * BLOCK_N // 128) * stride_sn
    up_scales = gate_scales + (intermediate // 128) * stride_sn
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for first in range(0, hidden, BLOCK_K):
        k = first + steps
        k_ok = k < hidden
        a = tl.load(x_rows + k[None, :] * stride_xh, mask=valid[:, None] & k_ok[None, :], other=0.0)
        weight_mask = k_ok[:, None] & columns_ok[None, :]
        gate_weight = tl.load(gate_rows + k[:, None] * stride_wk, mask=weight_mask, other=0.0)
        up_weight = tl.load(up_rows + k[:, None] * stride_wk, mask=weight_mask, other=0.0)
        step = (first // 128) * stride_sk
        gate += _product(a, gate_weight, gate_scales + step, PRECISION, FP8)
        up += _product(a, up_weight, up_scales + step, PRECISION, FP8)
    # h rounded to x's dtype (what a separate gate_up GEMM would store), then SiLU-and-mul in fp32
    dtype = act_ptr.dtype.element_ty
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    activated = gate / (1.0 + tl.exp(-gate)) * up
    target = act_ptr + buffer_row[:, None] * intermediate + columns[None, :]
    tl.store(target, activated.to(dtype), mask=valid[:, None] & columns_ok[None, :])


@cached
@triton.jit(do_not_specialize=["tokens", "slots", "sorted_blocks"])
def _down_kernel(
    act_ptr,
    w_ptr,
    stride_we,
    stride_wn,
    stride_wk,
    scale_ptr,
    stride_se,
    stride_sn,
    stride_sk,
    weights_ptr,
    stride_weights_t,
    stride_weights_j,
    y_ptr,
    sorted_ptr,
    block_experts_ptr,
    tokens,
    top_k,
    slots,
    sorted_blocks,
    experts,
    hidden,
    intermediate,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    FP8: tl.constexpr,
):
    expert, buffer_row, token, column, valid = _block_rows(
        sorted_ptr, block_experts_ptr, tokens, top_k, slots, sorted_blocks, experts, BLOCK_M
    )
    if expert < 0:
        return
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    columns_ok = columns < hidden
    steps = tl.arange(0, BLOCK_K)
    a_rows = act_ptr + buffer_row[:, None] * intermediate
    w_rows = w_ptr + expert.to(tl.int64) * stride_we + columns.to(tl.int64)[None, :] * stride_wn
    scales = scale_ptr + expert.to(tl.int64) * stride_se + (tl.program_id(1) * BLOCK_N // 128) * stride_sn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for first in range(0, intermediate, BLOCK_K):
        k = first + steps
        k_ok = k < intermediate
        a = tl.load(a_rows + k[None, :], mask=valid[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_rows + k[:, None] * stride_wk, mask=k_ok[:, None] & columns_ok[None, :], other=0.0)
        acc += _product(a, w, scales + (first // 128) * stride_sk, PRECISION, FP8)
    routed = valid & (column >= 0)
    weight = tl.load(
        weights_ptr + token * stride_weights_t + column.to(tl.int64) * stride_weights_j, mask=routed, other=1.0
    ).to(tl.float32)
    target = y_ptr + buffer_row[:, None] * hidden + columns[None, :]
    tl.store(target, acc * weight[:, None], mask=valid[:, None] & columns_ok[None, :])


@cached
@triton.jit(do_not_specialize=["slots"])
def _combine_kernel(
    y_ptr,
    ids_ptr,
    stride_ids_t,
    stride_ids_j,
    out_ptr,
    stride_out_t,
    stride_out_h,
    top_k,
    slots,
    experts,
    shared,
    hidden,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    columns_ok = columns < hidden
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * stride_ids_t + j * stride_ids_j)
        # a slot outside [0, E) was in no block: its y row was never written
        width = tl.where((expert >= 0) & (expert < experts), hidden, 0)
        total += tl.load(y_ptr + (token * top_k + j) * hidden + columns, mask=columns < width, other=0.0)
    for s in range(0, shared):
        total += tl.load(y_ptr + (slots + s * (slots // top_k) + token) * hidden + columns, mask=columns_ok, other=0.0)
    target = out_ptr + token * stride_out_t + columns * stride_out_h
    tl.store(target, total.to(out_ptr.dtype.element_ty), mask=columns_ok)
