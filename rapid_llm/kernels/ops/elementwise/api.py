"""The elementwise family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import SCALE

__all__ = ["scale"]


def scale(x, factor: float):
    """x * factor (fp32 math, x's dtype out). Contract: elementwise.scale."""
    return _call(SCALE, (x, factor))
