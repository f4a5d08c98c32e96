"""The comm family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import ALL_REDUCE, ALL_REDUCE_ADD_RMS_NORM, EP_COMBINE, EP_DISPATCH

__all__ = ["all_reduce", "all_reduce_add_rms_norm", "ep_combine", "ep_dispatch"]


def all_reduce(x, group=None, inplace: bool = False):
    """The sum of x over the ranks of `group` (None: the default group). Contract: comm.all_reduce."""
    return _call(ALL_REDUCE, (x, group, inplace))


def all_reduce_add_rms_norm(x, residual, weight, eps: float = 1e-6, group=None):
    """In place: residual += all_reduce(x); x = rms_norm(residual); returns (x, residual). Contract:
    comm.all_reduce_add_rms_norm."""
    return _call(ALL_REDUCE_ADD_RMS_NORM, (x, residual, weight, eps, group))


def ep_dispatch(x, topk_ids, topk_weights, num_experts: int, group=None, x_scale=None):
    """Send each token to the ranks holding its top-k experts; returns an EpDispatch (x, x_scale, topk_ids,
    topk_weights, tokens_per_expert, handle) of the rows this rank received. Contract: comm.ep_dispatch."""
    return _call(EP_DISPATCH, (x, topk_ids, topk_weights, num_experts, group, x_scale))


def ep_combine(y, handle, group=None):
    """Send each received row's result back to its token's rank and add a token's results: out [T, H].
    Contract: comm.ep_combine."""
    return _call(EP_COMBINE, (y, handle, group))
