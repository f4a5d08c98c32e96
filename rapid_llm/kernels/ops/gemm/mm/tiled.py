"""native/mm: a persistent tiled GEMM, out = x @ w.T (+ bias); native/w8a16_mm: the same kernel over int8
weights, out = w_scale * (x @ w_q.T) (+ bias) (the int8 tile converted to x's dtype in registers, exact;
the channel scales applied to the fp32 tile before the bias and the rounding).

x: [M, K] rows (layout x:rows: one row stride, unit stride along K); w: [N, K] (w:rows: unit stride
along K, any row stride); bias: None or [N] (any stride); out: new [M, N] contiguous, x's dtype.

One program per SM walks output tiles BLOCK_M x BLOCK_N in grouped order (GROUP_M tiles of M share a
column of w tiles, so w tiles are reused from L2), accumulating BLOCK_K slices with tl.dot in fp32,
adding the bias and rounding once at the store. Loads clamp row and column indices into range (no
masks on M and N; the stores are masked) and mask K only when BLOCK_K does not divide it. M and the
strides are runtime arguments that Triton does not specialise: new token counts never recompile.
Tiles come from ops/gemm/tiles.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...device_facts import multiprocessor_count
from ...fast_launch import cached, cdiv
from . import prepare

ROW = "native/mm"
W8A16_ROW = "native/w8a16_mm"


def mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Unchecked kernel entry (gemm.mm's check ran: x:rows and w:rows hold)."""
    out, rows, out_rows, knobs = prepare(ROW, x, w.shape[0])
    if rows is not None:
        launch(rows, w, bias, out_rows, knobs)
    return out


def w8a16_mm(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None):
    """Unchecked kernel entry of native/w8a16_mm (gemm.w8a16_mm's check ran: x:rows and w:rows hold)."""
    out, rows, out_rows, knobs = prepare(W8A16_ROW, x, w_q.shape[0])
    if rows is not None:
        launch(rows, w_q, bias, out_rows, knobs, scale=w_scale.reshape(-1))
    return out


def launch(x, w, bias, out, knobs: dict, scale=None) -> None:
    """Launch over x [M, K], w [N, K] (int8 with scale [N]), out [M, N] with explicit knobs (perf/tune_gemm.py
    times candidates)."""
    m, k = x.shape
    n = w.shape[0]
    tiles = cdiv(m, knobs["BLOCK_M"]) * cdiv(n, knobs["BLOCK_N"])
    programs = max(1, min(tiles, multiprocessor_count(x.device)))
    _mm_kernel[(programs,)](
        x,
        w,
        bias if bias is not None else x,
        scale if scale is not None else x,
        out,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        bias.stride(0) if bias is not None else 0,
        scale.stride(0) if scale is not None else 0,
        HAS_BIAS=bias is not None,
        HAS_SCALE=scale is not None,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        NUM_PROGRAMS=programs,
        **knobs,
    )


@cached
@triton.jit(do_not_specialize=["M"])
def _mm_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    scale_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_bias,
    stride_scale,
    HAS_BIAS: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    EVEN_K: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_group = GROUP_M * tiles_n
    for tile in range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        group = tile // per_group
        first_m = group * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        tile_m = first_m + (tile % per_group) % group_rows
        tile_n = (tile % per_group) // group_rows
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        columns = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # clamped indices: every load stays in range without a mask; the store masks the real extent
        safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
        safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
        ks = tl.arange(0, BLOCK_K)
        x_tile = x_ptr + safe_rows[:, None] * stride_xm + ks[None, :]
        w_tile = w_ptr + safe_columns[None, :] * stride_wn + ks[:, None]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, k_steps):
            if EVEN_K:
                a = tl.load(x_tile)
                b = tl.load(w_tile)
            else:
                left = K - step * BLOCK_K
                a = tl.load(x_tile, mask=ks[None, :] < left, other=0.0)
                b = tl.load(w_tile, mask=ks[:, None] < left, other=0.0)
            acc = tl.dot(a, b.to(a.dtype), acc)  # int8 weights: exact in fp16/bf16
            x_tile += BLOCK_K
            w_tile += BLOCK_K
        if HAS_SCALE:
            acc *= tl.load(scale_ptr + safe_columns * stride_scale).to(tl.float32)[None, :]
        if HAS_BIAS:
            bias = tl.load(bias_ptr + safe_columns * stride_bias)
            acc += bias.to(tl.float32)[None, :]
        out_tile = out_ptr + rows.to(tl.int64)[:, None] * N + columns[None, :]
        tl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (columns[None, :] < N))
