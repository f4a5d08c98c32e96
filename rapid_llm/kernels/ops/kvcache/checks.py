"""Argument checks for the KV-cache writes (shared by every implementation)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_float_tensor, expect_same_device, expect_tensor

UPDATE_KV_BUFFER = "kvcache.update_kv_buffer"
UPDATE_KV_BUFFER_FP8 = "kvcache.update_kv_buffer_fp8"


def check_update_kv_buffer_args(kv, loc, buffer) -> tuple[int, int, int]:
    """Validate the arguments; return (num_tokens, 2*num_kv_heads, head_dim)."""
    return _check_scatter_args(UPDATE_KV_BUFFER, kv, loc, buffer, buffer_dtype=None)


def check_update_kv_buffer_fp8_args(kv, loc, buffer, k_scale, v_scale) -> tuple[int, int, int]:
    """As check_update_kv_buffer_args with an e4m3 buffer and two one-element fp32 scale tensors
    on kv's device; return (num_tokens, 2*num_kv_heads, head_dim)."""
    op = UPDATE_KV_BUFFER_FP8
    shape = _check_scatter_args(op, kv, loc, buffer, torch.float8_e4m3fn)
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        expect_tensor(op, name, scale)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise OpInputError(op, name, "a one-element torch.float32 tensor (the per-tensor dequant scale)",
                               f"{scale.dtype} with {scale.numel()} elements")
        expect_same_device(op, name, scale, "kv", kv)
    return shape


def _check_scatter_args(op, kv, loc, buffer, buffer_dtype) -> tuple[int, int, int]:
    """The shared scatter checks; buffer_dtype None means kv's dtype."""
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
    if buffer.dtype != (buffer_dtype or kv.dtype):
        expected = str(buffer_dtype) if buffer_dtype else f"kv's dtype {kv.dtype}"
        raise OpInputError(op, "buffer", expected, str(buffer.dtype))
    expect_same_device(op, "loc", loc, "kv", kv)
    expect_same_device(op, "buffer", buffer, "kv", kv)
    return kv.shape[0], kv.shape[1], kv.shape[2]
