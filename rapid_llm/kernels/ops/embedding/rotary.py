"""Native Triton rotary embedding, in place on q [T, Hq*D] and k [T, Hk*D].

For every head and every pair (x1, x2) of its first rotary_dim dims, with
c, s = cos_sin_cache[positions[t]] halves:  x1' = x1 c - x2 s,  x2' = x2 c + x1 s
(fp32 math, one rounding). NeoX pairs dim i with i + rotary_dim/2; GPT-J pairs
2i with 2i+1. Dims past rotary_dim are not touched (partial rotary).

Layout: q and k with unit stride along their last dim and any token stride
(layout ``qk:rows``: e.g. views into a fused qkv tensor). Grid: (T, 2) —
program (t, 0) rotates every q head of token t, (t, 1) every k head, as one
[heads, rotary_dim/2] tile, so cos/sin are read once per token and tensor.
Positions outside the cache are skipped (masked, no host sync): those
tokens stay unrotated; the reference row is the one that raises on them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import OpInputError, expect_triton_device
from .rotary_checks import ROTARY, check_rotary_args


def rotary(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int,
           cos_sin_cache: torch.Tensor, is_neox: bool):
    tokens, q_heads, k_heads, rotary_dim = check_rotary_args(positions, q, k, head_dim, cos_sin_cache, is_neox)
    expect_triton_device(ROTARY, "q", q)
    for name, tensor in (("q", q), ("k", k), ("cos_sin_cache", cos_sin_cache)):
        if tensor.stride(1) != 1:
            raise OpInputError(ROTARY, name, "unit stride along the last dim (layout qk:rows)",
                               f"strides {tensor.stride()}")
    if tokens == 0:
        return q, k
    half = rotary_dim // 2
    block_heads = triton.next_power_of_2(max(q_heads, k_heads))
    block_half = triton.next_power_of_2(half)
    _rotary_kernel[(tokens, 2)](
        positions, q, k, cos_sin_cache, q.stride(0), k.stride(0), cos_sin_cache.stride(0),
        q_heads, k_heads, cos_sin_cache.shape[0], half, head_dim,
        BLOCK_HEADS=block_heads, BLOCK_HALF=block_half, IS_NEOX=is_neox,
        num_warps=max(1, min(8, block_heads * block_half // 256)),
    )
    return q, k


@triton.jit
def _rotary_kernel(positions_ptr, q_ptr, k_ptr, cache_ptr, q_token_stride, k_token_stride, cache_row_stride,
                   q_heads, k_heads, max_position, half, head_dim,
                   BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr, IS_NEOX: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)
    # Position validity as a block, so it can join the masks (no host sync, no branch).
    position_block = tl.zeros([BLOCK_HALF], dtype=tl.int64) + position
    pair_mask = (pairs < half) & (position_block >= 0) & (position_block < max_position)
    cos = tl.load(cache_ptr + position_block * cache_row_stride + pairs, mask=pair_mask, other=1.0).to(tl.float32)
    sin = tl.load(cache_ptr + position_block * cache_row_stride + half + pairs, mask=pair_mask,
                  other=0.0).to(tl.float32)
    if tl.program_id(1) == 0:
        base = q_ptr + token * q_token_stride
        num_heads = q_heads
    else:
        base = k_ptr + token * k_token_stride
        num_heads = k_heads
    heads = tl.arange(0, BLOCK_HEADS)[:, None]
    mask = (heads < num_heads) & pair_mask[None, :]
    if IS_NEOX:
        first = heads * head_dim + pairs[None, :]
        second = first + half
    else:
        first = heads * head_dim + 2 * pairs[None, :]
        second = first + 1
    x1 = tl.load(base + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + second, mask=mask, other=0.0).to(tl.float32)
    out1 = x1 * cos[None, :] - x2 * sin[None, :]
    out2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(base + first, out1.to(base.dtype.element_ty), mask=mask)
    tl.store(base + second, out2.to(base.dtype.element_ty), mask=mask)
