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

from conformance.cases.case import Case, randn as _randn
from conformance.cases.norm import _rows as _norm_rows, fused_add_rms_norm_oracle
from rapid_llm.kernels.ops.comm import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM


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
