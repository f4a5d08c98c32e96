"""Argument checks of the comm family: each op's one validation site (see ops/checks.py).

Besides the local arguments, a collective needs every rank to agree: the same op, dtype and sizes. Where the
call's values are checked (CPU tensors always; CUDA under RAPID_LLM_CHECK_BOUNDS=1) the ranks exchange a
small description of their call (one all_gather of int64 [_ENTRIES]) after each ran its local checks, so
every rank raises an OpInputError instead of hanging in (or exchanging garbage through) a collective of
mismatched sizes: the rank whose own arguments failed raises its error, the others name that rank; a
mismatch names the first rank that differs. Unchecked (CUDA by default), a rank whose arguments fail raises
alone and its peers find out from the transport (NCCL's timeout).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...collectives import LIBRARY_HANDLE_SIZES, EpHandle, is_process_group, resolve_group
from ..checks import OpInputError, expect_bool, expect_float_tensor, expect_int, expect_tensor, values_checked
from ..norm.checks import check_residual, check_x_weight_eps
from . import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM, EP_COMBINE, EP_DISPATCH, FP8_GROUP

#: A call's description: [op index, 1 if its local checks failed, then the op's entries padded with -1].
_ENTRIES = 10
_OPS = (ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM, EP_DISPATCH, EP_COMBINE)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.int64)
_ID_DTYPES = (torch.int32, torch.int64)
_FP8 = torch.float8_e4m3fn
_NO_TAGS = frozenset()
_DEEP_EP_TAGS = frozenset({"handle:deep_ep"})


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
        raise OpInputError(op, "group", "a group this process is a rank of", repr(group)) from error
    if dist.get_rank(resolved) < 0:
        raise OpInputError(op, "group", "a group this process is a rank of", "a group without this process")
    return resolved, dist.get_world_size(resolved)


def _agree(op, anchor, group, local_checks, describe):
    """Run `local_checks()` (it raises OpInputError or returns (the call's entries: ints every rank must
    share, the check's result)), then, where anchor's values are checked, exchange every rank's entries:
    raises on every rank when one rank's local checks failed or the entries differ. `describe(entries)`
    says in words what a rank called."""
    resolved, world = _resolved_group(op, group)
    exchanged = world > 1 and isinstance(anchor, torch.Tensor) and values_checked(anchor)
    if not exchanged:
        entries, result = local_checks(resolved, world)
        return result
    try:
        entries, result = local_checks(resolved, world)
        error = None
    except OpInputError as failure:
        entries, result, error = (), None, failure
    mine = [_OPS.index(op), int(error is not None), *entries]
    mine += [-1] * (_ENTRIES - len(mine))
    description = torch.tensor(mine, dtype=torch.int64, device=anchor.device)
    gathered = [torch.empty_like(description) for _ in range(world)]
    dist.all_gather(gathered, description, group=resolved)
    table = torch.stack(gathered).cpu()
    if error is not None:
        raise error
    failed = torch.nonzero(table[:, 1] != 0)
    if failed.numel():
        rank = int(failed[0, 0])
        raise OpInputError(
            op, "group", "every rank's arguments to pass the op's checks", f"rank {rank}'s failed (its error says how)"
        )
    differs = (table != table[0]).any(dim=1)
    if bool(differs.any()):
        rank = int(torch.nonzero(differs)[0, 0])
        first, other = table[0].tolist(), table[rank].tolist()
        raise OpInputError(
            op,
            "x" if op != EP_COMBINE else "y",
            f"the same call on every rank of the group ({_said(first, describe)} on rank 0)",
            f"{_said(other, describe)} on rank {rank}",
        )
    return result


def _said(entry, describe) -> str:
    return f"{_OPS[entry[0]]} with {describe(entry[2:])}"


def _shape_entries(op, x) -> list:
    if x.dim() > _ENTRIES - 3:
        raise OpInputError(op, "x", f"at most {_ENTRIES - 3} dims", f"{x.dim()} dims")
    return [_DTYPES.index(x.dtype), *x.shape]


def _describe_shape(entries) -> str:
    return f"{_DTYPES[entries[0]]} {[size for size in entries[1:] if size >= 0]}"


def check_all_reduce(x, group=None, inplace=False):
    """comm.all_reduce's check: (x, no tags, (num_tokens, hidden, world_size))."""
    op = ALL_REDUCE

    def local(resolved, world):
        expect_float_tensor(op, "x", x)
        if x.dim() == 0 or x.shape[-1] == 0:
            raise OpInputError(op, "x", "a tensor of shape [..., hidden] with hidden >= 1", f"shape {list(x.shape)}")
        expect_bool(op, "inplace", inplace)
        hidden = x.shape[-1]
        dims = (("num_tokens", x.numel() // hidden), ("hidden", hidden), ("world_size", world))
        return _shape_entries(op, x), (x, _NO_TAGS, dims)

    return _agree(op, x, group, local, _describe_shape)


def check_all_reduce_add_rms_norm(x, residual, weight, eps=1e-6, group=None):
    """comm.all_reduce_add_rms_norm's check: fused_add_rms_norm's local checks, then the group's."""
    op = ALL_REDUCE_ADD_RMS_NORM

    def local(resolved, world):
        num_tokens, hidden = check_x_weight_eps(op, x, weight, eps)
        check_residual(op, x, residual, weight)
        dims = (("num_tokens", num_tokens), ("hidden", hidden), ("world_size", world))
        return _shape_entries(op, x), (x, _NO_TAGS, dims)

    return _agree(op, x, group, local, _describe_shape)


def _expect_ids_in_range(op, ids, num_experts: int) -> None:
    """Every id in [-1, num_experts) (-1: an unused slot); a host read, done where values are checked."""
    bad = (ids < -1) | (ids >= num_experts)
    if bool(bad.any()):
        token, column = (int(i) for i in bad.nonzero()[0])
        raise OpInputError(
            op,
            "topk_ids",
            f"expert ids in [0, {num_experts}) or -1",
            f"{int(ids[token, column])} at [{token}, {column}]",
        )


def _describe_dispatch(entries) -> str:
    dtype, hidden, top_k, experts, scaled, ids = entries[:6]
    scale = " with x_scale" if scaled else ""
    return f"x {_DTYPES[dtype]} [_, {hidden}]{scale}, topk_ids {_DTYPES[ids]} [_, {top_k}], num_experts={experts}"


def check_ep_dispatch(x, topk_ids, topk_weights, num_experts, group=None, x_scale=None):
    """comm.ep_dispatch's check: (x, no tags, (num_tokens, hidden, top_k, num_experts, world_size)). The
    ranks agree on everything but the token count, which is each rank's own."""
    op = EP_DISPATCH

    def local(resolved, world):
        expect_tensor(op, "x", x)
        if x.dtype != _FP8:
            expect_float_tensor(op, "x", x)
        if x.dim() != 2 or x.shape[1] == 0:
            raise OpInputError(op, "x", "a tensor [T, hidden] with hidden >= 1", f"shape {list(x.shape)}")
        tokens, hidden = x.shape
        expect_tensor(op, "topk_ids", topk_ids)
        if topk_ids.dtype not in _ID_DTYPES or topk_ids.dim() != 2 or topk_ids.shape[1] == 0:
            got = f"{topk_ids.dtype} {list(topk_ids.shape)}"
            raise OpInputError(op, "topk_ids", "an int32/int64 tensor [T, top_k] with top_k >= 1", got)
        top_k = topk_ids.shape[1]
        if topk_ids.shape[0] != tokens:
            raise OpInputError(op, "topk_ids", f"{tokens} rows (x's tokens)", f"shape {list(topk_ids.shape)}")
        expect_tensor(op, "topk_weights", topk_weights)
        if topk_weights.dtype != torch.float32 or tuple(topk_weights.shape) != (tokens, top_k):
            got = f"{topk_weights.dtype} {list(topk_weights.shape)}"
            raise OpInputError(op, "topk_weights", f"a float32 tensor [{tokens}, {top_k}]", got)
        expect_int(op, "num_experts", num_experts, minimum=1)
        if num_experts % world:
            raise OpInputError(
                op, "num_experts", f"a multiple of the group's {world} ranks (each holds as many experts)", num_experts
            )
        if x.dtype == _FP8:
            if hidden % FP8_GROUP:
                raise OpInputError(op, "x", f"hidden a multiple of {FP8_GROUP} for fp8 (its scale groups)", hidden)
            groups = hidden // FP8_GROUP
            expected = f"a float32 tensor [{tokens}, {groups}] for fp8 x (a scale per {FP8_GROUP} elements)"
            if not isinstance(x_scale, torch.Tensor):
                raise OpInputError(op, "x_scale", expected, type(x_scale).__name__)
            if x_scale.dtype != torch.float32 or tuple(x_scale.shape) != (tokens, groups):
                raise OpInputError(op, "x_scale", expected, f"{x_scale.dtype} {list(x_scale.shape)}")
        elif x_scale is not None:
            raise OpInputError(op, "x_scale", f"None for {x.dtype} x (scales go with float8_e4m3fn)", "a tensor")
        for name, tensor in (("topk_ids", topk_ids), ("topk_weights", topk_weights), ("x_scale", x_scale)):
            if tensor is not None and tensor.device != x.device:
                raise OpInputError(op, name, f"x's device ({x.device})", str(tensor.device))
        if topk_ids.numel() and values_checked(topk_ids):
            _expect_ids_in_range(op, topk_ids, num_experts)
        entries = [_DTYPES.index(x.dtype), hidden, top_k, num_experts, int(x_scale is not None)]
        entries.append(_DTYPES.index(topk_ids.dtype))
        dims = (
            ("num_tokens", tokens),
            ("hidden", hidden),
            ("top_k", top_k),
            ("num_experts", num_experts),
            ("world_size", world),
        )
        return entries, (x, _NO_TAGS, dims)

    return _agree(op, x, group, local, _describe_dispatch)


def _describe_combine(entries) -> str:
    return f"y {_DTYPES[entries[0]]} [_, {entries[1]}]"


def _expect_handle(op, handle, world: int, device) -> None:
    expected = "the EpHandle that comm.ep_dispatch returned on this group"
    if not isinstance(handle, EpHandle):
        raise OpInputError(op, "handle", expected, type(handle).__name__)
    layout, counts = handle.token_in_rank, handle.recv_counts
    if not (isinstance(layout, torch.Tensor) and layout.dtype == torch.bool and layout.dim() == 2):
        raise OpInputError(op, "handle", f"{expected} (token_in_rank: bool [T, W])", repr(layout)[:80])
    if not (isinstance(counts, torch.Tensor) and counts.dtype == torch.int64 and counts.dim() == 1):
        raise OpInputError(op, "handle", f"{expected} (recv_counts: int64 [W])", repr(counts)[:80])
    if layout.shape[1] != world or counts.shape[0] != world:
        got = f"a handle of {layout.shape[1]} ranks"
        raise OpInputError(op, "handle", f"{expected}: a group of {world} ranks", got)
    for name, tensor in (("token_in_rank", layout), ("recv_counts", counts)):
        if tensor.device != device:
            raise OpInputError(op, "handle", f"its {name} on y's device ({device})", str(tensor.device))
    size = LIBRARY_HANDLE_SIZES.get(handle.library_name, 0)
    if len(handle.library) != size or (not size and handle.library_name):
        raise OpInputError(op, "handle", expected, f"library part {handle.library_name!r} of {len(handle.library)}")


def check_ep_combine(y, handle, group=None):
    """comm.ep_combine's check: (y, handle:deep_ep where the handle carries DeepEP's layout, (num_tokens = the
    rows sent back, hidden, world_size)); y's rows are checked against the handle's count where values are."""
    op = EP_COMBINE

    def local(resolved, world):
        expect_float_tensor(op, "y", y)
        if y.dim() != 2 or y.shape[1] == 0:
            raise OpInputError(op, "y", "a tensor [R, hidden] with hidden >= 1", f"shape {list(y.shape)}")
        _expect_handle(op, handle, world, y.device)
        if values_checked(y):
            received = int(handle.recv_counts.sum())
            if y.shape[0] != received:
                raise OpInputError(op, "y", f"{received} rows (those the dispatch received)", y.shape[0])
        tags = _DEEP_EP_TAGS if handle.library_name == "deep_ep" else _NO_TAGS
        dims = (("num_tokens", y.shape[0]), ("hidden", y.shape[1]), ("world_size", world))
        return [_DTYPES.index(y.dtype), y.shape[1]], (y, tags, dims)

    return _agree(op, y, group, local, _describe_combine)
