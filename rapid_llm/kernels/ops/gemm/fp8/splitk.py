"""native/fp8_block_mm_splitk and native/fp8_mm_splitk: decode-shaped fp8 GEMMs (made for m <= 64; the rows serve m <= 128, the
token bucket's edge), streaming the
fp8 weight at bandwidth; the block-scaled and the per-channel-scaled op (scales as in fp8/__init__.py).

a: [M, K] float8_e4m3fn (a:tma); b: [N, K] float8_e4m3fn (b:tma); bias (fp8_mm): None or [N]; out: [M, N],
any strides.

At decode sizes the cost is reading b once (N x K bytes) and an output tiling leaves most SMs idle.
Program (j, s, i) multiplies rows i * BLOCK_M.. of a by the BLOCK_N rows of b from j * BLOCK_N over the
s-th of SPLIT_K slices of the K steps (tiled.py's accumulate(): block scales applied per step, channel
scales at the end of the slice), writing fp32 partial sums [SPLIT_K, M, N]; a second
kernel adds the slices in a fixed order (deterministic: no atomics), adds the bias and rounds once into
out. With SPLIT_K = 1 the first kernel writes out directly. Tiles (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K)
come from ops/gemm/tiles.py; M and a_scale's K-step stride are not specialised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from ..mm.splitk import merge, slices
from . import SCALE_BLOCK, Scales, block_entry, channel_entry
from .tiled import accumulate, finish_tile

BLOCK_ROW = "native/fp8_block_mm_splitk"
CHANNEL_ROW = "native/fp8_mm_splitk"


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm_splitk (the check ran: a:tma, b:tma)."""
    return block_entry(BLOCK_ROW, launch, a, a_scale, b, b_scale, out)


def fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    """Unchecked kernel entry of native/fp8_mm_splitk (the check ran: a:tma, b:tma)."""
    return channel_entry(CHANNEL_ROW, launch, a, a_scale, b, b_scale, out_dtype, bias)


def launch(a, b, scales: Scales, bias, out, knobs: dict) -> None:
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (perf/tune_gemm.py times candidates)."""
    m, k = a.shape
    n = b.shape[0]
    knobs = dict(knobs)
    split, steps_per_split = slices(cdiv(k, knobs["BLOCK_K"]), knobs.pop("SPLIT_K"))
    has_bias = bias is not None
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    _fp8_partial_kernel[(cdiv(n, knobs["BLOCK_N"]), split, cdiv(m, knobs["BLOCK_M"]))](
        a,
        b,
        scales.a,
        scales.b,
        bias if has_bias else out,
        partial,
        m,
        n,
        k,
        a.stride(0),
        b.stride(0),
        *scales.a_strides,
        *scales.b_strides,
        bias.stride(0) if has_bias else 0,
        *(out.stride() if split == 1 else (n, 1)),
        steps_per_split,
        BLOCK_SCALES=scales.blocks,
        SCALE_K=SCALE_BLOCK,
        HAS_BIAS=has_bias and split == 1,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        **knobs,
    )
    if split > 1:
        merge(partial, bias, out, split)


@cached
@triton.jit(do_not_specialize=["M", "stride_ask"])
def _fp8_partial_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_bias,
    stride_om,
    stride_on,
    steps_per_split,
    BLOCK_SCALES: tl.constexpr,
    SCALE_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    if BLOCK_SCALES:
        tl.static_assert(BLOCK_K == SCALE_K, "block scales: one scale per K step")
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    first_step = split * steps_per_split
    steps = tl.minimum(steps_per_split, tl.cdiv(K, BLOCK_K) - first_step)  # the last slice is shorter
    acc = accumulate(
        a_ptr,
        b_ptr,
        a_scale_ptr,
        b_scale_ptr,
        safe_rows,
        safe_columns,
        first_step,
        steps,
        K,
        stride_am,
        stride_bn,
        stride_asm,
        stride_ask,
        stride_bsn,
        stride_bsk,
        BLOCK_SCALES,
        SCALE_K,
        EVEN_K,
        BLOCK_M,
        BLOCK_N,
        BLOCK_K,
    )
    slice_out = out_ptr + split.to(tl.int64) * M * N
    finish_tile(
        acc,
        a_scale_ptr,
        b_scale_ptr,
        bias_ptr,
        slice_out,
        rows,
        columns,
        safe_rows,
        safe_columns,
        M,
        N,
        stride_asm,
        stride_bsn,
        stride_bias,
        stride_om,
        stride_on,
        BLOCK_SCALES,
        HAS_BIAS,
    )
