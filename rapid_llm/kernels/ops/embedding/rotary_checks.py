"""Argument checks for embedding.rotary (shared by every implementation)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_float_tensor, expect_same_device, expect_tensor

ROTARY = "embedding.rotary"


def check_rotary_args(positions, q, k, head_dim, cos_sin_cache, is_neox) -> tuple[int, int, int, int]:
    """Validate the arguments; return (num_tokens, num_q_heads, num_kv_heads, rotary_dim)."""
    op = ROTARY
    expect_tensor(op, "positions", positions)
    if positions.dtype not in (torch.int32, torch.int64) or positions.dim() != 1:
        raise OpInputError(op, "positions", "a 1-D int32/int64 tensor [T]",
                           f"{positions.dtype} of shape {list(positions.shape)}")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0:
        raise OpInputError(op, "head_dim", "a positive int", repr(head_dim))
    tokens = positions.shape[0]
    heads = []
    for name, tensor in (("q", q), ("k", k)):
        expect_float_tensor(op, name, tensor)
        if tensor.dim() != 2 or tensor.shape[0] != tokens or tensor.shape[1] % head_dim or tensor.shape[1] == 0:
            raise OpInputError(op, name, f"shape [{tokens}, heads * {head_dim}]", f"shape {list(tensor.shape)}")
        heads.append(tensor.shape[1] // head_dim)
    if k.dtype != q.dtype:
        raise OpInputError(op, "k", f"q's dtype {q.dtype}", str(k.dtype))
    if not isinstance(is_neox, bool):
        raise OpInputError(op, "is_neox", "a bool", type(is_neox).__name__)
    expect_float_tensor(op, "cos_sin_cache", cos_sin_cache)
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] % 2 or not 0 < cos_sin_cache.shape[1] <= head_dim:
        raise OpInputError(op, "cos_sin_cache", f"shape [max_position, rotary_dim], rotary_dim even and <= {head_dim}",
                           f"shape {list(cos_sin_cache.shape)}")
    if cos_sin_cache.dtype not in (torch.float32, q.dtype):
        raise OpInputError(op, "cos_sin_cache", f"dtype torch.float32 or q's {q.dtype}", str(cos_sin_cache.dtype))
    for name, tensor in (("q", q), ("k", k), ("cos_sin_cache", cos_sin_cache)):
        expect_same_device(op, name, tensor, "positions", positions)
    if tokens and q.data_ptr() == k.data_ptr():
        raise OpInputError(op, "k", "a tensor distinct from q (both are rotated in place)", "the same memory as q")
    return tokens, heads[0], heads[1], cos_sin_cache.shape[1]
