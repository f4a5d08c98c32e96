"""torch.distributed rows of the comm family: the correctness baseline and the floor.

all_reduce: torch.distributed.all_reduce(SUM) on a contiguous buffer (a copy of x, or x itself in place).
all_reduce_add_rms_norm: that sum, then norm's fused_add_rms_norm reference (fp32 add, one rounding, RMSNorm
of the stored residual). Arguments are checked by the op's check (comm/checks.py) before these run.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..norm.reference import fused_add_rms_norm
from .groups import resolve_group


def all_reduce(x: torch.Tensor, group=None, inplace: bool = False) -> torch.Tensor:
    # the collective needs a contiguous buffer: x itself in place when it is one, else a contiguous copy
    buffer = x if inplace and x.is_contiguous() else x.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=resolve_group(group))
    if inplace and buffer is not x:
        x.copy_(buffer)
    return x if inplace else buffer


def all_reduce_add_rms_norm(x, residual, weight, eps: float = 1e-6, group=None):
    all_reduce(x, group, inplace=True)
    return fused_add_rms_norm(x, residual, weight, eps)
