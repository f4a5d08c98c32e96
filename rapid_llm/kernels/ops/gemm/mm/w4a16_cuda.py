"""aot/w4a16_mma and jit/w4a16_mma: the CUDA extension's decode int4 GEMM (csrc/gemm/w4a16_mma.cu), two builds
of one kernel.

    w4a16_mma_aot   torch.ops.rapid_llm.w4a16_mm      (rapid_llm._C: RAPID_LLM_BUILD_EXT=1)
    w4a16_mma_jit   torch.ops.rapid_llm_jit.w4a16_mm  (compiled on first use: RAPID_LLM_JIT=1)

gemm.w4a16_mm's public order (x, qweight, scales, qzeros, group_size, packing, bias); the schema's is outputs
first: w4a16_mm(Tensor! out, Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor bias, int
group_size, bool v1_zeros) -> (), bias empty for none. The rows serve M <= 16 and GPTQ words (layout w:gptq:
packing "gptq" or "gptq_v2"); x [..., K] is viewed as [M, K] rows (layout x:rows). No scratch and no host
sync in the launcher (capture in a CUDA graph is not yet checked on a GPU). Importing this module loads no
extension.
"""

from __future__ import annotations

from .... import aot, jit
from . import call_extension


def _w4a16_mm(op, x, qweight, scales, qzeros, group_size, packing, bias):
    trailing = (int(group_size), packing == "gptq")  # v1_zeros: GPTQ v1 stores zero - 1
    return call_extension(op, x, qweight.shape[1], (qweight, scales, qzeros), bias, trailing)


def w4a16_mma_aot(x, qweight, scales, qzeros, group_size, packing, bias=None):
    return _w4a16_mm(aot.op("w4a16_mm"), x, qweight, scales, qzeros, group_size, packing, bias)


def w4a16_mma_jit(x, qweight, scales, qzeros, group_size, packing, bias=None):
    return _w4a16_mm(jit.op("w4a16_mm"), x, qweight, scales, qzeros, group_size, packing, bias)


__all__ = ["w4a16_mma_aot", "w4a16_mma_jit"]
