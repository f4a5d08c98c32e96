// kvcache.update_kv_buffer on the CUDA extension path: buffer[loc[t], :] = kv[t, :].
// Schema: update_kv_buffer(Tensor! buffer, Tensor kv, Tensor loc) -> () (outputs first).
//
// buffer [rows, 2*Hk, D] and kv [T, 2*Hk, D] (same dtype: the copy is bitwise,
// so the kernels move bytes and only the element size matters) are rows of
// W = 2*Hk*D contiguous elements with their own row stride (the launcher's
// TORCH_CHECK rejects heads that are not packed in a row); loc: int32/int64
// [T] row ids, any order, any stride (read as loc[t * loc.stride(0)]). One
// block per token copies its row with 16-byte vectors when every row start
// is 16-byte aligned (an element-sized scalar path otherwise). Row ids
// outside [0, rows) are skipped on the device (no host sync), as the native
// Triton row does; the torch reference is the row that raises on them.
// Offsets are int64: buffers past 2**31 elements need no special path.
// ASCII only.

#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "rapid_llm_ext.h"

namespace rapid_llm {
namespace {

constexpr int kMaxThreads = 256;

// One block per token: thread i copies words i, i + blockDim.x, ... of the row.
// Strides are in Words (buffer, kv rows) and in Index elements (loc).
template <typename Word, typename Index>
__global__ void scatter_rows_kernel(Word* __restrict__ buffer, const Word* __restrict__ kv,
                                    const Index* __restrict__ loc, int64_t buffer_row_stride,
                                    int64_t kv_row_stride, int64_t loc_stride, int64_t buffer_rows,
                                    int64_t row_words) {
  const int64_t token = blockIdx.x;
  const int64_t row = static_cast<int64_t>(loc[token * loc_stride]);
  if (row < 0 || row >= buffer_rows) {
    return;
  }
  const Word* __restrict__ source = kv + token * kv_row_stride;
  Word* __restrict__ target = buffer + row * buffer_row_stride;
  for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) {
    target[i] = source[i];
  }
}

template <typename Word, typename Index>
void launch(at::Tensor& buffer, const at::Tensor& kv, const at::Tensor& loc, int64_t element_bytes,
            cudaStream_t stream) {
  const int64_t word_elements = static_cast<int64_t>(sizeof(Word)) / element_bytes;
  const int64_t row_words = kv.size(1) * kv.size(2) / word_elements;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (row_words + 31) / 32 * 32));
  scatter_rows_kernel<Word, Index><<<static_cast<unsigned int>(kv.size(0)), threads, 0, stream>>>(
      static_cast<Word*>(buffer.mutable_data_ptr()), static_cast<const Word*>(kv.const_data_ptr()),
      loc.const_data_ptr<Index>(), buffer.stride(0) / word_elements, kv.stride(0) / word_elements, loc.stride(0),
      buffer.size(0), row_words);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void update_kv_buffer(at::Tensor& buffer, const at::Tensor& kv, const at::Tensor& loc) {
  TORCH_CHECK(kv.is_cuda(), "rapid_llm::update_kv_buffer: kv must be a CUDA tensor, got a tensor on ", kv.device());
  TORCH_CHECK(loc.device() == kv.device() && buffer.device() == kv.device(),
              "rapid_llm::update_kv_buffer: loc and buffer must be on kv's device ", kv.device(), ", got ",
              loc.device(), " and ", buffer.device());
  const at::ScalarType dtype = kv.scalar_type();
  TORCH_CHECK(is_served_float(dtype),
              "rapid_llm::update_kv_buffer: kv dtype must be float32, float16 or bfloat16, got ", dtype);
  TORCH_CHECK(buffer.scalar_type() == dtype, "rapid_llm::update_kv_buffer: buffer dtype ", buffer.scalar_type(),
              " must equal kv dtype ", dtype);
  TORCH_CHECK(kv.dim() == 3 && kv.size(1) > 0 && kv.size(1) % 2 == 0 && kv.size(2) > 0,
              "rapid_llm::update_kv_buffer: kv must be [T, 2*Hk, D], got shape ", dims_to_string(kv.sizes()));
  TORCH_CHECK(buffer.dim() == 3 && buffer.size(1) == kv.size(1) && buffer.size(2) == kv.size(2),
              "rapid_llm::update_kv_buffer: buffer must be [rows, ", std::to_string(kv.size(1)), ", ",
              std::to_string(kv.size(2)), "], got shape ", dims_to_string(buffer.sizes()));
  TORCH_CHECK(loc.scalar_type() == at::kInt || loc.scalar_type() == at::kLong,
              "rapid_llm::update_kv_buffer: loc dtype must be int32 or int64, got ", loc.scalar_type());
  TORCH_CHECK(loc.dim() == 1 && loc.size(0) == kv.size(0), "rapid_llm::update_kv_buffer: loc must be [",
              std::to_string(kv.size(0)), "], got shape ", dims_to_string(loc.sizes()));
  TORCH_CHECK(packed_rows(kv), "rapid_llm::update_kv_buffer: each token's heads of kv must be contiguous, got strides ",
              dims_to_string(kv.strides()));
  TORCH_CHECK(packed_rows(buffer),
              "rapid_llm::update_kv_buffer: each row's heads of buffer must be contiguous, got strides ",
              dims_to_string(buffer.strides()));
  TORCH_CHECK(kv.size(0) <= INT32_MAX, "rapid_llm::update_kv_buffer: at most 2**31 - 1 tokens per call");
  // Two rows of buffer may not share memory (a stride-0 row dimension: an expanded tensor).
  at::assert_no_internal_overlap(buffer);
  // The kernel reads kv and loc and writes buffer through __restrict__ pointers.
  at::assert_no_overlap(buffer, kv);
  at::assert_no_overlap(buffer, loc);
  if (kv.size(0) == 0) {
    return;
  }

  const at::cuda::OptionalCUDAGuard device_guard(kv.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t element_bytes = kv.element_size();
  const int64_t row_bytes = kv.size(1) * kv.size(2) * element_bytes;
  const bool vectorized = is_vector_aligned(kv.const_data_ptr()) && is_vector_aligned(buffer.const_data_ptr()) &&
                          row_bytes % kVectorBytes == 0 && (kv.stride(0) * element_bytes) % kVectorBytes == 0 &&
                          (buffer.stride(0) * element_bytes) % kVectorBytes == 0;
  AT_DISPATCH_INDEX_TYPES(loc.scalar_type(), "rapid_llm::update_kv_buffer", [&] {
    if (vectorized) {
      launch<uint4, index_t>(buffer, kv, loc, element_bytes, stream);
    } else if (element_bytes == 2) {
      launch<uint16_t, index_t>(buffer, kv, loc, element_bytes, stream);
    } else {
      launch<uint32_t, index_t>(buffer, kv, loc, element_bytes, stream);
    }
  });
}

}  // namespace rapid_llm
