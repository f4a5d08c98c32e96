"""Argument checks for the elementwise family (shared by every implementation)."""

from __future__ import annotations

from ..checks import OpInputError, expect_float_tensor, expect_real_number

SCALE = "elementwise.scale"


def check_scale_args(x, factor) -> None:
    expect_float_tensor(SCALE, "x", x)
    expect_real_number(SCALE, "factor", factor)


def check_scale_extension_args(x, factor) -> None:
    """check_scale_args, then what the CUDA extension's kernel reads: CUDA memory, contiguous (x:contiguous)."""
    check_scale_args(x, factor)
    if not x.is_cuda:
        raise OpInputError(SCALE, "x", "a CUDA tensor (the CUDA extension's rows run on the GPU only)",
                           f"a tensor on {x.device}")
    if not x.is_contiguous():
        raise OpInputError(SCALE, "x", "a contiguous tensor (layout x:contiguous)", f"strides {x.stride()}")
