"""The comm family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM

__all__ = ["all_reduce", "all_reduce_add_rms_norm"]


def all_reduce(x, group=None, inplace: bool = False):
    """The sum of x over the ranks of `group` (None: the default group). Contract: comm.all_reduce."""
    return _call(ALL_REDUCE, (x, group, inplace))


def all_reduce_add_rms_norm(x, residual, weight, eps: float = 1e-6, group=None):
    """In place: residual += all_reduce(x); x = rms_norm(residual); returns (x, residual). Contract:
    comm.all_reduce_add_rms_norm."""
    return _call(ALL_REDUCE_ADD_RMS_NORM, (x, residual, weight, eps, group))
