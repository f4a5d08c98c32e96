"""Where an expert-parallel dispatch sends each token: the layout every EP row of ours computes the same way.

destinations(topk_ids, num_experts, world): (valid [T, k] bool: the slot names an expert in [0, E); owner
[T, k] int64: the rank holding it, `world` for no rank; token_in_rank [T, W] bool: the token goes to rank r,
once however many of its experts live there). Ranks hold num_experts / world consecutive experts each.
exchange_counts(token_in_rank, group): (send_counts, recv_counts) int64 [W] on the device, both as host
lists too: the all_to_all_single of each rank's send counts (the exchanges' split sizes, read on the host).
send_slots(token_in_rank, send_counts): int32 [T, W]: the row of token t among all the rows this rank sends
(rank r's rows first for r = 0, 1, ..., each rank's in token order), -1 where t is not sent to r. Received
rows come in the same order by source rank (what every row of the op promises).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def destinations(topk_ids, num_experts: int, world: int):
    local_experts = num_experts // world
    ids = topk_ids.long()
    valid = (ids >= 0) & (ids < num_experts)  # unchecked ids outside [-1, E) count as -1
    owner = torch.where(valid, ids.clamp(min=0) // local_experts, world)
    token_in_rank = torch.zeros((ids.shape[0], world + 1), dtype=torch.bool, device=ids.device)
    token_in_rank.scatter_(1, owner, True)
    return valid, owner, token_in_rank[:, :world].contiguous()


def exchange_counts(token_in_rank, group):
    send_counts = token_in_rank.sum(dim=0)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    return send_counts, recv_counts, send_counts.tolist(), recv_counts.tolist()


def send_slots(token_in_rank, send_counts) -> torch.Tensor:
    starts = torch.cumsum(send_counts, dim=0) - send_counts
    ranks = torch.cumsum(token_in_rank.to(torch.int64), dim=0) - 1 + starts[None, :]
    return torch.where(token_in_rank, ranks, -1).to(torch.int32)
