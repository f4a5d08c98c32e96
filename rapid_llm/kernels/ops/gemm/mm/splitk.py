"""native/mm_splitk: decode-shaped GEMM (M <= 16), out = x @ w.T (+ bias), streaming w at bandwidth;
native/w8a16_mm_splitk: the same kernel over int8 weights (half the bytes), out = w_scale * (x @ w_q.T)
(+ bias), each fp32 slice scaled by its channel's scale before the merge adds the slices.

x: [M, K] rows (x:rows), M <= 16; w: [N, K] (w:rows); bias: None or [N]; out: new [M, N], x's dtype.

At decode sizes the cost is reading w once (N x K elements), and an output tiling leaves most SMs idle
(N / BLOCK_N programs). Here program (j, s) multiplies all M rows by the BLOCK_N rows of w starting at
j * BLOCK_N over the s-th of SPLIT_K slices of K (tl.dot on a 16-row tile; rows past M are clamped reads
whose results are never stored), writing fp32 partial sums [SPLIT_K, M, N]; a second kernel adds the
slices in a fixed order, adds the bias and rounds once (deterministic: no atomics). With SPLIT_K = 1
the first kernel writes out directly. Tiles (BLOCK_N, BLOCK_K, SPLIT_K) come from ops/gemm/tiles.py;
M is not specialised (new token counts never recompile; strides are, for vector loads).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from . import prepare

ROW = "native/mm_splitk"
W8A16_ROW = "native/w8a16_mm_splitk"


def mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Unchecked kernel entry (gemm.mm's check ran: x:rows and w:rows hold; the row's shape: M <= 16)."""
    out, rows, out_rows, knobs = prepare(ROW, x, w.shape[0])
    if rows is not None:
        launch(rows, w, bias, out_rows, knobs)
    return out


def w8a16_mm(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None):
    """Unchecked kernel entry of native/w8a16_mm_splitk (the check ran: x:rows, w:rows; M <= 16)."""
    out, rows, out_rows, knobs = prepare(W8A16_ROW, x, w_q.shape[0])
    if rows is not None:
        launch(rows, w_q, bias, out_rows, knobs, scale=w_scale.reshape(-1))
    return out


def launch(x, w, bias, out, knobs: dict, scale=None) -> None:
    """Launch over x [M, K], w [N, K] (int8 with scale [N]), out [M, N] with explicit knobs (perf/tune_gemm.py
    times candidates)."""
    m, k = x.shape
    n = w.shape[0]
    knobs = dict(knobs)
    split, steps_per_split = slices(cdiv(k, knobs["BLOCK_K"]), knobs.pop("SPLIT_K"))
    has_bias = bias is not None
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (cdiv(n, knobs["BLOCK_N"]), split)
    _partial_kernel[grid](
        x,
        w,
        bias if has_bias else x,
        scale if scale is not None else x,
        partial,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        bias.stride(0) if has_bias else 0,
        scale.stride(0) if scale is not None else 0,
        steps_per_split,
        HAS_BIAS=has_bias and split == 1,
        HAS_SCALE=scale is not None,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        **knobs,
    )
    if split > 1:
        merge(partial, bias, out, split)


def slices(total_steps: int, split: int) -> tuple[int, int]:
    """(slices, steps per slice) of total_steps K steps cut into at most `split` slices of equal length but the
    last, none empty (the split-K kernels' grid dimension and their steps_per_split argument)."""
    split = max(1, min(split, total_steps))
    per = cdiv(total_steps, split)
    return cdiv(total_steps, per), per


def merge(partial, bias, out, split: int) -> None:
    """Add the fp32 slices partial [split, M, N] (contiguous) in order (plus the bias) into out [M, N] (any
    strides), rounding once (also the second pass of mm/w4a16.py and fp8/splitk.py)."""
    m, n = out.shape
    has_bias = bias is not None
    block = 256
    _merge_kernel[(cdiv(m * n, block),)](
        partial,
        bias if has_bias else partial,
        out,
        m * n,
        n,
        bias.stride(0) if has_bias else 0,
        *out.stride(),
        SPLIT_K=split,
        HAS_BIAS=has_bias,
        BLOCK=block,
        num_warps=4,
    )


@cached
@triton.jit(do_not_specialize=["M"])
def _partial_kernel(
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
    steps_per_split,
    HAS_BIAS: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    first = split * steps_per_split * BLOCK_K
    ks = first + tl.arange(0, BLOCK_K)
    x_tile = x_ptr + safe_rows[:, None] * stride_xm + ks[None, :]
    w_tile = w_ptr + safe_columns[None, :] * stride_wn + ks[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    steps = tl.minimum(steps_per_split, tl.cdiv(K, BLOCK_K) - split * steps_per_split)  # the last slice is shorter
    for step in range(0, steps):
        if EVEN_K:
            a = tl.load(x_tile)
            b = tl.load(w_tile)
        else:
            inside = ks < K - step * BLOCK_K
            a = tl.load(x_tile, mask=inside[None, :], other=0.0)
            b = tl.load(w_tile, mask=inside[:, None], other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)  # int8 weights: exact in fp16/bf16
        x_tile += BLOCK_K
        w_tile += BLOCK_K
    if HAS_SCALE:
        acc *= tl.load(scale_ptr + safe_columns * stride_scale).to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)[None, :]
    slice_out = out_ptr + split.to(tl.int64) * M * N + rows.to(tl.int64)[:, None] * N + columns[None, :]
    tl.store(slice_out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (columns[None, :] < N))


@cached
@triton.jit(do_not_specialize=["total"])
def _merge_kernel(
    partial_ptr,
    bias_ptr,
    out_ptr,
    total,
    N,
    stride_bias,
    stride_om,
    stride_on,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # 64-bit offsets: split x M x N passes 2**31 at prefill sizes
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):  # a fixed order: the same sum on every run
        acc += tl.load(partial_ptr + s * total.to(tl.int64) + offsets, mask=inside, other=0.0)
    columns = offsets % N
    if HAS_BIAS:
        acc += tl.load(bias_ptr + columns * stride_bias, mask=inside, other=0.0).to(tl.float32)
    target = out_ptr + (offsets // N).to(tl.int64) * stride_om + columns.to(tl.int64) * stride_on
    tl.store(target, acc.to(out_ptr.dtype.element_ty), mask=inside)
