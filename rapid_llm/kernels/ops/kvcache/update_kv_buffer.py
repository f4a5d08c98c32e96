"""Native Triton KV-cache write: buffer[loc[i], :] = kv[i, :], rows scattered in any order.

kv [T, 2*Hk, D] and buffer [rows, 2*Hk, D] are each viewed as rows of
W = 2*Hk*D contiguous elements with their own row stride (layout tags
``kv:rows``, ``buffer:rows``); loc: int32/int64 [T], any stride. Grid:
(token blocks of BLOCK_TOKENS, column blocks of BLOCK). Buffer offsets are
computed in int64, so buffers past 2**31 elements need no special path; ids
outside [0, rows) (padding, or unchecked out-of-range ids) are skipped by a
masked store, as in every row (no host sync).
Memory-bound: each token's row is read once and written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv


def launch_config(row_width: int) -> dict:
    """Row blocks of up to 1024 elements, one token per program; 2 warps for rows of <= 1024
    elements (4 KV heads x 128), else 4: 2 warps are faster on narrow rows, wider rows are
    insensitive to the choice, and 2-4 tokens per program measured no better (evidence
    h200.core.sweep.kv_write)."""
    block = min(1024, triton.next_power_of_2(row_width))
    return {"BLOCK_TOKENS": 1, "BLOCK": block, "num_warps": 2 if row_width <= 1024 else 4}


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """Unchecked kernel entry (the op's check ran: layouts kv:rows and buffer:rows)."""
    kv_rows, buffer_rows = scatter_rows(kv, buffer)
    num_tokens, width = kv_rows.shape
    if num_tokens:
        config = _POLICY.get((width,))
        _update_kv_buffer_kernel[scatter_grid(num_tokens, width, config)](
            kv_rows,
            loc,
            buffer_rows,
            kv_rows.stride(0),
            loc.stride(0),
            buffer_rows.stride(0),
            buffer.shape[0],
            num_tokens,
            width,
            **config,
        )
    return buffer


def scatter_rows(kv: torch.Tensor, buffer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """kv [T, H, D] and buffer [rows, H, D] as [T, H*D] and [rows, H*D] views (layouts kv:rows, buffer:rows)."""
    width = kv.shape[1] * kv.shape[2]
    return kv.view(kv.shape[0], width), buffer.view(buffer.shape[0], width)


def scatter_grid(num_tokens: int, width: int, config: dict) -> tuple[int, int]:
    """(token blocks, column blocks) of a KV scatter kernel's launch."""
    return cdiv(num_tokens, config["BLOCK_TOKENS"]), cdiv(width, config["BLOCK"])


@cached
@triton.jit
def _update_kv_buffer_kernel(
    kv_ptr,
    loc_ptr,
    buffer_ptr,
    kv_row_stride,
    loc_stride,
    buffer_row_stride,
    buffer_rows,
    num_tokens,
    width,
    BLOCK_TOKENS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    tokens = tl.program_id(0).to(tl.int64) * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    token_mask = tokens < num_tokens
    rows = tl.load(loc_ptr + tokens * loc_stride, mask=token_mask, other=-1).to(tl.int64)
    mask = token_mask[:, None] & (columns < width)[None, :]
    values = tl.load(kv_ptr + tokens[:, None] * kv_row_stride + columns[None, :], mask=mask)
    # Ids outside [0, rows) are skipped (padding; unchecked out-of-range ids): no host sync.
    store_mask = mask & ((rows >= 0) & (rows < buffer_rows))[:, None]
    tl.store(buffer_ptr + rows[:, None] * buffer_row_stride + columns[None, :], values, mask=store_mask)


_POLICY = LaunchPolicy("native/update_kv_buffer", launch_config)
