"""Native Triton silu_and_mul: out = silu(x[..., :d]) * x[..., d:] (kernel: gated.py)."""

from __future__ import annotations

import torch

from .checks import SILU_AND_MUL
from .gated import gated_activation


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return gated_activation(SILU_AND_MUL, "silu", x, out)
