"""gemm.mm's native kernels, one module per kernel (each its own row): tiled.py (persistent output tiles,
every m), splitk.py (m <= 16: the weight stream split over K, then a reduction), gemv.py (m == 1, CUDA
cores). Each also serves gemm.w8a16_mm's row of the same kernel (int8 weights, channel scales).
gemm.w4a16_mm's: w4a16.py (a tl.dot kernel for every m and a one-token CUDA-core kernel) and
w4a16_swap_ab.py (m <= 16 on the tensor cores, the weight on the MMA's M side).

prepare() is the host part every kernel entry shares: the output, x as [M, K] rows, the row's tiles;
call_extension() the CUDA extension rows' (w4a16_cuda.py, w8a16_cuda.py)."""

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


def call_extension(op, x: torch.Tensor, n: int, inputs: tuple, bias, trailing: tuple = ()) -> torch.Tensor:
    """out [..., N] new in x's dtype, filled by the extension op `op(out [M, N], x [M, K], *inputs, bias, *trailing)`
    (outputs first; bias None passed as an empty tensor); nothing launched when M == 0. x has layout x:rows."""
    k = x.shape[-1]
    m = x.numel() // k
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    if bias is None:
        bias = torch.empty(0, dtype=x.dtype, device=x.device)
    op(out.view(m, n), x.reshape(m, k), *inputs, bias, *trailing)
    return out
