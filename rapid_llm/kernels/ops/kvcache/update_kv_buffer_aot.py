"""CUDA extension KV-cache write, ahead-of-time build (`rapid_llm._C`): buffer[loc[i]] = kv[i], in place.

kv [T, 2*Hk, D] and buffer [rows, 2*Hk, D] (layout tags ``kv:rows``,
``buffer:rows``: each token's and row's heads contiguous, any row stride),
same dtype; loc int32/int64 [T]. Kernel: csrc/kvcache/update_kv_buffer.cu,
called as torch.ops.rapid_llm.update_kv_buffer(kv, loc, buffer): one block
per token, 16-byte vectors, ids outside [0, rows) skipped on the device (the
reference row raises on them). The op is looked up on first call, after
aot.available() has loaded the extension: importing this module loads nothing.
"""

from __future__ import annotations

import functools

import torch

from ... import aot
from .update_kv_buffer_checks import check_extension_args


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    check_extension_args(kv, loc, buffer)
    _operator()(kv, loc, buffer)
    return buffer


@functools.lru_cache(maxsize=None)
def _operator():
    ok, reason = aot.available()
    if not ok:
        raise RuntimeError(f"aot/update_kv_buffer: {reason}")
    return torch.ops.rapid_llm.update_kv_buffer
