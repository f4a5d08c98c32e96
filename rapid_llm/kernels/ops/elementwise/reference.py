"""PyTorch references for the elementwise family.

scale(x, factor) = x * factor: the product in fp32 (torch's opmath for a
half-precision tensor times a Python scalar), rounded once to x's dtype.
Returns a new contiguous tensor of x's shape and dtype.
"""

from __future__ import annotations

import torch


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.mul(x, factor).contiguous()
