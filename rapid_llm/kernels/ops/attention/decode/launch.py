"""Launch policies of the Triton paged decode kernel (attention.decode): tiles and split counts as data.

Each policy returns a fresh dict of knobs, `splits` included, after the sweep hook
(ops.launch_override.apply) for its row. Numbers: the H200 decode tile sweeps (evidence
h200.attention.sweep and h200.attention.decode_fp8.sweep).
"""

from __future__ import annotations

import torch

from ...launch_override import apply
from ..splits import num_splits


def decode(batch: int, num_kv_heads: int, head_dim: int, capacity: int, device: torch.device) -> dict:
    """native/decode: 64 positions a tile for head dims <= 128 (a K and a V tile of 64 x 128 bf16 = 32 KiB in
    flight with 2 stages), 32 for 256; 4 warps (the logits tile is only G_PAD x BLOCK_N). The CPU
    interpreter takes 32 positions and one stage (its cost is per operation)."""
    if device.type != "cuda":
        knobs = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1}
    else:
        knobs = {"BLOCK_N": 64 if head_dim <= 128 else 32, "num_warps": 4, "num_stages": 2}
    knobs["splits"] = num_splits(batch, num_kv_heads, capacity, device)
    return apply("native/decode", knobs)


def decode_fp8(
    batch: int, num_kv_heads: int, head_dim: int, capacity: int, q_dtype: torch.dtype, device: torch.device
) -> dict:
    """native/decode_fp8: twice decode's positions a tile (the same bytes); for head dims <= 128 registers
    capped at 128 a thread (four programs an SM instead of two); CVT_ASM, the inline-PTX e4m3 -> fp16
    conversion, on CUDA with fp16 products (a bf16 or fp16 q)."""
    if device.type != "cuda":
        knobs = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "CVT_ASM": False}
    else:
        knobs = {
            "BLOCK_N": 128 if head_dim <= 128 else 64,
            "num_warps": 4,
            "num_stages": 2,
            "CVT_ASM": q_dtype != torch.float32,
        }
        if head_dim <= 128:
            knobs["maxnreg"] = 128
    knobs["splits"] = num_splits(batch, num_kv_heads, capacity, device)
    return apply("native/decode_fp8", knobs)
