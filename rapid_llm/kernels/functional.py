"""Public functional ops. Each call goes through the default planner's cache.

    y = rms_norm(x, weight, eps)   # same table, same plans as Planner(env).plan(...)

The planner resolves (op, device, dtype, layout, shape bucket) once; later
calls look the plan up and call the loaded target. The call site derives the
layout tags it can provide from the tensors (cheap stride checks).
"""

from __future__ import annotations

from .dispatcher.plan import default_planner
from .ops.checks import expect_tensor, rows_view_ok

_CONTIGUOUS = frozenset({"x:contiguous"})
_ROWS = frozenset({"x:rows"})
_NONE = frozenset()


def scale(x, factor: float):
    """x * factor (fp32 math, x's dtype out). See ops/interfaces.py: elementwise.scale."""
    expect_tensor("elementwise.scale", "x", x)
    layout = _CONTIGUOUS if x.is_contiguous() else _NONE
    return default_planner().for_tensor("elementwise.scale", x, layout, num_elements=x.numel())(x, factor)


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x**2, -1) + eps) * weight. See ops/interfaces.py: norm.rms_norm."""
    expect_tensor("norm.rms_norm", "x", x)
    hidden = x.shape[-1] if x.dim() else 0
    layout = _ROWS if rows_view_ok(x) else _NONE
    num_tokens = x.numel() // hidden if hidden else 0
    planned = default_planner().for_tensor("norm.rms_norm", x, layout, num_tokens=num_tokens, hidden=hidden)
    return planned(x, weight, eps)
