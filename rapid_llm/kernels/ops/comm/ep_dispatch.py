"""native/ep_dispatch: comm.ep_dispatch with every payload of a row in one exchange.

    1. layout (layout.py, as the reference's): token_in_rank [T, W], the counts exchange (read on the
       host: the exchange's split sizes) and each sent (token, rank) pair's row, slots [T, W] (-1: not sent).
    2. _pack_kernel, program (t, r) per pair: one packed row of row_bytes bytes (a multiple of 16) holding,
       each at a 16-byte aligned offset, x[t]'s bytes, x_scale[t] (fp32, fp8 payloads), the slots' ids made
       local to r (int64; -1 for another rank's expert or an id outside [0, E)) and their weights (fp32,
       0 with the -1s).
    3. one all_to_all_single of the packed rows [S, row_bytes] uint8 (the reference makes four: x, scales,
       ids, weights; at decode sizes each costs a collective's latency).
    4. _unpack_kernel, program i per received row: x, x_scale, ids (the caller's id dtype) and weights into
       new contiguous outputs, and +1 in tokens_per_expert for each local expert the row names (at its
       first slot naming it: a token naming an expert twice counts once).

Values are copied as bytes (x through an integer view of its element size: bf16 and fp8 bits unchanged),
so every dtype is exact, under the CPU interpreter too. Not CUDA-graph safe (the counts are read on the
host). x, topk_ids, topk_weights and x_scale take any strides.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from ...collectives import EpDispatch, EpHandle, resolve_group
from ..fast_launch import LaunchPolicy, cached
from .layout import destinations, exchange_counts, send_slots

ROW = "native/ep_dispatch"
#: The kernels one call launches, in order (conformance's one-kernel-per-row walk checks them).
STAGES = (f"{__name__}:_pack_kernel", f"{__name__}:_unpack_kernel")
#: The integer type each element size is copied as.
_RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32}


def _aligned(size: int) -> int:
    return -(-size // 16) * 16


def row_layout(hidden: int, element_bytes: int, groups: int, top_k: int) -> tuple[int, int, int, int]:
    """(scale offset, ids offset, weights offset, row bytes) of a packed row: x's bytes first, each section
    16-byte aligned (groups = 0: no scales)."""
    scale_at = _aligned(hidden * element_bytes)
    ids_at = scale_at + _aligned(groups * 4)
    weights_at = ids_at + _aligned(top_k * 8)
    return scale_at, ids_at, weights_at, weights_at + _aligned(top_k * 4)


def launch_config(hidden: int, top_k: int) -> dict:
    """A row's copy in 1024-element chunks over 4 warps; the top-k slots in one block."""
    return {"BLOCK": 1024, "BLOCK_K": triton.next_power_of_2(top_k), "num_warps": 4}


_POLICY = LaunchPolicy(ROW, launch_config)


def ep_dispatch(x, topk_ids, topk_weights, num_experts: int, group=None, x_scale=None) -> EpDispatch:
    """Unchecked kernel entry of native/ep_dispatch (the check ran)."""
    group = resolve_group(group)
    world = dist.get_world_size(group)
    local_experts = num_experts // world
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    groups = 0 if x_scale is None else x_scale.shape[1]
    _, _, token_in_rank = destinations(topk_ids, num_experts, world)
    send_counts, recv_counts, send, receive = exchange_counts(token_in_rank, group)
    scale_at, ids_at, weights_at, row_bytes = row_layout(hidden, x.element_size(), groups, top_k)
    config = _POLICY.get((hidden, top_k))
    raw = _RAW[x.element_size()]
    packed = torch.empty((sum(send), row_bytes), dtype=torch.uint8, device=x.device)
    scale = x_scale if x_scale is not None else topk_weights  # a placeholder pointer when there are no scales
    if packed.shape[0]:
        slots = send_slots(token_in_rank, send_counts)
        _pack_kernel[(tokens, world)](
            x.view(raw), *x.stride(), scale, *scale.stride(), topk_ids, *topk_ids.stride(), topk_weights,
            *topk_weights.stride(), slots, packed, hidden, groups, top_k, local_experts, num_experts, world,
            row_bytes, scale_at, ids_at, weights_at, **config,
        )  # fmt: skip
    received = torch.empty((sum(receive), row_bytes), dtype=torch.uint8, device=x.device)
    dist.all_to_all_single(received, packed, receive, send, group=group)
    rows = received.shape[0]
    recv_x = torch.empty((rows, hidden), dtype=x.dtype, device=x.device)
    recv_scale = None if x_scale is None else torch.empty((rows, groups), dtype=torch.float32, device=x.device)
    recv_ids = torch.empty((rows, top_k), dtype=topk_ids.dtype, device=x.device)
    recv_weights = torch.empty((rows, top_k), dtype=torch.float32, device=x.device)
    counts = torch.zeros(local_experts, dtype=torch.int32, device=x.device)
    if rows:
        _unpack_kernel[(rows,)](
            received, recv_x.view(raw), recv_scale if recv_scale is not None else recv_weights, recv_ids,
            recv_weights, counts, hidden, groups, top_k, row_bytes, scale_at, ids_at, weights_at, **config,
        )  # fmt: skip
    return EpDispatch(recv_x, recv_scale, recv_ids, recv_weights, counts, EpHandle(token_in_rank, recv_counts))


@cached
@triton.jit
def _pack_kernel(
    x_ptr, x_stride0, x_stride1, scale_ptr, scale_stride0, scale_stride1, ids_ptr, ids_stride0, ids_stride1,
    w_ptr, w_stride0, w_stride1, slots_ptr, packed_ptr, hidden, groups, top_k, local_experts, num_experts, world,
    row_bytes, scale_at, ids_at, weights_at, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    rank = tl.program_id(1)
    slot = tl.load(slots_ptr + token * world + rank)
    if slot < 0:
        return
    row = packed_ptr + slot.to(tl.int64) * row_bytes
    x_out = row.to(tl.pointer_type(x_ptr.dtype.element_ty))
    for start in range(0, hidden, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = cols < hidden
        tl.store(x_out + cols, tl.load(x_ptr + token * x_stride0 + cols * x_stride1, mask=keep), mask=keep)
    scale_out = (row + scale_at).to(tl.pointer_type(tl.float32))
    for start in range(0, groups, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = cols < groups
        value = tl.load(scale_ptr + token * scale_stride0 + cols * scale_stride1, mask=keep)
        tl.store(scale_out + cols, value, mask=keep)
    slots_k = tl.arange(0, BLOCK_K)
    in_k = slots_k < top_k
    ids = tl.load(ids_ptr + token * ids_stride0 + slots_k * ids_stride1, mask=in_k, other=-1).to(tl.int64)
    here = (ids >= 0) & (ids < num_experts) & (ids >= rank * local_experts) & (ids < (rank + 1) * local_experts)
    tl.store(
        (row + ids_at).to(tl.pointer_type(tl.int64)) + slots_k,
        tl.where(here, ids - rank * local_experts, -1),
        mask=in_k,
    )
    weights = tl.load(w_ptr + token * w_stride0 + slots_k * w_stride1, mask=in_k, other=0.0)
    tl.store((row + weights_at).to(tl.pointer_type(tl.float32)) + slots_k, tl.where(here, weights, 0.0), mask=in_k)


@cached
@triton.jit
def _unpack_kernel(
    received_ptr, x_ptr, scale_ptr, ids_ptr, w_ptr, counts_ptr, hidden, groups, top_k, row_bytes, scale_at, ids_at,
    weights_at, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    index = tl.program_id(0).to(tl.int64)
    row = received_ptr + index * row_bytes
    x_in = row.to(tl.pointer_type(x_ptr.dtype.element_ty))
    for start in range(0, hidden, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = cols < hidden
        tl.store(x_ptr + index * hidden + cols, tl.load(x_in + cols, mask=keep), mask=keep)
    scale_in = (row + scale_at).to(tl.pointer_type(tl.float32))
    for start in range(0, groups, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = cols < groups
        tl.store(scale_ptr + index * groups + cols, tl.load(scale_in + cols, mask=keep), mask=keep)
    slots_k = tl.arange(0, BLOCK_K)
    in_k = slots_k < top_k
    ids = tl.load((row + ids_at).to(tl.pointer_type(tl.int64)) + slots_k, mask=in_k, other=-1)
    tl.store(ids_ptr + index * top_k + slots_k, ids.to(ids_ptr.dtype.element_ty), mask=in_k)
    weights = tl.load((row + weights_at).to(tl.pointer_type(tl.float32)) + slots_k, mask=in_k, other=0.0)
    tl.store(w_ptr + index * top_k + slots_k, weights, mask=in_k)
    # a local expert counts once per row: at the first slot naming it
    earlier = (ids[:, None] == ids[None, :]) & (slots_k[None, :] < slots_k[:, None]) & in_k[None, :]
    repeated = tl.max(earlier.to(tl.int32), axis=1) > 0
    counted = in_k & (ids >= 0) & ~repeated
    tl.atomic_add(counts_ptr + tl.where(counted, ids, 0), tl.full([BLOCK_K], 1, tl.int32), mask=counted)
