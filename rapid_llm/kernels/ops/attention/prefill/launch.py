"""Launch policies of the prefill kernels: tile knobs as data, one function per kernel.

Each policy returns a fresh dict of knobs after the sweep hook (ops.launch_override.apply) for the row
being served. Numbers: the H200 prefill tile sweeps and the Gluon kernel's variant runs (evidence
h200.attention.sweep and h200.attention.prefill.variants).
"""

from __future__ import annotations

import torch

from ...launch_override import apply


def pointer(row: str, head_dim: int, head_dim_v: int, dtype: torch.dtype, device: torch.device) -> dict:
    """native/prefill, native/mla_prefill, native/prefill_paged (the pointer kernel). sm80+: BLOCK_M = 128
    query rows and 8 warps (16 rows a warp: the m16 tensor-core tile) for head dims up to 128, so each K/V
    tile loaded serves 128 queries; BLOCK_N = 64 keys keeps the logits tile and the accumulator in
    registers. Head dims above 128 halve BLOCK_N, Dv 256 halves BLOCK_M, fp32 halves both (twice the
    bytes, IEEE products). The CPU interpreter pays per operation: 64 x 32 tiles (still BLOCK_M > BLOCK_N,
    so a query block's diagonal spans several key tiles)."""
    if device.type != "cuda":
        return apply(row, {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1})
    block_m, block_n, warps, stages = 128, 64, 8, 3
    if head_dim > 128:
        block_n = 32
    if head_dim_v > 128:
        block_m = 64
    if dtype == torch.float32:
        block_m, block_n, stages = block_m // 2, max(16, block_n // 2), 2
    return apply(row, {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages})


def tma(row: str, head_dim: int, head_dim_v: int) -> dict:
    """native/prefill_tma, native/mla_prefill_tma (sm90+): BLOCK_M = 128, BLOCK_N = 64; head dims <= 128 with
    4 warps (one warpgroup issues both m64 halves of each product) and 2 stages, q/k head dim 192 (MLA) with
    8 warps and 3 stages; value head dim 256 takes 64 x 32 tiles, which fit shared memory."""
    if head_dim_v > 128:
        knobs = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    elif head_dim > 128:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    else:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    return apply(row, knobs)


#: native/prefill_gluon per consumer count: (keys per tile, ring slots). Two consumer warpgroups with
#: 128-key tiles in 2 slots serve; three take 64-key tiles in 4 slots (a 128-key tile's logits, P and
#: accumulator would exceed the default partition's registers).
GLUON_TILES = {2: (128, 2), 3: (64, 4)}


def gluon(device: torch.device) -> dict:
    """native/prefill_gluon (sm90, head dim 128): two consumer warpgroups, 128-key tiles in a 2-slot ring, two
    Q slots (the next item's queries land while the current one finishes), no turns between the consumers
    (PINGPONG measured slower), a persistent grid of one program per SM (PROGRAMS None)."""
    block_n, stages = GLUON_TILES[2]
    return apply(
        "native/prefill_gluon",
        {"CONSUMERS": 2, "BLOCK_N": block_n, "STAGES": stages, "Q_SLOTS": 2, "PINGPONG": False, "PROGRAMS": None},
    )
