"""Parity cases of the comm family: inputs, a float64 oracle, tolerances.

The parity suite runs in one process, so these cases reduce over a one-rank group (created here on first
use: gloo for CPU tensors, NCCL for CUDA ones, over an in-memory store): the sum of one rank is its input,
and what the cases check is the op's contract around the collective (out of place versus in place, strided
views, the residual add and the norm, every form of the group argument). The reductions across ranks run in
conformance/test_comm_distributed.py (gloo, 2 and 4 processes) and on two GPUs.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case
from conformance.cases.case import randn as _randn
from conformance.cases.norm import _rows as _norm_rows
from conformance.cases.norm import fused_add_rms_norm_oracle
from rapid_llm.kernels.ops.comm import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM, EP_COMBINE, EP_DISPATCH


def one_rank_group(form: str):
    """The group argument of a one-rank world: "default" (None), "object" (the ProcessGroup) or "name" (its
    group_name); the world is initialised on first use. The cases pass None or the name, the forms the
    torch.library custom ops take too (conformance/test_custom_ops.py runs every case through them); the
    object form runs in conformance/test_comm_distributed.py."""
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    world = dist.group.WORLD
    return {"default": None, "object": world, "name": world.group_name}[form]


def _rows(shape, dtype, device, generator, row_pad=0):
    """x of `shape`, or its rows in a wider buffer (row_pad extra columns): norm's cases' inputs."""
    return _norm_rows(shape, dtype, device, generator, 1.0, row_pad)


def _all_reduce_case(shape, *, inplace=False, group="default", row_pad=0):
    def make(dtype, device, generator):
        x = _rows(shape, dtype, device, generator, row_pad)
        hidden = shape[-1]
        dims = {"num_tokens": x.numel() // hidden, "hidden": hidden, "world_size": 1}
        return (x, one_rank_group(group), inplace), dims, frozenset()

    return make


def _fused_case(shape, *, group="default", row_pad=0, weight_step=1, weight_fp32=False):
    def make(dtype, device, generator):
        hidden = shape[-1]
        x = _rows(shape, dtype, device, generator, row_pad)
        residual = _rows(shape, dtype, device, generator, row_pad)
        weight_dtype = torch.float32 if weight_fp32 else dtype
        weight = _randn((hidden * weight_step,), weight_dtype, device, generator)[::weight_step]
        dims = {"num_tokens": x.numel() // hidden, "hidden": hidden, "world_size": 1}
        return (x, residual, weight, 1e-6, one_rank_group(group)), dims, frozenset()

    return make


def all_reduce_oracle(x, group=None, inplace=False):
    """One rank: the sum is x (float64, rounded to x's dtype)."""
    return x.double().to(x.dtype)


def all_reduce_add_rms_norm_oracle(x, residual, weight, eps, group=None):
    return fused_add_rms_norm_oracle(x, residual, weight, eps)


CASES = {
    ALL_REDUCE: (
        Case("decode_1x7168", _all_reduce_case((1, 7168))),
        Case("decode_64x4096_in_place", _all_reduce_case((64, 4096), inplace=True)),
        Case("three_dims", _all_reduce_case((2, 3, 512))),
        Case("strided_rows_group_name", _all_reduce_case((9, 1000), group="name", row_pad=24)),
        Case("strided_rows_in_place", _all_reduce_case((9, 1000), inplace=True, row_pad=24)),
        Case("empty_batch", _all_reduce_case((0, 256))),
    ),
    ALL_REDUCE_ADD_RMS_NORM: (
        Case("decode_1x7168", _fused_case((1, 7168))),
        Case("decode_64x4096_group_name", _fused_case((64, 4096), group="name")),
        Case("strided_rows_and_weight", _fused_case((5, 1024), row_pad=64, weight_step=2)),
        Case("weight_fp32_3d", _fused_case((2, 3, 768), weight_fp32=True)),
    ),
}
ORACLES = {ALL_REDUCE: all_reduce_oracle, ALL_REDUCE_ADD_RMS_NORM: all_reduce_add_rms_norm_oracle}
TOLERANCES = {
    # one rank: the sum is the input, exactly
    **{(ALL_REDUCE, dtype): (0.0, 0.0) for dtype in ("fp32", "fp16", "bf16")},
    # the residual add and the norm as norm.fused_add_rms_norm's
    (ALL_REDUCE_ADD_RMS_NORM, "fp32"): (1e-5, 1e-5),
    (ALL_REDUCE_ADD_RMS_NORM, "fp16"): (1e-3, 2e-3),
    (ALL_REDUCE_ADD_RMS_NORM, "bf16"): (1e-2, 8e-3),
}


# --- expert parallelism -----------------------------------------------------------------------------


def _expert_choices(tokens, top_k, num_experts, generator, *, padding_every=0, duplicates=False):
    """[T, top_k] int64 ids: distinct experts per token (a random permutation's first top_k); every
    `padding_every`-th slot -1 (and token 1 naming none: an idle token) when padding_every > 0; token 0 naming
    its first expert twice when duplicates."""
    ids = torch.rand((tokens, num_experts), generator=generator).argsort(dim=1)[:, :top_k].contiguous()
    if padding_every:
        ids.view(-1)[::padding_every] = -1
        if tokens > 1:
            ids[1] = -1
    if duplicates and tokens and top_k > 1:
        ids[0, 1] = ids[0, 0]
    return ids


def _dispatch_inputs(
    dtype,
    device,
    generator,
    tokens,
    hidden,
    top_k,
    num_experts,
    *,
    ids_dtype=torch.int64,
    strided=False,
    padding_every=0,
    duplicates=False,
):
    """(x, topk_ids, topk_weights, x_scale): x in `dtype` (fp8: e4m3 values with per-128 scales); strided:
    x rows of a wider buffer, ids a column-major view, weights every other column of a wider tensor."""
    ids = _expert_choices(tokens, top_k, num_experts, generator, padding_every=padding_every, duplicates=duplicates)
    weights = torch.rand((tokens, top_k * (2 if strided else 1)), generator=generator)[:, :: 2 if strided else 1]
    fp8 = dtype == torch.float8_e4m3fn
    pad = 16 if strided else 0
    wide = _rows((tokens, hidden + pad), torch.float32 if fp8 else dtype, device, generator, 0)
    x = (wide.to(torch.float8_e4m3fn) if fp8 else wide)[:, :hidden]  # rows of a wider buffer when strided
    scale = None
    if fp8:
        groups = hidden // 128
        wide = torch.rand((tokens, groups * (2 if strided else 1)), generator=generator).to(device) + 0.5
        scale = wide[:, :: 2 if strided else 1]
    if strided:
        ids = ids.t().contiguous().t()
    return x, ids.to(ids_dtype).to(device), weights.to(device), scale


def _ep_dims(tokens, hidden, top_k, num_experts):
    return {"num_tokens": tokens, "hidden": hidden, "top_k": top_k, "num_experts": num_experts, "world_size": 1}


def _ep_dispatch_case(tokens, hidden, top_k, num_experts, *, group="default", **options):
    def make(dtype, device, generator):
        x, ids, weights, scale = _dispatch_inputs(
            dtype, device, generator, tokens, hidden, top_k, num_experts, **options
        )
        args = (x, ids, weights, num_experts, one_rank_group(group), scale)
        return args, _ep_dims(tokens, hidden, top_k, num_experts), frozenset()

    return make


def _ep_combine_case(tokens, hidden, top_k, num_experts, *, group="default", y_pad=0, **options):
    """y: random rows, one per row the reference dispatch received (y_pad: rows of a wider buffer)."""

    def make(dtype, device, generator):
        from rapid_llm.kernels.ops.comm.reference import ep_dispatch

        x, ids, weights, _ = _dispatch_inputs(
            torch.float32, device, generator, tokens, hidden, top_k, num_experts, **options
        )
        handle = ep_dispatch(x, ids, weights, num_experts, one_rank_group("default")).handle
        received = int(handle.recv_counts.sum())
        y = _rows((received, hidden), dtype, device, generator, y_pad)
        dims = {"num_tokens": received, "hidden": hidden, "world_size": 1}
        return (y, handle, one_rank_group(group)), dims, frozenset()

    return make


def ep_dispatch_oracle(x, topk_ids, topk_weights, num_experts, group=None, x_scale=None):
    """One rank holds every expert: a token with at least one id in [0, E) is received once, in token order,
    with its slots' ids (-1 kept) and weights (0 where the id is -1)."""
    from rapid_llm.kernels.collectives import EpDispatch, EpHandle

    valid = (topk_ids >= 0) & (topk_ids < num_experts)
    sent = valid.any(dim=1)
    rows = torch.nonzero(sent).reshape(-1)
    ids = torch.where(valid, topk_ids, -1)[rows]
    weights = torch.where(valid, topk_weights.double(), 0.0)[rows].float()
    counts = torch.stack([((ids == e).any(dim=1)).sum() for e in range(num_experts)]) if num_experts else None
    handle = EpHandle(sent[:, None].clone(), torch.tensor([rows.numel()], dtype=torch.int64, device=x.device))
    scale = None if x_scale is None else x_scale[rows]
    return EpDispatch(x[rows], scale, ids, weights, counts.to(torch.int32), handle)


def ep_combine_oracle(y, handle, group=None):
    """One rank: token t's result is its received row (rows in token order), 0 for a token sent nowhere."""
    sent = handle.token_in_rank[:, 0]
    out = torch.zeros((handle.num_tokens, y.shape[1]), dtype=torch.float64, device=y.device)
    out[sent] = y.double()
    return out.to(y.dtype)


_EP_DTYPES = frozenset({"fp32", "fp16", "bf16"})

CASES[EP_DISPATCH] = (
    Case("deepseek_128x7168_top8_of_256", _ep_dispatch_case(128, 7168, 8, 256)),
    Case(
        "padding_slots_idle_token_int32_ids", _ep_dispatch_case(33, 512, 4, 16, padding_every=3, ids_dtype=torch.int32)
    ),
    Case("duplicate_expert_group_name", _ep_dispatch_case(9, 256, 2, 8, duplicates=True, group="name")),
    Case("strided_x_ids_weights_hidden_1000", _ep_dispatch_case(17, 1000, 3, 12, strided=True)),
    Case("empty_batch", _ep_dispatch_case(0, 256, 2, 8)),
    Case("fp8_group_scales", _ep_dispatch_case(40, 512, 8, 64, padding_every=5), dtypes=frozenset({"fp8_e4m3"})),
    Case("fp8_strided_x_and_scales", _ep_dispatch_case(12, 256, 2, 8, strided=True), dtypes=frozenset({"fp8_e4m3"})),
)
CASES[EP_COMBINE] = (
    Case("deepseek_128x7168", _ep_combine_case(128, 7168, 8, 256)),
    Case("idle_tokens_hidden_1000", _ep_combine_case(33, 1000, 4, 16, padding_every=3)),
    Case("strided_y_group_name", _ep_combine_case(21, 512, 2, 8, group="name", y_pad=32)),
    Case("empty_batch", _ep_combine_case(0, 256, 2, 8)),
)
ORACLES[EP_DISPATCH] = ep_dispatch_oracle
ORACLES[EP_COMBINE] = ep_combine_oracle
# Dispatch moves bits (one pair per output: rows, scales or ids, ...: all exact); combine of one rank is a
# copy through fp32, exact in every dtype.
TOLERANCES.update({(EP_DISPATCH, dtype): (0.0, 0.0) for dtype in ("fp32", "fp16", "bf16", "fp8_e4m3")})
TOLERANCES.update({(EP_COMBINE, dtype): (0.0, 0.0) for dtype in ("fp32", "fp16", "bf16")})
#: The outputs rows are compared on: an EpDispatch's tensors (the handle's library part is a row's own).
COMPARED_OUTPUTS = {EP_DISPATCH: lambda result: result.compared()}
