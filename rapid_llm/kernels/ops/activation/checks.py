"""Argument checks of the activation family: each op's one validation site (see ops/checks.py).

Layout tags: x:rows / out:rows (the native rows), and x:contiguous16 /
out:contiguous16 for FlashInfer's act_and_mul_kernel
(include/flashinfer/activation.cuh), which ignores strides (row r of x at
r * 2d, of out at r * d) and loads/stores 16-byte vectors.
"""

from __future__ import annotations

from ..checks import (
    OpInputError,
    expect_disjoint,
    expect_float_tensor,
    expect_same_device,
    expect_tensor,
    rows_view_ok,
    tag_table,
)
from . import GELU_TANH_AND_MUL, SILU_AND_MUL

_TAGS = tag_table("x:rows", "out:rows", "x:contiguous16", "out:contiguous16")


def contiguous16(tensor) -> bool:
    """Contiguous (row-major, no gaps) with a 16-byte aligned data pointer."""
    return tensor.is_contiguous() and tensor.data_ptr() % 16 == 0


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
    tags = _TAGS[(rows_view_ok(x), out is None or rows_view_ok(out), contiguous16(x), out is None or contiguous16(out))]
    return x, tags, (("num_tokens", x.numel() // x.shape[-1]), ("intermediate", intermediate))
