"""Native Triton gated activations: silu_and_mul and gelu_tanh_and_mul, one kernel for both.

    out[r, c] = act(x[r, c]) * x[r, d + c],   c < d,   act in {silu, gelu_tanh}, fp32 math

x viewed as [rows, 2*d] and out as [rows, d], each with its own row stride
and unit column stride (layout tags ``x:rows``, ``out:rows``). Grid: one
axis of rows x column blocks, column blocks fastest (FLAT, rows wider than a
block), or (rows, column blocks) for rows of one block; either way up to
2**31 - 1 programs. Memory-bound: 2*d read and d written per row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv


def launch_config(intermediate: int) -> dict:
    """1024 columns over 4 warps (8 per thread: one 16-byte access of bf16 per operand), or the
    next power of two for narrower rows. Rows of several blocks use the flat grid (column blocks
    fastest, so consecutive programs stream one row: faster than rows fastest, and than FlashInfer,
    on wide rows); rows of one block (d <= 1024) keep the 2-D grid (evidence h200.core.sweep.gated)."""
    block = min(1024, triton.next_power_of_2(intermediate))
    return {"BLOCK": block, "num_warps": 4, "FLAT": intermediate > block}


def silu_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = silu(x[..., :d]) * x[..., d:] (unchecked kernel entry: layouts x:rows, out:rows)."""
    return gated_activation("silu", x, out)


def gelu_tanh_and_mul(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """out = gelu_tanh(x[..., :d]) * x[..., d:] (unchecked kernel entry: layouts x:rows, out:rows)."""
    return gated_activation("gelu_tanh", x, out)


def gated_activation(activation: str, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    intermediate = x.shape[-1] // 2
    num_rows = x.numel() // x.shape[-1]
    x_rows = x.view(num_rows, 2 * intermediate)
    if out is None:
        out = torch.empty((*x.shape[:-1], intermediate), dtype=x.dtype, device=x.device)
    out_rows = out.view(num_rows, intermediate)
    if num_rows == 0:
        return out
    config = _POLICIES[activation].get((intermediate,))
    blocks = cdiv(intermediate, config["BLOCK"])
    grid = (num_rows * blocks,) if config["FLAT"] else (num_rows, blocks)
    _gated_kernel[grid](
        x_rows, out_rows, x_rows.stride(0), out_rows.stride(0), intermediate, blocks, ACTIVATION=activation, **config
    )
    return out


@cached
@triton.jit
def _gated_kernel(
    x_ptr,
    out_ptr,
    x_row_stride,
    out_row_stride,
    intermediate,
    blocks,
    ACTIVATION: tl.constexpr,
    BLOCK: tl.constexpr,
    FLAT: tl.constexpr,
):
    if FLAT:
        # One axis, column blocks fastest: consecutive programs read consecutive memory of a row.
        program = tl.program_id(0).to(tl.int64)
        row = program // blocks
        columns = (program % blocks).to(tl.int32) * BLOCK + tl.arange(0, BLOCK)
    else:
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


#: The launch policy of each activation's row, cached per intermediate size.
_POLICIES = {name: LaunchPolicy(f"native/{name}_and_mul", launch_config) for name in ("silu", "gelu_tanh")}
