"""gemm.mm through cuBLAS (arguments checked by ops/gemm/checks.py): one cuBLASLt GEMM over x's rows,
fp32 accumulation, the bias added in its epilogue before the one rounding (torch.addmm). x is viewed as
[M, K] rows (a copy only when it has no x:rows layout) when a bias comes with x of more than 2 dims: torch's
F.linear on a 3-D strided x runs a matmul and then adds the bias, rounding twice. Otherwise F.linear itself
(one torch call: about half the host time of reshape + mm + view on the H200 machine)."""

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
