"""Argument checks of the elementwise family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

from ..checks import expect_float_tensor, expect_real_number
from . import SCALE

_CONTIGUOUS = frozenset({"x:contiguous"})
_NO_TAGS = frozenset()


def check_scale(x, factor):
    """scale's check: (x, {x:contiguous if x is}, (num_elements,))."""
    expect_float_tensor(SCALE, "x", x)
    expect_real_number(SCALE, "factor", factor)
    return x, (_CONTIGUOUS if x.is_contiguous() else _NO_TAGS), (("num_elements", x.numel()),)
