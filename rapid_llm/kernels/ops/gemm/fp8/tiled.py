"""native/fp8_block_mm: a persistent tiled fp8 GEMM with block scales, out = (a * a_scale) @ (b * b_scale).T
in bf16; native/fp8_mm: the same kernel with per-token/per-channel (or per-tensor) scales, + bias.

a: [M, K] float8_e4m3fn (layout a:tma: unit stride along K); b: [N, K] float8_e4m3fn (b:tma); scales as
fp8/__init__.py says (any strides); bias (fp8_mm): None or [N] in out's dtype, any stride; out: [M, N], any
strides (fp8_block_mm's out= is written in place).

One program per SM walks output tiles BLOCK_M x BLOCK_N in grouped order (GROUP_M tiles of M share a
column of b tiles, so b tiles are reused from L2). Each K step multiplies an fp8 [BLOCK_M, BLOCK_K] tile
of a by a [BLOCK_K, BLOCK_N] tile of b with tl.dot: in block mode (BLOCK_K == 128) a fresh fp32 product
scaled by a_scale[m, step] * b_scale[n // 128, step] and added to the fp32 accumulator; in channel mode
accumulated in the dot with promotion to fp32 every 128 of K (BLOCK_K a multiple of 128), the channel
scales (and the bias) applied once at the end. One rounding to out's dtype at the store. Loads clamp row and
column indices into range (no masks on M and N; the stores are masked); K is masked only when BLOCK_K
does not divide it (never in block mode: K % 128 == 0). M and the K-step stride of a_scale (which the
TMA-aligned layout ties to M) are not specialised: new token counts never recompile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...device_facts import multiprocessor_count
from ...fast_launch import cached, cdiv
from . import SCALE_BLOCK, Scales, block_entry, channel_entry

BLOCK_ROW = "native/fp8_block_mm"
CHANNEL_ROW = "native/fp8_mm"


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm (gemm.fp8_block_mm's check ran: a:tma and b:tma hold)."""
    return block_entry(BLOCK_ROW, launch, a, a_scale, b, b_scale, out)


def fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    """Unchecked kernel entry of native/fp8_mm (gemm.fp8_mm's check ran: a:tma and b:tma hold)."""
    return channel_entry(CHANNEL_ROW, launch, a, a_scale, b, b_scale, out_dtype, bias)


def launch(a, b, scales: Scales, bias, out, knobs: dict) -> None:
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (perf/tune_gemm.py times candidates)."""
    m, k = a.shape
    n = b.shape[0]
    tiles = cdiv(m, knobs["BLOCK_M"]) * cdiv(n, knobs["BLOCK_N"])
    programs = max(1, min(tiles, multiprocessor_count(a.device)))
    _fp8_mm_kernel[(programs,)](
        a,
        b,
        scales.a,
        scales.b,
        bias if bias is not None else out,
        out,
        m,
        n,
        k,
        a.stride(0),
        b.stride(0),
        *scales.a_strides,
        *scales.b_strides,
        bias.stride(0) if bias is not None else 0,
        *out.stride(),
        BLOCK_SCALES=scales.blocks,
        SCALE_K=SCALE_BLOCK,
        HAS_BIAS=bias is not None,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        NUM_PROGRAMS=programs,
        **knobs,
    )


@triton.jit
def accumulate(
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
    BLOCK_SCALES: tl.constexpr,
    SCALE_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """The fp32 tile sum over K steps first_step .. first_step + steps - 1 of the fp8 tiles' products, at
    most 128 of K accumulated in the fp8 tensor cores before an fp32 add; block mode: a fresh tl.dot per
    step, scaled by a_scale[m, step] and b_scale[n // 128, step] before it is added."""
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + safe_rows[:, None] * stride_am + (first_step * BLOCK_K + ks)[None, :]
    b_tile = b_ptr + safe_columns[None, :] * stride_bn + (first_step * BLOCK_K + ks)[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    weight_block = tl.min(safe_columns, axis=0) // SCALE_K  # the tile's first column's block of b's rows
    for offset in range(steps):
        step = first_step + offset
        if EVEN_K:
            a = tl.load(a_tile)
            b = tl.load(b_tile)
        else:
            left = K - step * BLOCK_K
            a = tl.load(a_tile, mask=ks[None, :] < left, other=0.0)
            b = tl.load(b_tile, mask=ks[:, None] < left, other=0.0)
        if BLOCK_SCALES:
            # A fresh dot per 128-wide step (the fp8 tensor cores accumulate that step), scaled in fp32.
            product = tl.dot(a, b)
            row_scale = tl.load(a_scale_ptr + safe_rows * stride_asm + step * stride_ask)
            if BLOCK_N <= SCALE_K:  # the tile lies in one 128-row block of b: one weight scale, one FMA
                column_scale = tl.load(b_scale_ptr + weight_block * stride_bsn + step * stride_bsk)
                acc += product * (row_scale * column_scale)[:, None]
            else:
                column_scale = tl.load(b_scale_ptr + (safe_columns // SCALE_K) * stride_bsn + step * stride_bsk)
                acc += product * row_scale[:, None] * column_scale[None, :]
        else:
            # Accumulated in the dot, promoted to fp32 every 128 of K (sm90's default would let the fp8
            # tensor cores accumulate the whole K at reduced precision).
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=SCALE_K)
        a_tile += BLOCK_K
        b_tile += BLOCK_K
    return acc


@triton.jit
def finish_tile(
    acc,
    a_scale_ptr,
    b_scale_ptr,
    bias_ptr,
    out_ptr,
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
    BLOCK_SCALES: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """Channel scales and bias on the fp32 tile, one rounding, the masked store."""
    if not BLOCK_SCALES:
        row_scale = tl.load(a_scale_ptr + safe_rows * stride_asm)
        column_scale = tl.load(b_scale_ptr + safe_columns * stride_bsn)
        acc = acc * row_scale[:, None] * column_scale[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + safe_columns * stride_bias).to(tl.float32)[None, :]
    out_tile = out_ptr + rows.to(tl.int64)[:, None] * stride_om + columns.to(tl.int64)[None, :] * stride_on
    tl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (columns[None, :] < N))


@cached
@triton.jit(do_not_specialize=["M", "stride_ask"])
def _fp8_mm_kernel(
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
    BLOCK_SCALES: tl.constexpr,
    SCALE_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    if BLOCK_SCALES:
        tl.static_assert(BLOCK_K == SCALE_K, "block scales: one scale per K step")
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_group = GROUP_M * tiles_n
    for tile in range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        first_m = (tile // per_group) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        rows = (first_m + (tile % per_group) % group_rows) * BLOCK_M + tl.arange(0, BLOCK_M)
        columns = ((tile % per_group) // group_rows) * BLOCK_N + tl.arange(0, BLOCK_N)
        safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
        safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
        acc = accumulate(
            a_ptr,
            b_ptr,
            a_scale_ptr,
            b_scale_ptr,
            safe_rows,
            safe_columns,
            0,
            k_steps,
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
        finish_tile(
            acc,
            a_scale_ptr,
            b_scale_ptr,
            bias_ptr,
            out_ptr,
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
