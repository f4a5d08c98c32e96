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
// Work: a block owns 32 output columns and runs 8 warps, warp w a contiguous run of the K groups; their fp32
// sums meet in shared memory and are added in warp order (deterministic) with the bias, rounded once.
// Lane (g, t) = (lane / 4, lane % 4) owns columns 4g .. 4g + 3 of the block. Per chunk of 32 k it loads word
// row 4c + t of its four columns (one 16-byte load when qweight rows are unit-stride and aligned).
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
#include <initializer_list>
#include <string>

#include "rapid_llm_ext.h"

namespace rapid_llm {
namespace {

constexpr int kWarps = 8;        // warps per block, each a run of groups along K
constexpr int kColumns = 32;     // output columns per block (8 lane groups x 4 columns)
constexpr int kChunkK = 32;      // k per chunk: two m16n8k16 steps, one word per lane and column
constexpr int kTokensPerTile = 8;  // the MMA's N side

template <typename T>
struct Sixteen;  // the 16-bit float's MMA type name, m16 bits (x2) and one (x2)
template <>
struct Sixteen<at::Half> {
  static constexpr uint32_t kMagic2 = 0x64006400u;  // fp16 1024 in both halves
  static constexpr uint32_t kOne2 = 0x3C003C00u;
  static constexpr float kBase = 1024.0f;
  static __device__ __forceinline__ uint32_t bits(float value) {
    return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(value)));
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
};
template <>
struct Sixteen<at::BFloat16> {
  static constexpr uint32_t kMagic2 = 0x43004300u;  // bf16 128 in both halves
  static constexpr uint32_t kOne2 = 0x3F803F80u;
  static constexpr float kBase = 128.0f;
  static __device__ __forceinline__ uint32_t bits(float value) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(value)));
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
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

// c += A [16 x 16] * B [16 x 8], fp32 accumulators.
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

// Streamed once: not kept in L1.
__device__ __forceinline__ uint4 load_stream(const int32_t* pointer) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(pointer));
  return v;
}

__device__ __forceinline__ float load_scale(const void* scales, int64_t index, int scale_kind) {
  if (scale_kind == 0) return static_cast<const float*>(scales)[index];
  if (scale_kind == 1) return __half2float(static_cast<const __half*>(scales)[index]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(scales)[index]);
}

struct Words {
  uint32_t w[4];  // the lane's four columns
};

struct Tokens {
  uint32_t r[4];  // x[token, 8w .. 8w + 7] as four pairs (x0 x1), (x2 x3), (x4 x5), (x6 x7)
};

template <typename T, int GROUP, int TILES>
__global__ void __launch_bounds__(kWarps * 32)
    w4a16_mma_kernel(T* __restrict__ out, const T* __restrict__ x, const int32_t* __restrict__ qweight,
                     const void* __restrict__ scales, const int32_t* __restrict__ qzeros,
                     const T* __restrict__ bias, int M, int N, int K, int64_t stride_xm, int64_t stride_q0,
                     int64_t stride_q1, int64_t stride_s0, int64_t stride_s1, int64_t stride_z0, int64_t stride_z1,
                     int64_t stride_bias, int groups_per_warp, int scale_kind, int v1_zeros, int weights_vector,
                     int x_vector) {
  using S = Sixteen<T>;
  constexpr int kChunks = GROUP / kChunkK;
  __shared__ float sums[kWarps][TILES * kTokensPerTile][kColumns];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  // N % 8 == 0 and the lane's first column is a multiple of 4: its four columns are all in range or all out
  const int first_column = blockIdx.x * kColumns + 4 * g;
  const int column = first_column < N ? first_column : N - 4;  // reads only; never stored
  const int groups = K / GROUP;
  const int first_group = warp * groups_per_warp;
  const int end_group = min(first_group + groups_per_warp, groups);

  float total[TILES][4][2];
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j) total[tile][j][0] = total[tile][j][1] = 0.0f;

  auto load_words = [&](int word_row) {
    Words q;
    const int32_t* base = qweight + static_cast<int64_t>(word_row) * stride_q0;
    if (weights_vector) {
      const uint4 v = load_stream(base + column);
      q.w[0] = v.x, q.w[1] = v.y, q.w[2] = v.z, q.w[3] = v.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) q.w[j] = static_cast<uint32_t>(base[static_cast<int64_t>(column + j) * stride_q1]);
    }
    return q;
  };
  auto load_tokens = [&](int tile, int word_row) {
    Tokens v{{0u, 0u, 0u, 0u}};
    const int token = tile * kTokensPerTile + g;
    if (token < M) {
      const T* row = x + static_cast<int64_t>(token) * stride_xm + 8 * word_row;
      if (x_vector) {
        const uint4 u = *reinterpret_cast<const uint4*>(row);
        v.r[0] = u.x, v.r[1] = u.y, v.r[2] = u.z, v.r[3] = u.w;
      } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
#pragma unroll
        for (int i = 0; i < 4; ++i) v.r[i] = static_cast<uint32_t>(h[2 * i]) | (static_cast<uint32_t>(h[2 * i + 1]) << 16);
      }
    }
    return v;
  };

  // one group ahead: its words and tokens are in flight while this group's are multiplied
  Words next_words[kChunks];
  Tokens next_tokens[TILES][kChunks];
  if (first_group < end_group) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int word_row = first_group * (GROUP / 8) + 4 * c + t;
      next_words[c] = load_words(word_row);
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) next_tokens[tile][c] = load_tokens(tile, word_row);
    }
  }
  for (int group = first_group; group < end_group; ++group) {
    Words words[kChunks];
    Tokens tokens[TILES][kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      words[c] = next_words[c];
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) tokens[tile][c] = next_tokens[tile][c];
    }
    if (group + 1 < end_group) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int word_row = (group + 1) * (GROUP / 8) + 4 * c + t;
        next_words[c] = load_words(word_row);
#pragma unroll
        for (int tile = 0; tile < TILES; ++tile) next_tokens[tile][c] = load_tokens(tile, word_row);
      }
    }
    // -(m16 + z) in both halves, and the scale, of each of the lane's columns
    const uint32_t zero_word =
        static_cast<uint32_t>(qzeros[static_cast<int64_t>(group) * stride_z0 + static_cast<int64_t>(column / 8) * stride_z1]);
    uint32_t offset[4];
    float scale[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int zero = static_cast<int>((zero_word >> (4 * ((column + j) % 8))) & 15u) + v1_zeros;
      offset[j] = S::bits(-(S::kBase + static_cast<float>(zero))) * 0x10001u;
      scale[j] = load_scale(scales, static_cast<int64_t>(group) * stride_s0 + static_cast<int64_t>(column + j) * stride_s1,
                            scale_kind);
    }
    float sum[TILES][2][4];
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
      for (int i = 0; i < 2; ++i) sum[tile][i][0] = sum[tile][i][1] = sum[tile][i][2] = sum[tile][i][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // nibble pairs (2 half, 2 half + 4) -> slots (2t, 2t+1); (2 half + 1, 2 half + 5) -> (2t + 8, 2t + 9)
        uint32_t pair[4][2];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            const uint32_t bits = and_or(words[c].w[j] >> (4 * (2 * half + p)), 0x000F000Fu, S::kMagic2);
            pair[j][p] = fma2<T>(bits, S::kOne2, offset[j]);
          }
        }
        const uint32_t a_first[4] = {pair[0][0], pair[1][0], pair[0][1], pair[1][1]};
        const uint32_t a_second[4] = {pair[2][0], pair[3][0], pair[2][1], pair[3][1]};
#pragma unroll
        for (int tile = 0; tile < TILES; ++tile) {
          const Tokens& v = tokens[tile][c];
          // x pairs (2 half, 2 half + 4) and (2 half + 1, 2 half + 5): halves of r[half] and r[half + 2]
          const uint32_t b0 = __byte_perm(v.r[half], v.r[half + 2], 0x5410);
          const uint32_t b1 = __byte_perm(v.r[half], v.r[half + 2], 0x7632);
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
        total[tile][2 * i][0] += sum[tile][i][0] * scale[2 * i];
        total[tile][2 * i][1] += sum[tile][i][1] * scale[2 * i];
        total[tile][2 * i + 1][0] += sum[tile][i][2] * scale[2 * i + 1];
        total[tile][2 * i + 1][1] += sum[tile][i][3] * scale[2 * i + 1];
      }
  }

#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) sums[warp][tile * kTokensPerTile + 2 * t + e][4 * g + j] = total[tile][j][e];
  __syncthreads();
  for (int index = threadIdx.x; index < TILES * kTokensPerTile * kColumns; index += blockDim.x) {
    const int token = index / kColumns;
    const int n = blockIdx.x * kColumns + index % kColumns;
    if (token >= M || n >= N) continue;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) value += sums[w][token][index % kColumns];
    if (bias != nullptr) value += static_cast<float>(bias[static_cast<int64_t>(n) * stride_bias]);
    out[static_cast<int64_t>(token) * N + n] = static_cast<T>(value);
  }
}

template <typename T, int GROUP, int TILES>
void launch(at::Tensor& out, const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
            const at::Tensor& qzeros, const at::Tensor& bias, int scale_kind, bool v1_zeros) {
  const int m = static_cast<int>(x.size(0));
  const int k = static_cast<int>(x.size(1));
  const int n = static_cast<int>(qweight.size(1));
  const int groups = k / GROUP;
  const int groups_per_warp = (groups + kWarps - 1) / kWarps;
  const bool weights_vector = qweight.stride(1) == 1 && qweight.stride(0) % 4 == 0 && is_vector_aligned(qweight.data_ptr());
  const bool x_vector = x.stride(0) % 8 == 0 && is_vector_aligned(x.data_ptr());
  const T* bias_pointer = bias.numel() ? bias.data_ptr<T>() : nullptr;
  const dim3 grid((n + kColumns - 1) / kColumns);
  w4a16_mma_kernel<T, GROUP, TILES><<<grid, kWarps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      out.data_ptr<T>(), x.data_ptr<T>(), qweight.data_ptr<int32_t>(), scales.data_ptr(), qzeros.data_ptr<int32_t>(),
      bias_pointer, m, n, k, x.stride(0), qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1),
      qzeros.stride(0), qzeros.stride(1), bias.numel() ? bias.stride(0) : 0, groups_per_warp, scale_kind,
      v1_zeros ? 1 : 0, weights_vector ? 1 : 0, x_vector ? 1 : 0);
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
  TORCH_CHECK(x.is_cuda(), op + "x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op + "x must be float16 or bfloat16");
  TORCH_CHECK(x.dim() == 2 && (x.size(1) == 1 || x.stride(1) == 1), op + "x must be [M, K] with unit stride along K");
  TORCH_CHECK(x.size(0) <= 2 * kTokensPerTile, op + "x has " + std::to_string(x.size(0)) + " rows; at most 16");
  TORCH_CHECK(group_size == 64 || group_size == 128, op + "group_size must be 64 or 128");
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
  int scale_kind = -1;
  if (scales.scalar_type() == at::kFloat) scale_kind = 0;
  if (scales.scalar_type() == at::kHalf) scale_kind = 1;
  if (scales.scalar_type() == at::kBFloat16) scale_kind = 2;
  TORCH_CHECK(scale_kind >= 0, op + "scales must be float32, float16 or bfloat16");
  TORCH_CHECK(bias.numel() == 0 || (bias.dim() == 1 && bias.size(0) == n && bias.scalar_type() == x.scalar_type()),
              op + "bias must be empty or [N] in x's dtype");
  TORCH_CHECK(out.is_contiguous() && out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == n &&
                  out.scalar_type() == x.scalar_type(),
              op + "out must be a contiguous [M, N] tensor of x's dtype");
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&qweight, &scales, &qzeros, &out}) {
    TORCH_CHECK(t->device() == x.device(), op + "every tensor must be on x's device");
  }
  TORCH_CHECK(bias.numel() == 0 || bias.device() == x.device(), op + "bias must be on x's device");
  if (x.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  if (x.scalar_type() == at::kHalf) {
    launch_dtype<at::Half>(out, x, qweight, scales, qzeros, bias, group_size, scale_kind, v1_zeros);
  } else {
    launch_dtype<at::BFloat16>(out, x, qweight, scales, qzeros, bias, group_size, scale_kind, v1_zeros);
  }
}

}  // namespace rapid_llm
