"""Argument checks of the norm family: each op's one validation site (see ops/checks.py).

Layout tags: x:rows / residual:rows (the native rows), and for FlashInfer's
kernels x:rows_vector / residual:rows_vector / weight:vector
(dispatcher/contract.py LAYOUT_TAGS): FlashInfer 0.6.0's RMSNorm and
FusedAddRMSNorm (include/flashinfer/norm.cuh) read rows with aligned vector
loads of gcd(16, hidden * element size) bytes, index with 32-bit unsigned
offsets (row * stride), and read the weight with unit stride in x's dtype.
"""

from __future__ import annotations

import math

import torch

from ..checks import (
    OpInputError,
    expect_disjoint,
    expect_float_tensor,
    expect_real_number,
    expect_same_device,
    rows_view_ok,
    tag_table,
)
from . import FUSED_ADD_RMS_NORM, RMS_NORM

#: FlashInfer's norm kernels compute row * stride + column in uint32 (norm.cuh).
_OFFSET_LIMIT = 1 << 32


def check_x_weight_eps(op, x, weight, eps) -> tuple[int, int]:
    """x [..., hidden] float, weight [hidden] (x's dtype or fp32, x's device), eps a real >= 0:
    (num_tokens, hidden). Shared by the fused norm + quantization ops (quantization/checks.py)."""
    expect_float_tensor(op, "x", x)
    expect_float_tensor(op, "weight", weight)
    if x.dim() == 0:
        raise OpInputError(op, "x", "a tensor of shape [..., hidden]", "a 0-d tensor")
    hidden = x.shape[-1]
    if hidden == 0:
        raise OpInputError(op, "x", "hidden (last dim) >= 1", "hidden = 0")
    if weight.dim() != 1 or weight.shape[0] != hidden:
        raise OpInputError(op, "weight", f"shape [{hidden}] (x's last dim)", f"shape {list(weight.shape)}")
    if weight.dtype not in (x.dtype, torch.float32):
        expected = "dtype torch.float32" + ("" if x.dtype == torch.float32 else f" or x's {x.dtype}")
        raise OpInputError(op, "weight", expected, str(weight.dtype))
    expect_same_device(op, "weight", weight, "x", x)
    expect_real_number(op, "eps", eps, minimum=0.0)
    return x.numel() // hidden, hidden


def _vector_bytes(x, hidden: int) -> int:
    """FlashInfer's norm vector width in bytes: gcd(16 / element size, hidden) elements."""
    return math.gcd(16, hidden * x.element_size())


def _row_step(x) -> int:
    """Elements between consecutive rows of x viewed as [rows, hidden] (x:rows holds): the stride of the
    innermost leading dim of size > 1 (size-1 dims may carry any stride)."""
    for dim in range(x.dim() - 2, -1, -1):
        if x.shape[dim] > 1:
            return x.stride(dim)
    return x.shape[-1]


def rows_vector_ok(x, num_rows: int, hidden: int) -> bool:
    """Whether x (x:rows already holds) also has layout x:rows_vector (see the module docstring)."""
    if x.stride(-1) != 1:  # FlashInfer checks stride(-1) == 1 even for hidden == 1
        return False
    vector, size = _vector_bytes(x, hidden), x.element_size()
    step = _row_step(x) if num_rows > 1 else 0
    if x.data_ptr() % vector or (step * size) % vector:
        return False
    return max(num_rows - 1, 0) * step + hidden <= _OFFSET_LIMIT and num_rows * hidden <= _OFFSET_LIMIT


def weight_vector_ok(weight, x, hidden: int) -> bool:
    """Whether the weight has layout weight:vector: x's dtype, unit stride, aligned like x's vectors."""
    return weight.dtype == x.dtype and weight.stride(0) == 1 and weight.data_ptr() % _vector_bytes(x, hidden) == 0


_RMS_NORM_TAGS = tag_table("x:rows", "x:rows_vector", "weight:vector")
_FUSED_TAGS = tag_table("x:rows", "residual:rows", "x:rows_vector", "residual:rows_vector", "weight:vector")


def check_rms_norm(x, weight, eps=1e-6):
    """rms_norm's check: (x, {x:rows, x:rows_vector, weight:vector as they hold}, (num_tokens, hidden))."""
    num_tokens, hidden = check_x_weight_eps(RMS_NORM, x, weight, eps)
    rows = rows_view_ok(x)
    tags = _RMS_NORM_TAGS[(rows, rows and rows_vector_ok(x, num_tokens, hidden), weight_vector_ok(weight, x, hidden))]
    return x, tags, (("num_tokens", num_tokens), ("hidden", hidden))


def check_residual(op, x, residual, weight) -> None:
    """A fused residual add's residual: x's shape, dtype and device, and x, residual and weight pairwise
    disjoint (the kernel writes residual, and whatever else it writes, while reading the others)."""
    expect_float_tensor(op, "residual", residual)
    if residual.shape != x.shape:
        raise OpInputError(op, "residual", f"x's shape {list(x.shape)}", f"shape {list(residual.shape)}")
    if residual.dtype != x.dtype:
        raise OpInputError(op, "residual", f"x's dtype {x.dtype}", str(residual.dtype))
    expect_same_device(op, "residual", residual, "x", x)
    expect_disjoint(op, "residual", residual, "x", x)
    expect_disjoint(op, "weight", weight, "x", x)
    expect_disjoint(op, "weight", weight, "residual", residual)


def check_fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """fused_add_rms_norm's check: x and residual alike and disjoint, weight disjoint from both."""
    op = FUSED_ADD_RMS_NORM
    num_tokens, hidden = check_x_weight_eps(op, x, weight, eps)
    check_residual(op, x, residual, weight)
    x_rows, residual_rows = rows_view_ok(x), rows_view_ok(residual)
    tags = _FUSED_TAGS[
        (
            x_rows,
            residual_rows,
            x_rows and rows_vector_ok(x, num_tokens, hidden),
            residual_rows and rows_vector_ok(residual, num_tokens, hidden),
            weight_vector_ok(weight, x, hidden),
        )
    ]
    return x, tags, (("num_tokens", num_tokens), ("hidden", hidden))
