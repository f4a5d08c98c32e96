"""Argument checks shared by every implementation of an op.

Every implementation calls its op's check before touching memory, so bad
input gives an `OpInputError` naming the op, the argument and what was
expected, whichever row was selected, never a crash inside a kernel.
"""

from __future__ import annotations

import numbers
import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class OpInputError(ValueError):
    """Bad input to an op: names the op, the argument and what was expected."""

    def __init__(self, op: str, argument: str, expected: str, got: str):
        self.op, self.argument, self.expected, self.got = op, argument, expected, got
        super().__init__(f"{op}: argument {argument!r}: expected {expected}, got {got}")


def expect_tensor(op: str, argument: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise OpInputError(op, argument, "a torch.Tensor", type(value).__name__)


def expect_float_tensor(op: str, argument: str, value) -> None:
    expect_tensor(op, argument, value)
    if value.dtype not in FLOAT_DTYPES:
        raise OpInputError(op, argument, "dtype float32, float16 or bfloat16", str(value.dtype))


def expect_real_number(op: str, argument: str, value, *, minimum: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OpInputError(op, argument, "a Python real number", type(value).__name__)
    if minimum is not None and not value >= minimum:
        raise OpInputError(op, argument, f"a number >= {minimum}", repr(value))


def expect_same_device(op: str, argument: str, value, reference_argument: str, reference) -> None:
    if value.device != reference.device:
        raise OpInputError(op, argument, f"the device of {reference_argument!r} ({reference.device})",
                           str(value.device))


def expect_triton_device(op: str, argument: str, value) -> None:
    """Triton kernels read CUDA memory, or CPU memory only under Triton's interpreter."""
    if value.is_cuda:
        return
    if value.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return
    raise OpInputError(op, argument, "a CUDA tensor (or a CPU tensor with TRITON_INTERPRET=1)",
                       f"a tensor on {value.device}")


def rows_view_ok(x) -> bool:
    """Whether x [..., n] views as [rows, n] with one row stride and unit stride along n."""
    if x.dim() == 0:
        return False
    strides = x.stride()
    if x.shape[-1] > 1 and strides[-1] != 1:
        return False
    shape = x.shape
    for dim in range(x.dim() - 2):
        if shape[dim] > 1 and strides[dim] != strides[dim + 1] * shape[dim + 1]:
            return False
    return True


def rows_view(op: str, argument: str, tensor, num_rows: int, width: int):
    """tensor as [num_rows, width] without a copy and with unit column stride, or an OpInputError
    naming the layout tag `<argument>:rows` that the row required."""
    try:
        rows = tensor.view(num_rows, width)
    except RuntimeError:
        raise OpInputError(op, argument, f"layout {argument}:rows (views as [rows, {width}] without a copy)",
                           f"strides {tensor.stride()} for shape {list(tensor.shape)}") from None
    if width > 1 and rows.stride(1) != 1:
        raise OpInputError(op, argument, f"unit stride along the last dim (layout {argument}:rows)",
                           f"strides {tensor.stride()}")
    return rows
