"""Argument checks of the quantization family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_bool,
    expect_disjoint,
    expect_float_tensor,
    expect_int,
    expect_same_device,
    expect_tensor,
    rows_view_ok,
    tag_table,
)
from ..norm.checks import check_residual, check_x_weight_eps
from . import (
    FUSED_ADD_RMS_NORM_GROUP_FP8,
    FUSED_ADD_RMS_NORM_STATIC_FP8,
    PER_TOKEN_FP8,
    PER_TOKEN_GROUP_FP8,
    RMS_NORM_GROUP_FP8,
    RMS_NORM_STATIC_FP8,
    SILU_AND_MUL_GROUP_FP8,
)

_X_ROWS = frozenset({"x:rows"})
_NO_TAGS = frozenset()


def _check_x(op, x):
    expect_float_tensor(op, "x", x)
    if x.dim() != 2 or x.shape[1] == 0:
        raise OpInputError(op, "x", "shape [T, H] with H >= 1", f"shape {list(x.shape)}")
    return x, (_X_ROWS if rows_view_ok(x) else _NO_TAGS), (("num_tokens", x.shape[0]), ("hidden", x.shape[1]))


def check_per_token_fp8(x):
    """per_token_fp8's check: (x, {x:rows if unit column stride}, (num_tokens, hidden))."""
    return _check_x(PER_TOKEN_FP8, x)


def check_per_token_group_fp8(x, group_size=128, column_major_scales=False):
    """per_token_group_fp8's check: x as per_token_fp8, group_size a positive divisor of H."""
    op = PER_TOKEN_GROUP_FP8
    result = _check_x(op, x)
    _check_groups(op, x.shape[1], "H", group_size, column_major_scales)
    return result


def _check_groups(op, width: int, width_name: str, group_size, column_major_scales) -> None:
    expect_int(op, "group_size", group_size, minimum=1)
    if width % group_size:
        raise OpInputError(op, "group_size", f"a divisor of {width_name} = {width}", repr(group_size))
    expect_bool(op, "column_major_scales", column_major_scales)


_FUSED_TAGS = tag_table("x:rows", "residual:rows")


def _check_norm_x(op, x, weight, eps) -> tuple[int, int]:
    """x [T, H] (two dims: q and the scales are per token), weight and eps as norm.rms_norm's."""
    expect_float_tensor(op, "x", x)
    if x.dim() != 2:
        raise OpInputError(op, "x", "shape [T, H] with H >= 1", f"shape {list(x.shape)}")
    return check_x_weight_eps(op, x, weight, eps)


def _check_static_scale(op, scale, x) -> None:
    expect_tensor(op, "scale", scale)
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise OpInputError(
            op, "scale", "a one-element torch.float32 tensor", f"{scale.dtype} of shape {list(scale.shape)}"
        )
    expect_same_device(op, "scale", scale, "x", x)


def _norm_result(x, residual, num_tokens, hidden, extra=()):
    if residual is None:
        tags = _X_ROWS if rows_view_ok(x) else _NO_TAGS
    else:
        tags = _FUSED_TAGS[(rows_view_ok(x), rows_view_ok(residual))]
    return x, tags, (("num_tokens", num_tokens), ("hidden", hidden), *extra)


def check_rms_norm_per_token_group_fp8(x, weight, eps=1e-6, group_size=128, column_major_scales=False):
    """x [T, H], weight, eps as norm.rms_norm; group_size a positive divisor of H; column_major_scales a bool."""
    op = RMS_NORM_GROUP_FP8
    num_tokens, hidden = _check_norm_x(op, x, weight, eps)
    _check_groups(op, hidden, "H", group_size, column_major_scales)
    return _norm_result(x, None, num_tokens, hidden, (("group_size", group_size),))


def check_fused_add_rms_norm_per_token_group_fp8(
    x, residual, weight, eps=1e-6, group_size=128, column_major_scales=False
):
    """As check_rms_norm_per_token_group_fp8, and residual as norm.fused_add_rms_norm's."""
    op = FUSED_ADD_RMS_NORM_GROUP_FP8
    num_tokens, hidden = _check_norm_x(op, x, weight, eps)
    check_residual(op, x, residual, weight)
    _check_groups(op, hidden, "H", group_size, column_major_scales)
    return _norm_result(x, residual, num_tokens, hidden, (("group_size", group_size),))


def check_rms_norm_static_fp8(x, weight, scale, eps=1e-6):
    """x [T, H], weight, eps as norm.rms_norm; scale a one-element fp32 tensor on x's device."""
    op = RMS_NORM_STATIC_FP8
    num_tokens, hidden = _check_norm_x(op, x, weight, eps)
    _check_static_scale(op, scale, x)
    return _norm_result(x, None, num_tokens, hidden)


def check_fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps=1e-6):
    """As check_rms_norm_static_fp8, and residual as norm.fused_add_rms_norm's (scale may not share
    memory with residual, which is written)."""
    op = FUSED_ADD_RMS_NORM_STATIC_FP8
    num_tokens, hidden = _check_norm_x(op, x, weight, eps)
    check_residual(op, x, residual, weight)
    _check_static_scale(op, scale, x)
    expect_disjoint(op, "scale", scale, "residual", residual)
    return _norm_result(x, residual, num_tokens, hidden)


def check_silu_and_mul_per_token_group_fp8(x, group_size=128, column_major_scales=False):
    """x [T, 2*d] (gate | up, d >= 1); group_size a positive divisor of d; column_major_scales a bool."""
    op = SILU_AND_MUL_GROUP_FP8
    expect_float_tensor(op, "x", x)
    if x.dim() != 2 or x.shape[1] == 0 or x.shape[1] % 2:
        raise OpInputError(op, "x", "shape [T, 2*d] with d >= 1 (gate | up)", f"shape {list(x.shape)}")
    intermediate = x.shape[1] // 2
    _check_groups(op, intermediate, "d", group_size, column_major_scales)
    tags = _X_ROWS if rows_view_ok(x) else _NO_TAGS
    return x, tags, (("num_tokens", x.shape[0]), ("intermediate", intermediate), ("group_size", group_size))
