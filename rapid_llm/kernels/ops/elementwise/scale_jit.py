"""CUDA extension scale, JIT build (RAPID_LLM_JIT=1): out = x * factor.

The same kernel and contract as scale_aot.py (csrc/elementwise/scale.cu),
compiled on first call by rapid_llm.kernels.jit into its cache directory and
called as torch.ops.rapid_llm_jit.scale(out, x, factor). x: contiguous CUDA
tensor (layout ``x:contiguous``), fp32/fp16/bf16; factor rounded once to
fp32; out: new tensor, bitwise torch/scale.
"""

from __future__ import annotations

import torch

from ... import jit
from .checks import check_scale_extension_args


def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    check_scale_extension_args(x, factor)
    operator = jit.op("scale")  # the first call in a process builds or loads the library
    out = torch.empty_like(x)
    operator(out, x, float(factor))
    return out
