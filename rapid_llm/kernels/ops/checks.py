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

__all__ = [
    "OpInputError",
    "expect_tensor",
    "expect_float_tensor",
    "expect_real_number",
    "expect_int",
    "expect_same_device",
    "rows_view_ok",
    "may_overlap",
    "expect_disjoint",
    "values_checked",
    "value_checks",
    "tag_table",
]


def tag_table(*names: str) -> dict:
    """{(flag, ...) one bool per name: frozenset of the names whose flag is set}, built once at import.

    A check computes one bool per layout tag and looks its tag set up, rather than building a set on
    every call (the check runs on every public call: `tags[(rows_ok, vector_ok)]`)."""
    return {
        flags: frozenset(name for name, flag in zip(names, flags) if flag)
        for flags in itertools.product((False, True), repeat=len(names))
    }


def expect_tensor(op: str, argument: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise OpInputError(op, argument, "a torch.Tensor", type(value).__name__)


def expect_float_tensor(op: str, argument: str, value) -> None:
    expect_tensor(op, argument, value)
    if value.dtype not in FLOAT_TORCH_DTYPES:
        raise OpInputError(op, argument, "dtype float32, float16 or bfloat16", str(value.dtype))


def expect_real_number(op: str, argument: str, value, *, minimum: float | None = None) -> None:
    # a float or int (the usual eps, scale) skips the isinstance test against the numbers.Real ABC
    kind = type(value)
    if kind is not float and kind is not int and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise OpInputError(op, argument, "a Python real number", type(value).__name__)
    if minimum is not None and not value >= minimum:
        raise OpInputError(op, argument, f"a number >= {minimum}", repr(value))


def expect_int(op: str, argument: str, value, *, minimum: int | None = None) -> None:
    if type(value) is int and (minimum is None or value >= minimum):
        return  # the usual case, without the message or the isinstance test against numbers.Integral
    expected = "a Python int" if minimum is None else "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OpInputError(op, argument, expected, type(value).__name__)
    if minimum is not None and value < minimum:
        raise OpInputError(op, argument, expected, repr(value))


def expect_bool(op: str, argument: str, value) -> None:
    if not isinstance(value, bool):
        raise OpInputError(op, argument, "a bool", type(value).__name__)


def expect_same_device(op: str, argument: str, value, reference_argument: str, reference) -> None:
    if value.device != reference.device:
        raise OpInputError(
            op, argument, f"the device of {reference_argument!r} ({reference.device})", str(value.device)
        )


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


#: Decisions may_overlap takes before it gives up and answers "may overlap" (see its docstring).
_OVERLAP_STEPS = 256


def _byte_pattern(t):
    """t's bytes as (dims, width): the element at index i covers bytes [sum(i_d * stride_d), + width) from
    t.data_ptr(), over dims ((count, stride in bytes), ...) outermost (largest stride) first.

    Dims of one element or stride 0 add no bytes and are dropped; a dim continuing the contiguous run
    of the dims inside it (stride == their extent) is merged into them, the innermost run into width."""
    size = t.element_size()
    width, dims = size, []
    for count, stride in sorted(
        ((n, s * size) for n, s in zip(t.shape, t.stride()) if n > 1 and s != 0), key=lambda dim: dim[1]
    ):
        if not dims and stride == width:
            width *= count
        elif dims and stride == dims[-1][0] * dims[-1][1]:
            dims[-1] = (dims[-1][0] * count, dims[-1][1])
        else:
            dims.append((count, stride))
    return tuple(reversed(dims)), width


def _byte_extent(t) -> int:
    """Bytes from t.data_ptr() to the end of t's last element (t not empty)."""
    if t.is_contiguous():  # the common case, without a Python loop over the dims
        return t.numel() * t.element_size()
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def _extent(pattern) -> int:
    dims, width = pattern
    return sum((count - 1) * stride for count, stride in dims) + width


class _Undecided(Exception):
    """may_overlap ran out of steps (_OVERLAP_STEPS)."""


def _step(steps: list) -> None:
    steps[0] -= 1
    if steps[0] < 0:
        raise _Undecided


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _patterns_meet(a, b, delta: int, steps: list) -> bool:
    """Whether byte pattern a (from byte 0) and byte pattern b (from byte delta) share a byte.

    Recursion on the outermost dims: rows of the pattern with the larger outer stride are split off
    (only the rows whose span meets the other's), or, where one outer stride is a multiple of the other,
    both at once: then only the row differences k whose rows can meet matter (at most
    (inner extents) / stride + 1 of them, whatever the row counts), each one sub-question."""
    extent_a, extent_b = _extent(a), _extent(b)
    if delta >= extent_a or delta + extent_b <= 0:
        return False
    (dims_a, _), (dims_b, _) = a, b
    # A pattern inside the span of a contiguous run meets it (patterns are never empty).
    if (not dims_b and delta <= 0 and extent_a <= delta + extent_b) or (
        not dims_a and delta >= 0 and delta + extent_b <= extent_a
    ):
        return True
    if not dims_a and not dims_b:
        return True  # two contiguous runs whose spans meet
    stride_a = dims_a[0][1] if dims_a else 0
    stride_b = dims_b[0][1] if dims_b else 0
    if stride_a < stride_b:
        return _patterns_meet(b, a, -delta, steps)
    count_a = dims_a[0][0]
    inner_a = (dims_a[1:], a[1])
    if stride_b and stride_a % stride_b == 0:
        # rows of a at (multiple * row_a) * stride, rows of b at delta + row_b * stride
        stride, multiple, count_b = stride_b, stride_a // stride_b, dims_b[0][0]
        inner_b = (dims_b[1:], b[1])
        inner_extent_a, inner_extent_b = _extent(inner_a), _extent(inner_b)
        # k = row_b - multiple * row_a: the rows meet only if delta + k * stride lies in (-inner_b, inner_a)
        low = (-inner_extent_b - delta) // stride + 1
        high = _ceil_div(inner_extent_a - delta, stride) - 1
        for k in range(max(low, -multiple * (count_a - 1)), min(high, count_b - 1) + 1):
            # some row_a in [0, count_a) with row_b = k + multiple * row_a in [0, count_b)
            _step(steps)
            first, last = max(0, _ceil_div(-k, multiple)), min(count_a - 1, (count_b - 1 - k) // multiple)
            if first <= last and _patterns_meet(inner_a, inner_b, delta + k * stride, steps):
                return True
        return False
    # rows of a that meet b's span [delta, delta + extent_b)
    inner_extent_a = _extent(inner_a)
    first = max(0, (delta - inner_extent_a) // stride_a + 1)
    last = min(count_a - 1, (delta + extent_b - 1) // stride_a)
    for row in range(first, last + 1):
        _step(steps)
        if _patterns_meet(inner_a, b, delta - row * stride_a, steps):
            return True
    return False


def _row_views_meet(a, b, delta: int):
    """Whether two row views with one row stride share a byte, in closed form; None for other shapes.

    The views engines pass most (q, k and v: column slices of one fused projection): a [Ta, Ca] and b [Tb, Cb],
    each row contiguous, both rows R bytes apart, b starting delta bytes after a. Row i of a covers
    [i R, i R + Wa), row j of b [delta + j R, delta + j R + Wb); two rows meet iff -Wb < delta + k R < Wa for
    k = j - i, and every k in [1 - Ta, Tb - 1] is some pair's."""
    if a.dim() != 2 or b.dim() != 2:
        return None
    (rows_a, columns_a), (rows_b, columns_b) = a.shape, b.shape
    if (columns_a > 1 and a.stride(1) != 1) or (columns_b > 1 and b.stride(1) != 1) or rows_a < 2 or rows_b < 2:
        return None
    stride = a.stride(0) * a.element_size()
    if stride <= 0 or b.stride(0) * b.element_size() != stride:
        return None
    width_a, width_b = columns_a * a.element_size(), columns_b * b.element_size()
    low = max((-width_b - delta) // stride + 1, 1 - rows_a)
    high = min(-((delta - width_a) // stride) - 1, rows_b - 1)
    return low <= high


def may_overlap(a, b) -> bool:
    """Whether tensors a and b share a byte of memory (any dtypes, shapes and strides, one storage or two).

    Exact for every pair of views whose outer strides are multiples of one another level by level (rows
    and columns of one tensor, fused-projection slices, transposes, every-other-row views, different
    offsets into one storage): the answer is computed from the index sets, not from spans. Otherwise
    (strides that are not multiples, e.g. as_strided windows) the rows are enumerated; past
    _OVERLAP_STEPS decisions the answer is True, "may overlap" (a conservative rejection, never a
    missed overlap). Tensors without memory (meta) never overlap."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device or a.device.type == "meta":
        return False
    # the common cases first, read without building storage objects: two dense tensors meet iff their spans
    # do; two row views of one row stride (q, k, v of a fused projection) in closed form; spans apart
    start_a, start_b = a.data_ptr(), b.data_ptr()
    if a.is_contiguous() and b.is_contiguous():
        return start_b < start_a + a.numel() * a.element_size() and start_a < start_b + b.numel() * b.element_size()
    rows = _row_views_meet(a, b, start_b - start_a)
    if rows is not None:
        return rows
    if start_a + _byte_extent(a) <= start_b or start_b + _byte_extent(b) <= start_a:
        return False
    try:
        return _patterns_meet(_byte_pattern(a), _byte_pattern(b), start_b - start_a, [_OVERLAP_STEPS])
    except _Undecided:
        return True


def expect_disjoint(op: str, argument: str, value, other_argument: str, other) -> None:
    """Reject `value` sharing memory with `other` where one of them is written by the op."""
    if may_overlap(value, other):
        raise OpInputError(
            op,
            argument,
            f"memory not overlapping {other_argument!r} (the op writes one of them)",
            f"a tensor sharing memory with {other_argument!r}",
        )


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
    from .host_replay import suspended  # a replayed call skips the check, value checks included

    saved = _state["override"]
    _state["override"] = enabled
    try:
        with suspended() if enabled else contextlib.nullcontext():
            yield
    finally:
        _state["override"] = saved
