"""The activation family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import GELU_TANH_AND_MUL, SILU_AND_MUL

__all__ = ["silu_and_mul", "gelu_tanh_and_mul"]


def silu_and_mul(x, out=None):
    """silu(x[..., :d]) * x[..., d:]. Contract: activation.silu_and_mul."""
    return _call(SILU_AND_MUL, (x, out))


def gelu_tanh_and_mul(x, out=None):
    """gelu_tanh(x[..., :d]) * x[..., d:]. Contract: activation.gelu_tanh_and_mul."""
    return _call(GELU_TANH_AND_MUL, (x, out))
