"""native/fp8_block_mm_swap_ab: gemm.fp8_block_mm at decode token counts (m <= 128) with the operands swapped,
out^T = b a^T.

out[m, n] = sum over 128-wide K steps s of a_scale[m, s] * b_scale[n // 128, s] * sum_{k in s} a[m, k] b[n, k]

a: [M, K] e4m3 (a:tma: unit stride along K), b: [N, K] e4m3 (b:tma), K % 128 == 0 (the op's check);
a_scale [M, K/128] and b_scale [ceil(N/128), K/128] fp32, any strides; out [M, N] bf16, any strides.

fp8/splitk.py multiplies a [BLOCK_M, 128] by b^T: at m <= 16 its token tile is the MMA's M side, 16 rows, below
the 64 rows of a Hopper warpgroup MMA, so it compiles to mma.sync on fp16 operands with every fp8 weight
converted in registers. Here the weight tile is the M side (BLOCK_N rows of b) and the tokens the N side
(BLOCK_M: 16 .. 64), both K-major in shared memory: the fp8 tensor cores read them as stored. Program (j, s, i)
owns b's rows j * BLOCK_N.. (BLOCK_N divides 128: one weight block scale per step), the s-th of SPLIT_K slices
of the K steps and tokens i * BLOCK_M..; its [BLOCK_N, BLOCK_M] fp32 accumulator adds each step's product times
a_scale[token, step] * b_scale[block, step]. SPLIT_K > 1 writes fp32 slices [SPLIT_K, M, N] that mm/splitk.py's
merge adds in a fixed order (deterministic), rounding once. Tiles come from ops/gemm/tiles.py; M and
a_scale's K-step stride (the padded M of the column-major layout) are not specialised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from ..mm.splitk import merge, slices
from . import SCALE_BLOCK, block_entry, check_knobs

ROW = "native/fp8_block_mm_swap_ab"


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm_swap_ab (the check ran: a:tma, b:tma, K % 128 == 0)."""
    return block_entry(ROW, launch, a, a_scale, b, b_scale, out)


def launch(a, b, scales, bias, out, knobs: dict) -> None:
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (perf/tune_gemm.py times candidates). bias
    must be None (the block op has none)."""
    assert bias is None, "gemm.fp8_block_mm has no bias"
    m, k = a.shape
    n = b.shape[0]
    knobs = dict(knobs)
    check_knobs(ROW, knobs)
    k_steps = k // SCALE_BLOCK
    split, steps_per_split = slices(k_steps, knobs.pop("SPLIT_K"))
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    _fp8_swap_ab_kernel[(cdiv(n, knobs["BLOCK_N"]), split, cdiv(m, knobs["BLOCK_M"]))](
        a,
        b,
        scales.a,
        scales.b,
        partial,
        m,
        n,
        a.stride(0),
        b.stride(0),
        *scales.a_strides,
        *scales.b_strides,
        *(out.stride() if split == 1 else (n, 1)),
        k_steps,
        steps_per_split,
        **knobs,
    )
    if split > 1:
        merge(partial, None, out, split)


@cached
@triton.jit(do_not_specialize=["M", "stride_ask"])
def _fp8_swap_ab_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    M,
    N,
    stride_am,
    stride_bn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_om,
    stride_on,
    k_steps,
    steps_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)  # clamped reads, never stored
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    first_step = split * steps_per_split
    steps = tl.minimum(steps_per_split, k_steps - first_step)  # the last slice is shorter
    ks = first_step * BLOCK_K + tl.arange(0, BLOCK_K)
    b_tile = b_ptr + safe_columns[:, None] * stride_bn + ks[None, :]  # [BLOCK_N, BLOCK_K]: the MMA's M side
    a_tile = a_ptr + safe_rows[:, None] * stride_am + ks[None, :]  # [BLOCK_M, BLOCK_K]: its N side, transposed
    a_scales = a_scale_ptr + safe_rows * stride_asm
    b_scales = b_scale_ptr + (first_column // BLOCK_K) * stride_bsn  # BLOCK_N divides 128: one weight block
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for offset in range(steps):
        step = first_step + offset
        product = tl.dot(tl.load(b_tile), tl.trans(tl.load(a_tile)))  # one K step in the fp8 tensor cores
        scale = tl.load(a_scales + step * stride_ask) * tl.load(b_scales + step * stride_bsk)
        acc += product * scale[None, :]
        b_tile += BLOCK_K
        a_tile += BLOCK_K
    out_tile = out_ptr + split.to(tl.int64) * M * N  # slice s of [SPLIT_K, M, N] (split 0: out itself)
    out_tile += rows.to(tl.int64)[None, :] * stride_om + columns.to(tl.int64)[:, None] * stride_on
    tl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=(columns[:, None] < N) & (rows[None, :] < M))


__all__ = ["fp8_block_mm", "launch"]
