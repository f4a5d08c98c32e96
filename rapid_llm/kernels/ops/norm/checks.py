"""Argument checks for the norm family (shared by every implementation)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_float_tensor, expect_real_number, expect_same_device

RMS_NORM = "norm.rms_norm"
FUSED_ADD_RMS_NORM = "norm.fused_add_rms_norm"


def check_rms_norm_args(x, weight, eps, op: str = RMS_NORM) -> tuple[int, int]:
    """Validate rms_norm's arguments (or the x/weight/eps part of another norm op's); return (num_tokens, hidden)."""
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
        raise OpInputError(op, "weight", f"dtype {x.dtype} (x's) or torch.float32", str(weight.dtype))
    expect_same_device(op, "weight", weight, "x", x)
    expect_real_number(op, "eps", eps, minimum=0.0)
    return x.numel() // hidden, hidden


def check_fused_add_rms_norm_args(x, residual, weight, eps) -> tuple[int, int]:
    """Validate fused_add_rms_norm's arguments; return (num_tokens, hidden)."""
    num_tokens, hidden = check_rms_norm_args(x, weight, eps, op=FUSED_ADD_RMS_NORM)
    expect_float_tensor(FUSED_ADD_RMS_NORM, "residual", residual)
    if residual.shape != x.shape:
        raise OpInputError(FUSED_ADD_RMS_NORM, "residual", f"x's shape {list(x.shape)}", f"shape {list(residual.shape)}")
    if residual.dtype != x.dtype:
        raise OpInputError(FUSED_ADD_RMS_NORM, "residual", f"x's dtype {x.dtype}", str(residual.dtype))
    expect_same_device(FUSED_ADD_RMS_NORM, "residual", residual, "x", x)
    if num_tokens and residual.data_ptr() == x.data_ptr():
        raise OpInputError(FUSED_ADD_RMS_NORM, "residual", "a tensor distinct from x (both are written)",
                           "the same memory as x")
    return num_tokens, hidden
