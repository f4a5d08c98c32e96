"""PyTorch references for the elementwise family.

scale(x, factor) = x * factor: the product in fp32 (torch's opmath for a
half-precision tensor times a Python scalar), rounded once to x's dtype.
Returns a new contiguous tensor of x's shape and dtype.
"""

from __future__ import annotations

import torch

from .checks import check_scale_args


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    check_scale_args(x, factor)
    return torch.mul(x, factor).contiguous()
