"""PyTorch references for the norm family: the correctness baseline and the floor.

rms_norm(x, weight, eps) = x / sqrt(mean(x**2, -1) + eps) * weight, computed
in fp32 and rounded once to x's dtype. x: [..., hidden]; weight: [hidden].
"""

from __future__ import annotations

import torch

from .checks import check_rms_norm_args


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    check_rms_norm_args(x, weight, eps)
    x32 = x.float()
    inverse_rms = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    return (x32 * inverse_rms * weight.float()).to(x.dtype).contiguous()
