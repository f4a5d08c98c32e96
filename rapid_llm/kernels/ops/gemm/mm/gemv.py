"""native/mm_gemv: one token's GEMM (M == 1), out[0, n] = sum_k x[0, k] * w[n, k] (+ bias[n]), on the CUDA
cores; native/w8a16_mm_gemv: the same over int8 weights, out[0, n] = w_scale[n] * sum_k x[0, k] * w_q[n, k]
(+ bias[n]).

x: [1, K] (x:rows); w: [N, K] (w:rows), bf16/fp16 or int8; bias: None or [N]; out: new [1, N], x's dtype.

At M == 1 the product is a weight stream with one multiply-add per weight element. The tensor-core kernels
pad the token to a 16-row tile and hand the weight tile to tl.dot, which converts it into the MMA operand
layout (a trip through shared memory, and a conversion for int8); here each program keeps its BLOCK_N x
BLOCK_K weight tile in the registers it was loaded into, multiplies by x and accumulates in fp32
elementwise, and reduces along K once at the end. Program j owns the output columns j * BLOCK_N ...; no
split over K, so no second pass and one rounding. Tiles (BLOCK_N, BLOCK_K, warps, stages) come from
ops/gemm/tiles.py. No tl.dot: the CPU interpreter computes it exactly in every dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from . import prepare

ROW = "native/mm_gemv"
W8A16_ROW = "native/w8a16_mm_gemv"


def mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Unchecked kernel entry (gemm.mm's check ran: x:rows and w:rows hold; the row's shape: M == 1)."""
    out, rows, out_rows, knobs = prepare(ROW, x, w.shape[0])
    if rows is not None:
        launch(rows, w, bias, out_rows, knobs)
    return out


def w8a16_mm(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None):
    """Unchecked kernel entry of native/w8a16_mm_gemv (the check ran: x:rows, w:rows; M == 1)."""
    out, rows, out_rows, knobs = prepare(W8A16_ROW, x, w_q.shape[0])
    if rows is not None:
        launch(rows, w_q, bias, out_rows, knobs, scale=w_scale.reshape(-1))
    return out


def launch(x, w, bias, out, knobs: dict, scale=None) -> None:
    """Launch over x [1, K], w [N, K] (int8 with scale [N]), out [1, N] with explicit knobs (perf/tune_gemm.py
    times candidates). BLOCK_M (the tile policy's common knob) is unused: one row."""
    n, k = w.shape
    knobs = {name: value for name, value in knobs.items() if name != "BLOCK_M"}
    has_bias = bias is not None
    _gemv_kernel[(cdiv(n, knobs["BLOCK_N"]),)](
        x,
        w,
        bias if has_bias else x,
        scale if scale is not None else x,
        out,
        n,
        k,
        w.stride(0),
        bias.stride(0) if has_bias else 0,
        scale.stride(0) if scale is not None else 0,
        HAS_BIAS=has_bias,
        HAS_SCALE=scale is not None,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        **knobs,
    )


@triton.jit
def _to_float(b):
    """The weight tile in fp32. int8 q decodes as float bits 0x4B000080 + q (= 2**23 + 128 + q, exact) minus
    2**23 + 128: an integer add and a float subtract in place of the int-to-float convert, which issues at a
    fraction of the CUDA cores' add rate and measured slower on the int8 stream."""
    if b.dtype == tl.int8:
        return (b.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
    return b.to(tl.float32)


@cached
@triton.jit
def _gemv_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    N,
    K,
    stride_wn,
    stride_bias,
    stride_scale,
    HAS_BIAS: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)  # clamped reads, never stored
    ks = tl.arange(0, BLOCK_K)
    w_tile = w_ptr + safe_columns[:, None] * stride_wn + ks[None, :]
    x_tile = x_ptr + ks
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        if EVEN_K:
            b = tl.load(w_tile)
            a = tl.load(x_tile)
        else:
            inside = ks < K - start
            b = tl.load(w_tile, mask=inside[None, :], other=0)
            a = tl.load(x_tile, mask=inside, other=0.0)
        acc += _to_float(b) * a.to(tl.float32)[None, :]
        x_tile += BLOCK_K
        w_tile += BLOCK_K
    result = tl.sum(acc, axis=1)
    if HAS_SCALE:
        result *= tl.load(scale_ptr + safe_columns * stride_scale).to(tl.float32)
    if HAS_BIAS:
        result += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)
    tl.store(out_ptr + columns, result.to(out_ptr.dtype.element_ty), mask=columns < N)
