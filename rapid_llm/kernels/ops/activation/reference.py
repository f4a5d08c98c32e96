"""PyTorch references for the gated activations: fp32 math, one rounding.

silu_and_mul(x, out=None)      = silu(x[..., :d]) * x[..., d:]
gelu_tanh_and_mul(x, out=None) = gelu(x[..., :d], approximate="tanh") * x[..., d:]
x: [..., 2*d]; out: optional [..., d], written and returned. Arguments are
checked by the op's check (activation/checks.py) before these run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _gated(activation, x, out):
    intermediate = x.shape[-1] // 2
    result = (activation(x[..., :intermediate].float()) * x[..., intermediate:].float()).to(x.dtype)
    if out is None:
        return result.contiguous()
    out.copy_(result)
    return out


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(F.silu, x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(lambda gate: F.gelu(gate, approximate="tanh"), x, out)
