"""PyTorch references for the embedding family (arguments checked by embedding/checks.py first).

vocab_embedding: out[i] = table[ids[i] - vocab_start] if vocab_start <= ids[i] < vocab_end else 0
(negative ids are padding: zero rows).

rotary(positions, q, k, head_dim, cos_sin_cache, is_neox): NeoX or GPT-J
rotary embedding in place, fp32 math. Tokens whose position is outside
[0, max_position) (padding, or unchecked out-of-range) are left unrotated.
Neither function syncs with the device.
"""

from __future__ import annotations

import torch

from .checks import shard_end


def vocab_embedding(
    ids: torch.Tensor, table: torch.Tensor, vocab_start: int = 0, vocab_end: int | None = None
) -> torch.Tensor:
    rows, hidden = table.shape
    vocab_end = shard_end(table, vocab_start, vocab_end)
    out = torch.zeros((*ids.shape, hidden), dtype=table.dtype, device=table.device)
    if rows == 0 or ids.numel() == 0:
        return out
    in_shard = (ids >= vocab_start) & (ids < vocab_end)
    local = torch.where(in_shard, ids.long() - vocab_start, torch.zeros_like(ids, dtype=torch.long))
    gathered = table.index_select(0, local.reshape(-1)).reshape(*ids.shape, hidden)
    return gathered.masked_fill_(~in_shard.unsqueeze(-1), 0)


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int, cos_sin_cache: torch.Tensor, is_neox: bool
):
    """Rotary embedding in place on q [T, Hq*D] and k [T, Hk*D] (contract: embedding.rotary)."""
    tokens = positions.shape[0]
    if tokens == 0:
        return q, k
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    valid = ((positions >= 0) & (positions < cos_sin_cache.shape[0]))[:, None, None]
    clamped = positions.long().clamp(0, cos_sin_cache.shape[0] - 1)
    cos, sin = cos_sin_cache.index_select(0, clamped).float().split(half, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    for tensor in (q, k):
        heads = tensor.view(tokens, -1, head_dim)
        original = heads[..., :rotary_dim]
        rotated = original.float()
        if is_neox:
            x1, x2 = rotated[..., :half], rotated[..., half:]
            result = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
            result = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        heads[..., :rotary_dim] = torch.where(valid, result.to(tensor.dtype), original)
    return q, k
