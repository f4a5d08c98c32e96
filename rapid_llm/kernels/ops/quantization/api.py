"""The quantization family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import PER_TOKEN_FP8, PER_TOKEN_GROUP_FP8

__all__ = ["per_token_fp8", "per_token_group_fp8"]


def per_token_fp8(x):
    """(q e4m3 [T, H], scale fp32 [T, 1]). Contract: quantization.per_token_fp8."""
    return _call(PER_TOKEN_FP8, (x,))


def per_token_group_fp8(x, group_size: int = 128, column_major_scales: bool = False):
    """(q e4m3 [T, H], scale fp32 [T, H/g]). Contract: quantization.per_token_group_fp8."""
    return _call(PER_TOKEN_GROUP_FP8, (x, group_size, column_major_scales))
