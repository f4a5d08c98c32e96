"""Native Triton rotary embedding, in place on q [T, Hq*D] and k [T, Hk*D].

For every head and every pair (x1, x2) of its first rotary_dim dims, with
c, s = cos_sin_cache[positions[t]] halves:  x1' = x1 c - x2 s,  x2' = x2 c + x1 s
(fp32 math, one rounding). NeoX pairs dim i with i + rotary_dim/2; GPT-J pairs
2i with 2i+1. Dims past rotary_dim are not touched (partial rotary).

Layout: q, k and the cache with unit stride along their last dim and any
token stride (layout ``qk:rows``: e.g. views into a fused qkv tensor);
positions with any stride. Grid: (T, q head
blocks + k head blocks): each program rotates BLOCK_HEADS heads of one token
as one [BLOCK_HEADS, rotary_dim/2] tile of pairs (launch_config).
Positions outside [0, max_position) (padding, or unchecked out-of-range
ones) are masked: those tokens stay unrotated, as in every row (no host sync).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..fast_launch import LaunchPolicy, cached, cdiv

#: Self-test hook of ci/gpu_perf_gate, the only caller that sets the variable: a deliberately worse launch
#: config (4 heads x 4 warps per program: measurably slower at prefill sizes; evidence
#: h200.core.sweep.rotary_fp8) that the GPU perf gate must catch and name.
PLANTED_SLOWDOWN = os.environ.get("RAPID_LLM_GPU_PERF_PLANT") == "native/rotary"


def launch_config(q_heads: int, k_heads: int, rotary_dim: int) -> dict:
    """Heads per program and warps from the head counts and rotary width (no search).

    A program rotates BLOCK_HEADS heads of one token ([BLOCK_HEADS, rotary_dim/2]
    pairs): about 512 pairs (2 KiB of bf16 read and written per program) over
    two warps, 8 pairs per thread. The q and k heads of a token are split
    into blocks of the same size, so programs are balanced. 8 heads x 2 warps
    is the best or near it at every size swept; one program per tensor is
    slower, 1-2 heads per program far slower (evidence h200.core.sweep.rotary_fp8).
    """
    block_half = triton.next_power_of_2(rotary_dim // 2)
    if PLANTED_SLOWDOWN:
        return {"BLOCK_HEADS": 4, "BLOCK_HALF": block_half, "num_warps": 4}
    block_heads = max(1, min(triton.next_power_of_2(max(q_heads, k_heads)), 512 // block_half))
    return {
        "BLOCK_HEADS": block_heads,
        "BLOCK_HALF": block_half,
        "num_warps": max(1, min(8, block_heads * block_half // 256)),
    }


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int, cos_sin_cache: torch.Tensor, is_neox: bool
):
    """Unchecked kernel entry (the op's check ran: layout qk:rows)."""
    tokens = positions.shape[0]
    q_heads, k_heads, rotary_dim = q.shape[1] // head_dim, k.shape[1] // head_dim, cos_sin_cache.shape[1]
    if tokens:
        launch(
            positions,
            q,
            k,
            head_dim,
            cos_sin_cache,
            is_neox,
            q_heads,
            k_heads,
            rotary_dim,
            _POLICY.get((q_heads, k_heads, rotary_dim)),
        )
    return q, k


def launch(positions, q, k, head_dim, cos_sin_cache, is_neox, q_heads, k_heads, rotary_dim, config) -> None:
    """Run the kernel with an explicit config (checked arguments; the tuning sweep calls this directly)."""
    block_heads = config["BLOCK_HEADS"]
    q_blocks = cdiv(q_heads, block_heads)
    grid = (positions.shape[0], q_blocks + cdiv(k_heads, block_heads))
    _rotary_kernel[grid](
        positions,
        q,
        k,
        cos_sin_cache,
        positions.stride(0),
        q.stride(0),
        k.stride(0),
        cos_sin_cache.stride(0),
        q_heads,
        k_heads,
        q_blocks,
        cos_sin_cache.shape[0],
        rotary_dim // 2,
        head_dim,
        IS_NEOX=is_neox,
        **config,
    )


@cached
@triton.jit
def _rotary_kernel(
    positions_ptr,
    q_ptr,
    k_ptr,
    cache_ptr,
    positions_stride,
    q_token_stride,
    k_token_stride,
    cache_row_stride,
    q_heads,
    k_heads,
    q_blocks,
    max_position,
    half,
    head_dim,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    position = tl.load(positions_ptr + token * positions_stride).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)
    # Position validity as a block, so it can join the masks (no host sync, no branch).
    position_block = tl.zeros([BLOCK_HALF], dtype=tl.int64) + position
    pair_mask = (pairs < half) & (position_block >= 0) & (position_block < max_position)
    cos = tl.load(cache_ptr + position_block * cache_row_stride + pairs, mask=pair_mask, other=1.0).to(tl.float32)
    sin = tl.load(cache_ptr + position_block * cache_row_stride + half + pairs, mask=pair_mask, other=0.0).to(
        tl.float32
    )
    # Blocks [0, q_blocks) cover q's heads, the rest k's.
    if block < q_blocks:
        base = q_ptr + token * q_token_stride
        first_head = block * BLOCK_HEADS
        num_heads = q_heads
    else:
        base = k_ptr + token * k_token_stride
        first_head = (block - q_blocks) * BLOCK_HEADS
        num_heads = k_heads
    heads = first_head + tl.arange(0, BLOCK_HEADS)[:, None]
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


_POLICY = LaunchPolicy("native/rotary", launch_config)
