// gemm.w8a16_mm at decode token counts (M <= 16) on the tensor cores: mma.sync m16n8k16, the int8 weights
// converted in registers straight into the MMA's A operand, tokens on its N side.
// Schema: w8a16_mm(Tensor! out, Tensor x, Tensor w_q, Tensor w_scale, Tensor bias) -> () (outputs first; bias
// empty: none).
//
// out[m, n] = T(w_scale[n] * sum_k x[m, k] * w_q[n, k] (+ bias[n])), the products exact, fp32 sums, one rounding.
//
// Layouts (the op's contract, ops/gemm/__init__.py): w_q int8 [N, K] with unit stride along K (a checkpoint's
// compressed-tensors W8A16 weight as stored), any row stride; w_scale [N] or [N, 1] float32 or x's dtype, any
// stride; x [M, K] fp16/bf16 with unit stride along K; out [M, N] contiguous in x's dtype.
//
// Work: a block owns 32 output columns (weight rows) and runs 8 warps (up to 8 tokens: 16 where the N / 32 blocks
// leave an SM at most one), warp w a contiguous run of the 64-k chunks; their fp32 sums meet in shared memory
// and are added in warp order (deterministic), scaled, biased, rounded once. Lane (g, t) = (lane / 4, lane % 4)
// owns rows g, g + 8 (the first MMA's A rows) and 16 + g, 24 + g (the second's) and reads 16 bytes of each at
// k = 16t .. 16t + 15 of the chunk, with x[token g, the same 16 k] (two 16-byte loads per tile of 8 tokens).
// The next chunk's loads are in flight while this one is multiplied (two buffers, the loop unrolled by two).
//
// Why no repack: the sum over k does not depend on the order the MMA sees k in. Over the chunk's four MMA steps
// the lane's A k-slots (2t, 2t+1), (2t + 8, 2t + 9) take its own 16 bytes in order (step s: bytes 4s .. 4s + 3),
// and the B slots of lanes with the same t take x at the same k: the pairs of x as loaded, no permute.
//
// Conversion, exact: b + 128 (an XOR of the sign bits) is 0..255. fp16: a byte permute puts it under 1024's bits
// (0x64, spacing 1) two at a time; one packed subtract of 1152 leaves b. bf16 has one mantissa bit too few for
// 256 consecutive integers: each byte goes under 2**23's bits in fp32, one subtract of 2**23 + 128, and a pair of
// them is packed to bf16x2 (|b| <= 128 is exact in bf16).

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "rapid_llm_ext.h"
#include "rapid_llm_mma.cuh"

namespace rapid_llm {
namespace {

using mma_sync::kColumns;
using mma_sync::kTokensPerTile;
using mma_sync::load_stream;
using mma_sync::mma;
constexpr int kChunkK = 64;  // k per chunk: four m16n8k16 steps, 16 bytes per lane and row

// Bytes b0..b3 of a word (int8) as the 16-bit float pairs (b0, b1), (b2, b3) of T, exactly.
template <typename T>
__device__ __forceinline__ void byte_pairs(uint32_t word, uint32_t& low, uint32_t& high);
template <>
__device__ __forceinline__ void byte_pairs<at::Half>(uint32_t word, uint32_t& low, uint32_t& high) {
  const uint32_t biased = word ^ 0x80808080u;  // b + 128
  const uint32_t base = 0x64806480u;           // 1024 + 128 in both halves
  const uint32_t a = __byte_perm(biased, 0x64646464u, 0x4140);  // (1024 + u0, 1024 + u1)
  const uint32_t b = __byte_perm(biased, 0x64646464u, 0x4342);  // (1024 + u2, 1024 + u3)
  asm("sub.f16x2 %0, %1, %2;" : "=r"(low) : "r"(a), "r"(base));
  asm("sub.f16x2 %0, %1, %2;" : "=r"(high) : "r"(b), "r"(base));
}
template <>
__device__ __forceinline__ void byte_pairs<at::BFloat16>(uint32_t word, uint32_t& low, uint32_t& high) {
  const uint32_t biased = word ^ 0x80808080u;  // b + 128
  float value[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // byte i under the bits of 2**23: the float 2**23 + b + 128
    value[i] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7650 + i)) - 8388736.0f;
  }
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(low) : "f"(value[1]), "f"(value[0]));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(high) : "f"(value[3]), "f"(value[2]));
}

// 16 bytes (VECTOR: one aligned load) or `count` of them (the rest zero) from a weight row at k.
template <bool VECTOR>
__device__ __forceinline__ uint4 load_weights(const int8_t* at, int count) {
  if (VECTOR && count == 16) return load_stream(at);
  uint32_t word[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (i < count) word[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(at[i])) << (8 * (i % 4));
  return make_uint4(word[0], word[1], word[2], word[3]);
}

// x[token, k .. k + 15] as 8 pairs (VECTOR: two aligned loads) or `count` of them (the rest zero).
template <bool VECTOR>
__device__ __forceinline__ void load_tokens(const uint16_t* at, int count, uint4 (&into)[2]) {
  if (VECTOR && count == 16) {
    into[0] = *reinterpret_cast<const uint4*>(at);
    into[1] = *reinterpret_cast<const uint4*>(at + 8);
    return;
  }
  uint32_t pair[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (i < count) pair[i / 2] |= static_cast<uint32_t>(at[i]) << (16 * (i % 2));
  into[0] = make_uint4(pair[0], pair[1], pair[2], pair[3]);
  into[1] = make_uint4(pair[4], pair[5], pair[6], pair[7]);
}

template <typename T, int TILES, bool VECTOR, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, TILES == 1 && kWarps == 8 ? 2 : 1)
    w8a16_mma_kernel(T* __restrict__ out, const T* __restrict__ x, const int8_t* __restrict__ w_q,
                     const char* __restrict__ w_scale, const T* __restrict__ bias, int M, int N, int K,
                     int64_t stride_xm, int64_t stride_w0, int64_t scale_stride_bytes, int scale_kind,
                     int64_t stride_bias, int chunks_per_warp) {
  constexpr int kTokens = TILES * kTokensPerTile;
  __shared__ float sums[kWarps][kTokens][kColumns];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  // the lane's rows: g, g + 8 (first MMA), 16 + g, 24 + g (second); reads past N take row N - 1
  const int first = blockIdx.x * kColumns;
  const int8_t* rows_at[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) rows_at[r] = w_q + static_cast<int64_t>(min(first + g + 8 * r, N - 1)) * stride_w0;
  const uint16_t* tokens_at[TILES];
  bool live[TILES];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    const int token = tile * kTokensPerTile + g;
    live[tile] = token < M;
    tokens_at[tile] = reinterpret_cast<const uint16_t*>(x) + static_cast<int64_t>(live[tile] ? token : 0) * stride_xm;
  }
  const int chunks = (K + kChunkK - 1) / kChunkK;
  const int first_chunk = min(warp * chunks_per_warp, chunks);
  const int end_chunk = min(first_chunk + chunks_per_warp, chunks);

  float sum[TILES][2][4];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int i = 0; i < 2; ++i) sum[tile][i][0] = sum[tile][i][1] = sum[tile][i][2] = sum[tile][i][3] = 0.0f;

  struct Chunk {
    uint4 words[4];            // the lane's 16 bytes of each of its rows
    uint4 tokens[TILES][2];    // x at the same 16 k, per tile
  };
  auto fetch = [&](Chunk& into, int chunk) {
    const int k = chunk * kChunkK + 16 * t;
    const int count = max(0, min(16, K - k));  // 16 but in the last chunk of a K that 64 does not divide
#pragma unroll
    for (int r = 0; r < 4; ++r) into.words[r] = load_weights<VECTOR>(rows_at[r] + k, count);
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      if (live[tile]) {
        load_tokens<VECTOR>(tokens_at[tile] + k, count, into.tokens[tile]);
      } else {
        into.tokens[tile][0] = into.tokens[tile][1] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  auto multiply = [&](const Chunk& in) {
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      uint32_t low[4], high[4];  // per row: bytes (4 step, 4 step + 1) and (4 step + 2, 4 step + 3)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const uint4& v = in.words[r];
        const uint32_t word = step == 0 ? v.x : step == 1 ? v.y : step == 2 ? v.z : v.w;
        byte_pairs<T>(word, low[r], high[r]);
      }
      const uint32_t a_first[4] = {low[0], low[1], high[0], high[1]};
      const uint32_t a_second[4] = {low[2], low[3], high[2], high[3]};
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) {
        // x pairs (4 step, 4 step + 1) and (4 step + 2, 4 step + 3) of the lane's 16
        const uint4& v = in.tokens[tile][step / 2];
        const uint32_t b0 = step % 2 == 0 ? v.x : v.z;
        const uint32_t b1 = step % 2 == 0 ? v.y : v.w;
        mma<T>(sum[tile][0], a_first, b0, b1);
        mma<T>(sum[tile][1], a_second, b0, b1);
      }
    }
  };
  mma_sync::double_buffered<Chunk>(first_chunk, end_chunk, fetch, multiply);

  // accumulator (row g, tokens 2t, 2t+1), (row g + 8, tokens 2t, 2t+1) of MMA i: rows 16 i + g, 16 i + 8 + g
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        sums[warp][tile * kTokensPerTile + 2 * t + e][16 * i + g] = sum[tile][i][e];
        sums[warp][tile * kTokensPerTile + 2 * t + e][16 * i + 8 + g] = sum[tile][i][2 + e];
      }
  __syncthreads();
  mma_sync::store_block<T, kWarps, kTokens>(sums, out, M, N, bias, stride_bias, w_scale, scale_stride_bytes,
                                            scale_kind);
}

template <typename T, int TILES>
void launch(at::Tensor& out, const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_scale,
            const at::Tensor& bias) {
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int n = static_cast<int>(w_q.size(0));
  const int chunks = (k + kChunkK - 1) / kChunkK;
  // 16-byte loads where both operands allow them (any fresh allocation with K % 16 == 0 does)
  const bool vector = w_q.stride(0) % 16 == 0 && is_vector_aligned(w_q.data_ptr()) && x.stride(0) % 8 == 0 &&
                      is_vector_aligned(x.data_ptr());
  const T* bias_pointer = bias.numel() ? bias.data_ptr<T>() : nullptr;
  const int scale_kind = mma_sync::scale_kind_of(w_scale.scalar_type());
  const int64_t scale_stride_bytes = w_scale.stride(0) * w_scale.element_size();
  const int blocks = (n + kColumns - 1) / kColumns;
  const int warps =
      mma_sync::warps_per_block(blocks, TILES, at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  auto kernel = vector ? w8a16_mma_kernel<T, TILES, true, 8> : w8a16_mma_kernel<T, TILES, false, 8>;
  if constexpr (TILES == 1) {
    if (warps == 16) kernel = vector ? w8a16_mma_kernel<T, 1, true, 16> : w8a16_mma_kernel<T, 1, false, 16>;
  }
  kernel<<<blocks, warps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<T>(), x.data_ptr<T>(), w_q.data_ptr<int8_t>(), static_cast<const char*>(w_scale.data_ptr()),
      bias_pointer, m, n, k, x.stride(0), w_q.stride(0), scale_stride_bytes, scale_kind,
      bias.numel() ? bias.stride(0) : 0, (chunks + warps - 1) / warps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void w8a16_mm(at::Tensor& out, const at::Tensor& x, const at::Tensor& w_q, const at::Tensor& w_scale,
              const at::Tensor& bias) {
  const std::string op = "w8a16_mm: ";
  mma_sync::check_tokens(op, x);
  const int64_t k = x.size(1);
  TORCH_CHECK(w_q.scalar_type() == at::kChar && w_q.dim() == 2 && w_q.size(1) == k && w_q.size(0) >= 1 &&
                  (k == 1 || w_q.stride(1) == 1),
              op + "w_q must be int8 [N, K] with unit stride along K, got " + dims_to_string(w_q.sizes()));
  const int64_t n = w_q.size(0);
  TORCH_CHECK(w_scale.numel() == n && (w_scale.dim() == 1 || (w_scale.dim() == 2 && w_scale.size(1) == 1)),
              op + "w_scale must be [N] or [N, 1], got " + dims_to_string(w_scale.sizes()));
  TORCH_CHECK(w_scale.scalar_type() == at::kFloat || w_scale.scalar_type() == x.scalar_type(),
              op + "w_scale must be float32 or x's dtype");
  mma_sync::check_outputs(op, out, x, n, bias, {&w_q, &w_scale});
  if (x.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const bool two_tiles = x.size(0) > kTokensPerTile;
  if (x.scalar_type() == at::kHalf) {
    two_tiles ? launch<at::Half, 2>(out, x, w_q, w_scale, bias) : launch<at::Half, 1>(out, x, w_q, w_scale, bias);
  } else {
    two_tiles ? launch<at::BFloat16, 2>(out, x, w_q, w_scale, bias)
              : launch<at::BFloat16, 1>(out, x, w_q, w_scale, bias);
  }
}

}  // namespace rapid_llm
