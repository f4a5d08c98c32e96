"""The Triton kernel behind the native gated activations (silu_and_mul, gelu_tanh_and_mul).

    out[r, c] = act(x[r, c]) * x[r, d + c],   c < d,   act in {silu, gelu_tanh}, fp32 math

x viewed as [rows, 2*d] and out as [rows, d], each with its own row stride
and unit column stride (layout tags ``x:rows``, ``out:rows``). Grid: (rows,
column blocks); rows on axis 0 (up to 2**31 - 1), blocks of BLOCK columns on
axis 1 (d / BLOCK <= 65535 for any real model). Memory-bound: 2*d read and
d written per row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import expect_triton_device, rows_view
from .checks import check_gated_args


def launch_config(intermediate: int) -> dict:
    """1024 columns over 4 warps (8 per thread: one 16-byte access of bf16 per operand), or the
    next power of two for narrower rows; the same shape the scale kernel measured best."""
    return {"BLOCK": min(1024, triton.next_power_of_2(intermediate)), "num_warps": 4}


def gated_activation(op: str, activation: str, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    num_rows, intermediate = check_gated_args(op, x, out)
    expect_triton_device(op, "x", x)
    x_rows = rows_view(op, "x", x, num_rows, 2 * intermediate)
    if out is None:
        out = torch.empty((*x.shape[:-1], intermediate), dtype=x.dtype, device=x.device)
    out_rows = rows_view(op, "out", out, num_rows, intermediate)
    if num_rows == 0:
        return out
    config = launch_config(intermediate)
    grid = (num_rows, triton.cdiv(intermediate, config["BLOCK"]))
    _gated_kernel[grid](x_rows, out_rows, x_rows.stride(0), out_rows.stride(0), intermediate,
                        ACTIVATION=activation, **config)
    return out


@triton.jit
def _gated_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, intermediate,
                  ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = columns < intermediate
    x_row = x_ptr + row * x_row_stride
    gate = tl.load(x_row + columns, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + intermediate + columns, mask=mask, other=0.0).to(tl.float32)
    if ACTIVATION == "silu":
        activated = gate / (1.0 + tl.exp(-gate))
    else:
        # gelu, tanh approximation: 0.5 g (1 + tanh(z)) = g * sigmoid(2z), which avoids the
        # cancellation in 1 + tanh(z) for very negative gates (and needs no tanh).
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        activated = gate / (1.0 + tl.exp(-2.0 * inner))
    tl.store(out_ptr + row * out_row_stride + columns, (activated * up).to(out_ptr.dtype.element_ty), mask=mask)
