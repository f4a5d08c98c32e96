"""The CUDA extension's scale (csrc/elementwise/scale.cu), two builds of one kernel: out = x * factor.

    scale_aot   torch.ops.rapid_llm.scale       (rapid_llm._C, built at install: RAPID_LLM_BUILD_EXT=1)
    scale_jit   torch.ops.rapid_llm_jit.scale   (compiled on first use: RAPID_LLM_JIT=1)

The two differ only in the namespace (aot.op / jit.op). Schema, outputs
first: scale(Tensor! out, Tensor input, float factor) -> (). x: contiguous
CUDA tensor (layout ``x:contiguous``, guaranteed by dispatch), fp32/fp16/
bf16; factor rounded once to fp32; out: a new tensor, bitwise torch/scale.
Unchecked kernels: the op's check ran before (elementwise/checks.py); the
C++ launcher still validates with TORCH_CHECK (a RuntimeError, for callers
of torch.ops directly). Importing this module loads no extension.
"""

from __future__ import annotations

import torch

from ... import aot, jit


def scale_aot(x: torch.Tensor, factor: float) -> torch.Tensor:
    return _scale(aot.op("scale"), x, factor)


def scale_jit(x: torch.Tensor, factor: float) -> torch.Tensor:
    return _scale(jit.op("scale"), x, factor)


def _scale(operator, x, factor):
    out = torch.empty_like(x)
    operator(out, x, float(factor))
    return out
