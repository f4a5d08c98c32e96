"""aot/w8a16_mma and jit/w8a16_mma: the CUDA extension's decode int8 GEMM (csrc/gemm/w8a16_mma.cu), two builds
of one kernel.

    w8a16_mma_aot   torch.ops.rapid_llm.w8a16_mm      (rapid_llm._C: RAPID_LLM_BUILD_EXT=1)
    w8a16_mma_jit   torch.ops.rapid_llm_jit.w8a16_mm  (compiled on first use: RAPID_LLM_JIT=1)

gemm.w8a16_mm's public order (x, w_q, w_scale, bias); the schema's is outputs first: w8a16_mm(Tensor! out,
Tensor x, Tensor w_q, Tensor w_scale, Tensor bias) -> (), bias empty for none. The rows serve M <= 16 with
layouts x:rows and w:rows (w_q unit stride along K); x [..., K] is viewed as [M, K] rows. No scratch and no
host sync in the launcher (capture in a CUDA graph is not yet checked on a GPU). Importing this module loads
no extension.
"""

from __future__ import annotations

from .... import aot, jit
from . import call_extension


def _w8a16_mm(op, x, w_q, w_scale, bias):
    return call_extension(op, x, w_q.shape[0], (w_q, w_scale), bias)


def w8a16_mma_aot(x, w_q, w_scale, bias=None):
    return _w8a16_mm(aot.op("w8a16_mm"), x, w_q, w_scale, bias)


def w8a16_mma_jit(x, w_q, w_scale, bias=None):
    return _w8a16_mm(jit.op("w8a16_mm"), x, w_q, w_scale, bias)


__all__ = ["w8a16_mma_aot", "w8a16_mma_jit"]
