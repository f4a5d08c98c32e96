// rapid_llm CUDA extension: op declarations and the dtype dispatch macro.
//
// Every op is declared here once and registered in csrc/common_extension.cc.
// The same sources build two ways:
//   AOT  setup.py (RAPID_LLM_BUILD_EXT=1)  -> rapid_llm/_C.so, ops in torch.ops.rapid_llm
//   JIT  rapid_llm/kernels/jit.py          -> <cache>/rapid_llm_jit_ext.so, ops in torch.ops.rapid_llm_jit
// The JIT build passes -DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit so that both
// libraries can be loaded in one process: two TORCH_LIBRARY_FRAGMENTs that
// define the same schema in the same namespace would abort the second load.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#ifndef RAPID_LLM_OP_NAMESPACE
#define RAPID_LLM_OP_NAMESPACE rapid_llm
#endif

// Dispatches over the floating dtypes the ops serve. AT_DISPATCH_FLOATING_TYPES_AND2
// also instantiates double; every launcher rejects double with TORCH_CHECK
// before dispatching, so that instantiation is compiled but never runs.
#define RAPID_LLM_DISPATCH_FLOAT_HALF_BF16(TYPE, NAME, ...)                          \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, \
                                  TYPE, NAME, __VA_ARGS__)

namespace rapid_llm {

// elementwise.scale: out[i] = T(float(input[i]) * float(factor)).
// out, input: CUDA, contiguous, same shape, same dtype (float32, float16 or
// bfloat16), no overlap. factor arrives as a double (the schema's `float`)
// and is rounded to fp32 once, as torch does for a tensor times a scalar.
void scale(at::Tensor& out, const at::Tensor& input, double factor);

// kvcache.update_kv_buffer: buffer[loc[t]] = kv[t], in place (csrc/kvcache/update_kv_buffer.cu).
// kv [T, 2*Hk, D] and buffer [rows, 2*Hk, D]: CUDA, same dtype (float32, float16
// or bfloat16), each token's/row's heads contiguous, any row stride; loc int32
// or int64 [T]. Row ids outside [0, rows) are skipped on the device.
void update_kv_buffer(const at::Tensor& kv, const at::Tensor& loc, at::Tensor& buffer);

}  // namespace rapid_llm
