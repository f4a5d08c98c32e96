"""The norm family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import FUSED_ADD_RMS_NORM, RMS_NORM

__all__ = ["rms_norm", "fused_add_rms_norm"]


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x**2, -1) + eps) * weight. Contract: norm.rms_norm."""
    return _call(RMS_NORM, (x, weight, eps))


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    """In place: residual += x; x = rms_norm(residual); returns (x, residual). Contract: norm.fused_add_rms_norm."""
    return _call(FUSED_ADD_RMS_NORM, (x, residual, weight, eps))
