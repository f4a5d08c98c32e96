"""The CUDA extension's KV-cache write (csrc/kvcache/update_kv_buffer.cu), two builds of one kernel.

    update_kv_buffer_aot   torch.ops.rapid_llm.update_kv_buffer      (rapid_llm._C: RAPID_LLM_BUILD_EXT=1)
    update_kv_buffer_jit   torch.ops.rapid_llm_jit.update_kv_buffer  (compiled on first use: RAPID_LLM_JIT=1)

The two differ only in the namespace (aot.op / jit.op). buffer[loc[i]] =
kv[i], in place; returns buffer. Schema, outputs first:
update_kv_buffer(Tensor! buffer, Tensor kv, Tensor loc) -> (), while the
op's public order is (kv, loc, buffer). kv [T, 2*Hk, D] and buffer [rows,
2*Hk, D] (layouts ``kv:rows``, ``buffer:rows``, guaranteed by dispatch: each
token's/row's heads contiguous, any row stride), same dtype; loc int32/int64
[T], any stride (the kernel reads loc[t * loc.stride(0)]). One block per
token, 16-byte vectors when aligned, ids outside [0, rows) skipped on the
device. Unchecked kernels: the op's check ran before (kvcache/checks.py);
the C++ launcher still validates with TORCH_CHECK. Importing this module
loads no extension.
"""

from __future__ import annotations

import torch

from ... import aot, jit


def update_kv_buffer_aot(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    aot.op("update_kv_buffer")(buffer, kv, loc)
    return buffer


def update_kv_buffer_jit(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    jit.op("update_kv_buffer")(buffer, kv, loc)
    return buffer
