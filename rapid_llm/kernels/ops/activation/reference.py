"""PyTorch references for the gated activations: fp32 math, one rounding.

silu_and_mul(x, out=None)      = silu(x[..., :d]) * x[..., d:]
gelu_tanh_and_mul(x, out=None) = gelu(x[..., :d], approximate="tanh") * x[..., d:]
x: [..., 2*d]; out: optional [..., d], written and returned.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .checks import GELU_TANH_AND_MUL, SILU_AND_MUL, check_gated_args


def _gated(op, activation, x, out):
    _, intermediate = check_gated_args(op, x, out)
    result = (activation(x[..., :intermediate].float()) * x[..., intermediate:].float()).to(x.dtype)
    if out is None:
        return result.contiguous()
    out.copy_(result)
    return out


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(SILU_AND_MUL, F.silu, x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(GELU_TANH_AND_MUL, lambda gate: F.gelu(gate, approximate="tanh"), x, out)
