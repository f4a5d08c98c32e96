"""Argument checks of the comm family: each op's one validation site (see ops/checks.py).

Besides the local arguments, a collective needs every rank to agree: the same op, shapes and dtype. Where
the call's values are checked (CPU tensors always; CUDA under RAPID_LLM_CHECK_BOUNDS=1) the ranks exchange a
small description of their call (one all_gather of int64 [2 + _MAX_DIMS]) and every rank raises the same
OpInputError on a mismatch, naming the first rank that differs, instead of hanging in (or reducing garbage
through) a collective of mismatched sizes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..checks import OpInputError, expect_bool, expect_float_tensor, values_checked
from ..norm.checks import check_residual, check_x_weight_eps
from . import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM
from .groups import is_process_group, resolve_group

#: Entries of a call's description: the op's index, x's dtype's index, then its shape padded with -1.
_MAX_DIMS = 8
_OPS = (ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _resolved_group(op, group):
    """(the ProcessGroup `group` stands for (None: the default group), its world size), this process being
    one of its ranks."""
    if not (dist.is_available() and dist.is_initialized()):
        raise OpInputError(
            op,
            "group",
            "a torch.distributed process group (call torch.distributed.init_process_group first)",
            "no process group initialised in this process",
        )
    if type(group) is int and group == dist.GroupMember.NON_GROUP_MEMBER:  # new_group's value outside it
        raise OpInputError(op, "group", "a group this process is a rank of", "a group without this process")
    if not is_process_group(group):
        expected = "None (the default group), a torch.distributed ProcessGroup or its group_name"
        raise OpInputError(op, "group", expected, type(group).__name__)
    try:
        resolved = resolve_group(group)
    except ValueError as error:
        raise OpInputError(op, "group", "the name of a process group of this process", repr(group)) from error
    if dist.get_rank(resolved) < 0:
        raise OpInputError(op, "group", "a group this process is a rank of", "a group without this process")
    return resolved, dist.get_world_size(resolved)


def _expect_ranks_agree(op, x, group, world: int) -> None:
    """Every rank of `group` (resolved) called `op` with x of the same shape and dtype (checked where x's values
    are)."""
    if world == 1 or not values_checked(x):
        return
    if x.dim() > _MAX_DIMS:
        raise OpInputError(op, "x", f"at most {_MAX_DIMS} dims", f"{x.dim()} dims")
    mine = [_OPS.index(op), _DTYPES.index(x.dtype), *x.shape, *([-1] * (_MAX_DIMS - x.dim()))]
    description = torch.tensor(mine, dtype=torch.int64, device=x.device)
    gathered = [torch.empty_like(description) for _ in range(world)]
    dist.all_gather(gathered, description, group=group)
    table = torch.stack(gathered).cpu()
    differs = (table != table[0]).any(dim=1)
    if bool(differs.any()):
        rank = int(torch.nonzero(differs)[0, 0])
        first = table[0].tolist()
        other = table[rank].tolist()

        def describe(entry):
            shape = [size for size in entry[2:] if size >= 0]
            return f"{_OPS[entry[0]]} on {_DTYPES[entry[1]]} {shape}"

        raise OpInputError(
            op,
            "x",
            f"the same op, dtype and shape on every rank of the group ({describe(first)} on rank 0)",
            f"{describe(other)} on rank {rank}",
        )


def check_all_reduce(x, group=None, inplace=False):
    """comm.all_reduce's check: (x, no tags, (num_tokens, hidden, world_size))."""
    op = ALL_REDUCE
    expect_float_tensor(op, "x", x)
    if x.dim() == 0 or x.shape[-1] == 0:
        raise OpInputError(op, "x", "a tensor of shape [..., hidden] with hidden >= 1", f"shape {list(x.shape)}")
    expect_bool(op, "inplace", inplace)
    resolved, world = _resolved_group(op, group)
    _expect_ranks_agree(op, x, resolved, world)
    hidden = x.shape[-1]
    return x, frozenset(), (("num_tokens", x.numel() // hidden), ("hidden", hidden), ("world_size", world))


def check_all_reduce_add_rms_norm(x, residual, weight, eps=1e-6, group=None):
    """comm.all_reduce_add_rms_norm's check: fused_add_rms_norm's local checks, then the group's."""
    op = ALL_REDUCE_ADD_RMS_NORM
    num_tokens, hidden = check_x_weight_eps(op, x, weight, eps)
    check_residual(op, x, residual, weight)
    resolved, world = _resolved_group(op, group)
    _expect_ranks_agree(op, x, resolved, world)
    return x, frozenset(), (("num_tokens", num_tokens), ("hidden", hidden), ("world_size", world))
