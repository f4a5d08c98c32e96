"""Native Triton KV-cache write into an fp8 (e4m3) buffer with per-tensor scales, in place.

    buffer[loc[i], h, :] = e4m3(clamp(kv[i, h, :] * (1 / s), -448, 448)),  s = k_scale for h < Hk, else v_scale

kv [T, 2*Hk, D] (fp32/fp16/bf16) and buffer [rows, 2*Hk, D] float8_e4m3fn are
viewed as rows of W = 2*Hk*D elements (layout tags ``kv:rows``,
``buffer:rows``); k_scale, v_scale: one-element fp32 device tensors (read by
the kernel: no host sync, graph-capturable). fp32 math: an IEEE reciprocal
(tl.math.div_rn) per program, one multiply per element, a round-to-nearest-even
cast: bitwise equal to the torch reference. The e4m3 cast is native on sm89+ only (the row's capability).
Grid and offsets as update_kv_buffer.py: (token blocks, column blocks), int64
buffer offsets, loc read through its stride, ids outside [0, rows) skipped.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached
from ..fp8 import E4M3_MAX
from .update_kv_buffer import scatter_grid, scatter_rows


def launch_config(row_width: int) -> dict:
    """Row blocks of up to 2048 elements (16 per thread: the one-byte e4m3 stores want fuller threads
    than the bf16 copy's 1024), one token per program, 4 warps; 2 for rows of <= 1024 elements.
    2048-element blocks beat 1024 on wide rows, 2 warps beat 4 on narrow ones, and 2-4 tokens per
    program measured no better (evidence h200.core.sweep.fp8_kv, h200.core.sweep.kv_write)."""
    return {
        "BLOCK_TOKENS": 1,
        "BLOCK": min(2048, triton.next_power_of_2(row_width)),
        "num_warps": 2 if row_width <= 1024 else 4,
    }


def update_kv_buffer_fp8(
    kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor
) -> torch.Tensor:
    """Unchecked kernel entry (the op's check ran: layouts kv:rows and buffer:rows)."""
    kv_rows, buffer_rows = scatter_rows(kv, buffer)
    num_tokens, width = kv_rows.shape
    if num_tokens:
        config = _POLICY.get((width,))
        _update_kv_buffer_fp8_kernel[scatter_grid(num_tokens, width, config)](
            kv_rows,
            loc,
            buffer_rows,
            k_scale,
            v_scale,
            kv_rows.stride(0),
            loc.stride(0),
            buffer_rows.stride(0),
            buffer.shape[0],
            num_tokens,
            width,
            width // 2,
            E4M3_MAX,
            **config,
        )
    return buffer


@cached
@triton.jit
def _update_kv_buffer_fp8_kernel(
    kv_ptr,
    loc_ptr,
    buffer_ptr,
    k_scale_ptr,
    v_scale_ptr,
    kv_row_stride,
    loc_stride,
    buffer_row_stride,
    buffer_rows,
    num_tokens,
    width,
    k_width,
    fp8_max,
    BLOCK_TOKENS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    tokens = tl.program_id(0).to(tl.int64) * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    token_mask = tokens < num_tokens
    rows = tl.load(loc_ptr + tokens * loc_stride, mask=token_mask, other=-1).to(tl.int64)
    mask = token_mask[:, None] & (columns < width)[None, :]
    # K heads come first in each row, then V heads: the scale is chosen per column.
    k_inverse = tl.math.div_rn(1.0, tl.load(k_scale_ptr))
    v_inverse = tl.math.div_rn(1.0, tl.load(v_scale_ptr))
    inverse = tl.where(columns < k_width, k_inverse, v_inverse)
    values = tl.load(kv_ptr + tokens[:, None] * kv_row_stride + columns[None, :], mask=mask, other=0.0)
    quantized = tl.clamp(values.to(tl.float32) * inverse[None, :], -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
    store_mask = mask & ((rows >= 0) & (rows < buffer_rows))[:, None]
    tl.store(
        buffer_ptr + rows[:, None] * buffer_row_stride + columns[None, :],
        quantized.to(buffer_ptr.dtype.element_ty),
        mask=store_mask,
    )


_POLICY = LaunchPolicy("native/update_kv_buffer_fp8", launch_config)
