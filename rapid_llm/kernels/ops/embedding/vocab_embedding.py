"""Native Triton vocab embedding: gather table rows by token id, zero rows outside the shard.

    out[i, :] = table[ids[i] - vocab_start, :]  if vocab_start <= ids[i] < vocab_end  else 0

ids: int32/int64 [...] (any strides: read through a flat view with its own
stride, a copy only when no such view exists); table: [rows, hidden] with unit
stride along hidden (layout ``table:rows``); out: new contiguous
[..., hidden]. Grid: (tokens, column blocks of BLOCK); table row offsets in
int64. Ids outside [vocab_start, vocab_end), negative (padding) ones
included, give zero rows without touching the table, as in every row.
Memory-bound: one row read and one row written per token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv
from .checks import shard_end


def launch_config(hidden: int) -> dict:
    """1024 columns over 4 warps (one 16-byte access per thread in bf16), as the copy-like kernels."""
    return {"BLOCK": min(1024, triton.next_power_of_2(hidden)), "num_warps": 4}


def vocab_embedding(
    ids: torch.Tensor, table: torch.Tensor, vocab_start: int = 0, vocab_end: int | None = None
) -> torch.Tensor:
    """Unchecked kernel entry (the op's check ran: table has layout table:rows)."""
    hidden = table.shape[1]
    vocab_end = shard_end(table, vocab_start, vocab_end)
    out = torch.empty((*ids.shape, hidden), dtype=table.dtype, device=table.device)
    num_tokens = ids.numel()
    if num_tokens == 0:
        return out
    flat_ids = ids.reshape(-1)  # a strided view when one exists; a tiny copy otherwise (4-8 bytes a token)
    config = _POLICY.get((hidden,))
    grid = (num_tokens, cdiv(hidden, config["BLOCK"]))
    _vocab_embedding_kernel[grid](
        flat_ids, table, out, flat_ids.stride(0), table.stride(0), hidden, vocab_start, vocab_end, **config
    )
    return out


@cached
@triton.jit
def _vocab_embedding_kernel(
    ids_ptr, table_ptr, out_ptr, ids_stride, table_row_stride, hidden, vocab_start, vocab_end, BLOCK: tl.constexpr
):
    token = tl.program_id(0).to(tl.int64)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    token_id = tl.load(ids_ptr + token * ids_stride).to(tl.int64)
    local = token_id - vocab_start
    mask = columns < hidden
    # The shard test as a block (one value per column): out-of-shard tokens load nothing, and
    # the masked load yields their zero row without touching the table.
    local_block = tl.zeros([BLOCK], dtype=tl.int64) + local
    load_mask = mask & (local_block >= 0) & (local_block < vocab_end - vocab_start)
    row = tl.load(table_ptr + local_block * table_row_stride + columns, mask=load_mask, other=0.0)
    tl.store(out_ptr + token * hidden + columns, row, mask=mask)


_POLICY = LaunchPolicy("native/vocab_embedding", launch_config)
