"""comm.all_reduce through torch's symmetric-memory kernels (torch.ops.symm_mem) on one node's GPUs.

Buffers: one symmetric buffer per (group, device, dtype), allocated with
torch.distributed._symmetric_memory.empty and exchanged with rendezvous (a collective on the group: every
rank makes it in the same call, as every rank calls the op), sized for the largest message so far (a
power of two, at least MIN_BUFFER_BYTES), kept for the process's life. A larger message allocates a
larger buffer on its first call; that call must not be inside a CUDA-graph capture (allocation and
rendezvous cannot be captured): warm up eagerly at the largest size before capturing, as engines do.
A capture that finds its buffer too small raises a RuntimeError saying so.

one_shot: torch.ops.symm_mem.one_shot_all_reduce_copy: x copied into this rank's buffer, then every rank
reads every peer's buffer and sums (one kernel, world_size reads per element): the latency-bound decode
sizes. two_shot: x copied into the buffer, then torch.ops.symm_mem.two_shot_all_reduce_out: each rank
sums 1/W of the elements from every peer and all-gathers them into out (bandwidth-bound sizes). Sums in
fp32 per element, rounded once to x's dtype. one_shot_all_reduce_add_rms_norm: the one-shot sum, then our
fused_add_rms_norm (two kernels, no NCCL call between them).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...collectives import resolve_group

MIN_BUFFER_BYTES = 2**20
#: (group_name, device, dtype) -> the symmetric buffer (1-D).
_BUFFERS: dict = {}


def _group_name(group) -> str:
    resolved = resolve_group(group)
    return (dist.group.WORLD if resolved is None else resolved).group_name


def _buffer(group_name: str, numel: int, dtype, device):
    """This rank's symmetric buffer of at least numel elements (allocated and exchanged when too small)."""
    key = (group_name, device, dtype)
    held = _BUFFERS.get(key)
    if held is not None and held.numel() >= numel:
        return held[:numel]
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"comm.all_reduce (symm_mem): the group's symmetric buffer holds {0 if held is None else held.numel()} "
            f"elements, this call needs {numel}; allocating one cannot be captured in a CUDA graph: call the op "
            "once eagerly at this size before capturing"
        )
    from torch.distributed import _symmetric_memory as symm_mem

    element_bytes = torch.empty((), dtype=dtype).element_size()
    capacity = max(MIN_BUFFER_BYTES // element_bytes, 1 << (numel - 1).bit_length())
    buffer = symm_mem.empty(capacity, dtype=dtype, device=device)
    symm_mem.rendezvous(buffer, group_name)
    _BUFFERS[key] = buffer
    return buffer[:numel]


def _finish(x, summed, inplace: bool):
    summed = summed.view(x.shape)
    if not inplace:
        return summed
    x.copy_(summed)
    return x


def one_shot_all_reduce(x, group=None, inplace: bool = False):
    if x.numel() == 0:
        return x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
    name = _group_name(group)
    buffer = _buffer(name, x.numel(), x.dtype, x.device)
    summed = torch.ops.symm_mem.one_shot_all_reduce_copy(buffer, x.reshape(-1), "sum", name)
    return _finish(x, summed, inplace)


def two_shot_all_reduce(x, group=None, inplace: bool = False):
    if x.numel() == 0:
        return x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
    name = _group_name(group)
    buffer = _buffer(name, x.numel(), x.dtype, x.device)
    buffer.copy_(x.reshape(-1))
    out = x.view(-1) if inplace and x.is_contiguous() else torch.empty(x.numel(), dtype=x.dtype, device=x.device)
    torch.ops.symm_mem.two_shot_all_reduce_out(buffer, "sum", name, out)
    if out.data_ptr() == x.data_ptr():
        return x
    return _finish(x, out, inplace)


def one_shot_all_reduce_add_rms_norm(x, residual, weight, eps: float = 1e-6, group=None):
    """comm.all_reduce_add_rms_norm: the one-shot sum into x, then norm.fused_add_rms_norm (the public op: its
    planned row) on x and residual."""
    from ... import fused_add_rms_norm

    one_shot_all_reduce(x, group, inplace=True)
    return fused_add_rms_norm(x, residual, weight, eps)
