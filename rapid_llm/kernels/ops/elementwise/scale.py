"""Native Triton scale: out = x * factor over a contiguous tensor.

x: contiguous (layout tag ``x:contiguous``), fp32/fp16/bf16, any shape;
factor: Python float, applied in fp32; out: new tensor, x's shape and
dtype. Flat 1-D blocks of BLOCK elements with int64 offsets (tensors past
2**31 elements). Memory-bound: one read and one write per element.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import OpInputError, expect_triton_device
from .checks import SCALE, check_scale_args


def launch_config(num_elements: int) -> dict:
    """8 KiB-16 KiB per program in half precision: enough bytes in flight per SM, few programs."""
    return {"BLOCK": 4096 if num_elements >= 1 << 20 else 1024, "num_warps": 4}


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    check_scale_args(x, factor)
    expect_triton_device(SCALE, "x", x)
    if not x.is_contiguous():
        raise OpInputError(SCALE, "x", "a contiguous tensor (layout x:contiguous)", f"strides {x.stride()}")
    out = torch.empty_like(x)
    num_elements = x.numel()
    if num_elements == 0:
        return out
    config = launch_config(num_elements)
    grid = (triton.cdiv(num_elements, config["BLOCK"]),)
    _scale_kernel[grid](x, out, num_elements, float(factor), **config)
    return out


@triton.jit
def _scale_kernel(x_ptr, out_ptr, num_elements, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < num_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, (x.to(tl.float32) * factor).to(out_ptr.dtype.element_ty), mask=mask)
