"""gemm.mm and gemm.fp8_mm through cuBLAS.

gemm.mm through cuBLAS (arguments checked by ops/gemm/checks.py): one cuBLASLt GEMM over x's rows,
fp32 accumulation, the bias added in its epilogue before the one rounding (torch.addmm). x is viewed as
[M, K] rows (a copy only when it has no x:rows layout) when a bias comes with x of more than 2 dims: torch's
F.linear on a 3-D strided x runs a matmul and then adds the bias, rounding twice. Otherwise F.linear itself
(one torch call: about half the host time of reshape + mm + view on the H200 machine).

gemm.fp8_mm through torch._scaled_mm (arguments checked; the row's layout a:tma, b:tma, a:dense, b:dense,
bias:unit and K, N multiples of 16 hold): mat2 must be column-major, so the weight goes in as b.t() of the row-major [N, K]
(a view). Both scales per tensor: cuBLASLt's fp8 GEMM with scalar scales. Otherwise the row-wise kernel,
which takes scale_a [M, 1] and scale_b [1, N], both fp32 and contiguous: a per-tensor scale on one side is
broadcast to that shape (a copy of M or N floats), b_scale [N, 1] is viewed as [1, N]. bf16 out, fp32
accumulation without fast accumulation (use_fast_accum=False), the bias in the epilogue.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mm(x, w, bias=None):
    if bias is None or x.dim() == 2:  # mm, or addmm with the bias in the epilogue
        return F.linear(x, w, bias)
    k, n = x.shape[-1], w.shape[0]
    rows = x.reshape(-1, k)
    out = torch.addmm(bias, rows, w.t())
    return out.view(*x.shape[:-1], n)


def fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    m, n = a.shape[0], b.shape[0]
    if m == 0:
        return torch.empty((0, n), dtype=out_dtype, device=a.device)
    if a_scale.numel() == 1 and b_scale.numel() == 1:
        scale_a, scale_b = a_scale.reshape(()), b_scale.reshape(())
    else:
        scale_a = a_scale.reshape(-1, 1).expand(m, 1).contiguous()
        scale_b = b_scale.reshape(1, -1).expand(1, n).contiguous()
    return torch._scaled_mm(a, b.t(), scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=False)
