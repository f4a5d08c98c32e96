// Helpers shared by the decode GEMMs on mma.sync (csrc/gemm/): on the device the m16n8k16 MMA, a streaming
// 16-byte load, scalar scale loads, the double-buffered step loop and the blocks' ordered cross-warp sum; on the
// host the launchers' common checks and warps per block. Include from .cu files only.
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace rapid_llm {
namespace mma_sync {

constexpr int kTokensPerTile = 8;  // the MMA's N side: tokens
constexpr int kColumns = 32;       // output columns per block

// c += A [16 x 16] * B [16 x 8] with fp32 accumulators; A row-major, B column-major, 16-bit floats of T.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<at::Half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<at::BFloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes read once (weights): not kept in L1.
__device__ __forceinline__ uint4 load_stream(const void* pointer) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(pointer));
  return v;
}

// One scale as fp32 (scale_kind 0: float32, 1: float16, 2: bfloat16).
__device__ __forceinline__ float load_scale(const char* at, int scale_kind) {
  if (scale_kind == 0) return *reinterpret_cast<const float*>(at);
  if (scale_kind == 1) return __half2float(*reinterpret_cast<const __half*>(at));
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(at));
}

// out[token, n] = T(sum over warps w in order of sums[w][token][n - first] (* scale[n]) (+ bias[n])): the block's
// warps' fp32 sums (shared memory [kWarps][kTokens][kColumns], written before the caller's __syncthreads) added
// in a fixed order, one rounding. column_scales null: no scale (scale_kind / stride as load_scale's).
template <typename T, int kWarps, int kTokens>
__device__ __forceinline__ void store_block(const float (&sums)[kWarps][kTokens][kColumns], T* out, int M, int N,
                                            const T* bias, int64_t stride_bias, const char* column_scales,
                                            int64_t scale_stride_bytes, int scale_kind) {
  for (int index = threadIdx.x; index < kTokens * kColumns; index += blockDim.x) {
    const int token = index / kColumns;
    const int n = blockIdx.x * kColumns + index % kColumns;
    if (token >= M || n >= N) continue;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) value += sums[w][token][index % kColumns];
    if (column_scales != nullptr) value *= load_scale(column_scales + n * scale_stride_bytes, scale_kind);
    if (bias != nullptr) value += static_cast<float>(bias[static_cast<int64_t>(n) * stride_bias]);
    out[static_cast<int64_t>(token) * N + n] = static_cast<T>(value);
  }
}

// fetch(buffer, i) loads step i, multiply(buffer) consumes it: steps first .. end - 1 with the next step's loads
// in flight while one is multiplied. Two buffers taken in turn (the loop unrolled by two): no register copies.
template <typename Buffer, typename Fetch, typename Multiply>
__device__ __forceinline__ void double_buffered(int first, int end, Fetch&& fetch, Multiply&& multiply) {
  Buffer even, odd;
  if (first < end) fetch(even, first);
  for (int step = first; step < end; step += 2) {
    if (step + 1 < end) fetch(odd, step + 1);
    multiply(even);
    if (step + 1 >= end) break;
    if (step + 2 < end) fetch(even, step + 2);
    multiply(odd);
  }
}

// Warps per block (host): 8, two blocks an SM; 16 (K split finer) for one token tile where the blocks of 32
// columns leave an SM at most one (two tiles would spill at 16 warps).
inline int warps_per_block(int blocks, int tiles, int multiprocessors) {
  return tiles == 1 && blocks <= multiprocessors ? 16 : 8;
}

// Host checks both decode GEMM launchers share. x: CUDA float16/bfloat16 [M, K], unit stride along K, M <= 16.
inline void check_tokens(const std::string& op, const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), op + "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op + "x must be float16 or bfloat16");
  TORCH_CHECK(x.dim() == 2 && (x.size(1) == 1 || x.stride(1) == 1), op + "x must be [M, K] with unit stride along K");
  TORCH_CHECK(x.size(0) <= 2 * kTokensPerTile, op + "x has " + std::to_string(x.size(0)) + " rows; at most 16");
}

// bias empty or [N] in x's dtype; out contiguous [M, N] in x's dtype; every tensor on x's device.
inline void check_outputs(const std::string& op, const at::Tensor& out, const at::Tensor& x, int64_t n,
                          const at::Tensor& bias, std::initializer_list<const at::Tensor*> inputs) {
  TORCH_CHECK(bias.numel() == 0 || (bias.dim() == 1 && bias.size(0) == n && bias.scalar_type() == x.scalar_type()),
              op + "bias must be empty or [N] in x's dtype");
  TORCH_CHECK(out.is_contiguous() && out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == n &&
                  out.scalar_type() == x.scalar_type(),
              op + "out must be a contiguous [M, N] tensor of x's dtype");
  for (const at::Tensor* t : inputs) TORCH_CHECK(t->device() == x.device(), op + "every tensor must be on x's device");
  TORCH_CHECK(out.device() == x.device(), op + "every tensor must be on x's device");
  TORCH_CHECK(bias.numel() == 0 || bias.device() == x.device(), op + "bias must be on x's device");
}

// 0 float32, 1 float16, 2 bfloat16, -1 otherwise (host).
inline int scale_kind_of(at::ScalarType dtype) {
  if (dtype == at::kFloat) return 0;
  if (dtype == at::kHalf) return 1;
  if (dtype == at::kBFloat16) return 2;
  return -1;
}

}  // namespace mma_sync
}  // namespace rapid_llm
