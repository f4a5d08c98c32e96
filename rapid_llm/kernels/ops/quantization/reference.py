"""PyTorch references for fp8 (e4m3) activation quantization (arguments checked by quantization/checks.py).

per_token_fp8(x) -> (q [T, H] e4m3, scale [T, 1] fp32)
per_token_group_fp8(x, group_size=128, column_major_scales=False) -> (q [T, H] e4m3, scale [T, H/g] fp32)
scale = max(absmax, 1e-10) / 448; q = clamp(x * (1 / scale), -448, 448) cast to e4m3 (fp32 math,
IEEE division and reciprocal, one multiply per element: the contract says why).

The fused epilogues (rms_norm / fused_add_rms_norm / silu_and_mul, then fp8) are the unfused
pipelines of the torch rows they fuse: the intermediate is rounded to x's dtype, as the contract says.
"""

from __future__ import annotations

import torch

from ..activation import reference as activation_reference
from ..fp8 import E4M3_MAX, SCALE_FLOOR, group_scale_storage
from ..norm import reference as norm_reference


def _quantize(groups32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """groups32: [..., n] fp32 -> (q [..., n] e4m3, scale [..., 1] fp32), one scale per last-dim group."""
    absmax = groups32.abs().amax(dim=-1, keepdim=True).clamp_min(SCALE_FLOOR)
    # A tensor divisor on the same device (a fill, graph-capturable): CUDA torch turns division by
    # a Python scalar into a multiply by its reciprocal, one ulp away from the IEEE quotient the
    # contract specifies.
    scale = absmax / torch.full_like(absmax, E4M3_MAX)
    q = (groups32 * scale.reciprocal()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize(x.float())


def per_token_group_fp8(
    x: torch.Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = x.shape
    groups = hidden // group_size
    q, scale = _quantize(x.float().reshape(tokens, groups, group_size))
    out_scale = group_scale_storage(tokens, groups, column_major_scales, x.device)
    out_scale.copy_(scale.view(tokens, groups))
    return q.view(tokens, hidden), out_scale


# --- the fused epilogues: the unfused pipelines, composed of the torch rows they fuse --------------------------


def rms_norm_per_token_group_fp8(x, weight, eps=1e-6, group_size=128, column_major_scales=False):
    return per_token_group_fp8(norm_reference.rms_norm(x, weight, eps), group_size, column_major_scales)


def fused_add_rms_norm_per_token_group_fp8(x, residual, weight, eps=1e-6, group_size=128, column_major_scales=False):
    normalised, _ = norm_reference.fused_add_rms_norm(x.clone(), residual, weight, eps)
    return per_token_group_fp8(normalised, group_size, column_major_scales)


def static_fp8(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q = clamp(y * (1 / scale), -448, 448) as e4m3: one IEEE reciprocal of the fp32 scale, one multiply each."""
    inverse = scale.reshape(1).float().reciprocal()
    return (y.float() * inverse).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def rms_norm_static_fp8(x, weight, scale, eps=1e-6):
    return static_fp8(norm_reference.rms_norm(x, weight, eps), scale)


def fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps=1e-6):
    normalised, _ = norm_reference.fused_add_rms_norm(x.clone(), residual, weight, eps)
    return static_fp8(normalised, scale)


def silu_and_mul_per_token_group_fp8(x, group_size=128, column_major_scales=False):
    return per_token_group_fp8(activation_reference.silu_and_mul(x), group_size, column_major_scales)
