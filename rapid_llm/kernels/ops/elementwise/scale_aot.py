"""CUDA extension scale, ahead-of-time build (`rapid_llm._C`): out = x * factor.

x: contiguous CUDA tensor (layout ``x:contiguous``), fp32/fp16/bf16, any
shape; factor: Python real, rounded once to fp32; out: new tensor, x's shape
and dtype, out[i] = dtype(fp32(x[i]) * factor) -- bitwise torch/scale.
Kernel: csrc/elementwise/scale.cu, called as
torch.ops.rapid_llm.scale(out, x, factor) (writes out, returns nothing).

The op is looked up on first call, after aot.available() has loaded the
extension: importing this module loads nothing.
"""

from __future__ import annotations

import functools

import torch

from ... import aot
from .checks import check_scale_extension_args


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    check_scale_extension_args(x, factor)
    out = torch.empty_like(x)
    _scale_op()(out, x, float(factor))
    return out


@functools.lru_cache(maxsize=None)
def _scale_op():
    ok, reason = aot.available()
    if not ok:
        raise RuntimeError(f"aot/scale: {reason}")
    return torch.ops.rapid_llm.scale
