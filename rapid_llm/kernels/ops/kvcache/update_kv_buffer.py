"""Native Triton KV-cache write: buffer[loc[i], :] = kv[i, :], rows scattered in any order.

kv [T, 2*Hk, D] and buffer [rows, 2*Hk, D] are each viewed as rows of
W = 2*Hk*D contiguous elements with their own row stride (layout tags
``kv:rows``, ``buffer:rows``); loc: int32/int64 [T]. Grid: (T, column blocks
of BLOCK). Buffer offsets are computed in int64, so buffers past 2**31
elements need no special path; ids outside [0, rows) are skipped (masked
store, no host sync: the reference row is the one that raises on them).
Memory-bound: each token's row is read once and written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import expect_triton_device, rows_view
from .checks import UPDATE_KV_BUFFER, check_update_kv_buffer_args


def launch_config(row_width: int) -> dict:
    """1024 elements over 4 warps (one 16-byte access per thread in bf16), as the copy-like kernels."""
    return {"BLOCK": min(1024, triton.next_power_of_2(row_width)), "num_warps": 4}


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    num_tokens, heads, head_dim = check_update_kv_buffer_args(kv, loc, buffer)
    expect_triton_device(UPDATE_KV_BUFFER, "kv", kv)
    width = heads * head_dim
    kv_rows = rows_view(UPDATE_KV_BUFFER, "kv", kv, num_tokens, width)
    buffer_rows = rows_view(UPDATE_KV_BUFFER, "buffer", buffer, buffer.shape[0], width)
    if num_tokens == 0:
        return buffer
    config = launch_config(width)
    grid = (num_tokens, triton.cdiv(width, config["BLOCK"]))
    _update_kv_buffer_kernel[grid](kv_rows, loc, buffer_rows, kv_rows.stride(0), buffer_rows.stride(0),
                                   buffer.shape[0], width, **config)
    return buffer


@triton.jit
def _update_kv_buffer_kernel(kv_ptr, loc_ptr, buffer_ptr, kv_row_stride, buffer_row_stride, buffer_rows, width,
                             BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    row = tl.load(loc_ptr + token).to(tl.int64)
    # The row-id test as a block (one value per column), so it can join the store mask.
    row_block = tl.zeros([BLOCK], dtype=tl.int64) + row
    mask = columns < width
    values = tl.load(kv_ptr + token * kv_row_stride + columns, mask=mask)
    store_mask = mask & (row_block >= 0) & (row_block < buffer_rows)
    tl.store(buffer_ptr + row_block * buffer_row_stride + columns, values, mask=store_mask)
