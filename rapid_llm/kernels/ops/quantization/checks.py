"""Argument checks of the quantization family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

from ..checks import OpInputError, expect_float_tensor, expect_int, rows_view_ok
from . import PER_TOKEN_FP8, PER_TOKEN_GROUP_FP8

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
    expect_int(op, "group_size", group_size, minimum=1)
    if x.shape[1] % group_size:
        raise OpInputError(op, "group_size", f"a divisor of H = {x.shape[1]}", repr(group_size))
    if not isinstance(column_major_scales, bool):
        raise OpInputError(op, "column_major_scales", "a bool", type(column_major_scales).__name__)
    return result
