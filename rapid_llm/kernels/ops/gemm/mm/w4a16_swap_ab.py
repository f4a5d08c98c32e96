"""native/w4a16_mm_swap_ab: gemm.w4a16_mm at decode token counts (M <= 16) on the tensor cores, the weight tile
on the MMA's M side and the tokens on its N side.

out[m, n] = sum_g scale[g, n] * sum_{k in g} x[m, k] (q[k, n] - z[g, n])   (+ bias[n])

x: [M, K] fp16/bf16 rows (x:rows: unit stride along K); qweight, scales, qzeros, bias as the op's contract
(ops/gemm/__init__.py: GPTQ v1 / v2 [K/8, N] words packed along K, AWQ [K, N/8] packed along N in AutoAWQ's
order), any strides; out: [M, N] new, contiguous.

Per group of g k, program (j, s) loads the group's words for columns j * BLOCK_N.. and ORs each nibble into
the bits of a 16-bit float m16 (1024: fp16 bits 0x6400; 128: bf16 bits 0x4300), two nibbles at a time: nibbles
i and i + 4 of a word land in the two halves of one register (one shift and one lop3 on CUDA), giving m16 + q
exactly with no int-to-float conversion. Stacked in order into the [BLOCK_N, g] tile (GPTQ: a word's nibbles
are 8 k of one column; AWQ: nibbles i and i + 4 are columns 2i and 2i + 1 of one k) less m16 + zero (q - zero:
an integer in -16..15, exact in 16 bits, so every product with x is exact in the tensor cores' fp32 sums, as
the reference's), it multiplies the [g, BLOCK_M] token tile; the group's [BLOCK_N, BLOCK_M] product is scaled
in fp32 and added to the accumulator. At one to 16 tokens the weight tile fills the MMA's 64-row M side, where
native/w4a16_mm puts the padded token tile and forms every weight as fp32 before converting it.
Program (j, s) owns columns j * BLOCK_N.. and the s-th of SPLIT_K runs of groups; SPLIT_K > 1 writes fp32
slices [SPLIT_K, M, N] that mm/splitk.py's merge adds in a fixed order with the bias, rounding once. Tiles
come from ops/gemm/tiles.py; M is not specialised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from . import prepare
from .splitk import merge, slices
from .w4a16 import AWQ_MIN_BLOCK_N, _common

ROW = "native/w4a16_mm_swap_ab"


def mm(x, qweight, scales, qzeros, group_size: int, packing: str, bias=None):
    """Unchecked kernel entry of native/w4a16_mm_swap_ab (the check ran: x:rows; the row's shape: M <= 16)."""
    n = scales.shape[1]
    out, rows, out_rows, knobs = prepare(ROW, x, n)
    if rows is not None:
        launch(rows, qweight, scales, qzeros, group_size, packing, bias, out_rows, knobs)
    return out


def launch(x, qweight, scales, qzeros, group_size, packing, bias, out, knobs: dict) -> None:
    """Launch over x [M, K] (M <= BLOCK_M) and out [M, N] (contiguous) with explicit knobs (perf/tune_gemm.py
    times candidates); BLOCK_N is raised to AWQ_MIN_BLOCK_N for AWQ (rows of BLOCK_N / 8 words)."""
    m, k = x.shape
    n = out.shape[1]
    knobs = dict(knobs)
    if m > knobs["BLOCK_M"]:
        raise ValueError(f"{ROW}: {m} tokens exceed the token tile BLOCK_M {knobs['BLOCK_M']}")
    if packing == "awq":
        knobs["BLOCK_N"] = max(knobs["BLOCK_N"], AWQ_MIN_BLOCK_N)
    split, per = slices(k // group_size, knobs.pop("SPLIT_K"))
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    _w4a16_swap_ab_kernel[(cdiv(n, knobs["BLOCK_N"]), split)](
        x,
        *_common(qweight, scales, qzeros, bias),
        partial,
        m,
        n,
        x.stride(0),
        k // group_size,
        per,
        AWQ=packing == "awq",
        V1_ZEROS=packing == "gptq",
        GROUP=group_size,
        HAS_BIAS=bias is not None and split == 1,
        ASM=x.is_cuda,
        **knobs,
    )
    if split > 1:
        merge(partial, bias, out, split)


@triton.jit
def _nibble_pairs(words, SHIFT: tl.constexpr, MAGIC: tl.constexpr, DTYPE: tl.constexpr, ASM: tl.constexpr):
    """(nibble SHIFT / 4, nibble SHIFT / 4 + 4) of every word as 16-bit floats m16 + nibble (MAGIC: m16's bits).
    On CUDA one shift and one lop3 form both in the halves of one register; the interpreter masks each."""
    if ASM:
        low, high = tl.inline_asm_elementwise(
            asm=f"{{ .reg .b32 t; shr.u32 t, $2, {SHIFT}; lop3.b32 t, t, 0x000F000F, {MAGIC * 65537}, 0xEA; "
            "mov.b32 {$0, $1}, t; }",
            constraints="=h,=h,r",
            args=[words],
            dtype=(tl.int16, tl.int16),
            is_pure=True,
            pack=1,
        )
    else:
        low = (((words >> SHIFT) & 15) | MAGIC).to(tl.int16)
        high = (((words >> (SHIFT + 16)) & 15) | MAGIC).to(tl.int16)
    return low.to(DTYPE, bitcast=True), high.to(DTYPE, bitcast=True)


@triton.jit
def _stacked_nibbles(words, MAGIC: tl.constexpr, DTYPE: tl.constexpr, ASM: tl.constexpr):
    """words [..] -> [.., 2, 2, 2] of m16 + nibble: element (a, b, c) is nibble 2c + b + 4a."""
    low0, high0 = _nibble_pairs(words, 0, MAGIC, DTYPE, ASM)
    low1, high1 = _nibble_pairs(words, 4, MAGIC, DTYPE, ASM)
    low2, high2 = _nibble_pairs(words, 8, MAGIC, DTYPE, ASM)
    low3, high3 = _nibble_pairs(words, 12, MAGIC, DTYPE, ASM)
    return tl.join(
        tl.join(tl.join(low0, high0), tl.join(low1, high1)), tl.join(tl.join(low2, high2), tl.join(low3, high3))
    )


@cached
@triton.jit(do_not_specialize=["M"])
def _w4a16_swap_ab_kernel(
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
    M,
    N,
    stride_xm,
    groups,
    groups_per_split,
    AWQ: tl.constexpr,
    V1_ZEROS: tl.constexpr,
    GROUP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ASM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    # m16: a 16-bit float whose low mantissa bits take a nibble exactly (fp16 1024, bf16 128) and its bits
    M16: tl.constexpr = 1024.0 if DTYPE == tl.float16 else 128.0
    MAGIC: tl.constexpr = 0x6400 if DTYPE == tl.float16 else 0x4300
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    # clamped reads (never stored): a column past N reads its nibble position in N's last word
    safe_columns = tl.where(columns < N, columns, (N - 8) + columns % 8).to(tl.int64)
    word_columns = tl.minimum(first_column // 8 + tl.arange(0, BLOCK_N // 8), N // 8 - 1).to(tl.int64)
    tokens = tl.arange(0, BLOCK_M)
    safe_tokens = tl.where(tokens < M, tokens, M - 1).to(tl.int64)
    first = split * groups_per_split
    last = tl.minimum(first + groups_per_split, groups)
    word_rows = tl.arange(0, GROUP // 8)
    ks = tl.arange(0, GROUP)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for group in range(first, last):
        # nibbles as m16 + q, less m16 + zero: q - zero, exact in 16 bits
        if AWQ:  # words [GROUP, BLOCK_N / 8]: 8 columns of one k each; the zeros' words packed the same way
            words = tl.load(qw_ptr + (group * GROUP + ks)[:, None] * stride_q0 + word_columns[None, :] * stride_q1)
            zero_words = tl.load(qz_ptr + group * stride_z0 + word_columns * stride_z1)
            nibbles = (
                _stacked_nibbles(words, MAGIC, DTYPE, ASM)
                - _stacked_nibbles(zero_words, MAGIC, DTYPE, ASM)[None, :, :, :, :]
            )
            # nibbles i and i + 4 are columns 2i and 2i + 1 (AutoAWQ's order): element (k, w, a, b, c) is column
            # 8w + 4c + 2b + a; (w, c, b, a, k) -> [BLOCK_N, GROUP]
            tile = tl.reshape(tl.permute(nibbles, (1, 4, 3, 2, 0)), (BLOCK_N, GROUP))
        else:  # words [GROUP / 8, BLOCK_N]: 8 k of one column each
            rows = (group * (GROUP // 8) + word_rows)[:, None] * stride_q0
            words = tl.load(qw_ptr + rows + safe_columns[None, :] * stride_q1)
            zero_words = tl.load(qz_ptr + group * stride_z0 + (safe_columns // 8) * stride_z1)
            zeros = ((zero_words >> (4 * (safe_columns % 8)).to(tl.int32)) & 15).to(tl.float32)
            if V1_ZEROS:
                zeros += 1.0  # GPTQ v1 stores zero - 1
            offsets = (M16 + zeros).to(DTYPE)
            nibbles = _stacked_nibbles(words, MAGIC, DTYPE, ASM) - offsets[None, :, None, None, None]
            # element (r, n, a, b, c) is k = 8r + 4a + 2c + b; (n, r, a, c, b) -> [BLOCK_N, GROUP]
            tile = tl.reshape(tl.permute(nibbles, (1, 0, 2, 4, 3)), (BLOCK_N, GROUP))
        x_tile = tl.load(x_ptr + safe_tokens[:, None] * stride_xm + (group * GROUP + ks)[None, :])  # [BLOCK_M, GROUP]
        product = tl.dot(tile, tl.trans(x_tile))  # [BLOCK_N, BLOCK_M]: sum_k (q - zero) x, exact products
        scales = tl.load(s_ptr + group * stride_s0 + safe_columns * stride_s1).to(tl.float32)
        acc += product * scales[:, None]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)[:, None]
    target = out_ptr + split.to(tl.int64) * M * N + tokens.to(tl.int64)[None, :] * N + columns[:, None]
    tl.store(target, acc.to(out_ptr.dtype.element_ty), mask=(columns[:, None] < N) & (tokens[None, :] < M))


__all__ = ["launch", "mm"]
