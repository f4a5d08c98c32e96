"""Argument checks of the activation family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

from ..checks import OpInputError, expect_disjoint, expect_float_tensor, expect_same_device, expect_tensor, \
    rows_view_ok
from . import GELU_TANH_AND_MUL, SILU_AND_MUL

_TAGS = {(True, True): frozenset({"x:rows", "out:rows"}), (True, False): frozenset({"x:rows"}),
         (False, True): frozenset({"out:rows"}), (False, False): frozenset()}


def check_silu_and_mul(x, out=None):
    return _check_gated(SILU_AND_MUL, x, out)


def check_gelu_tanh_and_mul(x, out=None):
    return _check_gated(GELU_TANH_AND_MUL, x, out)


def _check_gated(op: str, x, out):
    """A gated activation's check: (x, tags, (num_tokens, intermediate))."""
    expect_float_tensor(op, "x", x)
    if x.dim() == 0 or x.shape[-1] == 0 or x.shape[-1] % 2:
        raise OpInputError(op, "x", "shape [..., 2*d] with d >= 1 (gate | up)", f"shape {list(x.shape)}")
    intermediate = x.shape[-1] // 2
    if out is not None:
        expect_tensor(op, "out", out)
        expected = [*x.shape[:-1], intermediate]
        if list(out.shape) != expected:
            raise OpInputError(op, "out", f"shape {expected}", f"shape {list(out.shape)}")
        if out.dtype != x.dtype:
            raise OpInputError(op, "out", f"x's dtype {x.dtype}", str(out.dtype))
        expect_same_device(op, "out", out, "x", x)
        expect_disjoint(op, "out", out, "x", x)
    tags = _TAGS[(rows_view_ok(x), out is None or rows_view_ok(out))]
    return x, tags, (("num_tokens", x.numel() // x.shape[-1]), ("intermediate", intermediate))
