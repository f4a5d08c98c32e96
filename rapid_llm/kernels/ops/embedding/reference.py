"""PyTorch reference for the vocab embedding (vocab-parallel shard semantics).

out[i] = table[ids[i] - vocab_start] if vocab_start <= ids[i] < vocab_end else 0.
Negative ids raise here (a host-side check: one device sync).
"""

from __future__ import annotations

import torch

from ..checks import OpInputError
from .checks import VOCAB_EMBEDDING, check_vocab_embedding_args


def vocab_embedding(ids: torch.Tensor, table: torch.Tensor, vocab_start: int = 0,
                    vocab_end: int | None = None) -> torch.Tensor:
    vocab_start, vocab_end, hidden = check_vocab_embedding_args(ids, table, vocab_start, vocab_end)
    if ids.numel() and int(ids.min()) < 0:
        raise OpInputError(VOCAB_EMBEDDING, "ids", "token ids >= 0", f"a minimum of {int(ids.min())}")
    in_shard = (ids >= vocab_start) & (ids < vocab_end)
    local = torch.where(in_shard, ids.long() - vocab_start, torch.zeros_like(ids, dtype=torch.long))
    out = table.index_select(0, local.reshape(-1)).reshape(*ids.shape, hidden)
    return out.masked_fill(~in_shard.unsqueeze(-1), 0)
