"""native/align: moe.align's Triton kernel, the expert-sorted layout in one launch, without atomics.

Slot s = t * top_k + j of topk_ids [T, top_k] (any strides) has the key e = topk_ids[t, j] - expert_start
when that is a local expert (0 <= e < L), else the key L (left out). With counts[e] the slots of key e,
padded[e] = round_up(counts[e], block_size), start[e] = sum of padded[e'] for e' < e:

    sorted_ids[start[e] + r] = the r-th slot of key e in ascending slot order   (r < counts[e])
    sorted_ids[p] = N (the slot count) at every other p < capacity
    block_experts[b] = the e with start[e] <= b * block_size < start[e] + padded[e], or -1 past the padded total

Grid: one program per CHUNK slots (at least one). Every program histograms all N keys (the totals give
start[], the chunks before its own give each key's earlier slots: a few hundred KB of L2 reads at the
largest prefill, and no grid-wide synchronisation), then sorts its chunk by (key, slot) with tl.sort and
scatters each slot to start[key] + earlier[key] + its rank in the chunk's run of that key. The programs
also share the writes nobody else makes: the padding entries of each expert's run and of the tail, and
block_experts. Every output entry is written by exactly one program. Outputs: see moe/__init__.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import cached, cdiv
from .checks import local_range
from .reference import align_capacity

#: Slots per program: the sort's length (a power of two).
CHUNK = 1024
#: Padding entries written per expert per step, and blocks per step of the block_experts pass.
_PAD_STEP = 16
_BLOCK_STEP = 32


def align(topk_ids, num_experts, block_size, expert_start=0, num_local_experts=None):
    """Unchecked kernel entry: (sorted_ids, block_experts, padded_count, counts) as the contract states."""
    local_experts = local_range(num_experts, expert_start, num_local_experts)
    return launch(topk_ids, expert_start, local_experts, block_size)


def launch(topk_ids, expert_start, local_experts, block_size):
    """(sorted_ids, block_experts, padded_count, counts): new buffers sized from the shapes (align_capacity),
    holding the layout of topk_ids [T, top_k] over local experts expert_start .. + local_experts - 1."""
    tokens, top_k = topk_ids.shape
    capacity = align_capacity(tokens * top_k, local_experts, block_size)
    device = topk_ids.device
    sorted_ids = torch.empty(capacity, dtype=torch.int32, device=device)
    block_experts = torch.empty(capacity // block_size, dtype=torch.int32, device=device)
    padded_count = torch.empty(1, dtype=torch.int32, device=device)
    counts = torch.empty(local_experts, dtype=torch.int32, device=device)
    slots = tokens * top_k
    _align_kernel[(max(1, cdiv(slots, CHUNK)),)](
        topk_ids,
        topk_ids.stride(0),
        topk_ids.stride(1),
        top_k,
        slots,
        expert_start,
        local_experts,
        block_size,
        sorted_ids.shape[0],
        sorted_ids,
        block_experts,
        padded_count,
        counts,
        CHUNK=CHUNK,
        # bin L holds the left-out slots: L + 1 bins
        BLOCK_E=triton.next_power_of_2(local_experts + 1),
        PAD_STEP=_PAD_STEP,
        BLOCK_STEP=_BLOCK_STEP,
    )
    return sorted_ids, block_experts, padded_count, counts


@triton.jit
def _keys(ids_ptr, stride_t, stride_k, top_k, slots, expert_start, local_experts, slot):
    """The key of each slot (int32): its local expert, or local_experts for another expert, an id outside
    the local range, or a slot past the end."""
    inside = slot < slots
    token = slot // top_k
    column = slot - token * top_k
    ids = tl.load(ids_ptr + token.to(tl.int64) * stride_t + column.to(tl.int64) * stride_k, mask=inside, other=-1)
    local = ids - expert_start
    return tl.where(inside & (local >= 0) & (local < local_experts), local, local_experts).to(tl.int32)


@cached
@triton.jit(do_not_specialize=["slots", "capacity"])
def _align_kernel(
    ids_ptr,
    stride_t,
    stride_k,
    top_k,
    slots,
    expert_start,
    local_experts,
    block_size,
    capacity,
    sorted_ptr,
    block_experts_ptr,
    padded_count_ptr,
    counts_ptr,
    CHUNK: tl.constexpr,
    BLOCK_E: tl.constexpr,
    PAD_STEP: tl.constexpr,
    BLOCK_STEP: tl.constexpr,
):
    chunk = tl.program_id(0)
    programs = tl.num_programs(0)
    lanes = tl.arange(0, CHUNK)
    experts = tl.arange(0, BLOCK_E)
    real = experts < local_experts

    # Totals, and each key's slots in the chunks before this program's.
    totals = tl.zeros((BLOCK_E,), dtype=tl.int32)
    earlier = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for first in range(0, slots, CHUNK):
        keys = _keys(ids_ptr, stride_t, stride_k, top_k, slots, expert_start, local_experts, first + lanes)
        histogram = tl.histogram(keys, BLOCK_E)
        totals += histogram
        earlier += tl.where(first < chunk * CHUNK, histogram, 0)
    counts = tl.where(real, totals, 0)
    padded = (counts + block_size - 1) // block_size * block_size
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)

    # This chunk's slots, sorted by (key, slot): a key's run starts at its exclusive prefix in the chunk.
    keys = _keys(ids_ptr, stride_t, stride_k, top_k, slots, expert_start, local_experts, chunk * CHUNK + lanes)
    run_lengths = tl.histogram(keys, BLOCK_E)
    run_starts = tl.cumsum(run_lengths, axis=0) - run_lengths
    ordered = tl.sort(keys * CHUNK + lanes)
    ordered_keys = ordered // CHUNK
    shift = tl.gather(starts + earlier - run_starts, ordered_keys, 0)
    tl.store(sorted_ptr + lanes + shift, chunk * CHUNK + ordered % CHUNK, mask=ordered_keys < local_experts)

    # Padding of each expert's run (at most block_size - 1 entries), PAD_STEP entries per expert at a time,
    # the experts spread over the programs.
    steps = tl.arange(0, PAD_STEP)
    for pad_first in range(0, block_size - 1, PAD_STEP):
        offsets = pad_first + steps
        positions = (starts + counts)[:, None] + offsets[None, :]
        mine = (experts % programs == chunk) & real
        inside = mine[:, None] & (offsets[None, :] < (padded - counts)[:, None])
        tl.store(sorted_ptr + positions, slots, mask=inside)
    # The tail past the padded total, and block_experts, strided over the programs.
    for tail_first in range(total + chunk * CHUNK, capacity, programs * CHUNK):
        positions = tail_first + lanes
        tl.store(sorted_ptr + positions, slots, mask=positions < capacity)
    blocks = capacity // block_size
    block_lanes = tl.arange(0, BLOCK_STEP)
    for block_first in range(chunk * BLOCK_STEP, blocks, programs * BLOCK_STEP):
        block = block_first + block_lanes
        position = block * block_size
        # the owner of a position: the number of (real) experts whose run ends at or before it
        owner = tl.sum(((ends[None, :] <= position[:, None]) & real[None, :]).to(tl.int32), axis=1)
        tl.store(block_experts_ptr + block, tl.where(position < total, owner, -1), mask=block < blocks)
    if chunk == 0:
        tl.store(counts_ptr + experts, counts, mask=real)
        tl.store(padded_count_ptr, total)
