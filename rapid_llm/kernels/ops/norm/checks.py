"""Argument checks of the norm family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_disjoint, expect_float_tensor, expect_real_number, expect_same_device, \
    rows_view_ok
from . import FUSED_ADD_RMS_NORM, RMS_NORM

_X_ROWS = frozenset({"x:rows"})
_NO_TAGS = frozenset()
_RESIDUAL_TAGS = {(True, True): frozenset({"x:rows", "residual:rows"}), (True, False): _X_ROWS,
                  (False, True): frozenset({"residual:rows"}), (False, False): _NO_TAGS}


def _check_x_weight_eps(op, x, weight, eps) -> tuple[int, int]:
    expect_float_tensor(op, "x", x)
    expect_float_tensor(op, "weight", weight)
    if x.dim() == 0:
        raise OpInputError(op, "x", "a tensor of shape [..., hidden]", "a 0-d tensor")
    hidden = x.shape[-1]
    if hidden == 0:
        raise OpInputError(op, "x", "hidden (last dim) >= 1", "hidden = 0")
    if weight.dim() != 1 or weight.shape[0] != hidden:
        raise OpInputError(op, "weight", f"shape [{hidden}] (x's last dim)", f"shape {list(weight.shape)}")
    if weight.dtype not in (x.dtype, torch.float32):
        expected = "dtype torch.float32" + ("" if x.dtype == torch.float32 else f" or x's {x.dtype}")
        raise OpInputError(op, "weight", expected, str(weight.dtype))
    expect_same_device(op, "weight", weight, "x", x)
    expect_real_number(op, "eps", eps, minimum=0.0)
    return x.numel() // hidden, hidden


def check_rms_norm(x, weight, eps=1e-6):
    """rms_norm's check: (x, {x:rows if x views as rows}, (num_tokens, hidden))."""
    num_tokens, hidden = _check_x_weight_eps(RMS_NORM, x, weight, eps)
    return x, (_X_ROWS if rows_view_ok(x) else _NO_TAGS), (("num_tokens", num_tokens), ("hidden", hidden))


def check_fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """fused_add_rms_norm's check: x and residual alike and disjoint, weight disjoint from both."""
    op = FUSED_ADD_RMS_NORM
    num_tokens, hidden = _check_x_weight_eps(op, x, weight, eps)
    expect_float_tensor(op, "residual", residual)
    if residual.shape != x.shape:
        raise OpInputError(op, "residual", f"x's shape {list(x.shape)}", f"shape {list(residual.shape)}")
    if residual.dtype != x.dtype:
        raise OpInputError(op, "residual", f"x's dtype {x.dtype}", str(residual.dtype))
    expect_same_device(op, "residual", residual, "x", x)
    expect_disjoint(op, "residual", residual, "x", x)
    expect_disjoint(op, "weight", weight, "x", x)
    expect_disjoint(op, "weight", weight, "residual", residual)
    tags = _RESIDUAL_TAGS[(rows_view_ok(x), rows_view_ok(residual))]
    return x, tags, (("num_tokens", num_tokens), ("hidden", hidden))
