"""Argument checks for the gated activations (shared by every implementation)."""

from __future__ import annotations

from ..checks import OpInputError, expect_float_tensor, expect_same_device, expect_tensor

SILU_AND_MUL = "activation.silu_and_mul"
GELU_TANH_AND_MUL = "activation.gelu_tanh_and_mul"


def check_gated_args(op: str, x, out) -> tuple[int, int]:
    """Validate (x, out) of a gated activation; return (num_tokens, intermediate)."""
    expect_float_tensor(op, "x", x)
    if x.dim() == 0 or x.shape[-1] == 0 or x.shape[-1] % 2:
        raise OpInputError(op, "x", "shape [..., 2*d] with d >= 1 (gate | up)",
                           f"shape {list(x.shape)}")
    intermediate = x.shape[-1] // 2
    if out is not None:
        expect_tensor(op, "out", out)
        expected = [*x.shape[:-1], intermediate]
        if list(out.shape) != expected:
            raise OpInputError(op, "out", f"shape {expected}", f"shape {list(out.shape)}")
        if out.dtype != x.dtype:
            raise OpInputError(op, "out", f"x's dtype {x.dtype}", str(out.dtype))
        expect_same_device(op, "out", out, "x", x)
        if out.numel() and _overlaps(out, x):
            raise OpInputError(op, "out", "memory not overlapping x", "a tensor sharing x's storage range")
    return x.numel() // x.shape[-1], intermediate


def _overlaps(a, b) -> bool:
    """Whether the byte ranges spanned by a and b intersect (conservative for strided tensors)."""
    def span(t):
        start = t.data_ptr()
        extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
        return start, start + extent * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1
