"""DeepEP's intranode normal-mode dispatch and combine as rows of comm.ep_dispatch and comm.ep_combine.

Buffers: one deep_ep.Buffer per process group (keyed by its group_name), created on the group's first
call (a collective: DeepEP exchanges IPC handles over the group, so every rank creates it in the same
call) with NVLink buffer bytes from DeepEP's own size hints for the call's hidden size (bf16 bytes, the
larger of the dispatch and combine configs'), and kept for the process's life; a later call with a wider
hidden size replaces it with a larger one (the old one is released once no handle refers to it). Rows run
on the caller's current CUDA stream (async_finish off), so the results are ordered like any other op.

Dispatch: DeepEP's layout kernel (which ranks and experts each token goes to), then its dispatch, which
moves each token once per rank in source-rank, then token order, ids made local (-1 for another rank's
expert) and their weights zeroed with them: the contract's order and values. Ids outside [0, E) are
passed as -1 (the contract's unchecked behaviour). tokens_per_expert is counted from the received ids
(DeepEP's list counts per its own alignment). The handle keeps DeepEP's tuple beside the shared layout:
token_in_rank is DeepEP's is_token_in_rank; recv_counts are the differences of its rank_prefix_matrix
column for this rank (row i: the tokens ranks 0..i send here).

Combine: DeepEP's intranode combine (bf16; the sum in fp32, rounded once) over the handle's DeepEP tuple.
Not CUDA-graph safe: the received count is read on the host (num_worst_tokens is not used).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...collectives import EpDispatch, EpHandle, resolve_group, tokens_per_local_expert

#: group_name -> (deep_ep.Buffer, the hidden bytes it was sized for).
_BUFFERS: dict = {}


def _buffer(group, hidden_bytes: int):
    import deep_ep

    key = group.group_name
    held = _BUFFERS.get(key)
    if held is not None and held[1] >= hidden_bytes:
        return held[0]
    ranks = group.size()
    configs = (deep_ep.Buffer.get_dispatch_config(ranks), deep_ep.Buffer.get_combine_config(ranks))
    nvl_bytes = max(config.get_nvl_buffer_size_hint(hidden_bytes, ranks) for config in configs)
    buffer = deep_ep.Buffer(group, num_nvl_bytes=nvl_bytes, num_rdma_bytes=0)
    _BUFFERS[key] = (buffer, hidden_bytes)
    return buffer


def _group(group):
    resolved = resolve_group(group)
    return dist.group.WORLD if resolved is None else resolved


def ep_dispatch(x, topk_ids, topk_weights, num_experts: int, group=None, x_scale=None) -> EpDispatch:
    group = _group(group)
    world, rank = group.size(), dist.get_rank(group)
    buffer = _buffer(group, x.shape[1] * 2)
    ids = topk_ids.long()
    ids = torch.where((ids >= 0) & (ids < num_experts), ids, -1).contiguous()
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(ids, num_experts)
    payload = x.contiguous() if x_scale is None else (x.contiguous(), x_scale.contiguous())
    received, recv_ids, recv_weights, _, library, _ = buffer.dispatch(
        payload,
        num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert,
        topk_idx=ids,
        topk_weights=topk_weights.contiguous(),
    )
    recv_x, recv_scale = received if x_scale is not None else (received, None)
    prefix = library[0][:, rank].long()  # rank_prefix_matrix: [i, j] = tokens ranks 0..i send to rank j
    recv_counts = torch.diff(prefix, prepend=prefix.new_zeros(1))
    handle = EpHandle(in_rank, recv_counts, "deep_ep", tuple(library))
    local_ids = recv_ids.to(topk_ids.dtype)
    counts = tokens_per_local_expert(local_ids, num_experts // world)
    return EpDispatch(recv_x, recv_scale, local_ids, recv_weights, counts, handle)


def ep_combine(y, handle: EpHandle, group=None) -> torch.Tensor:
    group = _group(group)
    buffer = _buffer(group, y.shape[1] * 2)
    combined, _, _ = buffer.combine(y.contiguous(), handle.library)
    return combined
