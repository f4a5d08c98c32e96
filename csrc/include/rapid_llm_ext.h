// rapid_llm CUDA extension: op declarations, shared launcher helpers and the dtype dispatch macro.
//
// Every op is declared here once and registered in csrc/common_extension.cc.
// Schemas list their outputs first (`Tensor! out` before the inputs) and
// each declaration below takes its arguments in its schema's order: the
// schema's types are inferred from these signatures, and every Tensor
// argument infers as `Tensor`, so a reordered declaration would still
// compile and silently swap arguments. conformance/test_extension.py checks
// that schema, declaration and definition name the same arguments in the
// same order.
//
// The same sources build two ways:
//   AOT  setup.py (RAPID_LLM_BUILD_EXT=1)  -> rapid_llm/_C.so, ops in torch.ops.rapid_llm
//   JIT  rapid_llm/kernels/jit.py          -> <cache>/rapid_llm_jit_ext.so, ops in torch.ops.rapid_llm_jit
// The JIT build passes -DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit so that both
// libraries can be loaded in one process: two TORCH_LIBRARY_FRAGMENTs that
// define the same schema in the same namespace would abort the second load.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>

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

// ---------------------------------------------------------------------------
// Ops (schemas in csrc/common_extension.cc; outputs first)
// ---------------------------------------------------------------------------

// elementwise.scale(Tensor! out, Tensor input, float factor) -> ()
// out[i] = T(float(input[i]) * float(factor)) (csrc/elementwise/scale.cu).
// out, input: CUDA, contiguous, same shape, same dtype (float32, float16 or
// bfloat16), no overlap. factor arrives as a double (the schema's `float`)
// and is rounded to fp32 once, as torch does for a tensor times a scalar.
void scale(at::Tensor& out, const at::Tensor& input, double factor);

// kvcache.update_kv_buffer(Tensor! buffer, Tensor kv, Tensor loc) -> ()
// buffer[loc[t]] = kv[t], in place (csrc/kvcache/update_kv_buffer.cu).
// buffer [rows, 2*Hk, D] and kv [T, 2*Hk, D]: CUDA, same dtype (float32,
// float16 or bfloat16), each row's/token's heads contiguous, any row stride;
// loc int32 or int64 [T], any stride. Row ids outside [0, rows) are skipped
// on the device.
void update_kv_buffer(at::Tensor& buffer, const at::Tensor& kv, const at::Tensor& loc);

// attention.decode(Tensor! out, Tensor! partial, Tensor! partial_lse, Tensor q, Tensor kv_buffer,
//   Tensor page_table, Tensor seq_lens, Tensor k_scale, Tensor v_scale, int page_size, float sm_scale,
//   int num_splits) -> ()
// The fp8-e4m3 KV buffer's decode (csrc/attention/decode_fp8.cu): q float16/bfloat16 [B, Hq, 128] any
// strides, kv_buffer e4m3 [rows, 2*Hk, 128] (16-byte aligned rows and heads), page_table int32 [B, pages],
// seq_lens int32 [B], one-element float32 scales, page_size a power of two; out contiguous [B, Hq, 128] of
// q's dtype; with num_splits > 1, partial fp32 [B, Hq, S, 128] and partial_lse fp32 [B, Hq, S] (scratch).
void decode(at::Tensor& out, at::Tensor& partial, at::Tensor& partial_lse, const at::Tensor& q,
            const at::Tensor& kv_buffer, const at::Tensor& page_table, const at::Tensor& seq_lens,
            const at::Tensor& k_scale, const at::Tensor& v_scale, int64_t page_size, double sm_scale,
            int64_t num_splits);

// gemm.w4a16_mm(Tensor! out, Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor bias,
//   int group_size, bool v1_zeros) -> ()
// Decode token counts (M <= 16) over GPTQ words on the tensor cores (csrc/gemm/w4a16_mma.cu): x float16/bfloat16
// [M, K] with unit stride along K, qweight int32 [K/8, N], qzeros int32 [K/g, N/8] (v1_zeros: the stored nibble
// is zero - 1), scales [K/g, N] float32/float16/bfloat16, any strides; bias empty (none) or [N] in x's dtype;
// out contiguous [M, N] in x's dtype.
void w4a16_mm(at::Tensor& out, const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
              const at::Tensor& qzeros, const at::Tensor& bias, int64_t group_size, bool v1_zeros);

// gemm.w8a16_mm(Tensor! out, Tensor x, Tensor w_q, Tensor w_scale, Tensor bias) -> ()
// Decode token counts (M <= 16) over int8 weights on the tensor cores (csrc/gemm/w8a16_mma.cu): x float16/bfloat16
// [M, K] with unit stride along K, w_q int8 [N, K] with unit stride along K (any row stride), w_scale [N] or [N, 1]
// float32 or x's dtype, any stride; bias empty (none) or [N] in x's dtype; out contiguous [M, N] in x's dtype.
void w8a16_mm(at::Tensor& out, const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_scale,
              const at::Tensor& bias);

// ---------------------------------------------------------------------------
// Helpers shared by the launchers (host code only)
// ---------------------------------------------------------------------------

// Bytes per vectorized access of the kernels (uint4 / 8 halves / 4 floats).
constexpr int64_t kVectorBytes = 16;

// "[a, b, c]". Integers reach TORCH_CHECK messages only as std::string (this, or
// std::to_string): streaming an int64_t or an IntArrayRef into the message crashed
// the process (SIGSEGV while formatting it) in the H200 build (torch 2.11, nvcc 13.0).
inline std::string dims_to_string(c10::IntArrayRef dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(dims[i]);
  }
  return text + "]";
}

// Whether pointer is aligned for a kVectorBytes access.
inline bool is_vector_aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % static_cast<std::uintptr_t>(kVectorBytes) == 0;
}

// The dtypes the ops compute in: float32, float16, bfloat16.
inline bool is_served_float(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
}

// Whether t [n, heads, head_dim] views as n rows of heads*head_dim contiguous elements
// (any row stride): the kernels index a row as row * stride(0) + i.
inline bool packed_rows(const at::Tensor& t) {
  return (t.size(2) == 1 || t.stride(2) == 1) && (t.size(1) == 1 || t.stride(1) == t.size(2));
}

}  // namespace rapid_llm
