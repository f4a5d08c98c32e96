"""PyTorch reference for the vocab embedding (vocab-parallel shard semantics).

out[i] = table[ids[i] - vocab_start] if vocab_start <= ids[i] < vocab_end else 0.
Negative ids raise here (a host-side check: one device sync).

rotary(positions, q, k, head_dim, cos_sin_cache, is_neox): NeoX or GPT-J
rotary embedding in place, fp32 math; positions outside the cache raise.
"""

from __future__ import annotations

import torch

from ..checks import OpInputError
from .checks import VOCAB_EMBEDDING, check_vocab_embedding_args
from .rotary_checks import ROTARY, check_rotary_args


def vocab_embedding(ids: torch.Tensor, table: torch.Tensor, vocab_start: int = 0,
                    vocab_end: int | None = None) -> torch.Tensor:
    vocab_start, vocab_end, hidden = check_vocab_embedding_args(ids, table, vocab_start, vocab_end)
    if ids.numel() and int(ids.min()) < 0:
        raise OpInputError(VOCAB_EMBEDDING, "ids", "token ids >= 0", f"a minimum of {int(ids.min())}")
    in_shard = (ids >= vocab_start) & (ids < vocab_end)
    local = torch.where(in_shard, ids.long() - vocab_start, torch.zeros_like(ids, dtype=torch.long))
    out = table.index_select(0, local.reshape(-1)).reshape(*ids.shape, hidden)
    return out.masked_fill(~in_shard.unsqueeze(-1), 0)


def rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
           cos_sin_cache: torch.Tensor, is_neox: bool):
    """Rotary embedding in place on q [T, Hq*D] and k [T, Hk*D]; see ops/interfaces.py embedding.rotary."""
    tokens, _, _, rotary_dim = check_rotary_args(positions, q, k, head_dim, cos_sin_cache, is_neox)
    if tokens == 0:
        return q, k
    low, high = int(positions.min()), int(positions.max())
    if low < 0 or high >= cos_sin_cache.shape[0]:
        raise OpInputError(ROTARY, "positions", f"positions in [0, {cos_sin_cache.shape[0]}) (the cache's rows)",
                           f"positions from {low} to {high}")
    half = rotary_dim // 2
    cos, sin = cos_sin_cache.index_select(0, positions.long()).float().split(half, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    for tensor in (q, k):
        heads = tensor.view(tokens, -1, head_dim)
        rotated = heads[..., :rotary_dim].float()
        if is_neox:
            x1, x2 = rotated[..., :half], rotated[..., half:]
            result = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
            result = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        heads[..., :rotary_dim] = result.to(tensor.dtype)
    return q, k
