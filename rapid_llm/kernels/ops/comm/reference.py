"""torch.distributed rows of the comm family: the correctness baseline and the floor.

all_reduce: torch.distributed.all_reduce(SUM) on a contiguous buffer (a copy of x, or x itself in place).
all_reduce_add_rms_norm: that sum, then norm's fused_add_rms_norm reference (fp32 add, one rounding, RMSNorm
of the stored residual).
ep_dispatch: the rows each rank sends (layout.py: token_in_rank from the ids' owners), a counts exchange
(all_to_all_single of int64 [W]), then one all_to_all_single per payload (x, its scales, ids, weights).
ep_combine: the rows back with the counts swapped, added per token in fp32 (index_add), rounded once.
Arguments are checked by the op's check (comm/checks.py) before these run.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...collectives import EpDispatch, EpHandle, resolve_group, tokens_per_local_expert
from ..norm.reference import fused_add_rms_norm
from .layout import destinations, exchange_counts


def all_reduce(x: torch.Tensor, group=None, inplace: bool = False) -> torch.Tensor:
    # the collective needs a contiguous buffer: x itself in place when it is one, else a contiguous copy
    buffer = x if inplace and x.is_contiguous() else x.clone(memory_format=torch.contiguous_format)
    dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=resolve_group(group))
    if inplace and buffer is not x:
        x.copy_(buffer)
    return x if inplace else buffer


def all_reduce_add_rms_norm(x, residual, weight, eps: float = 1e-6, group=None):
    all_reduce(x, group, inplace=True)
    return fused_add_rms_norm(x, residual, weight, eps)


def _exchange(rows: torch.Tensor, send: list, receive: list, group) -> torch.Tensor:
    """all_to_all_single of `rows` ([S, ...], grouped by destination rank, send[r] rows to rank r): the rows
    every rank sent here, grouped by source rank. Bytes are moved as uint8 (fp8 included)."""
    rows = rows.contiguous()
    out = torch.empty((sum(receive), *rows.shape[1:]), dtype=rows.dtype, device=rows.device)
    as_bytes = (lambda t: t.view(torch.uint8)) if rows.dtype == torch.float8_e4m3fn else (lambda t: t)
    dist.all_to_all_single(as_bytes(out), as_bytes(rows), receive, send, group=group)
    return out


def ep_dispatch(x, topk_ids, topk_weights, num_experts: int, group=None, x_scale=None) -> EpDispatch:
    group = resolve_group(group)
    world = dist.get_world_size(group)
    local_experts = num_experts // world
    ids = topk_ids.long()
    valid, owner, token_in_rank = destinations(topk_ids, num_experts, world)
    _, recv_counts, send, receive = exchange_counts(token_in_rank, group)
    # the rows to send, by destination rank, then token index (the order every row of the op receives in)
    destination, token = token_in_rank.t().nonzero(as_tuple=True)
    slot_here = (owner[token] == destination[:, None]) & valid[token]
    local_ids = torch.where(slot_here, ids[token] - destination[:, None] * local_experts, -1)
    weights = torch.where(slot_here, topk_weights[token], 0.0)
    rows = x.view(torch.uint8)[token].view(x.dtype) if x.dtype == torch.float8_e4m3fn else x[token]  # fp8: bytes
    recv_x = _exchange(rows, send, receive, group)
    recv_scale = None if x_scale is None else _exchange(x_scale[token], send, receive, group)
    recv_ids = _exchange(local_ids.to(topk_ids.dtype), send, receive, group)
    recv_weights = _exchange(weights, send, receive, group)
    handle = EpHandle(token_in_rank, recv_counts)
    counts = tokens_per_local_expert(recv_ids, local_experts)
    return EpDispatch(recv_x, recv_scale, recv_ids, recv_weights, counts, handle)


def ep_combine(y, handle: EpHandle, group=None) -> torch.Tensor:
    group = resolve_group(group)
    send_counts = handle.token_in_rank.sum(dim=0)
    back = _exchange(y, handle.recv_counts.tolist(), send_counts.tolist(), group)
    _, token = handle.token_in_rank.t().nonzero(as_tuple=True)
    out = torch.zeros((handle.num_tokens, y.shape[1]), dtype=torch.float32, device=y.device)
    out.index_add_(0, token, back.float())
    return out.to(y.dtype)
