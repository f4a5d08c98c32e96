"""CUDA extension KV-cache write, JIT build (RAPID_LLM_JIT=1): buffer[loc[i]] = kv[i], in place.

The same kernel and contract as update_kv_buffer_aot.py
(csrc/kvcache/update_kv_buffer.cu), compiled on first call by
rapid_llm.kernels.jit and called as torch.ops.rapid_llm_jit.update_kv_buffer.
"""

from __future__ import annotations

import torch

from ... import jit
from .update_kv_buffer_checks import check_extension_args


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    check_extension_args(kv, loc, buffer)
    jit.op("update_kv_buffer")(kv, loc, buffer)  # the first call in a process builds or loads the library
    return buffer
