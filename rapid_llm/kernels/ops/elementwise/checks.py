"""Argument checks for the elementwise family (shared by every implementation)."""

from __future__ import annotations

from ..checks import expect_float_tensor, expect_real_number

SCALE = "elementwise.scale"


def check_scale_args(x, factor) -> None:
    expect_float_tensor(SCALE, "x", x)
    expect_real_number(SCALE, "factor", factor)
