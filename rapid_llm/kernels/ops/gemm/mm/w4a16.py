"""gemm.w4a16_mm's native kernels: int4 weights read as GPTQ (v1, v2) or AWQ checkpoints store them (the contract
in ops/gemm/__init__.py states the packings), unpacked in registers; no repack. "gptq_v2" is the "gptq" layout
with zeros stored as they are (V1_ZEROS off): every GPTQ path below serves it.

native/w4a16_mm_gemv (M == 1, CUDA cores, every dtype under the CPU interpreter): program (j, s) owns the
BLOCK_N columns from j * BLOCK_N and the s-th of SPLIT_K runs of whole groups along K. Per group it loads the
group's packed words once ([g/8, BLOCK_N] words for GPTQ, [g, BLOCK_N/8] for AWQ: rows of coalesced int32
loads), the next group's words before this one's are summed (one group always in flight), and forms q - zero
in fp32 without an int -> float conversion: a nibble ORed into the bits of 2**23 is the float 2**23 + q.
GPTQ (a word's 8 nibbles are 8 k of one column): nibble i is masked in place within its half word (one lop3;
the upper half shifted down once), giving 2**23 + 16**j q (j = i mod 4, inside the mantissa), minus 2**23 is
16**j q exactly, and x carries the 16**-j; t = sum_i q_i x_i - zero * sum_i x_i per word (exact products),
scaled once per word into a [g/8, BLOCK_N] fp32 accumulator summed over its rows after the K loop (no
reduction across threads inside it). AWQ (a word's nibbles are 8 columns of one k): the words spread into
[g, BLOCK_N/8, 8] with shifts, q - zero against 2**23 + zero, t summed over the group's k (across threads,
every group) and scale[n] * t[n] added to the column's fp32 sum. The slices go to an fp32 [SPLIT_K, 1, N]
buffer that mm/splitk.py's merge kernel adds in a fixed order with the bias, rounding once (deterministic;
SPLIT_K = 1 writes out directly).

native/w4a16_mm (every M, tl.dot): program (j, i, s) owns rows i * BLOCK_M.., columns j * BLOCK_N.. and the
s-th slice of K steps. Each step of BLOCK_K (a divisor of the group size: one group per step) unpacks its
weight tile to the integers q - zero (-16..15, exact in fp16/bf16), multiplies it with tl.dot in fp32, and adds
the product times the group's scales to the fp32 accumulator (the scale on the fp32 product: no rounding of a
dequantized weight). SPLIT_K > 1 (decode token counts) writes fp32 slices merged as above.

Knobs come from ops/gemm/tiles.py (kernel names ROW and GEMV_ROW); M is not specialised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from . import prepare
from .splitk import merge, slices

ROW = "native/w4a16_mm"
#: 2**23 and its fp32 bits: a nibble q ORed into the bits is the float 2**23 + q (no int -> float conversion).
_MAGIC = tl.constexpr(8388608.0)
_MAGIC_BITS = tl.constexpr(0x4B000000)
#: AWQ's rows of words are BLOCK_N / 8 words: below 64 columns a row reads less than one 32-byte sector (the
#: tuning store's entries are keyed without the packing, and tuned on GPTQ, whose rows are BLOCK_N words).
AWQ_MIN_BLOCK_N = 64
GEMV_ROW = "native/w4a16_mm_gemv"


def gemv(x, qweight, scales, qzeros, group_size: int, packing: str, bias=None):
    """Unchecked kernel entry of native/w4a16_mm_gemv (the check ran: x:rows; the row's shape: M == 1)."""
    n = scales.shape[1]
    out, rows, out_rows, knobs = prepare(GEMV_ROW, x, n)
    if rows is not None:
        launch_gemv(rows, qweight, scales, qzeros, group_size, packing, bias, out_rows, knobs)
    return out


def mm(x, qweight, scales, qzeros, group_size: int, packing: str, bias=None):
    """Unchecked kernel entry of native/w4a16_mm (the check ran: x:rows)."""
    n = scales.shape[1]
    out, rows, out_rows, knobs = prepare(ROW, x, n)
    if rows is not None:
        launch_mm(rows, qweight, scales, qzeros, group_size, packing, bias, out_rows, knobs)
    return out


def _finish(partial, bias, out, split: int) -> None:
    """Add the fp32 slices [split, M, N] in order (plus the bias) into out, rounding once (split 1: written)."""
    if split > 1:
        merge(partial, bias, out, split)


def _common(qweight, scales, qzeros, bias):
    """The pointer and stride arguments both kernels take after x."""
    has_bias = bias is not None
    return (
        qweight,
        scales,
        qzeros,
        bias if has_bias else scales,
        *qweight.stride(),
        *scales.stride(),
        *qzeros.stride(),
        bias.stride(0) if has_bias else 0,
    )


def launch_gemv(x, qweight, scales, qzeros, group_size, packing, bias, out, knobs: dict) -> None:
    """Launch over x [1, K] and out [1, N] with explicit knobs (perf/tune_gemm.py times candidates); BLOCK_N is
    raised to AWQ_MIN_BLOCK_N for AWQ."""
    k = x.shape[1]
    n = out.shape[1]
    knobs = {name: value for name, value in knobs.items() if name != "BLOCK_M"}
    if packing == "awq":
        knobs["BLOCK_N"] = max(knobs["BLOCK_N"], AWQ_MIN_BLOCK_N)
    split, per = slices(k // group_size, knobs.pop("SPLIT_K"))
    partial = out if split == 1 else torch.empty((split, 1, n), dtype=torch.float32, device=x.device)
    _gemv_kernel[(cdiv(n, knobs["BLOCK_N"]), split)](
        x,
        *_common(qweight, scales, qzeros, bias),
        partial,
        n,
        k,
        per,
        AWQ=packing == "awq",
        V1_ZEROS=packing == "gptq",
        GROUP=group_size,
        HAS_BIAS=bias is not None and split == 1,
        ASM=x.is_cuda,
        **knobs,
    )
    _finish(partial, bias, out, split)


def launch_mm(x, qweight, scales, qzeros, group_size, packing, bias, out, knobs: dict) -> None:
    """Launch over x [M, K] and out [M, N] with explicit knobs; BLOCK_K is capped at the group size (and
    BLOCK_N raised to AWQ_MIN_BLOCK_N for AWQ)."""
    m, k = x.shape
    n = out.shape[1]
    knobs = dict(knobs)
    knobs["BLOCK_K"] = min(knobs["BLOCK_K"], group_size)  # powers of two: a divisor of the group
    if packing == "awq":
        knobs["BLOCK_N"] = max(knobs["BLOCK_N"], AWQ_MIN_BLOCK_N)
    split, per = slices(k // knobs["BLOCK_K"], knobs.pop("SPLIT_K"))
    partial = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (cdiv(n, knobs["BLOCK_N"]), cdiv(m, knobs["BLOCK_M"]), split)
    _mm_kernel[grid](
        x,
        *_common(qweight, scales, qzeros, bias),
        partial,
        m,
        n,
        k,
        x.stride(0),
        per,
        AWQ=packing == "awq",
        V1_ZEROS=packing == "gptq",
        GROUP=group_size,
        HAS_BIAS=bias is not None and split == 1,
        **knobs,
    )
    _finish(partial, bias, out, split)


@triton.jit
def _and_or(word, MASK: tl.constexpr, ASM: tl.constexpr):
    """(word & MASK) | 2**23's bits as fp32: one lop3 on CUDA (ASM); the compiler splits it in two, both
    operands being immediates. For MASK = 15 << 4j the float is 2**23 + nibble * 16**j, exact for j < 5."""
    if ASM:
        bits = tl.inline_asm_elementwise(
            asm=f"lop3.b32 $0, $1, {MASK}, 0x4B000000, 0xEA;",
            constraints="=r,r",
            args=[word],
            dtype=tl.int32,
            is_pure=True,
            pack=1,
        )
    else:
        bits = (word & MASK) | _MAGIC_BITS
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _nibble_shifts(AWQ: tl.constexpr):
    """[8] int32: the shift of entry j of a word's 8 values (GPTQ: 4j; AWQ: column 8c + j is nibble
    [0, 4, 1, 5, 2, 6, 3, 7][j], the inverse of AutoAWQ's packing order [0, 2, 4, 6, 1, 3, 5, 7])."""
    j = tl.arange(0, 8)
    if AWQ:
        return 4 * (j // 2 + 4 * (j % 2))
    else:
        return 4 * j


@triton.jit
def _packed_tile(
    qw_ptr,
    first_k,
    first_column,
    safe_columns,
    stride_q0,
    stride_q1,
    N,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    AWQ: tl.constexpr,
):
    """The int32 words holding weight rows first_k.. first_k + ROWS - 1 (first_k a multiple of 8) at the BLOCK_N
    columns from first_column (a multiple of 8; safe_columns their clamped indices, so reads past N hit N's last
    word): GPTQ [ROWS / 8, BLOCK_N] (row r holds k = first_k + 8r + i), AWQ [ROWS, BLOCK_N / 8]."""
    if AWQ:
        words = tl.minimum((first_column // 8 + tl.arange(0, BLOCK_N // 8)).to(tl.int64), N // 8 - 1)
        ks = first_k + tl.arange(0, ROWS)
        return tl.load(qw_ptr + ks[:, None] * stride_q0 + words[None, :] * stride_q1)
    else:
        packed = first_k // 8 + tl.arange(0, ROWS // 8)
        return tl.load(qw_ptr + packed[:, None] * stride_q0 + safe_columns[None, :] * stride_q1)


@triton.jit
def _spread(q, AWQ: tl.constexpr):
    """_packed_tile's words as 3-d values 0..15: GPTQ [ROWS / 8, 8, BLOCK_N] (k = 8r + i), AWQ
    [ROWS, BLOCK_N / 8, 8] (column 8c + j)."""
    shifts = _nibble_shifts(AWQ)
    if AWQ:
        return (q[:, :, None] >> shifts[None, None, :]) & 15
    else:
        return (q[:, None, :] >> shifts[None, :, None]) & 15


@triton.jit
def _zeros(qz_ptr, group, safe_columns, stride_z0, stride_z1, AWQ: tl.constexpr, V1_ZEROS: tl.constexpr):
    """The zeros of `group` at the columns, int32: 1..16 (GPTQ v1 stores zero - 1: V1_ZEROS) or the nibble
    0..15 (gptq_v2, AWQ)."""
    j = (safe_columns % 8).to(tl.int32)
    words = tl.load(qz_ptr + group * stride_z0 + (safe_columns // 8) * stride_z1)
    if AWQ:
        return (words >> (4 * (j // 2 + 4 * (j % 2)))) & 15
    elif V1_ZEROS:
        return ((words >> (4 * j)) & 15) + 1
    else:
        return (words >> (4 * j)) & 15


@cached
@triton.jit
def _gemv_kernel(
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
    HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ASM: tl.constexpr,
):
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    # clamped reads (never stored): a column past N reads its nibble position in N's last word
    safe_columns = tl.where(columns < N, columns, (N - 8) + columns % 8).to(tl.int64)
    first = split * groups_per_split
    last = tl.minimum(first + groups_per_split, K // GROUP) - 1
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # GPTQ: one [GROUP / 8, BLOCK_N] accumulator of scaled sums, reduced over its rows once after the loop
    # (a per-group reduction across threads would cost a shared-memory round trip every group)
    rows_acc = tl.zeros((GROUP // 8, BLOCK_N), dtype=tl.float32)
    rows = tl.arange(0, GROUP // 8)
    # one group ahead: the next group's words are in flight while this one's are summed
    q = _packed_tile(qw_ptr, first * GROUP, first_column, safe_columns, stride_q0, stride_q1, N, GROUP, BLOCK_N, AWQ)
    for group in range(first, last + 1):
        following = tl.minimum(group + 1, last)
        q_next = _packed_tile(
            qw_ptr, following * GROUP, first_column, safe_columns, stride_q0, stride_q1, N, GROUP, BLOCK_N, AWQ
        )
        # q - zero as fp32 without an int -> float conversion (a fraction of the add rate): the nibble
        # ORed into the mantissa of 2**23 is the float 2**23 + q, and 2**23 + zero is exact too
        offsets = _zeros(qz_ptr, group, safe_columns, stride_z0, stride_z1, AWQ, V1_ZEROS).to(tl.float32) + _MAGIC
        scales = tl.load(s_ptr + group * stride_s0 + safe_columns * stride_s1).to(tl.float32)
        if AWQ:  # values [GROUP, BLOCK_N / 8, 8]
            values = (_spread(q, AWQ) | _MAGIC_BITS).to(tl.float32, bitcast=True)
            weights = values - tl.reshape(offsets, (BLOCK_N // 8, 8))[None, :, :]
            xs = tl.load(x_ptr + group * GROUP + tl.arange(0, GROUP)).to(tl.float32)
            t = tl.reshape(tl.sum(weights * xs[:, None, None], axis=0), (BLOCK_N,))
            acc += scales * t  # t: exact products x * (q - zero), fp32 sums
        else:  # q [GROUP / 8, BLOCK_N]: nibble i of row r is k = group * GROUP + 8r + i
            # sum_i q_i x_i - zero * sum_i x_i per word (q_i x_i exact): the zero costs one multiply per word,
            # not a subtraction per nibble
            sums = tl.zeros((GROUP // 8, BLOCK_N), dtype=tl.float32)
            x_sums = tl.zeros((GROUP // 8,), dtype=tl.float32)
            high = q >> 16  # nibbles 4..7 in bits 0..15 (one shift a word)
            for i in tl.static_range(8):
                xs = tl.load(x_ptr + group * GROUP + 8 * rows + i).to(tl.float32)
                x_sums += xs
                # nibble i left in place within its half word, at bits 4j..4j+3 (j = i mod 4: inside the
                # 23 mantissa bits): 16**j q_i, and x carries 16**-j (powers of two: exact)
                if i < 4:
                    values = _and_or(q, 15 << (4 * (i % 4)), ASM) - _MAGIC
                else:
                    values = _and_or(high, 15 << (4 * (i % 4)), ASM) - _MAGIC
                sums += values * (xs * (0.0625 ** (i % 4)))[:, None]
            rows_acc += (sums - (offsets - _MAGIC)[None, :] * x_sums[:, None]) * scales[None, :]
        q = q_next
    if not AWQ:
        acc += tl.sum(rows_acc, axis=0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)
    tl.store(out_ptr + split.to(tl.int64) * N + columns, acc.to(out_ptr.dtype.element_ty), mask=columns < N)


@cached
@triton.jit(do_not_specialize=["M"])
def _mm_kernel(
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
    K,
    stride_xm,
    steps_per_split,
    AWQ: tl.constexpr,
    V1_ZEROS: tl.constexpr,
    GROUP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    split = tl.program_id(2)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
    safe_columns = tl.where(columns < N, columns, (N - 8) + columns % 8).to(tl.int64)
    first = split * steps_per_split
    steps = tl.minimum(steps_per_split, K // BLOCK_K - first)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for index in range(0, steps):
        start = (first + index) * BLOCK_K
        group = start // GROUP
        a = tl.load(x_ptr + safe_rows[:, None] * stride_xm + (start + tl.arange(0, BLOCK_K))[None, :])
        words = _packed_tile(qw_ptr, start, first_column, safe_columns, stride_q0, stride_q1, N, BLOCK_K, BLOCK_N, AWQ)
        values = tl.reshape(_spread(words, AWQ) | _MAGIC_BITS, (BLOCK_K, BLOCK_N)).to(tl.float32, bitcast=True)
        offsets = _zeros(qz_ptr, group, safe_columns, stride_z0, stride_z1, AWQ, V1_ZEROS).to(tl.float32) + _MAGIC
        b = (values - offsets[None, :]).to(a.dtype)  # q - zero, -16..15: exact (as _gemv_kernel forms it)
        scales = tl.load(s_ptr + group * stride_s0 + safe_columns * stride_s1).to(tl.float32)
        acc += tl.dot(a, b) * scales[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)[None, :]
    slice_out = out_ptr + split.to(tl.int64) * M * N + rows.to(tl.int64)[:, None] * N + columns[None, :]
    tl.store(slice_out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (columns[None, :] < N))
