"""Lab variants of the one-token CUDA-core GEMV (rapid_llm/kernels/ops/gemm/mm/gemv.py's kernel, int8/bf16
weights): X2D loads the activation chunk as a [BLOCK_N, BLOCK_K] broadcast (the weight tile's own register
layout: no shared-memory round trip and no barriers in the K loop); AHEAD issues the next K step's weight
loads before this step's multiply-adds (one tile in flight while the FMAs run)."""

import triton
import triton.language as tl


@triton.jit
def _to_float(b):
    if b.dtype == tl.int8:
        return (b.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
    return b.to(tl.float32)


@triton.jit
def gemv_variant_kernel(
    x_ptr,
    w_ptr,
    scale_ptr,
    out_ptr,
    N,
    K,
    stride_wn,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    X2D: tl.constexpr,
    AHEAD: tl.constexpr,
):
    columns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    w_tile = w_ptr + safe_columns[:, None] * stride_wn + ks[None, :]
    if X2D:
        x_tile = x_ptr + (ks[None, :] + 0 * columns[:, None])
    else:
        x_tile = x_ptr + ks
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    if AHEAD:
        b = tl.load(w_tile)
        for start in range(0, K, BLOCK_K):
            a = tl.load(x_tile)
            following = tl.minimum(start + BLOCK_K, K - BLOCK_K) - start  # the last step reloads itself
            b_next = tl.load(w_tile + following)
            if X2D:
                acc += _to_float(b) * a.to(tl.float32)
            else:
                acc += _to_float(b) * a.to(tl.float32)[None, :]
            b = b_next
            x_tile += BLOCK_K
            w_tile += BLOCK_K
    else:
        for start in range(0, K, BLOCK_K):
            b = tl.load(w_tile)
            a = tl.load(x_tile)
            if X2D:
                acc += _to_float(b) * a.to(tl.float32)
            else:
                acc += _to_float(b) * a.to(tl.float32)[None, :]
            x_tile += BLOCK_K
            w_tile += BLOCK_K
    result = tl.sum(acc, axis=1) * tl.load(scale_ptr + safe_columns).to(tl.float32)
    tl.store(out_ptr + columns, result.to(out_ptr.dtype.element_ty), mask=columns < N)


def launch(x, w, scale, out, BLOCK_N, BLOCK_K, X2D, AHEAD, num_warps, num_stages=2):
    """x [1, K], w [N, K] (K % BLOCK_K == 0), scale [N], out [1, N]."""
    n, k = w.shape
    gemv_variant_kernel[(triton.cdiv(n, BLOCK_N),)](
        x, w, scale, out, n, k, w.stride(0), BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, X2D=X2D, AHEAD=AHEAD,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip


@triton.jit
def fp8_gemv_variant_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    N,
    K,
    stride_bn,
    stride_bsn,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    AHEAD: tl.constexpr,
):
    """native/fp8_block_mm_gemv's loop (K % BLOCK_K == 0, contiguous scales [K/128] and [N/128, K/128]) with
    the next K step's weight loads issued before this step's multiply-adds when AHEAD."""
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    b_tile = b_ptr + safe_columns[:, None] * stride_bn + ks[None, :]
    b_scales = b_scale_ptr + (first_column // 128) * stride_bsn
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    if AHEAD:
        w = tl.load(b_tile)
    for start in range(0, K, BLOCK_K):
        groups = (start + ks) // 128
        if AHEAD:
            following = tl.minimum(start + BLOCK_K, K - BLOCK_K) - start
            w_next = tl.load(b_tile + following)
        else:
            w = tl.load(b_tile)
        x = tl.load(a_ptr + start + ks)
        scale = tl.load(a_scale_ptr + groups) * tl.load(b_scales + groups)
        acc += w.to(tl.float32) * (x.to(tl.float32) * scale)[None, :]
        if AHEAD:
            w = w_next
        b_tile += BLOCK_K
    result = tl.sum(acc, axis=1)
    tl.store(out_ptr + columns, result.to(out_ptr.dtype.element_ty), mask=columns < N)


def launch_fp8(a, a_scale, b, b_scale, out, BLOCK_N, BLOCK_K, AHEAD, num_warps, num_stages=2):
    """a [1, K] e4m3, a_scale [1, K/128] fp32 contiguous, b [N, K] e4m3, b_scale [N/128, K/128] fp32."""
    n, k = b.shape
    fp8_gemv_variant_kernel[(triton.cdiv(n, BLOCK_N),)](
        a, b, a_scale, b_scale.contiguous(), out, n, k, b.stride(0), b_scale.contiguous().stride(0),
        BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, AHEAD=AHEAD, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
