"""Argument checks of the kvcache family: each op's one validation site (see ops/checks.py)."""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_disjoint,
    expect_float_tensor,
    expect_same_device,
    expect_tensor,
    rows_view_ok,
    tag_table,
    values_checked,
)
from . import UPDATE_KV_BUFFER, UPDATE_KV_BUFFER_FP8, UPDATE_MLA_BUFFER, UPDATE_MLA_BUFFER_FP8

_TAGS = tag_table("kv:rows", "buffer:rows")
_MLA_TAGS = tag_table("latent_rope:rows", "buffer:rows")


def check_update_kv_buffer(kv, loc, buffer):
    """update_kv_buffer's check: (kv, kv:rows/buffer:rows tags, (num_tokens, num_kv_heads, head_dim))."""
    return _check_scatter(UPDATE_KV_BUFFER, kv, loc, buffer, buffer_dtype=None)


def check_update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale):
    """As check_update_kv_buffer with an e4m3 buffer and two one-element, positive fp32 scale tensors."""
    op = UPDATE_KV_BUFFER_FP8
    result = _check_scatter(op, kv, loc, buffer, torch.float8_e4m3fn)
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        _check_scale(op, name, scale, "kv", kv, buffer)
    return result


def check_update_mla_buffer(latent, rope, loc, buffer):
    """update_mla_buffer's check: (latent, latent_rope:rows/buffer:rows tags, (num_tokens, kv_lora_rank,
    rope_dim))."""
    return _check_mla_write(UPDATE_MLA_BUFFER, latent, rope, loc, buffer, buffer_dtype=None)


def check_update_mla_buffer_fp8(latent, rope, loc, buffer, scale):
    """As check_update_mla_buffer with an e4m3 buffer and one one-element, positive fp32 scale tensor."""
    op = UPDATE_MLA_BUFFER_FP8
    result = _check_mla_write(op, latent, rope, loc, buffer, torch.float8_e4m3fn)
    _check_scale(op, "scale", scale, "latent", latent, buffer)
    return result


def _packed_token_rows(t) -> bool:
    """[n, H, D] with each row's H*D elements contiguous (views as [n, H*D] without a copy)."""
    return (t.shape[2] == 1 or t.stride(2) == 1) and (t.shape[1] == 1 or t.stride(1) == t.shape[2])


def _check_scatter(op, kv, loc, buffer, buffer_dtype):
    """The checks both KV writes share; buffer_dtype None means kv's dtype."""
    expect_float_tensor(op, "kv", kv)
    if kv.dim() != 3 or kv.shape[1] == 0 or kv.shape[1] % 2 or kv.shape[2] == 0:
        raise OpInputError(op, "kv", "shape [T, 2*Hk, D] (K heads then V heads)", f"shape {list(kv.shape)}")
    tokens = kv.shape[0]
    _check_loc(op, loc, tokens)
    expect_tensor(op, "buffer", buffer)
    if buffer.dim() != 3 or tuple(buffer.shape[1:]) != tuple(kv.shape[1:]):
        raise OpInputError(
            op,
            "buffer",
            f"shape [rows, {kv.shape[1]}, {kv.shape[2]}] (kv's per-token shape)",
            f"shape {list(buffer.shape)}",
        )
    _check_buffer_and_slots(op, loc, buffer, buffer_dtype, (("kv", kv),))
    tags = _TAGS[(_packed_token_rows(kv), _packed_token_rows(buffer))]
    return kv, tags, (("num_tokens", tokens), ("num_kv_heads", kv.shape[1] // 2), ("head_dim", kv.shape[2]))


def _check_mla_write(op, latent, rope, loc, buffer, buffer_dtype):
    """The checks both MLA writes share; buffer_dtype None means latent's dtype."""
    expect_float_tensor(op, "latent", latent)
    if latent.dim() != 2 or latent.shape[1] == 0:
        raise OpInputError(op, "latent", "shape [T, kv_lora_rank] (kv_lora_rank >= 1)", f"shape {list(latent.shape)}")
    tokens, kv_lora_rank = latent.shape
    expect_tensor(op, "rope", rope)
    if rope.dtype != latent.dtype:
        raise OpInputError(op, "rope", f"latent's dtype {latent.dtype}", str(rope.dtype))
    if rope.dim() != 2 or rope.shape[0] != tokens or rope.shape[1] == 0:
        raise OpInputError(
            op, "rope", f"shape [{tokens}, rope_dim] (latent's tokens; rope_dim >= 1)", f"shape {list(rope.shape)}"
        )
    rope_dim = rope.shape[1]
    _check_loc(op, loc, tokens)
    expect_tensor(op, "buffer", buffer)
    if buffer.dim() != 2 or buffer.shape[1] != kv_lora_rank + rope_dim:
        raise OpInputError(
            op,
            "buffer",
            f"shape [rows, {kv_lora_rank + rope_dim}] (kv_lora_rank {kv_lora_rank} + rope_dim {rope_dim})",
            f"shape {list(buffer.shape)}",
        )
    _check_buffer_and_slots(op, loc, buffer, buffer_dtype, (("latent", latent), ("rope", rope)))
    # 2-D tensors: rows_view_ok is unit stride along the row, any row stride
    tags = _MLA_TAGS[(rows_view_ok(latent) and rows_view_ok(rope), rows_view_ok(buffer))]
    return latent, tags, (("num_tokens", tokens), ("kv_lora_rank", kv_lora_rank), ("rope_dim", rope_dim))


def _check_loc(op, loc, tokens):
    expect_tensor(op, "loc", loc)
    if loc.dtype not in (torch.int32, torch.int64):
        raise OpInputError(op, "loc", "dtype torch.int32 or torch.int64", str(loc.dtype))
    if loc.dim() != 1 or loc.shape[0] != tokens:
        raise OpInputError(op, "loc", f"shape [{tokens}] (one row id per token)", f"shape {list(loc.shape)}")


def _check_buffer_and_slots(op, loc, buffer, buffer_dtype, sources):
    """What every KV write checks once the shapes are: the buffer's dtype (None: the first source's), one
    device, no source or loc sharing memory with the buffer, and (when values are checked) the slot ids.
    sources: ((name, tensor), ...) of the token data written, the first one the dispatch anchor."""
    anchor_name, anchor = sources[0]
    if buffer.dtype != (buffer_dtype or anchor.dtype):
        expected = f"dtype {buffer_dtype}" if buffer_dtype else f"{anchor_name}'s dtype {anchor.dtype}"
        raise OpInputError(op, "buffer", expected, str(buffer.dtype))
    for name, tensor in (*sources[1:], ("loc", loc), ("buffer", buffer)):
        expect_same_device(op, name, tensor, anchor_name, anchor)
    for name, tensor in (*sources, ("loc", loc)):
        expect_disjoint(op, name, tensor, "buffer", buffer)
    if loc.shape[0] and values_checked(loc):
        high = int(loc.max())
        if high >= buffer.shape[0]:
            raise OpInputError(
                op,
                "loc",
                f"row ids < {buffer.shape[0]} (the buffer's rows; negative ids are padding)",
                f"a row id of {high}",
            )


def _check_scale(op, name, scale, anchor_name, anchor, buffer):
    """An fp8 write's per-tensor scale: a one-element fp32 tensor on the anchor's device, positive and finite
    (when values are checked)."""
    expect_tensor(op, name, scale)
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise OpInputError(
            op,
            name,
            "a one-element torch.float32 tensor (the per-tensor dequant scale)",
            f"{scale.dtype} with {scale.numel()} elements",
        )
    expect_same_device(op, name, scale, anchor_name, anchor)
    expect_disjoint(op, name, scale, "buffer", buffer)
    if values_checked(scale):
        value = float(scale.reshape(()))
        if not 0.0 < value < float("inf"):
            raise OpInputError(op, name, "a positive, finite scale", repr(value))
