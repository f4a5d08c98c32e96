"""Split-K host rules of the paged decode kernels (attention.decode and attention.mla_decode rows).

Host-known sizes only (batch, KV heads, the page table's reach, the SM count): no device value is read, so
a launch that uses it stays capturable in a CUDA graph. No Triton import: the extension rows use it too.
"""

from __future__ import annotations

import torch

from ..device_facts import multiprocessor_count

#: Upper bound of the split count (and the merge kernel's tile): 256 splits of a 32k context are
#: 128 positions each, already below a tile per program at BLOCK_N = 64.
MAX_SPLITS = 256
#: A split should cover at least this many positions of the page table's reach.
MIN_SPLIT_POSITIONS = 256
#: An MLA decode split should cover at least this many positions (its programs do ~8x decode's work per row).
MLA_MIN_SPLIT_POSITIONS = 128


def _capped(wanted: int, capacity: int) -> int:
    """`wanted` splits, no more than the page table's reach allows at MIN_SPLIT_POSITIONS per split, at most
    MAX_SPLITS, at least 1."""
    return max(1, min(wanted, capacity // MIN_SPLIT_POSITIONS, MAX_SPLITS))


def num_splits(batch: int, programs_per_sequence: int, capacity: int, device: torch.device) -> int:
    """Splits per sequence from host-known sizes only. One split when the batch alone gives >= 2 programs
    per SM; otherwise enough splits for ~4 programs per SM (batch * programs_per_sequence * splits >=
    4 * SMs), no more than the page table's reach allows at MIN_SPLIT_POSITIONS per split, at most
    MAX_SPLITS. One split on the CPU. Chosen by the decode tile sweep (evidence h200.attention.sweep)."""
    if device.type != "cuda" or batch == 0:
        return 1
    programs = batch * programs_per_sequence
    if programs >= 2 * multiprocessor_count(device):
        return 1
    return _capped(-(-4 * multiprocessor_count(device) // programs), capacity)


def one_wave_splits(
    batch: int, programs_per_sequence: int, capacity: int, device: torch.device, blocks_per_sm: int
) -> int:
    """Splits per sequence for a kernel whose blocks all run at once when the grid fits one wave (the CUDA
    extension's fp8 decode: blocks_per_sm resident per SM). One split when the batch alone fills the
    SMs' block slots; otherwise as many splits as fill one wave without starting a second (slots // programs:
    a grid of 1.2 waves takes as long as 2), no more than the page table's reach allows at
    MIN_SPLIT_POSITIONS per split, at most MAX_SPLITS. One split on the CPU."""
    if device.type != "cuda" or batch == 0:
        return 1
    programs = batch * programs_per_sequence
    slots = blocks_per_sm * multiprocessor_count(device)
    if programs >= slots:
        return 1
    return _capped(slots // programs, capacity)


def splits_filled_at_reach(splits: int, capacity: int, granule: int) -> int:
    """The splits a sequence as long as the page table's reach (`capacity` positions) fills, for a kernel
    that gives each split ceil(L / S) positions rounded up to a multiple of `granule`: S splits can leave
    the last ones empty (33 splits of 32768 positions in whole 32-position chunks are 32 of 1024; 132 of
    256-position chunks are 128), each a block with nothing to read and a partial row for the merge."""
    length = max(1, -(-(-(-capacity // splits)) // granule)) * granule
    return max(1, -(-capacity // length))


def mla_num_splits(batch: int, head_blocks: int, capacity: int, resident: int, device: torch.device) -> int:
    """MLA decode splits per sequence: one wave of programs (batch * head_blocks * splits ~= SMs * resident;
    a second, partial wave costs a whole program's time), at least MLA_MIN_SPLIT_POSITIONS positions of the
    page table's reach per split, at most MAX_SPLITS, rounded so that no split of a full-length sequence is
    empty. One split on the CPU."""
    if device.type != "cuda" or batch == 0:
        return 1
    wanted = (multiprocessor_count(device) * resident) // (batch * head_blocks)
    reach = max(1, capacity // MLA_MIN_SPLIT_POSITIONS)
    splits = max(1, min(wanted, reach, MAX_SPLITS))
    return splits_filled_at_reach(splits, capacity, MLA_MIN_SPLIT_POSITIONS)


def split_partials(out: torch.Tensor, splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(partial [B, H, S, Dv] fp32, partial_lse [B, H, S] fp32) for a split-K launch writing `out` [B, H, Dv];
    with one split the kernel writes `out` directly and the two are `out` itself (never read)."""
    if splits == 1:
        return out, out
    batch, heads, width = out.shape
    partial = torch.empty((batch, heads, splits, width), dtype=torch.float32, device=out.device)
    partial_lse = torch.empty((batch, heads, splits), dtype=torch.float32, device=out.device)
    return partial, partial_lse


__all__ = [
    "MAX_SPLITS",
    "MIN_SPLIT_POSITIONS",
    "MLA_MIN_SPLIT_POSITIONS",
    "mla_num_splits",
    "num_splits",
    "one_wave_splits",
    "split_partials",
    "splits_filled_at_reach",
]
