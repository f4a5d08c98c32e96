// elementwise.scale on CUDA: out[i] = T(float(input[i]) * factor).
// Schema: scale(Tensor! out, Tensor input, float factor) -> () (outputs first).
//
// input, out: contiguous (the kernels index both flat; the launcher's
// TORCH_CHECK rejects any other layout), same shape and dtype (float32,
// float16, bfloat16), no overlap. factor: fp32 (the schema's double rounded
// once on the host, as torch rounds a Python scalar to the opmath type). The
// product is computed in fp32 and rounded once to T, so the result equals
// torch.mul(x, factor) bit for bit.
//
// Memory-bound: one read and one write per element. When both pointers are
// 16-byte aligned (any fresh allocation; a view with an odd storage offset
// may not be), each thread moves 16 bytes per access (8 halves or 4 floats)
// and the last numel % 8 (or % 4) elements go through a scalar loop. Indices
// are int64 throughout: tensors past 2**31 elements are served.

#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

#include "rapid_llm_ext.h"

namespace rapid_llm {
namespace {

constexpr int kThreads = 256;
// One 16-byte vector per thread: a block per 256 vectors, as many blocks as the
// tensor needs (up to CUDA's grid limit; the loops stride past it). An earlier
// cap of 32 blocks per SM made each thread loop over ~30 dependent vectors and
// reached 92-94% of torch's bandwidth at prefill sizes on the H200.
constexpr int64_t kMaxBlocks = 2147483647;

template <typename T>
struct alignas(kVectorBytes) Vector {
  static constexpr int kSize = kVectorBytes / sizeof(T);
  T values[kSize];
};

template <typename T>
__device__ __forceinline__ T scale_one(T value, float factor) {
  // One fp32 multiply, one rounding to T: the same function as torch's mul.
  return static_cast<T>(static_cast<float>(value) * factor);
}

template <typename T>
__global__ void scale_vectorized_kernel(T* __restrict__ out, const T* __restrict__ input, float factor,
                                        int64_t num_elements) {
  using V = Vector<T>;
  const int64_t num_vectors = num_elements / V::kSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V* __restrict__ input_vectors = reinterpret_cast<const V*>(input);
  V* __restrict__ out_vectors = reinterpret_cast<V*>(out);
  for (int64_t i = first; i < num_vectors; i += stride) {
    V v = input_vectors[i];
#pragma unroll
    for (int k = 0; k < V::kSize; ++k) {
      v.values[k] = scale_one(v.values[k], factor);
    }
    out_vectors[i] = v;
  }
  // The last num_elements % kSize elements do not fill a vector.
  for (int64_t i = num_vectors * V::kSize + first; i < num_elements; i += stride) {
    out[i] = scale_one(input[i], factor);
  }
}

template <typename T>
__global__ void scale_scalar_kernel(T* __restrict__ out, const T* __restrict__ input, float factor,
                                    int64_t num_elements) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_elements; i += stride) {
    out[i] = scale_one(input[i], factor);
  }
}

unsigned int grid_size(int64_t work_items) {
  const int64_t needed = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(needed, kMaxBlocks)));
}

}  // namespace

void scale(at::Tensor& out, const at::Tensor& input, double factor) {
  TORCH_CHECK(input.is_cuda(), "rapid_llm::scale: input must be a CUDA tensor, got a tensor on ", input.device());
  TORCH_CHECK(out.is_cuda(), "rapid_llm::scale: out must be a CUDA tensor, got a tensor on ", out.device());
  TORCH_CHECK(out.device() == input.device(), "rapid_llm::scale: out is on ", out.device(), " but input is on ",
              input.device());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(is_served_float(dtype), "rapid_llm::scale: input dtype must be float32, float16 or bfloat16, got ",
              dtype);
  TORCH_CHECK(out.scalar_type() == dtype, "rapid_llm::scale: out dtype ", out.scalar_type(),
              " must equal input dtype ", dtype);
  TORCH_CHECK(out.sizes() == input.sizes(), "rapid_llm::scale: out shape ", dims_to_string(out.sizes()),
              " must equal input shape ", dims_to_string(input.sizes()));
  TORCH_CHECK(input.is_contiguous(), "rapid_llm::scale: input must be contiguous, got strides ",
              dims_to_string(input.strides()));
  TORCH_CHECK(out.is_contiguous(), "rapid_llm::scale: out must be contiguous, got strides ",
              dims_to_string(out.strides()));
  // The kernels read and write through __restrict__ pointers: out may not share memory with input.
  at::assert_no_overlap(out, input);

  const int64_t num_elements = input.numel();
  if (num_elements == 0) {
    return;
  }
  const at::cuda::OptionalCUDAGuard device_guard(input.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const float factor32 = static_cast<float>(factor);

  RAPID_LLM_DISPATCH_FLOAT_HALF_BF16(dtype, "rapid_llm::scale", [&] {
    const scalar_t* input_data = input.const_data_ptr<scalar_t>();
    scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
    if (is_vector_aligned(input_data) && is_vector_aligned(out_data)) {
      const int64_t vectors = num_elements / Vector<scalar_t>::kSize;
      scale_vectorized_kernel<scalar_t><<<grid_size(std::max<int64_t>(vectors, 1)), kThreads, 0,
                                          stream>>>(out_data, input_data, factor32, num_elements);
    } else {
      scale_scalar_kernel<scalar_t><<<grid_size(num_elements), kThreads, 0, stream>>>(
          out_data, input_data, factor32, num_elements);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace rapid_llm
