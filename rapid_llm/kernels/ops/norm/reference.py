"""PyTorch references for the norm family: the correctness baseline and the floor.

rms_norm(x, weight, eps) = x / sqrt(mean(x**2, -1) + eps) * weight, computed
in fp32 and rounded once to x's dtype. x: [..., hidden]; weight: [hidden].

fused_add_rms_norm(x, residual, weight, eps): residual += x (fp32 add, one
rounding), then x = rms_norm(residual) of the stored residual; in place.
Arguments are checked by the op's check (norm/checks.py) before these run.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _normalised(x, weight, eps).contiguous()


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    residual.copy_(residual.float() + x.float())
    x.copy_(_normalised(residual, weight, eps))
    return x, residual


def _normalised(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    inverse_rms = torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    return (x32 * inverse_rms * weight.float()).to(x.dtype)
