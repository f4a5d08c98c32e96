"""FlashInfer 0.6.0 adapters of the gated activations (imported only through the rows' targets).

    silu_and_mul(x, out=None)      -> out[..., d] = silu(x[..., :d]) * x[..., d:]
    gelu_tanh_and_mul(x, out=None) -> out[..., d] = gelu_tanh(x[..., :d]) * x[..., d:]

Unchecked entries: activation/checks.py ran, and the rows require layouts
x:contiguous16 and out:contiguous16, intermediate d a multiple of 8, dtypes
fp16/bf16 (why: the rows in ops/activation/__init__.py). x [..., 2d] goes to
flashinfer.activation.<op>(x, out) as it is (FlashInfer flattens the leading
dims itself: one CTA per row, include/flashinfer/activation.cuh).

What the adapter adds: the output is allocated here when out is None (as
FlashInfer would), zero rows return at once (FlashInfer would launch a grid of
0 blocks, which CUDA rejects), and the first call per FlashInfer module is
logged with its duration (jit_log.py: modules 'silu_and_mul' and
'gelu_tanh_and_mul' are JIT-compiled then). No host sync, no per-call host
data: graph-capturable once the module is built (call once before capturing).
"""

from __future__ import annotations

import torch
import tvm_ffi.libinfo  # noqa: F401  (FlashInfer 0.6.0's JIT reads this submodule without importing it)
import flashinfer

from .jit_log import first_call_logged


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(flashinfer.activation.silu_and_mul, "flashinfer module 'silu_and_mul'", x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _gated(flashinfer.activation.gelu_tanh_and_mul, "flashinfer module 'gelu_tanh_and_mul'", x, out)


def _gated(function, module: str, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    with first_call_logged(module):
        function(x, out)
    return out
