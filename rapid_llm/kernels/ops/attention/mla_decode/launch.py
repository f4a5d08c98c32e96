"""Launch policies of the MLA decode kernels: tile knobs and split counts as data, one function per kernel.

Each policy returns a fresh dict of its kernel's knobs, `splits` included, after the sweep hook
(ops.launch_override.apply) for its row. "resident" (programs of that shape an SM holds) feeds the split
rule only. Numbers: the H200 MLA decode sweeps (evidence h200.attention.mla_decode.sweep).
"""

from __future__ import annotations

import torch
import triton

from ...launch_override import apply
from ..splits import mla_num_splits

#: Splits of at most this many positions take the pointer kernel's 32-position tiles at Hq < 64.
SHORT_SPLIT_POSITIONS = 256

#: (BLOCK_H, BLOCK_N, num_warps, num_stages, resident) of the pointer and TMA kernels on CUDA.
#: Hq >= 64: 64 heads share each latent tile (two warpgroups, one program per SM);
#: Hq < 64: 16 heads (the tensor-core minimum), two programs per SM.
_MANY_HEADS = (64, 64, 8, 2, 1)
_FEW_HEADS_LONG = (16, 64, 4, 2, 2)
_FEW_HEADS_SHORT = (16, 32, 4, 2, 2)
#: fp8 cache: 8 warps (the e4m3 tile and its fp16 copy beside q and the accumulator: 4 warps spill at 16 rows
#: in the sm90 compile, 8 take 173 registers); >= 32 rows, 32 a program (64 spill 200+, 32 about 5).
_FP8_MANY_ROWS = (32, 64, 8, 2, 2)
_FP8_FEW_ROWS = (16, 64, 8, 2, 2)
#: The CPU interpreter pays per operation, not per element: small tiles keep parity fast.
_INTERPRETER = (16, 32, 4, 1, 1)


def _knobs(tiles, batch, num_q_heads, capacity, device, **extra) -> dict:
    block_h, block_n, warps, stages, resident = tiles
    splits = mla_num_splits(batch, triton.cdiv(num_q_heads, block_h), capacity, resident, device)
    return {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages, **extra, "splits": splits}


def pointer(batch: int, rows: int, capacity: int, dtype: torch.dtype, device: torch.device, fp8: bool = False) -> dict:
    """native/mla_decode and native/mla_decode_fp8 (fp8): the pointer kernel (any page size, fp32, any CUDA
    sm80+, the interpreter) over `rows` = num_q_tokens * Hq (token, head) rows a sequence. Below 64 rows it
    takes 64-position tiles on long splits and 32 on short ones (B=1's many splits); fp32 halves BLOCK_H and
    takes one stage (IEEE products, twice the bytes). UNMASKED_BODY: whole tiles load without masks. fp8:
    the _FP8 tiles and CVT_ASM, the inline-PTX e4m3 -> fp16 conversion, on CUDA with fp16 products (a bf16
    or fp16 q)."""
    row = "native/mla_decode_fp8" if fp8 else "native/mla_decode"
    if device.type != "cuda":
        return apply(row, _knobs(_INTERPRETER, batch, rows, capacity, device, UNMASKED_BODY=True))
    tiles = _MANY_HEADS if rows >= 64 else _FEW_HEADS_LONG
    if fp8:
        tiles = _FP8_MANY_ROWS if rows >= 32 else _FP8_FEW_ROWS
    short_splits_narrow = tiles == _FEW_HEADS_LONG
    if dtype == torch.float32:
        tiles = (max(16, tiles[0] // 2), tiles[1], tiles[2], 1, tiles[4])
    extra = {"CVT_ASM": dtype != torch.float32} if fp8 else {}
    knobs = _knobs(tiles, batch, rows, capacity, device, UNMASKED_BODY=True, **extra)
    if short_splits_narrow and capacity // knobs["splits"] <= SHORT_SPLIT_POSITIONS:
        knobs["BLOCK_N"] = _FEW_HEADS_SHORT[1]
    return apply(row, knobs)


def tma(batch: int, num_q_heads: int, capacity: int, device: torch.device) -> dict:
    """native/mla_decode_tma: 64 heads x 64 positions at Hq >= 64; 16 heads x 32 positions below (32-position
    boxes issue without address arithmetic and beat 64-position ones there)."""
    tiles = _MANY_HEADS if num_q_heads >= 64 else _FEW_HEADS_SHORT
    return apply("native/mla_decode_tma", _knobs(tiles, batch, num_q_heads, capacity, device))


def gluon(batch: int, num_q_heads: int, capacity: int, device: torch.device) -> dict:
    """native/mla_decode_gluon (Hq < 64): 16 heads x 64 positions (fixed by the kernel's layouts), 4 warps, one
    program per SM; a 2-slot ring of whole tiles with the rope columns in the ring (ROPE_RING), 164 KiB.
    STAGES=3 without ROPE_RING (three value slots, one rope slot, 220 KiB) measured 3-14% slower."""
    splits = mla_num_splits(batch, triton.cdiv(num_q_heads, 16), capacity, 1, device)
    return apply("native/mla_decode_gluon", {"STAGES": 2, "ROPE_RING": True, "splits": splits})


def gluon_pingpong(batch: int, num_q_heads: int, capacity: int, device: torch.device) -> dict:
    """native/mla_decode_gluon_pingpong (Hq >= 64): 64 heads x 64 positions (fixed by the kernel's layouts), two
    warp-specialised warpgroups, one program per SM (217 KiB); the second warpgroup's register budget is a knob."""
    splits = mla_num_splits(batch, triton.cdiv(num_q_heads, 64), capacity, 1, device)
    return apply("native/mla_decode_gluon_pingpong", {"WORKER_REGISTERS": 232, "splits": splits})
