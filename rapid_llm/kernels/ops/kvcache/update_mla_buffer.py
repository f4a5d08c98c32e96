"""Native Triton MLA latent-cache write: buffer[loc[i], :R] = latent[i], buffer[loc[i], R:] = rope[i].

latent [T, R] and rope [T, P] (any token strides, unit stride along the row:
layout tag ``latent_rope:rows``, e.g. slices of one projection output) are
copied into the rows loc names of buffer [rows, R + P] (any row stride, unit
stride along the row: ``buffer:rows``); loc: int32/int64 [T], read through
its stride. Grid: one program per token, which copies the latent part and
then the rope part of its row, each in blocks of at most 1024 elements.
Offsets are int64 (buffers past 2**31 elements need no special path); a
token whose id is outside [0, rows) (padding, or an unchecked out-of-range
id) writes nothing, as in every row: no host sync, graph-capturable.
Memory-bound: each token's row is read once and written once.

The kernel serves update_mla_buffer_fp8.py too (QUANTIZE: e4m3 rows).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached
from ..fp8 import E4M3_MAX


def launch_config(kv_lora_rank: int, rope_dim: int) -> dict:
    """One token per program; the latent and the rope part each in one block of the next power of two
    (at most 1024 elements: wider parts loop), not one block of next_power_of_2(R + P): DeepSeek's rows
    of 512 + 64 would leave 448 of 1024 lanes idle. 2 warps for rows of <= 1024 elements, else 4: at
    R = 512 bf16 that is 8 elements (one 16-byte vector) per thread, as update_kv_buffer's 2-warp rows
    of 1024 elements measured best (evidence h200.core.sweep.kv_write). A starting point, not a sweep
    of its own: the op's benchmark times it (evidence h200.attention.bench)."""
    return {
        "BLOCK_LATENT": min(1024, triton.next_power_of_2(kv_lora_rank)),
        "BLOCK_ROPE": min(1024, triton.next_power_of_2(rope_dim)),
        "num_warps": 2 if kv_lora_rank + rope_dim <= 1024 else 4,
    }


def update_mla_buffer(
    latent: torch.Tensor, rope: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor
) -> torch.Tensor:
    """Unchecked kernel entry (the op's check ran: layouts latent_rope:rows and buffer:rows)."""
    launch_mla_write(latent, rope, loc, buffer, None)
    return buffer


def launch_mla_write(
    latent: torch.Tensor, rope: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, scale: torch.Tensor | None
) -> None:
    """The one launch of both MLA writes: a plain copy (scale None) or e4m3 rows quantized with `scale`."""
    num_tokens, kv_lora_rank = latent.shape
    rope_dim = rope.shape[1]
    if num_tokens:
        config = _POLICIES[scale is not None].get((kv_lora_rank, rope_dim))
        _update_mla_buffer_kernel[(num_tokens,)](
            latent,
            rope,
            loc,
            buffer,
            scale,
            latent.stride(0),
            rope.stride(0),
            loc.stride(0),
            buffer.stride(0),
            buffer.shape[0],
            kv_lora_rank,
            rope_dim,
            QUANTIZE=scale is not None,
            FP8_MAX=E4M3_MAX,
            **config,
        )


@triton.jit
def _copy_part(
    source_ptr,
    destination_ptr,
    width,
    inverse_scale,
    QUANTIZE: tl.constexpr,
    FP8_MAX: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """destination[:width] = source[:width], or its e4m3 quantization (fp32 multiply, clamp to +-FP8_MAX)."""
    for start in range(0, width, BLOCK):
        columns = start + tl.arange(0, BLOCK)
        mask = columns < width
        values = tl.load(source_ptr + columns, mask=mask)
        if QUANTIZE:
            # NaN propagates (as the reference's clamp): a NaN input stays NaN in the cache.
            values = tl.clamp(
                values.to(tl.float32) * inverse_scale, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL
            )
        tl.store(destination_ptr + columns, values.to(destination_ptr.dtype.element_ty), mask=mask)


@cached
@triton.jit
def _update_mla_buffer_kernel(
    latent_ptr,
    rope_ptr,
    loc_ptr,
    buffer_ptr,
    scale_ptr,
    latent_row_stride,
    rope_row_stride,
    loc_stride,
    buffer_row_stride,
    buffer_rows,
    kv_lora_rank,
    rope_dim,
    QUANTIZE: tl.constexpr,
    FP8_MAX: tl.constexpr,
    BLOCK_LATENT: tl.constexpr,
    BLOCK_ROPE: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    row = tl.load(loc_ptr + token * loc_stride).to(tl.int64)
    # Ids outside [0, rows) are skipped (padding; unchecked out-of-range ids): no host sync.
    if (row >= 0) & (row < buffer_rows):
        inverse_scale = 1.0
        if QUANTIZE:
            # An IEEE reciprocal, then one multiply per element: the reference's fp32 math, bit for bit.
            inverse_scale = tl.math.div_rn(1.0, tl.load(scale_ptr))
        destination = buffer_ptr + row * buffer_row_stride
        _copy_part(
            latent_ptr + token * latent_row_stride,
            destination,
            kv_lora_rank,
            inverse_scale,
            QUANTIZE,
            FP8_MAX,
            BLOCK_LATENT,
        )
        _copy_part(
            rope_ptr + token * rope_row_stride,
            destination + kv_lora_rank,
            rope_dim,
            inverse_scale,
            QUANTIZE,
            FP8_MAX,
            BLOCK_ROPE,
        )


#: The launch policy of each write (a plain copy, e4m3), cached per (kv_lora_rank, rope_dim).
_POLICIES = {
    False: LaunchPolicy("native/update_mla_buffer", launch_config),
    True: LaunchPolicy("native/update_mla_buffer_fp8", launch_config),
}
