"""The one Case type of the conformance suite, and the seeded random inputs cases are built from.

A case builds fresh inputs from a seeded generator (never zeros: they hide
unwritten outputs): ``make(dtype, device, generator) -> (args, shape, layout)``
with the op's arguments in contract order, the named dims, and the layout
tags the arguments provide (what the op's check would report). `gpu_only`
cases need more memory than the CPU interpreter can process in reasonable
time (int64-offset cases past 2**31 elements).
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from rapid_llm.kernels.dispatcher.contract import FLOAT_DTYPE_LABELS


@attrs.frozen
class Case:
    id: str
    make: Callable  # (dtype, device, generator) -> (args tuple, shape dims dict, layout frozenset)
    gpu_only: bool = False
    dtypes: frozenset = FLOAT_DTYPE_LABELS


def randn(shape, dtype, device, generator, scale=1.0):
    """Seeded standard-normal values (times `scale`) of `dtype` on `device`."""
    return (torch.randn(shape, generator=generator, dtype=torch.float32) * scale).to(dtype).to(device)


def index_view(values, how: str | None):
    """`values` (1-D) as an index tensor with a non-unit stride, the way engines pass them:
    "every_other" -> ids[::2] of a twice-longer tensor, "column" -> column 0 of a [T, 2] tensor;
    None -> `values` itself. The values are the same; only the stride differs."""
    if how is None:
        return values
    if how == "every_other":
        wide = torch.full((2 * values.shape[0],), -7, dtype=values.dtype, device=values.device)
        wide[::2] = values
        return wide[::2]
    if how == "column":
        pairs = torch.full((values.shape[0], 2), -7, dtype=values.dtype, device=values.device)
        pairs[:, 0] = values
        return pairs[:, 0]
    raise ValueError(f"unknown index view {how!r}")


def with_padding(values, every: int = 3):
    """Every `every`-th id set to -1: padding, which every row must skip (the contracts' padding rule)."""
    values = values.clone()
    values[::every] = -1
    return values
