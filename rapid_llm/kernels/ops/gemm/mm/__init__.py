"""gemm.mm's native kernels, one module per kernel (each its own row): tiled.py (persistent output tiles,
every m), splitk.py (m <= 16: the weight stream split over K, then a reduction). Each also serves
gemm.w8a16_mm's row of the same kernel (int8 weights, channel scales).

prepare() is the host part every kernel entry shares: the output, x as [M, K] rows, the row's tiles."""

from __future__ import annotations

import torch

from ..tiles import resolve_tiles


def prepare(row: str, x: torch.Tensor, n: int):
    """(out [..., N] new in x's dtype, x viewed as rows [M, K], out viewed as [M, N], the row's knobs), with
    rows None when M == 0 (nothing to launch). The op's check ran: x has layout x:rows."""
    k = x.shape[-1]
    m = x.numel() // k
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out, None, None, None
    dtype = "bf16" if x.dtype == torch.bfloat16 else "fp16"
    return out, x.reshape(m, k), out.view(m, n), resolve_tiles(row, m, n, k, dtype, x.device).knobs
