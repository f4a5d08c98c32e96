"""The gemm family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import FP8_BLOCK_MM, FP8_GROUPED_MM_CONTIGUOUS, FP8_GROUPED_MM_MASKED, FP8_MM, MM, W4A16_MM, W8A16_MM

__all__ = ["mm", "w8a16_mm", "w4a16_mm", "fp8_mm", "fp8_block_mm", "fp8_grouped_mm_contiguous", "fp8_grouped_mm_masked"]


def mm(x, w, bias=None):
    """x @ w.T (+ bias), w [N, K] (a linear layer's weight), fp32 accumulation. Contract: gemm.mm."""
    return _call(MM, (x, w, bias))


def w8a16_mm(x, w_q, w_scale, bias=None):
    """w_scale * (x @ w_q.T) (+ bias): int8 weights [N, K] with one scale per output channel (compressed-tensors
    W8A16). Contract: gemm.w8a16_mm."""
    return _call(W8A16_MM, (x, w_q, w_scale, bias))


def fp8_mm(a, a_scale, b, b_scale, out_dtype=None, bias=None):
    """(a * a_scale) @ (b * b_scale).T (+ bias) in bf16: fp8 e4m3 a [M, K] with per-token (or per-tensor)
    scales, b [N, K] with per-channel [N, 1] (or per-tensor) scales. Contract: gemm.fp8_mm."""
    import torch

    return _call(FP8_MM, (a, a_scale, b, b_scale, torch.bfloat16 if out_dtype is None else out_dtype, bias))


def w4a16_mm(x, qweight, scales, qzeros, group_size: int, packing: str, bias=None):
    """x @ W (+ bias), W the int4 weight of a GPTQ (v1 or v2, no act-order) or AWQ checkpoint as stored,
    group_size 64 or 128, packing "gptq", "gptq_v2" or "awq". Contract: gemm.w4a16_mm."""
    return _call(W4A16_MM, (x, qweight, scales, qzeros, group_size, packing, bias))


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """(a * a_scale) @ (b * b_scale).T in bf16, fp8 e4m3 a [M, K] and b [N, K], 1x128 / 128x128 scales.
    Contract: gemm.fp8_block_mm."""
    return _call(FP8_BLOCK_MM, (a, a_scale, b, b_scale, out))


def fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None):
    """Row m of a times the weights of group m_indices[m] (negative: padding), bf16 [M, N].
    Contract: gemm.fp8_grouped_mm_contiguous."""
    return _call(FP8_GROUPED_MM_CONTIGUOUS, (a, a_scale, b, b_scale, m_indices, out))


def fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m: int, out=None):
    """a[g, :masked_m[g]] times the weights of group g, bf16 [G, M_max, N]. Contract: gemm.fp8_grouped_mm_masked."""
    return _call(FP8_GROUPED_MM_MASKED, (a, a_scale, b, b_scale, masked_m, expected_m, out))
