"""Lab variants of native/w4a16_mm_gemv (rapid_llm/kernels/ops/gemm/mm/w4a16.py's _gemv_kernel, same helpers):

- AWQ with the sum over k deferred: the shipped kernel sums each group's [g, BLOCK_N/8, 8] products over k
  (across threads and warps: a shared-memory round trip and barriers every group). Here each product is
  scaled where it is formed, (q - zero) * (x[k] * scale[n]), into a [g, BLOCK_N/8, 8] fp32 accumulator
  summed over k once after the K loop (one more multiply per weight, no reduction inside the loop).
- DEPTH = 2 (both packings): two groups' words in flight while one group is summed (the shipped kernel: one).

The slices and the merge are the shipped ones (SPLIT_K > 1: fp32 [SPLIT_K, 1, N], mm/splitk.py's merge).
"""

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops.gemm.mm.splitk import slices
from rapid_llm.kernels.ops.gemm.mm.w4a16 import (
    _MAGIC,
    _MAGIC_BITS,
    AWQ_MIN_BLOCK_N,
    _and_or,
    _common,
    _finish,
    _packed_tile,
    _spread,
    _zeros,
)


@triton.jit
def _group_sum(q, x_ptr, s_ptr, qz_ptr, group, safe_columns, rows, stride_s0, stride_s1, stride_z0, stride_z1,
               AWQ: tl.constexpr, V1_ZEROS: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
               ASM: tl.constexpr):  # fmt: skip
    """One group's scaled products in the accumulator's shape: AWQ [GROUP, BLOCK_N / 8, 8] (not summed over
    k), GPTQ [GROUP / 8, BLOCK_N] (summed over each word's 8 k, as the shipped kernel)."""
    offsets = _zeros(qz_ptr, group, safe_columns, stride_z0, stride_z1, AWQ, V1_ZEROS).to(tl.float32) + _MAGIC
    scales = tl.load(s_ptr + group * stride_s0 + safe_columns * stride_s1).to(tl.float32)
    if AWQ:
        values = (_spread(q, AWQ) | _MAGIC_BITS).to(tl.float32, bitcast=True)
        weights = values - tl.reshape(offsets, (BLOCK_N // 8, 8))[None, :, :]
        xs = tl.load(x_ptr + group * GROUP + tl.arange(0, GROUP)).to(tl.float32)
        return weights * (xs[:, None, None] * tl.reshape(scales, (BLOCK_N // 8, 8))[None, :, :])
    else:
        sums = tl.zeros((GROUP // 8, BLOCK_N), dtype=tl.float32)
        x_sums = tl.zeros((GROUP // 8,), dtype=tl.float32)
        high = q >> 16
        for i in tl.static_range(8):
            xs = tl.load(x_ptr + group * GROUP + 8 * rows + i).to(tl.float32)
            x_sums += xs
            if i < 4:
                values = _and_or(q, 15 << (4 * (i % 4)), ASM) - _MAGIC
            else:
                values = _and_or(high, 15 << (4 * (i % 4)), ASM) - _MAGIC
            sums += values * (xs * (0.0625 ** (i % 4)))[:, None]
        return (sums - (offsets - _MAGIC)[None, :] * x_sums[:, None]) * scales[None, :]


@triton.jit
def gemv_variant_kernel(
    x_ptr,
    qw_ptr,
    s_ptr,
    qz_ptr,
    bias_ptr,
    stride_q0,
    stride_q1,
    stride_s0,
    stride_s1,
    stride_z0,
    stride_z1,
    stride_bias,
    out_ptr,
    N,
    K,
    groups_per_split,
    AWQ: tl.constexpr,
    V1_ZEROS: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DEPTH: tl.constexpr,
    ASM: tl.constexpr,
):
    tl.static_assert(DEPTH == 1 or DEPTH == 2, "one or two groups in flight")
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    safe_columns = tl.where(columns < N, columns, (N - 8) + columns % 8).to(tl.int64)
    first = split * groups_per_split
    last = tl.minimum(first + groups_per_split, K // GROUP) - 1
    rows = tl.arange(0, GROUP // 8)
    if AWQ:
        acc = tl.zeros((GROUP, BLOCK_N // 8, 8), dtype=tl.float32)
    else:
        acc = tl.zeros((GROUP // 8, BLOCK_N), dtype=tl.float32)
    q = _packed_tile(qw_ptr, first * GROUP, first_column, safe_columns, stride_q0, stride_q1, N, GROUP, BLOCK_N, AWQ)
    if DEPTH == 2:
        q1 = _packed_tile(
            qw_ptr, tl.minimum(first + 1, last) * GROUP, first_column, safe_columns, stride_q0, stride_q1, N, GROUP,
            BLOCK_N, AWQ,
        )  # fmt: skip
    for group in range(first, last + 1):
        following = tl.minimum(group + DEPTH, last)
        q_next = _packed_tile(
            qw_ptr, following * GROUP, first_column, safe_columns, stride_q0, stride_q1, N, GROUP, BLOCK_N, AWQ
        )
        acc += _group_sum(q, x_ptr, s_ptr, qz_ptr, group, safe_columns, rows, stride_s0, stride_s1, stride_z0,
                          stride_z1, AWQ, V1_ZEROS, GROUP, BLOCK_N, ASM)  # fmt: skip
        if DEPTH == 2:
            q = q1
            q1 = q_next
        else:
            q = q_next
    if AWQ:
        result = tl.reshape(tl.sum(acc, axis=0), (BLOCK_N,))
    else:
        result = tl.sum(acc, axis=0)
    tl.store(out_ptr + split.to(tl.int64) * N + columns, result.to(out_ptr.dtype.element_ty), mask=columns < N)


def launch(x, qweight, scales, qzeros, group_size, packing, out, BLOCK_N, SPLIT_K, DEPTH, num_warps, num_stages=1):
    """x [1, K] -> out [1, N] (no bias), the shipped launch's slicing and merge."""
    k = x.shape[1]
    n = out.shape[1]
    if packing == "awq":
        BLOCK_N = max(BLOCK_N, AWQ_MIN_BLOCK_N)
    split, per = slices(k // group_size, SPLIT_K)
    partial = out if split == 1 else torch.empty((split, 1, n), dtype=torch.float32, device=x.device)
    gemv_variant_kernel[(triton.cdiv(n, BLOCK_N), split)](
        x, *_common(qweight, scales, qzeros, None), partial, n, k, per, AWQ=packing == "awq",
        V1_ZEROS=packing == "gptq", GROUP=group_size, BLOCK_N=BLOCK_N, DEPTH=DEPTH, ASM=x.is_cuda,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    _finish(partial, None, out, split)
    return out
