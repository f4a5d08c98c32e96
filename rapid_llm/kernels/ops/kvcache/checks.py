"""Argument checks for the KV-cache writes (shared by every implementation)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_float_tensor, expect_same_device, expect_tensor

UPDATE_KV_BUFFER = "kvcache.update_kv_buffer"


def check_update_kv_buffer_args(kv, loc, buffer) -> tuple[int, int, int]:
    """Validate the arguments; return (num_tokens, 2*num_kv_heads, head_dim)."""
    op = UPDATE_KV_BUFFER
    expect_float_tensor(op, "kv", kv)
    if kv.dim() != 3 or kv.shape[1] == 0 or kv.shape[1] % 2 or kv.shape[2] == 0:
        raise OpInputError(op, "kv", "shape [T, 2*Hk, D] (K heads then V heads)", f"shape {list(kv.shape)}")
    expect_tensor(op, "loc", loc)
    if loc.dtype not in (torch.int32, torch.int64):
        raise OpInputError(op, "loc", "dtype torch.int32 or torch.int64", str(loc.dtype))
    if loc.dim() != 1 or loc.shape[0] != kv.shape[0]:
        raise OpInputError(op, "loc", f"shape [{kv.shape[0]}] (one row id per token)", f"shape {list(loc.shape)}")
    expect_tensor(op, "buffer", buffer)
    if buffer.dim() != 3 or tuple(buffer.shape[1:]) != tuple(kv.shape[1:]):
        raise OpInputError(op, "buffer", f"shape [rows, {kv.shape[1]}, {kv.shape[2]}] (kv's per-token shape)",
                           f"shape {list(buffer.shape)}")
    if buffer.dtype != kv.dtype:
        raise OpInputError(op, "buffer", f"kv's dtype {kv.dtype}", str(buffer.dtype))
    expect_same_device(op, "loc", loc, "kv", kv)
    expect_same_device(op, "buffer", buffer, "kv", kv)
    return kv.shape[0], kv.shape[1], kv.shape[2]
