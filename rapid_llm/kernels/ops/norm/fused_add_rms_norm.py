"""Native Triton fused residual add + RMSNorm, in place.

    residual[r, :] <- residual[r, :] + x[r, :]                       (fp32 add, one rounding)
    x[r, :]        <- residual[r, :] * rsqrt(mean(residual[r, :]**2) + eps) * weight

x, residual: [..., hidden], each viewed as [rows, hidden] with its own row
stride and hidden contiguous (layout tags ``x:rows``, ``residual:rows``);
weight: [hidden] (x's dtype or fp32, any stride). The norm is taken of the residual as
stored (rounded), so the result equals the unfused pair. Memory-bound: x
and residual are read once and written once (rows up to
MAX_SINGLE_PASS_HIDDEN wide stay in registers; wider rows re-read the
residual they just wrote). Launch knobs: rms_norm.launch_config.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv
from .rms_norm import launch_config


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """Unchecked kernel entry (the op's check ran: layouts x:rows and residual:rows)."""
    hidden = x.shape[-1]
    num_rows = x.numel() // hidden
    x_rows = x.view(num_rows, hidden)
    residual_rows = residual.view(num_rows, hidden)
    if num_rows == 0:
        return x, residual
    config = _POLICY.get((hidden,))
    grid = (cdiv(num_rows, config["BLOCK_ROWS"]),)
    _fused_add_rms_norm_kernel[grid](
        x_rows,
        residual_rows,
        weight,
        x_rows.stride(0),
        residual_rows.stride(0),
        weight.stride(0),
        hidden,
        num_rows,
        float(eps),
        **config,
    )
    return x, residual


@cached
@triton.jit
def _fused_add_rms_norm_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    x_row_stride,
    residual_row_stride,
    weight_stride,
    hidden,
    num_rows,
    eps,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_HIDDEN: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < num_rows
    # int64: row * stride exceeds 2**31 for large prefill batches of wide rows.
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * x_row_stride
    residual_rows = residual_ptr + rows.to(tl.int64)[:, None] * residual_row_stride
    columns = tl.arange(0, BLOCK_HIDDEN)[None, :]
    if SINGLE_PASS:
        mask = row_mask[:, None] & (columns < hidden)
        x = tl.load(x_rows + columns, mask=mask, other=0.0).to(tl.float32)
        residual = tl.load(residual_rows + columns, mask=mask, other=0.0).to(tl.float32)
        stored = (x + residual).to(residual_ptr.dtype.element_ty)
        tl.store(residual_rows + columns, stored, mask=mask)
        summed = stored.to(tl.float32)
        inverse_rms = tl.rsqrt(tl.sum(summed * summed, axis=1) / hidden + eps)
        weight = tl.load(weight_ptr + columns * weight_stride, mask=columns < hidden, other=0.0).to(tl.float32)
        tl.store(x_rows + columns, (summed * inverse_rms[:, None] * weight).to(x_ptr.dtype.element_ty), mask=mask)
    else:
        sum_squares = tl.zeros((BLOCK_ROWS, BLOCK_HIDDEN), dtype=tl.float32)
        for start in range(0, hidden, BLOCK_HIDDEN):
            mask = row_mask[:, None] & (start + columns < hidden)
            x = tl.load(x_rows + start + columns, mask=mask, other=0.0).to(tl.float32)
            residual = tl.load(residual_rows + start + columns, mask=mask, other=0.0).to(tl.float32)
            stored = (x + residual).to(residual_ptr.dtype.element_ty)
            tl.store(residual_rows + start + columns, stored, mask=mask)
            summed = stored.to(tl.float32)
            sum_squares += summed * summed
        inverse_rms = tl.rsqrt(tl.sum(sum_squares, axis=1) / hidden + eps)
        # The second pass reads back what this program stored in the first.
        tl.debug_barrier()
        for start in range(0, hidden, BLOCK_HIDDEN):
            mask = row_mask[:, None] & (start + columns < hidden)
            summed = tl.load(residual_rows + start + columns, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + (start + columns) * weight_stride, mask=start + columns < hidden, other=0.0)
            y = summed * inverse_rms[:, None] * weight.to(tl.float32)
            tl.store(x_rows + start + columns, y.to(x_ptr.dtype.element_ty), mask=mask)


_POLICY = LaunchPolicy("native/fused_add_rms_norm", launch_config)
