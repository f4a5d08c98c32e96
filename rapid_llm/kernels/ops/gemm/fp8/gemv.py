"""native/fp8_block_mm_gemv: gemm.fp8_block_mm for one token (M == 1) on the CUDA cores.

out[0, n] = sum_k b[n, k] * (a[0, k] * a_scale[0, k // 128] * b_scale[n // 128, k // 128])

a: [1, K] e4m3, b: [N, K] e4m3 (a:tma, b:tma: unit stride along K), K % 128 == 0; a_scale [1, K/128] and
b_scale [ceil(N/128), K/128] fp32, any strides; out [1, N] bf16, any stride.

At one token the GEMM is a weight stream with one multiply-add per weight byte; the tensor-core kernels
pad the token to a 16-row tile and promote every 128-wide K step. Here (as native/w8a16_mm_gemv) program j
owns the output columns j * BLOCK_N ... (BLOCK_N divides 128: one weight block scale per K group), keeps
each BLOCK_N x BLOCK_K weight tile in the registers it was loaded into, widens it to fp32 and multiplies by
the activation row with both scales folded in (a[k] * a_scale * b_scale, a [BLOCK_K] vector per step), and
reduces along K once at the end: fp32 throughout, one rounding to bf16. No tl.dot; the e4m3 -> fp32
widening is exact (the CPU interpreter computes the same numbers). Tiles (BLOCK_N, BLOCK_K: a multiple of
128, warps, stages) come from ops/gemm/tiles.py.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...fast_launch import cached, cdiv
from . import SCALE_BLOCK, block_entry, check_knobs

ROW = "native/fp8_block_mm_gemv"


def fp8_block_mm_gemv(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm_gemv (gemm.fp8_block_mm's check ran; the row's
    conditions hold: M == 1, a:tma, b:tma)."""
    return block_entry(ROW, launch, a, a_scale, b, b_scale, out)


def launch(a, b, scales, bias, out, knobs: dict) -> None:
    """Launch over a [1, K], b [N, K], out [1, N] with explicit knobs (perf/tune_gemm.py times candidates);
    BLOCK_M (the tile policy's common knob) is unused: one row. bias must be None (the block op has none)."""
    assert bias is None, "gemm.fp8_block_mm has no bias"
    n, k = b.shape
    check_knobs(ROW, knobs)
    knobs = {name: value for name, value in knobs.items() if name != "BLOCK_M"}
    _fp8_gemv_kernel[(cdiv(n, knobs["BLOCK_N"]),)](
        a,
        b,
        scales.a,
        scales.b,
        out,
        n,
        k,
        b.stride(0),
        scales.a_strides[1],
        *scales.b_strides,
        out.stride(1),
        SCALE_K=SCALE_BLOCK,
        EVEN_K=k % knobs["BLOCK_K"] == 0,
        **knobs,
    )


@cached
@triton.jit
def _fp8_gemv_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    N,
    K,
    stride_bn,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_on,
    SCALE_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)  # clamped reads, never stored
    ks = tl.arange(0, BLOCK_K)
    b_tile = b_ptr + safe_columns[:, None] * stride_bn + ks[None, :]
    # the program's weight block row of scales (BLOCK_N divides 128: one block for all its columns)
    b_scales = b_scale_ptr + (first_column // SCALE_K) * stride_bsn
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        groups = (start + ks) // SCALE_K
        if EVEN_K:
            w = tl.load(b_tile)
            x = tl.load(a_ptr + start + ks)
            scale = tl.load(a_scale_ptr + groups * stride_ask) * tl.load(b_scales + groups * stride_bsk)
        else:
            inside = ks < K - start
            w = tl.load(b_tile, mask=inside[None, :], other=0.0)
            x = tl.load(a_ptr + start + ks, mask=inside, other=0.0)
            safe_groups = tl.where(inside, groups, 0)
            scale = tl.load(a_scale_ptr + safe_groups * stride_ask) * tl.load(b_scales + safe_groups * stride_bsk)
        acc += w.to(tl.float32) * (x.to(tl.float32) * scale)[None, :]
        b_tile += BLOCK_K
    result = tl.sum(acc, axis=1)
    tl.store(out_ptr + columns * stride_on, result.to(out_ptr.dtype.element_ty), mask=columns < N)


__all__ = ["fp8_block_mm_gemv", "launch"]
