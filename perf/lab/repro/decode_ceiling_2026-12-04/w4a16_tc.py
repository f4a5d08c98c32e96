"""Lab: gemm.w4a16_mm (GPTQ and AWQ packings) at decode token counts on the tensor cores, the weight on the MMA's M side.

out[m, n] = sum_g scale[g, n] * sum_{k in g} x[m, k] (q[k, n] - z[g, n])

Per group the nibbles are ORed into the bits of a 16-bit float m16 (1024: fp16 bits 0x6400; 128: bf16 0x4300),
two at a time (nibbles j and j + 4 of a word land in the two halves of one register: one shift and one lop3),
giving m16 + q exactly with no int-to-float conversion; stacked into the [BLOCK_N, g] tile in k order, less
m16 + z (q - z: an integer, exact), multiplied by the [g, BLOCK_M] token tile in the tensor cores (exact
products, fp32 sums) and the group's [BLOCK_N, BLOCK_M] product scaled in fp32. Program (j, s) owns columns j * BLOCK_N.. and the
s-th slice of groups; SPLIT_K > 1 writes fp32 slices [SPLIT_K, M, N] merged in order (mm/splitk.py).

x: [M, K] fp16/bf16 (unit stride along K), M <= BLOCK_M; qweight int32 [K/8, N]; scales [K/g, N]; qzeros int32
[K/g, N/8] (GPTQ v1: zero - 1 stored; v2: the zero).
"""

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops.gemm.mm.splitk import merge, slices


@triton.jit
def _half_values(words, SHIFT: tl.constexpr, MAGIC16: tl.constexpr, DTYPE: tl.constexpr):
    """Nibble SHIFT / 4 of every word as the 16-bit float MAGIC16-bits | nibble (= m16 + q)."""
    bits = ((words >> SHIFT) & 15) | MAGIC16
    return bits.to(tl.int16).to(DTYPE, bitcast=True)


@triton.jit
def _half_pairs(words, SHIFT: tl.constexpr, MAGIC16: tl.constexpr, DTYPE: tl.constexpr, ASM: tl.constexpr):
    """Nibbles SHIFT / 4 and SHIFT / 4 + 4 of every word as 16-bit floats m16 + q: on CUDA one shift and one
    lop3 for both (the two nibbles land in the two halves of one register: a packed pair)."""
    if ASM:
        if DTYPE == tl.float16:
            low, high = tl.inline_asm_elementwise(
                asm=f"{{ .reg .b32 t; shr.u32 t, $2, {SHIFT}; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA; "
                "mov.b32 {$0, $1}, t; }",
                constraints="=h,=h,r",
                args=[words],
                dtype=(tl.float16, tl.float16),
                is_pure=True,
                pack=1,
            )
        else:
            low, high = tl.inline_asm_elementwise(
                asm=f"{{ .reg .b32 t; shr.u32 t, $2, {SHIFT}; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; "
                "mov.b32 {$0, $1}, t; }",
                constraints="=h,=h,r",
                args=[words],
                dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True,
                pack=1,
            )
        return low, high
    else:
        return _half_values(words, SHIFT, MAGIC16, DTYPE), _half_values(words, SHIFT + 16, MAGIC16, DTYPE)


@triton.jit
def _stacked_pairs(words, MAGIC16: tl.constexpr, DTYPE: tl.constexpr, ASM: tl.constexpr):
    """words [..] -> [.., 2, 2, 2] 16-bit floats m16 + nibble: element (a, b, c) is nibble 2c + b + 4a."""
    low0, high0 = _half_pairs(words, 0, MAGIC16, DTYPE, ASM)
    low1, high1 = _half_pairs(words, 4, MAGIC16, DTYPE, ASM)
    low2, high2 = _half_pairs(words, 8, MAGIC16, DTYPE, ASM)
    low3, high3 = _half_pairs(words, 12, MAGIC16, DTYPE, ASM)
    return tl.join(
        tl.join(tl.join(low0, high0), tl.join(low1, high1)), tl.join(tl.join(low2, high2), tl.join(low3, high3))
    )


@triton.jit
def w4a16_tc_kernel(
    x_ptr,
    qw_ptr,
    s_ptr,
    qz_ptr,
    out_ptr,
    M,
    N,
    stride_xm,
    stride_q0,
    stride_s0,
    stride_z0,
    groups,
    groups_per_split,
    AWQ: tl.constexpr,
    V1_ZEROS: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ASM: tl.constexpr,
):
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    MAGIC16: tl.constexpr = 0x6400 if DTYPE == tl.float16 else 0x4300
    M16: tl.constexpr = 1024.0 if DTYPE == tl.float16 else 128.0
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    safe_columns = tl.where(columns < N, columns, (N - 8) + columns % 8).to(tl.int64)
    tokens = tl.arange(0, BLOCK_M)
    safe_tokens = tl.where(tokens < M, tokens, M - 1).to(tl.int64)
    first = split * groups_per_split
    last = tl.minimum(first + groups_per_split, groups)
    word_rows = tl.arange(0, GROUP // 8)
    ks = tl.arange(0, GROUP)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    word_columns = tl.minimum(first_column // 8 + tl.arange(0, BLOCK_N // 8), N // 8 - 1).to(tl.int64)
    for group in range(first, last):
        if AWQ:  # [GROUP, BLOCK_N / 8] words: 8 columns of one k each
            words = tl.load(qw_ptr + (group * GROUP + ks)[:, None] * stride_q0 + word_columns[None, :])
        else:  # [GROUP / 8, BLOCK_N] words: 8 k of one column each
            words = tl.load(qw_ptr + (group * (GROUP // 8) + word_rows)[:, None] * stride_q0 + safe_columns[None, :])
        # nibbles j and j + 4 of every word as m16 + q, [.., 2 (a), 2 (b), 2 (c)]: element (a, b, c) is nibble
        # 2c + b + 4a; less m16 + zero: q - zero, an integer, exact in 16 bits, so every product with x is exact
        # in the tensor cores' fp32 sums (as the reference's)
        nibbles = _stacked_pairs(words, MAGIC16, DTYPE, ASM)
        if AWQ:
            # the zeros' words are packed as the weights' rows: the same pairs give each column's m16 + zero
            zero_words = tl.load(qz_ptr + group * stride_z0 + word_columns)
            nibbles = nibbles - _stacked_pairs(zero_words, MAGIC16, DTYPE, ASM)[None, :, :, :, :]
            # AutoAWQ's order puts columns 2j and 2j + 1 in nibbles j and j + 4: element (k, w, a, b, c) is column
            # 8w + 4c + 2b + a; (w, c, b, a, k) -> [BLOCK_N, GROUP]
            tile = tl.reshape(tl.permute(nibbles, (1, 4, 3, 2, 0)), (BLOCK_N, GROUP))
        else:
            zero_words = tl.load(qz_ptr + group * stride_z0 + safe_columns // 8)
            zeros = ((zero_words >> (4 * (safe_columns % 8)).to(tl.int32)) & 15).to(tl.float32)
            if V1_ZEROS:
                zeros += 1.0
            nibbles = nibbles - (M16 + zeros).to(DTYPE)[None, :, None, None, None]
            # element (r, n, a, b, c) is k = 8r + 4a + 2c + b; (n, r, a, c, b) -> [BLOCK_N, GROUP]
            tile = tl.reshape(tl.permute(nibbles, (1, 0, 2, 4, 3)), (BLOCK_N, GROUP))
        x_tile = tl.load(x_ptr + safe_tokens[:, None] * stride_xm + (group * GROUP + ks)[None, :])  # [BLOCK_M, GROUP]
        product = tl.dot(tile, tl.trans(x_tile))  # [BLOCK_N, BLOCK_M]: sum_k (q - zero) x
        scales = tl.load(s_ptr + group * stride_s0 + safe_columns).to(tl.float32)
        acc += product * scales[:, None]
    target = out_ptr + split.to(tl.int64) * M * N + tokens.to(tl.int64)[None, :] * N + columns[:, None]
    tl.store(target, acc.to(out_ptr.dtype.element_ty), mask=(columns[:, None] < N) & (tokens[None, :] < M))


def launch(x, qweight, scales, qzeros, group_size, packing, out, BLOCK_N=64, SPLIT_K=8, num_warps=4, num_stages=2):
    """x [M, K] (M <= 16, unit stride along K), contiguous qweight / scales / qzeros -> out [M, N] contiguous."""
    assert x.stride(1) == 1 and x.shape[0] <= 16
    m, k = x.shape
    n = out.shape[1]
    split, per = slices(k // group_size, SPLIT_K)
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    w4a16_tc_kernel[(triton.cdiv(n, BLOCK_N), split)](
        x, qweight, scales, qzeros, partial, m, n, x.stride(0), qweight.stride(0), scales.stride(0),
        qzeros.stride(0), k // group_size, per, AWQ=packing == "awq", V1_ZEROS=packing == "gptq", GROUP=group_size, BLOCK_M=16,
        BLOCK_N=BLOCK_N, ASM=x.is_cuda, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    if split > 1:
        merge(partial, None, out, split)
    return out
