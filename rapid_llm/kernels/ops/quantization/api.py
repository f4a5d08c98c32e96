"""The quantization family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import (
    FUSED_ADD_RMS_NORM_GROUP_FP8,
    FUSED_ADD_RMS_NORM_STATIC_FP8,
    PER_TOKEN_FP8,
    PER_TOKEN_GROUP_FP8,
    RMS_NORM_GROUP_FP8,
    RMS_NORM_STATIC_FP8,
    SILU_AND_MUL_GROUP_FP8,
)

__all__ = [
    "fused_add_rms_norm_per_token_group_fp8",
    "fused_add_rms_norm_static_fp8",
    "per_token_fp8",
    "per_token_group_fp8",
    "rms_norm_per_token_group_fp8",
    "rms_norm_static_fp8",
    "silu_and_mul_per_token_group_fp8",
]


def per_token_fp8(x):
    """(q e4m3 [T, H], scale fp32 [T, 1]). Contract: quantization.per_token_fp8."""
    return _call(PER_TOKEN_FP8, (x,))


def per_token_group_fp8(x, group_size: int = 128, column_major_scales: bool = False):
    """(q e4m3 [T, H], scale fp32 [T, H/g]). Contract: quantization.per_token_group_fp8."""
    return _call(PER_TOKEN_GROUP_FP8, (x, group_size, column_major_scales))


def rms_norm_per_token_group_fp8(
    x, weight, eps: float = 1e-6, group_size: int = 128, column_major_scales: bool = False
):
    """per_token_group_fp8(rms_norm(x, weight, eps), ...) in one pass. Contract:
    quantization.rms_norm_per_token_group_fp8."""
    return _call(RMS_NORM_GROUP_FP8, (x, weight, eps, group_size, column_major_scales))


def fused_add_rms_norm_per_token_group_fp8(
    x, residual, weight, eps: float = 1e-6, group_size: int = 128, column_major_scales: bool = False
):
    """residual += x (in place), then (q, scale) of rms_norm(residual). Contract:
    quantization.fused_add_rms_norm_per_token_group_fp8."""
    return _call(FUSED_ADD_RMS_NORM_GROUP_FP8, (x, residual, weight, eps, group_size, column_major_scales))


def rms_norm_static_fp8(x, weight, scale, eps: float = 1e-6):
    """q e4m3 [T, H] of rms_norm(x) with a per-tensor scale. Contract: quantization.rms_norm_static_fp8."""
    return _call(RMS_NORM_STATIC_FP8, (x, weight, scale, eps))


def fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps: float = 1e-6):
    """residual += x (in place), then q e4m3 of rms_norm(residual) with a per-tensor scale. Contract:
    quantization.fused_add_rms_norm_static_fp8."""
    return _call(FUSED_ADD_RMS_NORM_STATIC_FP8, (x, residual, weight, scale, eps))


def silu_and_mul_per_token_group_fp8(x, group_size: int = 128, column_major_scales: bool = False):
    """per_token_group_fp8(silu_and_mul(x), ...) in one pass. Contract:
    quantization.silu_and_mul_per_token_group_fp8."""
    return _call(SILU_AND_MUL_GROUP_FP8, (x, group_size, column_major_scales))
