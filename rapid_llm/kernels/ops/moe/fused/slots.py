"""native/fused_moe_slots (float weights) and native/fused_moe_slots_fp8_block (fp8 e4m3 weights, 128 x 128
block scales): moe.fused_moe at decode token counts, over the slots as routing left them; two launches, no
sort and no padding.

    1. gate_up: program (r, j) takes buffer row r, a routed slot r = t * top_k + i (expert topk_ids[t, i];
       a slot whose id is outside [0, E) returns at once) or shared row N + s * T + t (expert E + s), and
       columns j * BLOCK_N.. of the intermediate I: gate and up = the dot products of x[t] with those rows
       of w13[e] (fp32), each rounded to x's dtype, a = silu(gate) * up in fp32, rounded, stored in
       act [N + S * T, I] (N = T * top_k).
    2. down: program (t, j) takes token t and columns j * BLOCK_N.. of H: for each of its slots in order
       (those with an id in [0, E)), then its shared rows, y = act[row] . w2[e, cols] in fp32 times the
       slot's weight (1 for a shared expert), summed in fp32 and rounded once into out[t].

Each program keeps its [BLOCK_N, BLOCK_K] weight tile in the registers it was loaded into and multiplies
elementwise in fp32, reducing along K once per row (as gemm's one-token kernels, mm/gemv.py and
fp8/gemv.py): no tl.dot, so the CPU interpreter runs the float row in every dtype. fp8: x (gate_up) and
the activation row (down) are quantized per 128-wide group in registers with per_token_group_fp8's
arithmetic (the e4m3 rounding is the hardware cast: sm89+), the e4m3 weights widened to fp32 (exact),
each group's products times its scale and the weight block's. A slot reads its expert's weights on its own, so two slots of one
expert read them twice (the second mostly from L2 when they run together): the row serves up to 16
tokens, where a step's slots rarely share an expert. x, w13, w2, topk_weights, topk_ids and out take any
strides; act is this call's contiguous buffer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from ...quantization.fp8_quant import quantize_group_tile
from .. import SCALE_BLOCK
from . import output, pipeline_knobs, scale_arguments

ROW = "native/fused_moe_slots"
FP8_ROW = "native/fused_moe_slots_fp8_block"
#: The kernels one call launches, in order (conformance's one-kernel-per-row walk checks them).
STAGES = (f"{__name__}:_gate_up_kernel", f"{__name__}:_down_kernel")


def fused_moe(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked kernel entry of native/fused_moe_slots (float weights; the check ran; T <= 16 by the row's
    shape)."""
    return _pipeline(ROW, x, w13, w2, None, None, topk_weights, topk_ids, num_shared_experts, out)


def fused_moe_fp8_block(
    x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None, num_shared_experts=0, out=None
):
    """Unchecked kernel entry of native/fused_moe_slots_fp8_block (fp8 e4m3 weights with 128 x 128 block
    scales, bf16 x; the check ran: H and I are multiples of 128; T <= 16 by the row's shape)."""
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
    slots = tokens * top_k
    rows = slots + shared * tokens
    # gate_up's tiles by the slot count, down's by the token count (its programs take a token's slots)
    gemms = {"gate_up": (rows, 2 * intermediate, hidden), "down": (tokens, hidden, intermediate)}
    stages = pipeline_knobs(row, gemms, w13.dtype, x.device, block_k_multiple=SCALE_BLOCK if fp8 else None)
    gate_up, down = stages["gate_up"], stages["down"]
    w13_scales, w2_scales = scale_arguments(w13, w13_scale), scale_arguments(w2, w2_scale)
    act = torch.empty((rows, intermediate), dtype=x.dtype, device=x.device)
    _gate_up_kernel[(rows, cdiv(intermediate, gate_up["BLOCK_N"]))](
        x,
        *x.stride(),
        w13,
        *w13.stride(),
        *w13_scales,
        topk_ids,
        *topk_ids.stride(),
        act,
        tokens,
        top_k,
        experts,
        intermediate,
        hidden,
        FP8=fp8,
        **gate_up,
    )
    _down_kernel[(tokens, cdiv(hidden, down["BLOCK_N"]))](
        act,
        w2,
        *w2.stride(),
        *w2_scales,
        topk_ids,
        *topk_ids.stride(),
        topk_weights,
        *topk_weights.stride(),
        out,
        *out.stride(),
        top_k,
        experts,
        shared,
        tokens,
        hidden,
        intermediate,
        FP8=fp8,
        **down,
    )
    return out


@triton.jit
def _dot_rows(
    vector_ptr,
    stride_vector,
    rows_ptr,
    stride_k,
    scales_ptr,
    stride_scale_k,
    length,
    FP8: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """[BLOCK_N] fp32: each row (rows_ptr[n] + k * stride_k, k < length) dotted with the vector, the products
    accumulated elementwise and reduced along K once. FP8: the vector quantized per 128-wide group as
    per_token_group_fp8 quantizes it (BLOCK_K a multiple of 128), each group's products times its scale and
    the rows' weight block scale (scales_ptr + group * stride_scale_k: one block row for the BLOCK_N rows)."""
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for first in range(0, length, BLOCK_K):
        k = first + ks
        inside = k < length
        vector = tl.load(vector_ptr + k * stride_vector, mask=inside, other=0.0).to(tl.float32)
        tile = tl.load(rows_ptr[:, None] + k[None, :] * stride_k, mask=inside[None, :], other=0.0)
        if FP8:
            groups = tl.reshape(vector, (BLOCK_K // 128, 128))
            q, scale = quantize_group_tile(groups, 1e-10, 448.0)
            block = tl.arange(0, BLOCK_K // 128)
            group_inside = first + block * 128 < length
            weight_scale = tl.load(scales_ptr + (first // 128 + block) * stride_scale_k, mask=group_inside, other=0.0)
            rounded = q.to(tile.dtype).to(tl.float32) * (scale * weight_scale)[:, None]
            vector = tl.reshape(rounded, (BLOCK_K,))
        acc += tile.to(tl.float32) * vector[None, :]
    return tl.sum(acc, axis=1)


@cached
@triton.jit(do_not_specialize=["tokens"])
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
    ids_ptr,
    stride_ids_t,
    stride_ids_j,
    act_ptr,
    tokens,
    top_k,
    experts,
    intermediate,
    hidden,
    FP8: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0)
    slots = tokens * top_k
    if row < slots:
        token = row // top_k
        expert = tl.load(ids_ptr + token.to(tl.int64) * stride_ids_t + (row - token * top_k) * stride_ids_j)
        if (expert < 0) | (expert >= experts):
            return
    else:
        shared = (row - slots) // tokens
        token = row - slots - shared * tokens
        expert = experts + shared
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    columns_ok = columns < intermediate
    # clamped reads (never stored): a column past I reads row I - 1
    safe = tl.where(columns_ok, columns, intermediate - 1).to(tl.int64)
    gate_rows = w_ptr + expert.to(tl.int64) * stride_we + safe * stride_wn
    x_row = x_ptr + token.to(tl.int64) * stride_xt
    # fp8: the weight block row of the gate columns (BLOCK_N divides 128), and of the up columns (I % 128 == 0)
    gate_scales = scale_ptr + expert.to(tl.int64) * stride_se + (tl.program_id(1) * BLOCK_N // 128) * stride_sn
    up_scales = gate_scales + (intermediate // 128) * stride_sn
    gate = _dot_rows(x_row, stride_xh, gate_rows, stride_wk, gate_scales, stride_sk, hidden, FP8, BLOCK_N, BLOCK_K)
    up_rows = gate_rows + intermediate * stride_wn
    up = _dot_rows(x_row, stride_xh, up_rows, stride_wk, up_scales, stride_sk, hidden, FP8, BLOCK_N, BLOCK_K)
    # h rounded to x's dtype (what a separate gate_up GEMM would store), then SiLU-and-mul in fp32
    dtype = act_ptr.dtype.element_ty
    gate = gate.to(dtype).to(tl.float32)
    up = up.to(dtype).to(tl.float32)
    activated = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(act_ptr + row.to(tl.int64) * intermediate + columns, activated.to(dtype), mask=columns_ok)


@cached
@triton.jit(do_not_specialize=["tokens"])
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
    ids_ptr,
    stride_ids_t,
    stride_ids_j,
    weights_ptr,
    stride_weights_t,
    stride_weights_j,
    out_ptr,
    stride_out_t,
    stride_out_h,
    top_k,
    experts,
    shared,
    tokens,
    hidden,
    intermediate,
    FP8: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    columns_ok = columns < hidden
    safe = tl.where(columns_ok, columns, hidden - 1).to(tl.int64) * stride_wn
    block_row = (tl.program_id(1) * BLOCK_N // 128) * stride_sn  # fp8: the columns' weight block row
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in range(0, top_k):
        expert = tl.load(ids_ptr + token * stride_ids_t + j * stride_ids_j)
        if (expert >= 0) & (expert < experts):
            weight = tl.load(weights_ptr + token * stride_weights_t + j * stride_weights_j).to(tl.float32)
            act_row = act_ptr + (token * top_k + j) * intermediate
            rows = w_ptr + expert.to(tl.int64) * stride_we + safe
            scales = scale_ptr + expert.to(tl.int64) * stride_se + block_row
            products = _dot_rows(act_row, 1, rows, stride_wk, scales, stride_sk, intermediate, FP8, BLOCK_N, BLOCK_K)
            total += weight * products
    for s in range(0, shared):
        act_row = act_ptr + (tokens * top_k + s * tokens + token) * intermediate
        rows = w_ptr + (experts + s).to(tl.int64) * stride_we + safe
        scales = scale_ptr + (experts + s).to(tl.int64) * stride_se + block_row
        total += _dot_rows(act_row, 1, rows, stride_wk, scales, stride_sk, intermediate, FP8, BLOCK_N, BLOCK_K)
    tl.store(
        out_ptr + token * stride_out_t + columns * stride_out_h, total.to(out_ptr.dtype.element_ty), mask=columns_ok
    )
