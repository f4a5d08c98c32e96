"""gemm.mm through cuBLAS (arguments checked by ops/gemm/checks.py): one cuBLASLt GEMM over x's rows,
fp32 accumulation, the bias added in its epilogue before the one rounding (torch.addmm). x is viewed as
[M, K] rows (a copy only when it has no x:rows layout): torch's F.linear on a 3-D strided x runs a
matmul and then adds the bias, rounding twice."""

from __future__ import annotations

import torch


def mm(x, w, bias=None):
    k, n = x.shape[-1], w.shape[0]
    rows = x.reshape(-1, k)
    out = torch.mm(rows, w.t()) if bias is None else torch.addmm(bias, rows, w.t())
    return out.view(*x.shape[:-1], n)
