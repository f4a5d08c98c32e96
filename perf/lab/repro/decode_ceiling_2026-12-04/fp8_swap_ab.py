"""Lab: gemm.fp8_block_mm for decode token counts with the operands swapped (out^T = b a^T).

out[m, n] = sum over 128-wide K steps s of a_scale[m, s] * b_scale[n // 128, s] * sum_{k in s} a[m, k] b[n, k]

native/fp8_block_mm_splitk multiplies a [BLOCK_M, 128] by b^T [128, BLOCK_N]: at BLOCK_M = 16 (m <= 16) the
MMA's M side is the padded token tile, below wgmma's 64 rows, so Triton emits mma.sync on fp16 operands and
converts every fp8 weight in registers (F2FP). Here the weight tile is the MMA's M side (BLOCK_N = 64 or
128 rows of b, K-major in shared memory) and the tokens its N side (BLOCK_M = 16 .. 64, a^T K-major too):
fp8 wgmma straight from shared memory, no conversion. Program (j, s, i) owns b's rows j * BLOCK_N.., the
s-th of SPLIT_K slices of K steps and tokens i * BLOCK_M..; the [BLOCK_N, BLOCK_M] fp32 accumulator takes
each step's product times a_scale[token, step] * b_scale[block, step] (BLOCK_N divides 128: one weight block
per tile). SPLIT_K > 1 writes fp32 slices [SPLIT_K, M, N] that mm/splitk.py's merge adds in order.

a: [M, K] e4m3 (unit stride along K), b: [N, K] e4m3 (unit stride along K), K % 128 == 0; a_scale [M, K/128],
b_scale [ceil(N/128), K/128] fp32, any strides; out [M, N] bf16.
"""

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops.gemm.mm.splitk import merge


@triton.jit(do_not_specialize=["M", "stride_ask"])
def fp8_swap_ab_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
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
    stride_om,
    stride_on,
    steps_per_split,
    PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    tl.static_assert(BLOCK_K == 128, "one block scale per K step")
    tl.static_assert(128 % BLOCK_N == 0, "one weight block per tile")
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    first_step = split * steps_per_split
    steps = tl.minimum(steps_per_split, K // BLOCK_K - first_step)
    ks = first_step * BLOCK_K + tl.arange(0, BLOCK_K)
    b_tile = b_ptr + safe_columns[:, None] * stride_bn + ks[None, :]  # [BLOCK_N, BLOCK_K]
    a_tile = a_ptr + safe_rows[:, None] * stride_am + ks[None, :]  # [BLOCK_M, BLOCK_K]
    a_scales = a_scale_ptr + safe_rows * stride_asm
    b_scales = b_scale_ptr + (first_column // 128) * stride_bsn
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for offset in range(steps):
        step = first_step + offset
        b = tl.load(b_tile)
        a = tl.load(a_tile)
        product = tl.dot(b, tl.trans(a))  # [BLOCK_N, BLOCK_M]: this step's 128 of K in the tensor cores
        scale = tl.load(a_scales + step * stride_ask) * tl.load(b_scales + step * stride_bsk)
        acc += product * scale[None, :]
        b_tile += BLOCK_K
        a_tile += BLOCK_K
    inside = (columns[:, None] < N) & (rows[None, :] < M)
    if PARTIAL:
        target = out_ptr + split.to(tl.int64) * M * N + rows.to(tl.int64)[None, :] * N + columns[:, None]
    else:
        target = out_ptr + rows.to(tl.int64)[None, :] * stride_om + columns[:, None] * stride_on
    tl.store(target, acc.to(out_ptr.dtype.element_ty), mask=inside)


def launch(a, a_scale, b, b_scale, out, BLOCK_M, BLOCK_N, SPLIT_K, num_warps=4, num_stages=4):
    """One call of the swapped kernel into out [M, N] (SPLIT_K slices, merged in order when > 1)."""
    m, k = a.shape
    n = b.shape[0]
    steps = k // 128
    per = triton.cdiv(steps, SPLIT_K)
    split = triton.cdiv(steps, per)
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    fp8_swap_ab_kernel[(triton.cdiv(n, BLOCK_N), split, triton.cdiv(m, BLOCK_M))](
        a, b, a_scale, b_scale, partial, m, n, k, a.stride(0), b.stride(0), *a_scale.stride(), *b_scale.stride(),
        *out.stride(), per, PARTIAL=split > 1, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=128,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    if split > 1:
        merge(partial, None, out, split)
    return out
