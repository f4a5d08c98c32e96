"""Argument checks for the norm family (shared by every implementation)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_float_tensor, expect_real_number, expect_same_device

RMS_NORM = "norm.rms_norm"


def check_rms_norm_args(x, weight, eps) -> tuple[int, int]:
    """Validate rms_norm's arguments; return (num_tokens, hidden)."""
    expect_float_tensor(RMS_NORM, "x", x)
    expect_float_tensor(RMS_NORM, "weight", weight)
    if x.dim() == 0:
        raise OpInputError(RMS_NORM, "x", "a tensor of shape [..., hidden]", "a 0-d tensor")
    hidden = x.shape[-1]
    if hidden == 0:
        raise OpInputError(RMS_NORM, "x", "hidden (last dim) >= 1", "hidden = 0")
    if weight.dim() != 1 or weight.shape[0] != hidden:
        raise OpInputError(RMS_NORM, "weight", f"shape [{hidden}] (x's last dim)", f"shape {list(weight.shape)}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise OpInputError(RMS_NORM, "weight", f"dtype {x.dtype} (x's) or torch.float32", str(weight.dtype))
    expect_same_device(RMS_NORM, "weight", weight, "x", x)
    expect_real_number(RMS_NORM, "eps", eps, minimum=0.0)
    return x.numel() // hidden, hidden
