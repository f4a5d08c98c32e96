"""Argument checks of the kvcache family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_disjoint, expect_float_tensor, expect_same_device, expect_tensor, \
    tag_table, values_checked
from . import UPDATE_KV_BUFFER, UPDATE_KV_BUFFER_FP8

_TAGS = tag_table("kv:rows", "buffer:rows")


def check_update_kv_buffer(kv, loc, buffer):
    """update_kv_buffer's check: (kv, kv:rows/buffer:rows tags, (num_tokens, num_kv_heads, head_dim))."""
    return _check_scatter(UPDATE_KV_BUFFER, kv, loc, buffer, buffer_dtype=None)


def check_update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale):
    """As check_update_kv_buffer with an e4m3 buffer and two one-element, positive fp32 scale tensors."""
    op = UPDATE_KV_BUFFER_FP8
    result = _check_scatter(op, kv, loc, buffer, torch.float8_e4m3fn)
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        expect_tensor(op, name, scale)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise OpInputError(op, name, "a one-element torch.float32 tensor (the per-tensor dequant scale)",
                               f"{scale.dtype} with {scale.numel()} elements")
        expect_same_device(op, name, scale, "kv", kv)
        expect_disjoint(op, name, scale, "buffer", buffer)
        if values_checked(scale):
            value = float(scale.reshape(()))
            if not 0.0 < value < float("inf"):
                raise OpInputError(op, name, "a positive, finite scale", repr(value))
    return result


def _packed_token_rows(t) -> bool:
    """[n, H, D] with each row's H*D elements contiguous (views as [n, H*D] without a copy)."""
    return (t.shape[2] == 1 or t.stride(2) == 1) and (t.shape[1] == 1 or t.stride(1) == t.shape[2])


def _check_scatter(op, kv, loc, buffer, buffer_dtype):
    """The checks both KV writes share; buffer_dtype None means kv's dtype."""
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
        expected = f"dtype {buffer_dtype}" if buffer_dtype else f"kv's dtype {kv.dtype}"
        raise OpInputError(op, "buffer", expected, str(buffer.dtype))
    expect_same_device(op, "loc", loc, "kv", kv)
    expect_same_device(op, "buffer", buffer, "kv", kv)
    expect_disjoint(op, "kv", kv, "buffer", buffer)
    expect_disjoint(op, "loc", loc, "buffer", buffer)
    tokens = kv.shape[0]
    if tokens and values_checked(loc):
        high = int(loc.max())
        if high >= buffer.shape[0]:
            raise OpInputError(op, "loc", f"row ids < {buffer.shape[0]} (the buffer's rows; negative ids are "
                               "padding)", f"a row id of {high}")
    tags = _TAGS[(_packed_token_rows(kv), _packed_token_rows(buffer))]
    return kv, tags, (("num_tokens", tokens), ("num_kv_heads", kv.shape[1] // 2), ("head_dim", kv.shape[2]))
