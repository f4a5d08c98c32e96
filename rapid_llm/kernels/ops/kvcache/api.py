"""The kvcache family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import UPDATE_KV_BUFFER, UPDATE_KV_BUFFER_FP8, UPDATE_MLA_BUFFER, UPDATE_MLA_BUFFER_FP8

__all__ = ["update_kv_buffer", "update_kv_buffer_fp8", "update_mla_buffer", "update_mla_buffer_fp8"]


def update_kv_buffer(kv, loc, buffer):
    """buffer[loc[i]] = kv[i], in place; returns buffer. Contract: kvcache.update_kv_buffer."""
    return _call(UPDATE_KV_BUFFER, (kv, loc, buffer))


def update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale):
    """buffer[loc[i]] = e4m3(kv[i] / scale), in place; returns buffer. Contract: kvcache.update_kv_buffer_fp8."""
    return _call(UPDATE_KV_BUFFER_FP8, (kv, loc, buffer, k_scale, v_scale))


def update_mla_buffer(latent, rope, loc, buffer):
    """buffer[loc[i]] = latent[i] | rope[i] (the MLA latent cache row), in place; returns buffer.
    Contract: kvcache.update_mla_buffer."""
    return _call(UPDATE_MLA_BUFFER, (latent, rope, loc, buffer))


def update_mla_buffer_fp8(latent, rope, loc, buffer, scale):
    """buffer[loc[i]] = e4m3((latent[i] | rope[i]) / scale), in place; returns buffer.
    Contract: kvcache.update_mla_buffer_fp8."""
    return _call(UPDATE_MLA_BUFFER_FP8, (latent, rope, loc, buffer, scale))
