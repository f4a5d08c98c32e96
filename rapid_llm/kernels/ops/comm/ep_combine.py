"""native/ep_combine: comm.ep_combine with the per-token sum in one kernel.

    1. one all_to_all_single of y's rows back to their tokens' ranks (split sizes from the handle: the rows
       this rank received from each rank go back to it; the rows it sent come back in the order it sent
       them, layout.send_slots).
    2. _combine_kernel, program (t, j) per token and block of columns: the token's returned rows (at most one
       per rank, in rank order) summed in fp32 and rounded once into out[t] (0 for a token sent nowhere).
The reference widens every returned row to fp32 and index_adds them into an fp32 buffer before rounding:
several passes over the rows where this row reads them once. Not CUDA-graph safe (the counts are read on
the host). y takes any strides (the exchange sends a contiguous copy).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from ...collectives import EpHandle, resolve_group
from ..fast_launch import LaunchPolicy, cached, cdiv
from .layout import send_slots

ROW = "native/ep_combine"


def launch_config(hidden: int) -> dict:
    """1024 columns of a token per program over 4 warps (8 bf16 elements per thread)."""
    return {"BLOCK": min(1024, triton.next_power_of_2(hidden)), "num_warps": 4}


_POLICY = LaunchPolicy(ROW, launch_config)


def ep_combine(y, handle: EpHandle, group=None) -> torch.Tensor:
    """Unchecked kernel entry of native/ep_combine (the check ran)."""
    group = resolve_group(group)
    hidden = y.shape[1]
    token_in_rank = handle.token_in_rank
    send_counts = token_in_rank.sum(dim=0)
    back = torch.empty((int(send_counts.sum()), hidden), dtype=y.dtype, device=y.device)
    dist.all_to_all_single(back, y.contiguous(), send_counts.tolist(), handle.recv_counts.tolist(), group=group)
    out = torch.empty((handle.num_tokens, hidden), dtype=y.dtype, device=y.device)
    if out.numel():
        config = _POLICY.get((hidden,))
        grid = (handle.num_tokens, cdiv(hidden, config["BLOCK"]))
        slots = send_slots(token_in_rank, send_counts)
        _combine_kernel[grid](back, slots, out, *out.stride(), hidden, handle.world_size, **config)
    return out


@cached
@triton.jit
def _combine_kernel(back_ptr, slots_ptr, out_ptr, out_stride0, out_stride1, hidden, world, BLOCK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    keep = cols < hidden
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for rank in range(world):
        slot = tl.load(slots_ptr + token * world + rank) + tl.zeros([BLOCK], tl.int32)  # -1: not sent there
        sent = keep & (slot >= 0)
        row = tl.where(sent, slot, 0).to(tl.int64)
        total += tl.load(back_ptr + row * hidden + cols, mask=sent, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * out_stride0 + cols * out_stride1, total.to(out_ptr.dtype.element_ty), mask=keep)
