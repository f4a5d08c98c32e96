"""Argument checks for the fp8 quantization ops (shared by every implementation)."""

from __future__ import annotations

from ..checks import OpInputError, expect_float_tensor

PER_TOKEN_FP8 = "quantization.per_token_fp8"
PER_TOKEN_GROUP_FP8 = "quantization.per_token_group_fp8"
FP8_E4M3_MAX = 448.0
SCALE_FLOOR = 1e-10


def check_per_token_fp8_args(op: str, x) -> tuple[int, int]:
    """x must be [T, H] floating point; return (T, H)."""
    expect_float_tensor(op, "x", x)
    if x.dim() != 2 or x.shape[1] == 0:
        raise OpInputError(op, "x", "shape [T, H] with H >= 1", f"shape {list(x.shape)}")
    return x.shape[0], x.shape[1]


def check_per_token_group_fp8_args(x, group_size, column_major_scales) -> tuple[int, int]:
    tokens, hidden = check_per_token_fp8_args(PER_TOKEN_GROUP_FP8, x)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise OpInputError(PER_TOKEN_GROUP_FP8, "group_size", "a positive int", repr(group_size))
    if hidden % group_size:
        raise OpInputError(PER_TOKEN_GROUP_FP8, "group_size", f"a divisor of H = {hidden}", repr(group_size))
    if not isinstance(column_major_scales, bool):
        raise OpInputError(PER_TOKEN_GROUP_FP8, "column_major_scales", "a bool", type(column_major_scales).__name__)
    return tokens, hidden
