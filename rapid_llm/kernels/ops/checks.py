"""Helpers for the ops' argument checks (each family's checks.py builds its ops' checks from these).

An op's check is its one validation site (dispatcher/contract.py): it raises
`OpInputError` naming the op, the argument and what was expected, or returns
``(anchor, layout, dims)`` for dispatch. Row targets never re-check.

Value checks (index bounds, scale signs) need the tensors' values: free on
the CPU, a device sync on CUDA. They run for CPU tensors always and for CUDA
tensors when RAPID_LLM_CHECK_BOUNDS=1 (`values_checked`); otherwise the
contract says what every row does with such values (unchecked).
"""

from __future__ import annotations

import contextlib
import itertools
import numbers

import torch

from ..dispatcher.contract import OpInputError
from .dtypes import FLOAT_TORCH_DTYPES

__all__ = ["OpInputError", "expect_tensor", "expect_float_tensor", "expect_real_number", "expect_int",
           "expect_same_device", "rows_view_ok", "may_overlap", "expect_disjoint", "values_checked",
           "value_checks", "tag_table"]


def tag_table(*names: str) -> dict:
    """{(flag, ...) one bool per name: frozenset of the names whose flag is set}, built once at import.

    A check computes one bool per layout tag and looks its tag set up, rather than building a set on
    every call (the check runs on every public call: `tags[(rows_ok, vector_ok)]`)."""
    return {flags: frozenset(name for name, flag in zip(names, flags) if flag)
            for flags in itertools.product((False, True), repeat=len(names))}


def expect_tensor(op: str, argument: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise OpInputError(op, argument, "a torch.Tensor", type(value).__name__)


def expect_float_tensor(op: str, argument: str, value) -> None:
    expect_tensor(op, argument, value)
    if value.dtype not in FLOAT_TORCH_DTYPES:
        raise OpInputError(op, argument, "dtype float32, float16 or bfloat16", str(value.dtype))


def expect_real_number(op: str, argument: str, value, *, minimum: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OpInputError(op, argument, "a Python real number", type(value).__name__)
    if minimum is not None and not value >= minimum:
        raise OpInputError(op, argument, f"a number >= {minimum}", repr(value))


def expect_int(op: str, argument: str, value, *, minimum: int | None = None) -> None:
    expected = "a Python int" if minimum is None else "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OpInputError(op, argument, expected, type(value).__name__)
    if minimum is not None and value < minimum:
        raise OpInputError(op, argument, expected, repr(value))


def expect_same_device(op: str, argument: str, value, reference_argument: str, reference) -> None:
    if value.device != reference.device:
        raise OpInputError(op, argument, f"the device of {reference_argument!r} ({reference.device})",
                           str(value.device))


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


def _byte_span(t) -> tuple[int, int]:
    start = t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return start, start + extent * t.element_size()


def _row_geometry(t):
    """(first byte, rows, row stride in bytes, row width in bytes) of t viewed as rows, or None."""
    if t.dim() == 0 or not rows_view_ok(t):
        return None
    width = t.shape[-1] * t.element_size()
    rows = t.numel() // t.shape[-1] if t.shape[-1] else 0
    stride = (t.stride(-2) if t.dim() >= 2 else t.shape[-1]) * t.element_size()
    return t.data_ptr(), rows, stride, width


def may_overlap(a, b) -> bool:
    """Whether a and b may share memory: exact for two row views with one row stride (q and k sliced
    from a fused qkv tensor do not overlap), conservative (byte spans) otherwise."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a0, a1), (b0, b1) = _byte_span(a), _byte_span(b)
    if a1 <= b0 or b1 <= a0:
        return False
    geometry_a, geometry_b = _row_geometry(a), _row_geometry(b)
    if geometry_a is None or geometry_b is None:
        return True
    start_a, rows_a, stride_a, width_a = geometry_a
    start_b, rows_b, stride_b, width_b = geometry_b
    if rows_a == 1 or rows_b == 1 or stride_a != stride_b or max(width_a, width_b) > stride_a:
        return True  # byte spans intersect and the rows are not one interleaved pattern
    # Element sets {start + r*stride + c}: they meet iff start_b - start_a + k*stride falls in
    # (-width_b, width_a) for some k = row_b - row_a with -(rows_a-1) <= k <= rows_b-1.
    delta = start_b - start_a
    quotient, remainder = divmod(delta, stride_a)
    for offset, shift in ((remainder, quotient), (remainder - stride_a, quotient + 1)):
        row_difference = -shift
        if -width_b < offset < width_a and -(rows_b - 1) <= row_difference <= rows_a - 1:
            return True
    return False


def expect_disjoint(op: str, argument: str, value, other_argument: str, other) -> None:
    """Reject `value` sharing memory with `other` where one of them is written by the op."""
    if may_overlap(value, other):
        raise OpInputError(op, argument, f"memory not overlapping {other_argument!r} (the op writes one of them)",
                           f"a tensor sharing memory with {other_argument!r}")


# ---------------------------------------------------------------------------
# Value checks: always on CPU tensors, on CUDA tensors under RAPID_LLM_CHECK_BOUNDS=1
# ---------------------------------------------------------------------------

_state = {"override": None, "cuda": None}  # "cuda": read once from the probed environment


def values_checked(tensor) -> bool:
    """Whether this call's value checks run: always for CPU tensors (no device sync), for CUDA tensors
    only when the probed environment has RAPID_LLM_CHECK_BOUNDS=1 (a sync per call: a debug mode)."""
    if _state["override"] is not None:
        return _state["override"]
    if tensor.device.type == "cpu":
        return True
    if _state["cuda"] is None:
        from ..dispatcher.environment import probe_environment

        _state["cuda"] = probe_environment().check_bounds
    return _state["cuda"]


@contextlib.contextmanager
def value_checks(enabled: bool):
    """Force value checks on or off for every device (tests: exercise the unchecked contract on the CPU)."""
    saved = _state["override"]
    _state["override"] = enabled
    try:
        yield
    finally:
        _state["override"] = saved
