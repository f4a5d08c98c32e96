"""Native Triton gelu_tanh_and_mul: out = gelu_tanh(x[..., :d]) * x[..., d:] (kernel: gated.py)."""

from __future__ import annotations

import torch

from .checks import GELU_TANH_AND_MUL
from .gated import gated_activation


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return gated_activation(GELU_TANH_AND_MUL, "gelu_tanh", x, out)
