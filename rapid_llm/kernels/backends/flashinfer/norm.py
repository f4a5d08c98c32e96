"""FlashInfer 0.6.0 adapters of norm.rms_norm and norm.fused_add_rms_norm (imported only through the rows' targets).

    rms_norm(x, weight, eps)                       -> out = x * rsqrt(mean(x**2) + eps) * weight
    fused_add_rms_norm(x, residual, weight, eps)   -> residual += x; x = rms_norm(fp32 sum)   (in place)

Unchecked entries: norm/checks.py ran, and the rows require layouts
x:rows_vector (residual:rows_vector) and weight:vector, dtypes fp16/bf16. x
[..., hidden] is handed over as its [rows, hidden] view (no copy; its row
stride is passed through), so FlashInfer runs its one-CTA-per-row kernels
(RMSNormKernel, FusedAddRMSNormKernel in include/flashinfer/norm.cuh), never
the per-head QKRMSNorm path it picks for 3-D inputs.

What the adapter adds to FlashInfer's call:
  - rms_norm allocates its output contiguous, as the contract says
    (flashinfer.norm.rmsnorm's own torch.empty_like would keep x's strides);
  - zero rows return at once: FlashInfer would launch a grid of 0 blocks,
    which CUDA rejects (cudaErrorInvalidConfiguration, raised by csrc/norm.cu);
  - the first call per process is logged with its duration (jit_log.py): the
    "norm" module is JIT-compiled then.
No host sync and no per-call host data: graph-capturable (a first call inside a
capture would compile there: plan and call once before capturing).
"""

from __future__ import annotations

import torch
import tvm_ffi.libinfo  # noqa: F401  (FlashInfer 0.6.0's JIT reads this submodule without importing it)
import flashinfer

from .jit_log import first_call_logged

_MODULE = "flashinfer module 'norm'"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    hidden = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    num_rows = x.numel() // hidden
    if num_rows == 0:
        return out
    with first_call_logged(_MODULE):
        flashinfer.norm.rmsnorm(x.view(num_rows, hidden), weight, float(eps), out=out.view(num_rows, hidden))
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    hidden = x.shape[-1]
    num_rows = x.numel() // hidden
    if num_rows:
        with first_call_logged(_MODULE):
            flashinfer.norm.fused_add_rmsnorm(
                x.view(num_rows, hidden), residual.view(num_rows, hidden), weight, float(eps)
            )
    return x, residual
