// gemm.w4a16_mm at decode token counts (M <= 16) on the tensor cores: mma.sync m16n8k16, the int4 weights
// dequantized in registers straight into the MMA's A operand, tokens on its N side.
// Schema: w4a16_mm(Tensor! out, Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor bias,
//                  int group_size, bool v1_zeros) -> () (outputs first; bias empty: none).
//
// out[m, n] = sum_g scales[g, n] * sum_{k in g} x[m, k] * (q[k, n] - z[g, n])   (+ bias[n]), rounded once.
//
// Layouts (the op's contract, ops/gemm/__init__.py): GPTQ words, qweight int32 [K/8, N] packed along K (nibble
// i of word (r, n) is q[8r + i, n]), qzeros int32 [K/g, N/8] packed along N (z = nibble + 1 for GPTQ v1:
// v1_zeros), scales [K/g, N] fp16/bf16/fp32, any strides. AWQ words are not read here (the rows say so).
// x: [M, K] fp16/bf16, unit stride along K; out: [M, N] contiguous, x's dtype.
//
// Work: a block owns 32 output columns and runs 8 warps (up to 8 tokens: 16 where the N / 32 blocks leave an SM
// at most one), warp w a contiguous run of the K groups; their fp32
// sums meet in shared memory and are added in warp order (deterministic) with the bias, rounded once.
// Lane (g, t) = (lane / 4, lane % 4) owns columns 4g .. 4g + 3 of the block. Per chunk of 32 k it loads word
// row 4c + t of its four columns (one 16-byte load where qweight rows are unit-stride and aligned) and its
// x[token, 8 * that row ..] (16 bytes per tile of 8 tokens; lanes past M load nothing). A whole group's words,
// x, zero word and scales are loaded a group ahead into registers (two buffers taken in turn, the loop unrolled
// by two, so no register is copied): the bytes in flight that keep HBM busy.
//
// Why no repack: the sum over k does not depend on the order the MMA sees k in. In one m16n8k16 the lane
// holds A k-slots (2t, 2t+1) and (2t + 8, 2t + 9); over the chunk's two MMAs those are 8 slots, filled with
// the 8 nibbles of the lane's own word: nibble pairs (0, 4), (1, 5) feed the first MMA, (2, 6), (3, 7) the
// second. The B operand (x) is permuted the same way: B's slots (2t, 2t+1), (2t+8, 2t+9) belong to lanes
// with the same t, and so to the same word row; each lane byte-permutes its x[8w .. 8w + 7] into those
// pairs. A rows are the lane's columns (4g -> row g, 4g + 1 -> row g + 8 of the first column MMA; 4g + 2,
// 4g + 3 of the second), so the accumulator rows a lane holds are its own columns.
//
// Dequantization, exact: (word >> 4p) & 0x000F000F | M2 puts nibbles p and p + 4 into the two 16-bit halves as
// the floats m16 + q (fp16 1024 = 0x6400, bf16 128 = 0x4300: the spacing there is 1), one lop3; one packed
// fma with -(m16 + z) leaves q - z, an integer in -16..15, exact in 16 bits. Products with x are exact in
// the MMA's fp32 sums; the group's sums are scaled in fp32 (the scale on the product, as the reference).

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

using mma_sync::kColumns;  // output columns per block (8 lane groups x 4 columns)
using mma_sync::kTokensPerTile;
using mma_sync::load_scale;
using mma_sync::load_stream;
using mma_sync::mma;
constexpr int kChunkK = 32;  // k per chunk: two m16n8k16 steps, one word per lane and column

template <typename T>
struct Sixteen;  // m16's bits in both halves, 1.0 in both halves, m16, and a float's 16-bit bits
template <>
struct Sixteen<at::Half> {
  static constexpr uint32_t kMagic2 = 0x64006400u;  // fp16 1024 in both halves
  static constexpr uint32_t kOne2 = 0x3C003C00u;
  static constexpr float kBase = 1024.0f;
  static __device__ __forceinline__ uint32_t bits(float value) {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(value)));
  }
};
template <>
struct Sixteen<at::BFloat16> {
  static constexpr uint32_t kMagic2 = 0x43004300u;  // bf16 128 in both halves
  static constexpr uint32_t kOne2 = 0x3F803F80u;
  static constexpr float kBase = 128.0f;
  static __device__ __forceinline__ uint32_t bits(float value) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(value)));
  }
};

// (a & b) | c in one instruction.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// a * one + c per 16-bit half (packed fma); with a = m16 + q, c = -(m16 + z): q - z exactly.
template <typename T>
__device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c);
template <>
__device__ __forceinline__ uint32_t fma2<at::Half>(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
template <>
__device__ __forceinline__ uint32_t fma2<at::BFloat16>(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The lane's four words of one word row: one 16-byte load (VECTOR: unit stride along N, 16-byte aligned rows)
// or four strided loads.
template <bool VECTOR>
__device__ __forceinline__ uint4 load_words(const int32_t* row, int64_t stride_q1) {
  if constexpr (VECTOR) {
    return load_stream(row);
  } else {
    return make_uint4(row[0], row[stride_q1], row[2 * stride_q1], row[3 * stride_q1]);
  }
}

// x[token, k .. k + 7] as four 16-bit pairs (VECTOR: 16-byte aligned rows), zeros when the token is past M.
template <bool VECTOR, typename T>
__device__ __forceinline__ uint4 load_tokens(const T* row, bool live) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (live) {
    if constexpr (VECTOR) {
      v = *reinterpret_cast<const uint4*>(row);
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      v = make_uint4(h[0] | (static_cast<uint32_t>(h[1]) << 16), h[2] | (static_cast<uint32_t>(h[3]) << 16),
                     h[4] | (static_cast<uint32_t>(h[5]) << 16), h[6] | (static_cast<uint32_t>(h[7]) << 16));
    }
  }
  return v;
}

template <typename T, int GROUP, int TILES, bool VECTOR, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, TILES == 1 && kWarps == 8 ? 2 : 1)
    w4a16_mma_kernel(T* __restrict__ out, const T* __restrict__ x, const int32_t* __restrict__ qweight,
                     const void* __restrict__ scales, const int32_t* __restrict__ qzeros,
                     const T* __restrict__ bias, int M, int N, int K, int64_t stride_xm, int64_t stride_q0,
                     int64_t stride_q1, int64_t stride_s0, int64_t stride_s1, int64_t stride_z0, int64_t stride_z1,
                     int64_t stride_bias, int groups_per_warp, int scale_kind, int v1_zeros) {
  using S = Sixteen<T>;
  constexpr int kChunks = GROUP / kChunkK;
  constexpr int kTokens = TILES * kTokensPerTile;
  __shared__ float sums[kWarps][kTokens][kColumns];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  // N % 8 == 0 and the lane's first column is a multiple of 4: its four columns are all in range or all out
  const int first_column = blockIdx.x * kColumns + 4 * g;
  const int column = first_column < N ? first_column : N - 4;  // reads only; never stored
  const int groups = K / GROUP;
  const int first_group = min(warp * groups_per_warp, groups);
  const int end_group = min(first_group + groups_per_warp, groups);

  // word row 4c + t of chunk c; rows advance by 4 a chunk through the warp's whole run of groups
  const int first_row = first_group * (GROUP / 8) + t;
  const int32_t* words_at = qweight + static_cast<int64_t>(first_row) * stride_q0 + static_cast<int64_t>(column) * stride_q1;
  const int64_t chunk_step = 4 * stride_q0;
  const T* tokens_at[TILES];
  bool live[TILES];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile) {
    const int token = tile * kTokensPerTile + g;
    live[tile] = token < M;
    tokens_at[tile] = x + static_cast<int64_t>(live[tile] ? token : 0) * stride_xm + 8 * first_row;
  }
  const int32_t* zeros_at = qzeros + static_cast<int64_t>(column / 8) * stride_z1;
  const int zero_shift = 4 * (column % 8);  // 0 or 16: the lane's four nibbles of the zero word

  float total[TILES][4][2];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j) total[tile][j][0] = total[tile][j][1] = 0.0f;

  // one group ahead: its words, tokens, zero word and scales are in flight while this group's are multiplied.
  // Two buffers taken in turn (the loop is unrolled by two) so that no register is copied from one to the other.
  struct Group {
    uint4 words[kChunks];
    uint4 tokens[TILES][kChunks];
    uint32_t zero_word;
    float scale[4];
  };
  // the scales of the lane's columns in group first_group: byte offsets, advanced a group at a time
  const int scale_bytes = scale_kind == 0 ? 4 : 2;
  const char* scales_at = static_cast<const char*>(scales) +
                          (static_cast<int64_t>(first_group) * stride_s0 + static_cast<int64_t>(column) * stride_s1) * scale_bytes;
  const int64_t scale_column_bytes = stride_s1 * scale_bytes;
  zeros_at += static_cast<int64_t>(first_group) * stride_z0;
  // the next group's loads, from pointers that then advance by one group (fetch is called once per group, in order)
  auto fetch = [&](Group& into, int /*group: the pointers say where*/) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      into.words[c] = load_words<VECTOR>(words_at + c * chunk_step, stride_q1);
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile)
        into.tokens[tile][c] = load_tokens<VECTOR>(tokens_at[tile] + c * kChunkK, live[tile]);
    }
    into.zero_word = static_cast<uint32_t>(*zeros_at);
#pragma unroll
    for (int j = 0; j < 4; ++j) into.scale[j] = load_scale(scales_at + j * scale_column_bytes, scale_kind);
    words_at += kChunks * chunk_step;
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) tokens_at[tile] += GROUP;
    zeros_at += stride_z0;
    scales_at += stride_s0 * scale_bytes;
  };
  auto multiply = [&](const Group& in) {
    // -(m16 + z) in both halves for each of the lane's columns
    uint32_t offset[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int zero = static_cast<int>((in.zero_word >> (zero_shift + 4 * j)) & 15u) + v1_zeros;
      offset[j] = S::bits(-(S::kBase + static_cast<float>(zero))) * 0x10001u;
    }
    float sum[TILES][2][4];
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
      for (int i = 0; i < 2; ++i) sum[tile][i][0] = sum[tile][i][1] = sum[tile][i][2] = sum[tile][i][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t w[4] = {in.words[c].x, in.words[c].y, in.words[c].z, in.words[c].w};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // nibble pairs (2 half, 2 half + 4) -> slots (2t, 2t+1); (2 half + 1, 2 half + 5) -> (2t + 8, 2t + 9)
        uint32_t pair[4][2];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const uint32_t bits = and_or(w[j] >> (4 * (2 * half + p)), 0x000F000Fu, S::kMagic2);
            pair[j][p] = fma2<T>(bits, S::kOne2, offset[j]);
          }
        }
        const uint32_t a_first[4] = {pair[0][0], pair[1][0], pair[0][1], pair[1][1]};
        const uint32_t a_second[4] = {pair[2][0], pair[3][0], pair[2][1], pair[3][1]};
#pragma unroll
        for (int tile = 0; tile < TILES; ++tile) {
          // x pairs (2 half, 2 half + 4) and (2 half + 1, 2 half + 5): halves of words half and half + 2
          const uint32_t low = half == 0 ? in.tokens[tile][c].x : in.tokens[tile][c].y;
          const uint32_t high = half == 0 ? in.tokens[tile][c].z : in.tokens[tile][c].w;
          const uint32_t b0 = __byte_perm(low, high, 0x5410);
          const uint32_t b1 = __byte_perm(low, high, 0x7632);
          mma<T>(sum[tile][0], a_first, b0, b1);
          mma<T>(sum[tile][1], a_second, b0, b1);
        }
      }
    }
    // accumulator (row g, tokens 2t, 2t+1), (row g + 8, tokens 2t, 2t+1): rows are columns 4g + 2i, 4g + 2i + 1
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        total[tile][2 * i][0] += sum[tile][i][0] * in.scale[2 * i];
        total[tile][2 * i][1] += sum[tile][i][1] * in.scale[2 * i];
        total[tile][2 * i + 1][0] += sum[tile][i][2] * in.scale[2 * i + 1];
        total[tile][2 * i + 1][1] += sum[tile][i][3] * in.scale[2 * i + 1];
      }
  };
  mma_sync::double_buffered<Group>(first_group, end_group, fetch, multiply);

#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) sums[warp][tile * kTokensPerTile + 2 * t + e][4 * g + j] = total[tile][j][e];
  __syncthreads();
  mma_sync::store_block<T, kWarps, kTokens>(sums, out, M, N, bias, stride_bias, nullptr, 0, 0);
}

template <typename T, int GROUP, int TILES>
void launch(at::Tensor& out, const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
            const at::Tensor& qzeros, const at::Tensor& bias, int scale_kind, bool v1_zeros) {
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int n = static_cast<int>(qweight.size(1));
  const int groups = k / GROUP;
  // 16-byte loads where both operands allow them (any fresh allocation does); strided loads otherwise
  const bool vector = qweight.stride(1) == 1 && qweight.stride(0) % 4 == 0 && is_vector_aligned(qweight.data_ptr()) &&
                      x.stride(0) % 8 == 0 && is_vector_aligned(x.data_ptr());
  const T* bias_pointer = bias.numel() ? bias.data_ptr<T>() : nullptr;
  const int blocks = (n + kColumns - 1) / kColumns;
  const int warps =
      mma_sync::warps_per_block(blocks, TILES, at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  auto kernel = vector ? w4a16_mma_kernel<T, GROUP, TILES, true, 8> : w4a16_mma_kernel<T, GROUP, TILES, false, 8>;
  if constexpr (TILES == 1) {
    if (warps == 16) kernel = vector ? w4a16_mma_kernel<T, GROUP, 1, true, 16> : w4a16_mma_kernel<T, GROUP, 1, false, 16>;
  }
  kernel<<<blocks, warps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<T>(), x.data_ptr<T>(), qweight.data_ptr<int32_t>(), scales.data_ptr(), qzeros.data_ptr<int32_t>(),
      bias_pointer, m, n, k, x.stride(0), qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1),
      qzeros.stride(0), qzeros.stride(1), bias.numel() ? bias.stride(0) : 0, (groups + warps - 1) / warps,
      scale_kind, v1_zeros ? 1 : 0);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch_dtype(at::Tensor& out, const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                  const at::Tensor& qzeros, const at::Tensor& bias, int64_t group_size, int scale_kind, bool v1_zeros) {
  const bool two_tiles = x.size(0) > kTokensPerTile;
  if (group_size == 128) {
    two_tiles ? launch<T, 128, 2>(out, x, qweight, scales, qzeros, bias, scale_kind, v1_zeros)
              : launch<T, 128, 1>(out, x, qweight, scales, qzeros, bias, scale_kind, v1_zeros);
  } else {
    two_tiles ? launch<T, 64, 2>(out, x, qweight, scales, qzeros, bias, scale_kind, v1_zeros)
              : launch<T, 64, 1>(out, x, qweight, scales, qzeros, bias, scale_kind, v1_zeros);
  }
}

}  // namespace

void w4a16_mm(at::Tensor& out, const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
              const at::Tensor& qzeros, const at::Tensor& bias, int64_t group_size, bool v1_zeros) {
  const std::string op = "w4a16_mm: ";
  mma_sync::check_tokens(op, x);
  const int64_t k = x.size(1);
  TORCH_CHECK(k % group_size == 0, op + "K must be a multiple of group_size");
  TORCH_CHECK(qweight.scalar_type() == at::kInt && qweight.dim() == 2 && qweight.size(0) == k / 8,
              op + "qweight must be int32 [K/8, N], got " + dims_to_string(qweight.sizes()));
  const int64_t n = qweight.size(1);
  TORCH_CHECK(n >= 8 && n % 8 == 0, op + "N must be a positive multiple of 8");
  TORCH_CHECK(qzeros.scalar_type() == at::kInt && qzeros.dim() == 2 && qzeros.size(0) == k / group_size &&
                  qzeros.size(1) == n / 8,
              op + "qzeros must be int32 [K/g, N/8], got " + dims_to_string(qzeros.sizes()));
  TORCH_CHECK(scales.dim() == 2 && scales.size(0) == k / group_size && scales.size(1) == n,
              op + "scales must be [K/g, N], got " + dims_to_string(scales.sizes()));
  const int scale_kind = mma_sync::scale_kind_of(scales.scalar_type());
  TORCH_CHECK(scale_kind >= 0, op + "scales must be float32, float16 or bfloat16");
  mma_sync::check_outputs(op, out, x, n, bias, {&qweight, &scales, &qzeros});
  if (x.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  if (x.scalar_type() == at::kHalf) {
    launch_dtype<at::Half>(out, x, qweight, scales, qzeros, bias, group_size, scale_kind, v1_zeros);
  } else {
    launch_dtype<at::BFloat16>(out, x, qweight, scales, qzeros, bias, group_size, scale_kind, v1_zeros);
  }
}

}  // namespace rapid_llm
