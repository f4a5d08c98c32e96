"""Checks the CUDA-extension KV writes run before calling their op (the op's TORCH_CHECKs repeat them)."""

from __future__ import annotations

from ..checks import OpInputError, rows_view
from .checks import UPDATE_KV_BUFFER, check_update_kv_buffer_args


def check_extension_args(kv, loc, buffer) -> None:
    """The op's shared checks, then: CUDA tensors, and the kv:rows / buffer:rows layouts."""
    num_tokens, heads, head_dim = check_update_kv_buffer_args(kv, loc, buffer)
    if not kv.is_cuda:
        raise OpInputError(UPDATE_KV_BUFFER, "kv", "a CUDA tensor (the CUDA extension rows)", f"a tensor on {kv.device}")
    rows_view(UPDATE_KV_BUFFER, "kv", kv, num_tokens, heads * head_dim)
    rows_view(UPDATE_KV_BUFFER, "buffer", buffer, buffer.shape[0], heads * head_dim)
