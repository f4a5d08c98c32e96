// attention.decode over an fp8-e4m3 paged KV buffer on the CUDA extension path (sm89+: mma.sync with
// fp16 operands and the e4m3x2 -> f16x2 conversion).
// Schema (outputs first; the op is attention.decode's, the extension op `decode`, and serves the fp8 buffer):
//   decode(Tensor! out, Tensor! partial, Tensor! partial_lse, Tensor q, Tensor kv_buffer, Tensor page_table,
//          Tensor seq_lens, Tensor k_scale, Tensor v_scale, int page_size, float sm_scale, int num_splits) -> ()
// partial / partial_lse: the splits' scratch ([B, Hq, num_splits, 128] and [B, Hq, num_splits] fp32, not read
// with one split); the launcher merges the splits into out itself (merge_kernel).
//
//   out[b, h] = v_scale * sum_j softmax_j(q[b, h] . k[j] * k_scale * sm_scale) v[j],  j < seq_lens[b]
//
// Why a CUDA kernel: the P.V product reduces over positions, so its B operand needs two positions of one
// head dim in each 32-bit register, while the buffer [rows, 2*Hk, 128] stores a position's dims
// contiguously. The Triton row gathers the value tile byte by byte from shared memory (128 LDS.U8 a
// 128-position tile; sm90 has no transposing ldmatrix for 8-bit elements) and reaches 1.43x the bf16
// row's tokens per second; here each thread reads 16-byte pieces of K/V rows and builds its operands
// with byte permutes (PRMT).
// Memory pipeline: each warp copies its chunks (K and V tiles of 32 positions, 8 KiB) with cp.async into
// its own ring of kStages slots in shared memory, kStages - 1 chunks ahead of the one it computes, and reads
// its fragments from there (16-byte reads, units swizzled by row: no bank conflicts); with OVERLAP it reads a
// chunk's V fragments first (freeing its slot) and computes the next chunk's logits beside this chunk's
// softmax and value product. Why a ring: a register prefetch of the next chunk alone leaves about 32 KiB per SM
// in flight at 8 warps per SM, too little to cover the memory latency; the ring holds up to 2 x 4 x 2 x 8 KiB
// per SM (evidence h200.attention.decode_fp8.builds.ring).
//
// Mapping: one block of 4 warps per (sequence b, KV head, split) and 16 of the KV head's G = Hq / Hk query
// heads (one block for G <= 16), the 16 rows of every m16n8k16 product (rows past G are zeros, never
// stored): the KV rows are read once per 16 query heads. Each warp takes 32-position chunks of the split
// (warp w: chunks w, w + 4, ...) with its own online softmax, and the block merges its 4 warps through
// shared memory at the end. A reduction index may be permuted as
// long as both operands agree, and so may an output index as long as the store undoes it:
//   - logits S = Q K^T (k = head dims): thread (g = lane / 4, t = lane % 4) holds dims 32t .. 32t + 31 of
//     the K row of position 8j + g (two 16-byte reads from the ring slot; j = 0..3, the chunk's four
//     8-position n-tiles); its k-step c uses the word of dims 32t + 4c .. + 3: bytes 0-1 as the k pair
//     (2t, 2t + 1), bytes 2-3 as (2t + 8, 2t + 9). q's fragments are loaded under the same dim permutation.
//   - P.V (k = positions, n = head dims): logical head dim n of n-tile j is physical dim 16 * n + j, so
//     thread (g, t) needs physical dims 16g .. 16g + 15 (one 16-byte read a position) of positions 2t,
//     2t + 1, 2t + 8, 2t + 9 of each 16-position k-step; two PRMTs interleave the two positions of a k
//     pair byte by byte, and each 16-bit half converts to one f16x2 B register. P comes from the logits'
//     accumulators in registers (the layouts line up: FlashAttention-2's register reuse). The output
//     accumulator of n-tile j holds dims 32t + j and 32t + 16 + j: each thread owns 32 contiguous dims.
// q: a bf16 q enters fp16 scaled by a power of two 2^s so that the block's largest |q| lands in
// [2^14, 2^15) (exact), as the Triton row does for its group; 2^-s, k_scale, sm_scale and log2(e) fold into the
// logit multiplier, v_scale into the final normalisation. P enters the value product in fp16.
// Split-K: sequence b's positions are cut into num_splits equal chunks of its own length (rounded up to
// 32); with one split the block writes out directly, else its normalised partial output and base-2
// log-sum-exp ([B, Hq, S, 128] and [B, Hq, S] fp32), which merge_kernel weighs by exp2(lse_s - max lse);
// the merge is a programmatic dependent launch (sm90), resident while the decode grid runs, waiting for it.
// On sm90 a grid of more blocks than SMs is itself a programmatic dependent of the stream's previous kernel
// (CHAIN): it waits for that kernel's end and writes (griddepcontrol.wait) before touching global memory.
// Pages: page_size is a power of two; pages of >= 8 positions are read once per page a 32-position chunk
// spans (ChunkRows: 1, 2 or 4 reads), smaller ones once per position, one chunk before the chunk's copy.
// Index values outside the contract (unchecked page ids, lengths past the table) are clamped into the page
// table and the buffer: an unspecified result, never an out-of-bounds read.
// ASCII only.

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "rapid_llm_ext.h"

namespace rapid_llm {
namespace {

constexpr int kHeadDim = 128;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 32;     // positions a warp takes per step: four n-tiles of the logits
constexpr int kMaxGroup = 16;  // query heads per KV head: the product's 16 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMergeRow = kHeadDim + 4;  // shared-memory row of the block's merge (4 floats of padding)
constexpr int kTileBytes = kChunk * kHeadDim;  // a chunk's K (or V) tile: 32 rows of 128 e4m3, 4 KiB
constexpr int kStageBytes = 2 * kTileBytes;    // a ring slot: the chunk's K tile, then its V tile

// Build knobs (-D; the defaults are the measured best, evidence h200.attention.decode_fp8.builds.ring): ring slots
// per warp (a warp's copies of its next STAGES - 1 chunks are in flight
// while it computes one) and the blocks per SM that __launch_bounds__ asks ptxas to fit.
#ifndef RAPID_LLM_DECODE_FP8_STAGES
#define RAPID_LLM_DECODE_FP8_STAGES 3
#endif
#ifndef RAPID_LLM_DECODE_FP8_MIN_BLOCKS
#define RAPID_LLM_DECODE_FP8_MIN_BLOCKS 2
#endif
// Switches (on by default: each was timed against the kernel without it, evidence
// h200.attention.decode_fp8.builds.peel_skip_prefetch and h200.attention.decode_fp8.builds.chain). EARLY_COPIES: the ring's first copies are issued before q's fragments are built (q's loads
// then wait behind the copies' latency instead of in front of it). OVERLAP: a warp computes chunk n + 1's
// logits beside chunk n's softmax and value product (two chunks' work in one instruction stream). MERGE_WARPS:
// the split merge's 4 warps share the splits (warp w: splits w, w + 4, ...; 4 dims a lane), against one
// thread per head dim walking every split. PDL: the merge kernel is launched as a programmatic dependent of
// the decode kernel (sm90: it is resident and waiting when the last decode block ends). Tried and dropped
// (perf/lab/decisions.md): an L2 prefetch hint on the copies, an even spread of whole chunks over the splits,
// batched merge loads, the prologue's table reads at once, and the splits merged by their last block through
// an atomic count in place of merge_kernel.
#ifndef RAPID_LLM_DECODE_FP8_EARLY_COPIES
#define RAPID_LLM_DECODE_FP8_EARLY_COPIES 1
#endif
#ifndef RAPID_LLM_DECODE_FP8_OVERLAP
#define RAPID_LLM_DECODE_FP8_OVERLAP 1
#endif
#ifndef RAPID_LLM_DECODE_FP8_MERGE_WARPS
#define RAPID_LLM_DECODE_FP8_MERGE_WARPS 1
#endif
#ifndef RAPID_LLM_DECODE_FP8_PDL
#define RAPID_LLM_DECODE_FP8_PDL 1
#endif
// PEEL (with OVERLAP): the last chunk of a warp's split after the loop, without a next chunk's logits, and the
// loop's chunks unmasked. SKIP_ROWS: the block merge stores only the rows of real query heads (G of 16).
#ifndef RAPID_LLM_DECODE_FP8_PEEL
#define RAPID_LLM_DECODE_FP8_PEEL 1
#endif
#ifndef RAPID_LLM_DECODE_FP8_SKIP_ROWS
#define RAPID_LLM_DECODE_FP8_SKIP_ROWS 1
#endif
// PREFETCH: before its sequence's length arrives, a block asks the L2 for q's rows and for the page-table line
// its warps' first chunks would use if the sequence filled the table's reach (a guess: right for a full
// table, a wasted line otherwise), so that the reads that follow the length hit the L2.
#ifndef RAPID_LLM_DECODE_FP8_PREFETCH
#define RAPID_LLM_DECODE_FP8_PREFETCH 1
#endif
// CHAIN (sm90): the decode kernel is itself launched as a programmatic dependent of the stream's previous kernel
// and waits for it (griddepcontrol.wait) before its first global memory access; the merge kernel allows its
// dependents' launch after its own wait. The decode grid's launch (its blocks resident, waiting) then overlaps
// the previous kernel's tail instead of following its end. The launcher chains grids of more blocks than SMs
// only (see decode()).
#ifndef RAPID_LLM_DECODE_FP8_CHAIN
#define RAPID_LLM_DECODE_FP8_CHAIN 1
#endif
constexpr int kStages = RAPID_LLM_DECODE_FP8_STAGES;
constexpr int kMinBlocks = RAPID_LLM_DECODE_FP8_MIN_BLOCKS;
constexpr bool kEarlyCopies = RAPID_LLM_DECODE_FP8_EARLY_COPIES != 0;
constexpr bool kOverlap = RAPID_LLM_DECODE_FP8_OVERLAP != 0;
constexpr bool kMergeWarps = RAPID_LLM_DECODE_FP8_MERGE_WARPS != 0;
constexpr bool kDependentMerge = RAPID_LLM_DECODE_FP8_PDL != 0;
constexpr bool kPeel = RAPID_LLM_DECODE_FP8_PEEL != 0;
constexpr bool kSkipRows = RAPID_LLM_DECODE_FP8_SKIP_ROWS != 0;
constexpr bool kPrefetch = RAPID_LLM_DECODE_FP8_PREFETCH != 0;
constexpr bool kChain = RAPID_LLM_DECODE_FP8_CHAIN != 0;
static_assert(!kOverlap || kStages >= 3, "OVERLAP keeps a chunk's slot until its values are read: 3 slots or more");
static_assert(kStages >= 2, "a ring of one slot would leave no copy in flight");
constexpr int kRingBytes = kStages * kWarps * kStageBytes;
constexpr int kMergeBytes = static_cast<int>(sizeof(float)) * kWarps * kMaxGroup * (kMergeRow + 2);
// the ring and, after the loop, the block's merge (which reuses it) in one dynamic allocation
constexpr int kSharedBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;

// Column of head dim 32 * slab + n (n < 32) in a merge row: rotated by the slab, see merge_acc.
__device__ __forceinline__ int merge_column(int slab, int n) { return 32 * slab + ((n + slab) & 31); }

struct Fragments {  // one warp's running state
  float acc[16][4];  // P.V accumulators: 16 n-tiles of 8 (permuted) head dims
  float m[2];        // running maximum of rows g and g + 8 (base-2 logit units)
  float l[2];        // this thread's part of the running sums of rows g and g + 8
};

__device__ __forceinline__ uint32_t byte_permute(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// The four e4m3 values of `word` as two f16x2 (low: bytes 0-1, high: bytes 2-3; the lower byte in the lower
// half), exact. One asm for both halves, so ptxas reads the 16-bit halves in place.
struct F16x2Pair {
  uint32_t low;
  uint32_t high;
};

__device__ __forceinline__ F16x2Pair e4m3x4_to_f16x2(uint32_t word) {
  F16x2Pair d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.rn.f16x2.e4m3x2 %0, lo; cvt.rn.f16x2.e4m3x2 %1, hi; }"
      : "=r"(d.low), "=r"(d.high)
      : "r"(word));
#else
  d.low = d.high = 0;
  __trap();  // the launcher refuses devices below sm89
#endif
  return d;
}

__device__ __forceinline__ uint32_t pack_f16x2(float low, float high) {
  const __half2 pair = __floats2half2_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// D = A B + D, m16n8k16, fp16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Programmatic dependent launch (sm90+; no-ops below, and griddepcontrol.wait returns at once in a grid that
// was not launched as a dependent).
__device__ __forceinline__ void wait_for_primary_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A non-binding request for the L2 line of `address` (no register written, no wait).
__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// Positions, pages and rows are 32-bit (the launcher checks that rows and the row stride fit); page_size
// is a power of two (1 << page_shift), so a position's page and offset are a shift and a mask.
struct Paging {
  const int32_t* table;  // this sequence's page table row
  int table_stride;
  int max_pages;
  int page_shift;
  uint32_t num_pages;  // the buffer's rows >> page_shift
};

// The buffer row of position p: its page id clamped into the buffer, its index into the table.
__device__ __forceinline__ uint32_t buffer_row(const Paging& paging, int p) {
  const int index = min(p >> paging.page_shift, paging.max_pages - 1);
  const uint32_t page = min(static_cast<uint32_t>(max(__ldg(paging.table + index * paging.table_stride), 0)),
                            paging.num_pages - 1);
  return (page << paging.page_shift) | static_cast<uint32_t>(p & ((1 << paging.page_shift) - 1));
}

// A 32-position chunk (32-aligned) spans CHUNK_PAGES pages of 32 / CHUNK_PAGES positions or more: 1 for
// pages of >= 32, 2 for 16, 4 for 8; their rows are read once a chunk. CHUNK_PAGES = 0 (pages of 1, 2 or 4
// positions): each of the lane's 8 positions (4k + lane / 8, k = 0..7: the ones it copies) its own lookup.
template <int CHUNK_PAGES>
struct ChunkRows {
  uint32_t row[CHUNK_PAGES > 0 ? CHUNK_PAGES : kChunk / 4];
};

template <int CHUNK_PAGES>
__device__ __forceinline__ ChunkRows<CHUNK_PAGES> chunk_rows_of(const Paging& paging, int chunk, int lane) {
  ChunkRows<CHUNK_PAGES> rows;
  if constexpr (CHUNK_PAGES > 0) {
#pragma unroll
    for (int k = 0; k < CHUNK_PAGES; ++k) {
      rows.row[k] = buffer_row(paging, chunk + k * (kChunk / CHUNK_PAGES));
    }
  } else {
#pragma unroll
    for (int k = 0; k < kChunk / 4; ++k) {
      rows.row[k] = buffer_row(paging, chunk + 4 * k + lane / 8);
    }
  }
  return rows;
}

// Byte offset of 16-byte unit `unit` (dims 16 unit .. + 15) of row `row` in a tile: rows of 128 bytes with
// the unit index XORed by the row's low 3 bits, so that the fragment reads below (8 lanes a phase: K rows
// g, g + 1 at units 2t (+ 1); V rows 2t (+ 1) at unit g) fall in 8 different 16-byte bank groups.
__device__ __forceinline__ uint32_t tile_offset(int row, int unit) {
  return static_cast<uint32_t>(row * kHeadDim + ((unit ^ (row & 7)) << 4));
}

// 16 bytes global -> shared, asynchronous and bypassing L1 (cp.async.cg); valid = false fills zeros
// (src-size 0: nothing is read; e4m3 zeros, so a masked position's value row adds nothing, never a NaN).
__device__ __forceinline__ void copy_async_16(uint32_t shared_address, const void* source, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address), "l"(source),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most PENDING of this thread's copy groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

// One warp copies a chunk's K and V tiles (positions past `end` as zeros) into the ring slot at
// `slot_address`: lane l copies unit l % 8 of rows 4k + l / 8 (k = 0..7), a whole 128-byte row of a head
// per 8 lanes, so every instruction reads full 32-byte sectors.
template <int CHUNK_PAGES>
__device__ __forceinline__ void copy_chunk(uint32_t slot_address, const uint8_t* k_base, const uint8_t* v_base,
                                           const ChunkRows<CHUNK_PAGES>& rows, uint32_t stride_row, int chunk,
                                           int end, int lane) {
  const int unit = lane % 8;
#pragma unroll
  for (int k = 0; k < kChunk / 4; ++k) {
    const int position = 4 * k + lane / 8;  // in the chunk
    const bool valid = chunk + position < end;
    uint32_t row = 0;
    if constexpr (CHUNK_PAGES > 0) {
      constexpr int kPagePart = kChunk / CHUNK_PAGES;  // the chunk's positions in one page (a multiple of 4)
      row = rows.row[(4 * k) / kPagePart] + static_cast<uint32_t>((4 * k) % kPagePart + lane / 8);
    } else {
      row = rows.row[k];
    }
    const uint64_t offset = static_cast<uint64_t>(valid ? row : 0) * stride_row + 16 * unit;
    const uint32_t destination = slot_address + tile_offset(position, unit);
    copy_async_16(destination, k_base + offset, valid);
    copy_async_16(destination + kTileBytes, v_base + offset, valid);
  }
}

struct ChunkLoads {
  uint4 k[4][2];  // K: n-tile j's position 8j + g, dims 32t .. 32t + 31
  uint4 v[2][4];  // V: k-step c's positions 16c + {2t, 2t + 1, 2t + 8, 2t + 9}, dims 16g .. 16g + 15
};

__device__ __forceinline__ uint4 load_unit(const uint8_t* tile, int row, int unit) {
  return *reinterpret_cast<const uint4*>(tile + tile_offset(row, unit));
}

// The thread's K fragments of a chunk from its ring slot.
__device__ __forceinline__ void load_k(ChunkLoads& loads, const uint8_t* slot, int g, int t) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    loads.k[j][0] = load_unit(slot, 8 * j + g, 2 * t);
    loads.k[j][1] = load_unit(slot, 8 * j + g, 2 * t + 1);
  }
}

// The thread's V fragments of a chunk from its ring slot.
__device__ __forceinline__ void load_v(ChunkLoads& loads, const uint8_t* slot, int g, int t) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      loads.v[c][i] = load_unit(slot + kTileBytes, 16 * c + 8 * (i >> 1) + 2 * t + (i & 1), g);
    }
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// The logits of one 32-position chunk: s[j][0..1] rows g, positions chunk + 8j + 2t + {0, 1}; s[j][2..3]
// rows g + 8.
__device__ __forceinline__ void chunk_logits(float (&s)[4][4], const uint32_t (&q_frag)[8][4],
                                             const ChunkLoads& loads) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const F16x2Pair k_pair = e4m3x4_to_f16x2(word(loads.k[j][c / 4], c % 4));  // dims 32t + 4c .. + 3
      mma_f16(s[j], q_frag[c], k_pair.low, k_pair.high);
    }
  }
}

// The online softmax of a chunk's logits (masked past `end` unless FULL) and its value product.
template <bool FULL>
__device__ __forceinline__ void chunk_softmax_and_values(Fragments& state, float (&s)[4][4], const ChunkLoads& loads,
                                                         float qk_scale, int chunk, int end, int t) {
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool valid = FULL || chunk + 8 * j + 2 * t + (e & 1) < end;
      s[j][e] = valid ? s[j][e] * qk_scale : -INFINITY;
      row_max[e >> 1] = fmaxf(row_max[e >> 1], s[j][e]);
    }
  }
  float alpha[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffff, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffff, row_max[r], 2));
    const float m_new = fmaxf(state.m[r], row_max[r]);
    const float m_safe = m_new == -INFINITY ? 0.0f : m_new;  // a row with no position yet
    alpha[r] = fast_exp2(state.m[r] - m_safe);
    state.m[r] = m_new;
    row_max[r] = m_safe;
  }
  float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = fast_exp2(s[j][e] - row_max[e >> 1]);
      row_sum[e >> 1] += s[j][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    state.l[r] = state.l[r] * alpha[r] + row_sum[r];
  }
  if (__any_sync(0xffffffff, alpha[0] != 1.0f || alpha[1] != 1.0f)) {  // a maximum moved in this warp
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      state.acc[n][0] *= alpha[0];
      state.acc[n][1] *= alpha[0];
      state.acc[n][2] *= alpha[1];
      state.acc[n][3] *= alpha[1];
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {  // k-step c: positions chunk + 16c .. + 15, logical k = the offset
    const uint32_t p_frag[4] = {pack_f16x2(s[2 * c][0], s[2 * c][1]), pack_f16x2(s[2 * c][2], s[2 * c][3]),
                                pack_f16x2(s[2 * c + 1][0], s[2 * c + 1][1]),
                                pack_f16x2(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
    for (int w = 0; w < 4; ++w) {  // dims 16g + 4w .. + 3: n-tiles 4w .. 4w + 3
      // bytes [p0 d0, p1 d0, p0 d1, p1 d1] and [p0 d2, p1 d2, p0 d3, p1 d3] of positions (2t, 2t + 1)
      // and (2t + 8, 2t + 9)
      const uint32_t low01 = byte_permute(word(loads.v[c][0], w), word(loads.v[c][1], w), 0x5140);
      const uint32_t low23 = byte_permute(word(loads.v[c][0], w), word(loads.v[c][1], w), 0x7362);
      const uint32_t high01 = byte_permute(word(loads.v[c][2], w), word(loads.v[c][3], w), 0x5140);
      const uint32_t high23 = byte_permute(word(loads.v[c][2], w), word(loads.v[c][3], w), 0x7362);
      const F16x2Pair low01_pair = e4m3x4_to_f16x2(low01);
      const F16x2Pair low23_pair = e4m3x4_to_f16x2(low23);
      const F16x2Pair high01_pair = e4m3x4_to_f16x2(high01);
      const F16x2Pair high23_pair = e4m3x4_to_f16x2(high23);
      mma_f16(state.acc[4 * w + 0], p_frag, low01_pair.low, high01_pair.low);
      mma_f16(state.acc[4 * w + 1], p_frag, low01_pair.high, high01_pair.high);
      mma_f16(state.acc[4 * w + 2], p_frag, low23_pair.low, high23_pair.low);
      mma_f16(state.acc[4 * w + 3], p_frag, low23_pair.high, high23_pair.high);
    }
  }
}

// q rows g and g + 8 of the block's heads (q_rows: its first head), dims 32t .. 32t + 31, as the logits' A
// fragments; returns the logit multiplier. A bf16 q enters fp16 scaled by 2^s with the block's largest |q| in
// [2^14, 2^15) (exact; the Triton row's rule), 2^-s folded into the multiplier.
template <typename T>
__device__ __forceinline__ float query_fragments(uint32_t (&q_frag)[8][4], const T* q_rows, int rows,
                                                 int64_t stride_qh, int64_t stride_qd, float qk_scale, int g, int t) {
  float q_vals[2][32];
  float q_abs_max = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const bool valid = row < rows;
    const T* q_row = q_rows + static_cast<int64_t>(valid ? row : 0) * stride_qh;
#pragma unroll
    for (int d = 0; d < 32; ++d) {
      q_vals[r][d] = valid ? to_float(q_row[static_cast<int64_t>(32 * t + d) * stride_qd]) : 0.0f;
      q_abs_max = fmaxf(q_abs_max, fabsf(q_vals[r][d]));
    }
  }
  float q_scale = 1.0f;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      q_abs_max = fmaxf(q_abs_max, __shfl_xor_sync(0xffffffff, q_abs_max, offset));
    }
    const int exponent = (__float_as_int(q_abs_max) >> 23) & 0xFF;
    const int scale_bits = exponent == 0 ? 127 : min(max(268 - exponent, 1), 254);
    q_scale = __int_as_float(scale_bits << 23);
    qk_scale /= q_scale;
  }
  // k-step c: rows (g, g + 8) x logical k (2t, 2t + 1) and (2t + 8, 2t + 9)
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    q_frag[c][0] = pack_f16x2(q_vals[0][4 * c] * q_scale, q_vals[0][4 * c + 1] * q_scale);
    q_frag[c][1] = pack_f16x2(q_vals[1][4 * c] * q_scale, q_vals[1][4 * c + 1] * q_scale);
    q_frag[c][2] = pack_f16x2(q_vals[0][4 * c + 2] * q_scale, q_vals[0][4 * c + 3] * q_scale);
    q_frag[c][3] = pack_f16x2(q_vals[1][4 * c + 2] * q_scale, q_vals[1][4 * c + 3] * q_scale);
  }
  return qk_scale;
}

template <typename T, int CHUNK_PAGES>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    decode_fp8_kernel(T* __restrict__ out, float* __restrict__ partial, float* __restrict__ partial_lse,
                      const T* __restrict__ q, const uint8_t* __restrict__ kv, const int32_t* __restrict__ table,
                      const int32_t* __restrict__ seq_lens, const float* __restrict__ k_scale,
                      const float* __restrict__ v_scale, int64_t stride_qb, int64_t stride_qh, int64_t stride_qd,
                      uint32_t stride_row, int64_t stride_head, int64_t table_stride0, int table_stride1,
                      int64_t seq_lens_stride, uint32_t num_pages, int max_pages, int page_shift, int num_kv_heads,
                      int group, int head_blocks, float sm_scale_log2, int num_splits) {
  // kSharedBytes: each warp's ring of kStages slots, then (after the loop) the block's merge
  extern __shared__ __align__(128) uint8_t shared[];
  if constexpr (kChain) {
    // a programmatic dependent of the stream's previous kernel (CHAIN): its writes (q, the buffer, the table,
    // memory reused for out) are complete and visible after this, and nothing global is touched before it
    wait_for_primary_grid();
  }
  if constexpr (kDependentMerge) {
    // the merge grid may become resident now; it waits for this grid's end. After the wait above: allowed
    // before it, the merge (and through its own early allowance the next call's decode grid, and so on) would
    // launch while this grid still waited, a cascade of resident waiting grids (measured slower)
    allow_dependent_launch();
  }

  const int64_t sequence = blockIdx.x;
  const int kv_head = blockIdx.y / head_blocks;
  // this block's query heads: first_head .. first_head + rows - 1 of the KV head's group (16 at most)
  const int first_head = kv_head * group + (blockIdx.y % head_blocks) * kMaxGroup;
  const int rows = min(kMaxGroup, (kv_head + 1) * group - first_head);
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int num_q_heads = num_kv_heads * group;
  const T* q_rows = q + sequence * stride_qb + static_cast<int64_t>(first_head) * stride_qh;
  if constexpr (kPrefetch) {
    if (lane == 0) {  // this warp's first chunk at the table's reach: its page-table entry's line
      const int reach = max_pages << page_shift;
      const int guess_len = ((reach + num_splits - 1) / num_splits + kChunk - 1) / kChunk * kChunk;
      const int index = min((split * guess_len + kChunk * warp) >> page_shift, max_pages - 1);
      prefetch_l2(table + sequence * table_stride0 + static_cast<int64_t>(index) * table_stride1);
    } else if (warp == 0 && lane <= 2 * rows) {  // q's rows: two 128-byte lines a 256-byte row (dims 0, 64)
      const int row = (lane - 1) / 2;
      prefetch_l2(q_rows + static_cast<int64_t>(row) * stride_qh + static_cast<int64_t>((lane - 1) % 2 * 64) * stride_qd);
    }
  }

  uint32_t q_frag[8][4];
  float qk_scale = sm_scale_log2 * __ldg(k_scale);
  if constexpr (!kEarlyCopies) {
    qk_scale = query_fragments(q_frag, q_rows, rows, stride_qh, stride_qd, qk_scale, g, t);
  }

  const int seq_len = __ldg(seq_lens + sequence * seq_lens_stride);
  const int split_len = ((seq_len + num_splits - 1) / num_splits + kChunk - 1) / kChunk * kChunk;
  const int start = split * split_len;
  const int end = min(start + split_len, seq_len);
  const Paging paging{table + sequence * table_stride0, table_stride1, max_pages, page_shift, num_pages};
  const uint8_t* k_base = kv + static_cast<int64_t>(kv_head) * stride_head;
  const uint8_t* v_base = kv + static_cast<int64_t>(num_kv_heads + kv_head) * stride_head;

  // software pipeline: a warp copies its chunks into its own ring of kStages slots, kStages - 1 chunks
  // ahead of the one it computes (cp.async: the bytes in flight hold no registers), and reads each page-table
  // entry one chunk before it copies that chunk's rows, so no copy waits on a table read. Warps never wait
  // for one another in the loop (__syncwarp only).
  uint8_t* ring = shared + warp * (kStages * kStageBytes);
  const uint32_t ring_address = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  constexpr int kStep = kChunk * kWarps;  // warp w takes chunks start + 32w, + 32w + kStep, ...
  const int first = start + kChunk * warp;
  ChunkRows<CHUNK_PAGES> copy_rows = chunk_rows_of<CHUNK_PAGES>(paging, first, lane);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int at = first + s * kStep;
    if (at < end) {
      copy_chunk<CHUNK_PAGES>(ring_address + s * kStageBytes, k_base, v_base, copy_rows, stride_row, at, end, lane);
      copy_rows = chunk_rows_of<CHUNK_PAGES>(paging, at + kStep, lane);
    }
    commit_copies();  // one group per slot, empty or not: wait_copies counts groups
  }
  if constexpr (kEarlyCopies) {
    qk_scale = query_fragments(q_frag, q_rows, rows, stride_qh, stride_qd, qk_scale, g, t);
  }

  Fragments state;
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    state.acc[n][0] = state.acc[n][1] = state.acc[n][2] = state.acc[n][3] = 0.0f;
  }
  state.m[0] = state.m[1] = -INFINITY;
  state.l[0] = state.l[1] = 0.0f;

  int slot = 0;  // the ring slot of `chunk`
  if constexpr (!kOverlap) {
    for (int chunk = first; chunk < end; chunk += kStep) {
      const int ahead = chunk + (kStages - 1) * kStep;
      const int ahead_slot = slot == 0 ? kStages - 1 : slot - 1;  // the slot computed last iteration
      if (ahead < end) {
        copy_chunk<CHUNK_PAGES>(ring_address + ahead_slot * kStageBytes, k_base, v_base, copy_rows, stride_row,
                                ahead, end, lane);
        copy_rows = chunk_rows_of<CHUNK_PAGES>(paging, ahead + kStep, lane);
      }
      commit_copies();
      wait_copies<kStages - 1>();  // this thread's copies of `chunk` have landed
      __syncwarp();                // and so have the other lanes'
      const uint8_t* chunk_slot = ring + slot * kStageBytes;
      ChunkLoads loads;
      load_k(loads, chunk_slot, g, t);
      float s[4][4];
      chunk_logits(s, q_frag, loads);
      load_v(loads, chunk_slot, g, t);
      if (chunk + kChunk <= end) {
        chunk_softmax_and_values<true>(state, s, loads, qk_scale, chunk, end, t);
      } else {
        chunk_softmax_and_values<false>(state, s, loads, qk_scale, chunk, end, t);
      }
      __syncwarp();  // every lane has read the slot before the next iteration copies into it
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }
  } else {
    // chunk n's softmax and value product beside chunk n + 1's logits: the logits of `chunk` are in
    // `logits` when its iteration starts, its V tile still in its slot (read first, which frees the slot)
    ChunkLoads loads;
    float logits[4][4];
    wait_copies<kStages - 2>();  // the first chunk has landed
    __syncwarp();
    load_k(loads, ring, g, t);
    chunk_logits(logits, q_frag, loads);  // garbage for a warp with no chunk: never used
    int chunk = first;
    // PEEL: the loop runs while a next chunk exists (every chunk in it full: no mask), the last chunk after
    // it without the next chunk's logits; else every iteration computes them (the last one on stale bytes)
    for (; kPeel ? chunk + kStep < end : chunk < end; chunk += kStep) {
      const int ahead = chunk + (kStages - 1) * kStep;
      const int ahead_slot = slot == 0 ? kStages - 1 : slot - 1;  // freed last iteration
      if (ahead < end) {
        copy_chunk<CHUNK_PAGES>(ring_address + ahead_slot * kStageBytes, k_base, v_base, copy_rows, stride_row,
                                ahead, end, lane);
        copy_rows = chunk_rows_of<CHUNK_PAGES>(paging, ahead + kStep, lane);
      }
      commit_copies();
      load_v(loads, ring + slot * kStageBytes, g, t);
      const int next_slot = slot + 1 == kStages ? 0 : slot + 1;
      wait_copies<kStages - 2>();  // this thread's copies of the next chunk have landed
      __syncwarp();                // and so have the other lanes'; every lane has read this chunk's V
      // the next chunk's logits (past the split's end: the slot's stale bytes, discarded)
      float next_logits[4][4];
      load_k(loads, ring + next_slot * kStageBytes, g, t);
      chunk_logits(next_logits, q_frag, loads);
      chunk_softmax_and_values<kPeel>(state, logits, loads, qk_scale, chunk, end, t);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          logits[j][e] = next_logits[j][e];
        }
      }
      slot = next_slot;
    }
    if (kPeel && chunk < end) {  // the last chunk: landed (the last wait covered it), its logits computed
      load_v(loads, ring + slot * kStageBytes, g, t);
      chunk_softmax_and_values<false>(state, logits, loads, qk_scale, chunk, end, t);
    }
  }
  wait_copies<0>();
  __syncthreads();  // every warp is out of its ring before the merge reuses it

  // a row's 128 dims in kMergeRow floats, thread t's 32 dims rotated by t: the stores of a warp's 32 lanes
  // (rows g, dims 32t + n) fall in 32 different banks
  auto merge_acc = reinterpret_cast<float(*)[kMaxGroup][kMergeRow]>(shared);
  auto merge_m = reinterpret_cast<float(*)[kMaxGroup]>(shared + sizeof(float) * kWarps * kMaxGroup * kMergeRow);
  auto merge_l = merge_m + kWarps;

  // the block's merge: each warp's rows through shared memory
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    state.l[r] += __shfl_xor_sync(0xffffffff, state.l[r], 1);
    state.l[r] += __shfl_xor_sync(0xffffffff, state.l[r], 2);
    const int row = g + 8 * r;
    if (kSkipRows && row >= rows) {  // a row past the group: zeros, never read
      continue;
    }
    if (t == 0) {
      merge_m[warp][row] = state.m[r];
      merge_l[warp][row] = state.l[r];
    }
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      merge_acc[warp][row][merge_column(t, n)] = state.acc[n][2 * r];
      merge_acc[warp][row][merge_column(t, 16 + n)] = state.acc[n][2 * r + 1];
    }
  }
  __syncthreads();
  const float value_scale = __ldg(v_scale);
  for (int index = threadIdx.x; index < rows * kHeadDim; index += kThreads) {
    const int row = index / kHeadDim;
    const int dim = index % kHeadDim;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      top = fmaxf(top, merge_m[w][row]);
    }
    const float top_safe = top == -INFINITY ? 0.0f : top;
    float total = 0.0f;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = fast_exp2(merge_m[w][row] - top_safe);  // 0 for a warp with no position
      total += weight * merge_l[w][row];
      value += weight * merge_acc[w][row][merge_column(dim / 32, dim % 32)];
    }
    const float result = total == 0.0f ? 0.0f : value * value_scale / total;  // a NaN sum stays NaN
    const int64_t head = first_head + row;
    if (num_splits == 1) {
      store(out + (sequence * num_q_heads + head) * kHeadDim + dim, result);
    } else {
      const int64_t slot = (sequence * num_q_heads + head) * num_splits + split;
      partial[slot * kHeadDim + dim] = result;
      if (dim == 0) {
        partial_lse[slot] = total == 0.0f ? -INFINITY : top_safe + __log2f(total);
      }
    }
  }
}

// out[b, h] = sum_s w_s partial[b, h, s] / sum_s w_s with w_s = exp2(lse_s - max lse): one block of 128
// threads per (sequence, query head), an empty split has lse = -inf: weight 0. MERGE_WARPS: warp w takes
// splits w, w + 4, ... (lane l: dims 4l .. 4l + 3, one 16-byte read a split), the 4 warps' sums add through
// shared memory; else one thread per head dim walks every split. Launched as a programmatic dependent of
// the decode kernel (PDL), it waits for that grid's end (and its writes) before reading.
template <typename T>
__global__ void __launch_bounds__(kHeadDim)
    merge_kernel(T* __restrict__ out, const float* __restrict__ partial, const float* __restrict__ partial_lse,
                 int num_splits) {
  wait_for_primary_grid();
  if constexpr (kChain) {
    // the stream's next decode grid may become resident (it waits for this one's end); after the wait, so that
    // it cannot launch while the decode grid runs (see decode_fp8_kernel's allowance)
    allow_dependent_launch();
  }
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y;  // b * Hq + h
  const float* lse = partial_lse + slot * num_splits;
  if constexpr (!kMergeWarps) {
    float top = -INFINITY;
    for (int s = 0; s < num_splits; ++s) {
      top = fmaxf(top, __ldg(lse + s));
    }
    const float top_safe = top == -INFINITY ? 0.0f : top;
    float total = 0.0f;
    float value = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float weight = fast_exp2(__ldg(lse + s) - top_safe);
      total += weight;
      value += weight * __ldg(partial + (slot * num_splits + s) * kHeadDim + threadIdx.x);
    }
    store(out + slot * kHeadDim + threadIdx.x, total == 0.0f ? 0.0f : value / total);
  } else {
    __shared__ float block_max[kWarps];
    __shared__ float block_total[kWarps];
    __shared__ float4 block_sum[kWarps][32];
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    float top = -INFINITY;
    for (int s = threadIdx.x; s < num_splits; s += kHeadDim) {
      top = fmaxf(top, __ldg(lse + s));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, offset));
    }
    if (lane == 0) {
      block_max[warp] = top;
    }
    __syncthreads();
    top = fmaxf(fmaxf(block_max[0], block_max[1]), fmaxf(block_max[2], block_max[3]));
    const float top_safe = top == -INFINITY ? 0.0f : top;
    const float4* rows = reinterpret_cast<const float4*>(partial + slot * num_splits * kHeadDim) + lane;
    float total = 0.0f;
    float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
    for (int s = warp; s < num_splits; s += kWarps) {
      const float weight = fast_exp2(__ldg(lse + s) - top_safe);
      const float4 row = __ldg(rows + s * (kHeadDim / 4));
      total += weight;
      value.x += weight * row.x;
      value.y += weight * row.y;
      value.z += weight * row.z;
      value.w += weight * row.w;
    }
    block_sum[warp][lane] = value;
    if (lane == 0) {
      block_total[warp] = total;
    }
    __syncthreads();
    if (warp == 0) {
      float sum_total = 0.0f;
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        sum_total += block_total[w];
        sum.x += block_sum[w][lane].x;
        sum.y += block_sum[w][lane].y;
        sum.z += block_sum[w][lane].z;
        sum.w += block_sum[w][lane].w;
      }
      const float inverse = sum_total == 0.0f ? 0.0f : 1.0f / sum_total;
      T* destination = out + slot * kHeadDim + 4 * lane;
      store(destination + 0, sum.x * inverse);
      store(destination + 1, sum.y * inverse);
      store(destination + 2, sum.z * inverse);
      store(destination + 3, sum.w * inverse);
    }
  }
}

// The launch of `grid` x `threads` with `shared_bytes` of dynamic shared memory on `stream`; `programmatic`: as a
// programmatic dependent of the stream's previous kernel (PDL, sm90+; the caller checks the arch), through
// `attribute`, which must outlive the launch call.
cudaLaunchConfig_t launch_config(dim3 grid, int threads, int shared_bytes, cudaStream_t stream, bool programmatic,
                                 cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return config;
}

}  // namespace

void decode(at::Tensor& out, at::Tensor& partial, at::Tensor& partial_lse, const at::Tensor& q,
                const at::Tensor& kv_buffer, const at::Tensor& page_table, const at::Tensor& seq_lens,
                const at::Tensor& k_scale, const at::Tensor& v_scale, int64_t page_size, double sm_scale,
                int64_t num_splits) {
  const std::string op = "rapid_llm::decode (fp8 KV): ";
  TORCH_CHECK(q.is_cuda(), op + "q must be a CUDA tensor");
  const at::Tensor* tensors[] = {&out, &partial, &partial_lse, &kv_buffer, &page_table, &seq_lens, &k_scale, &v_scale};
  for (const at::Tensor* t : tensors) {
    TORCH_CHECK(t->device() == q.device(), op + "every tensor must be on q's device");
  }
  int major = 0;
  int minor = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, q.get_device()));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, q.get_device()));
  TORCH_CHECK(major * 10 + minor >= 89, op + "needs sm89+ (the e4m3 -> f16x2 conversion), got sm" +
                                            std::to_string(major) + std::to_string(minor));
  TORCH_CHECK(q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16,
              op + "q must be float16 or bfloat16");
  TORCH_CHECK(q.dim() == 3 && q.size(2) == kHeadDim, op + "q must be [B, Hq, 128], got " + dims_to_string(q.sizes()));
  TORCH_CHECK(kv_buffer.scalar_type() == at::kFloat8_e4m3fn, op + "kv_buffer must be float8_e4m3fn");
  TORCH_CHECK(kv_buffer.dim() == 3 && kv_buffer.size(1) > 0 && kv_buffer.size(1) % 2 == 0 &&
                  kv_buffer.size(2) == kHeadDim,
              op + "kv_buffer must be [rows, 2*Hk, 128], got " + dims_to_string(kv_buffer.sizes()));
  TORCH_CHECK(kv_buffer.stride(2) == 1 && kv_buffer.stride(1) % kVectorBytes == 0 &&
                  kv_buffer.stride(0) % kVectorBytes == 0 && is_vector_aligned(kv_buffer.const_data_ptr()),
              op + "kv_buffer's rows and heads must be 16-byte aligned with unit stride along the head dim");
  const int64_t batch = q.size(0);
  const int64_t num_q_heads = q.size(1);
  const int64_t num_kv_heads = kv_buffer.size(1) / 2;
  TORCH_CHECK(num_q_heads % num_kv_heads == 0, op + "q's heads must be a multiple of the buffer's KV heads");
  const int64_t group = num_q_heads / num_kv_heads;
  const int64_t head_blocks = (group + kMaxGroup - 1) / kMaxGroup;  // blocks of 16 query heads per KV head
  TORCH_CHECK(page_table.scalar_type() == at::kInt && page_table.dim() == 2 && page_table.size(0) == batch &&
                  page_table.size(1) > 0,
              op + "page_table must be int32 [B, max_pages]");
  TORCH_CHECK(seq_lens.scalar_type() == at::kInt && seq_lens.dim() == 1 && seq_lens.size(0) == batch,
              op + "seq_lens must be int32 [B]");
  TORCH_CHECK(k_scale.scalar_type() == at::kFloat && k_scale.numel() == 1 && v_scale.scalar_type() == at::kFloat &&
                  v_scale.numel() == 1,
              op + "k_scale and v_scale must be one-element float32 tensors");
  TORCH_CHECK(page_size >= 1 && (page_size & (page_size - 1)) == 0 && kv_buffer.size(0) % page_size == 0,
              op + "page_size must be a power of two dividing the buffer's rows");
  TORCH_CHECK(kv_buffer.size(0) <= 2147483647 && kv_buffer.stride(0) <= 4294967295LL &&
                  page_table.size(1) * page_size <= 2147483647 - 1024 && page_table.stride(1) <= 2147483647,
              op + "the buffer's rows and positions must fit 31 bits, its row stride 32");
  TORCH_CHECK(num_splits >= 1 && num_splits <= 65535, op + "num_splits must be in [1, 65535]");
  TORCH_CHECK(out.scalar_type() == q.scalar_type() && out.sizes() == q.sizes() && out.is_contiguous(),
              op + "out must be a contiguous tensor of q's shape and dtype");
  if (num_splits > 1) {
    TORCH_CHECK(partial.scalar_type() == at::kFloat && partial.is_contiguous() && partial.dim() == 4 &&
                    partial.size(0) == batch && partial.size(1) == num_q_heads && partial.size(2) == num_splits &&
                    partial.size(3) == kHeadDim,
                op + "partial must be contiguous float32 [B, Hq, num_splits, 128]");
    TORCH_CHECK(partial_lse.scalar_type() == at::kFloat && partial_lse.is_contiguous() && partial_lse.dim() == 3 &&
                    partial_lse.size(0) == batch && partial_lse.size(1) == num_q_heads &&
                    partial_lse.size(2) == num_splits,
                op + "partial_lse must be contiguous float32 [B, Hq, num_splits]");
  }
  TORCH_CHECK(batch <= 2147483647 && num_q_heads <= 65535, op + "B must fit the grid's x axis, Hq its y axis");
  if (batch == 0) {
    return;
  }
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned int>(batch), static_cast<unsigned int>(num_kv_heads * head_blocks),
                  static_cast<unsigned int>(num_splits));
  const float sm_scale_log2 = static_cast<float>(sm_scale) * kLog2e;
  // CHAIN for grids of more blocks than SMs only: a grid of one block an SM launched early ran slower,
  // as if its blocks were placed two to an SM beside the previous kernel's
  int multiprocessors = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, q.get_device()));
  const bool chain = kChain && major >= 9 &&
                     static_cast<int64_t>(grid.x) * grid.y * grid.z > static_cast<int64_t>(multiprocessors);
  const int page_shift = __builtin_ctzll(static_cast<unsigned long long>(page_size));
  const auto launch = [&](auto* typed_out, auto* typed_q, auto chunk_pages) {
    using T = std::remove_pointer_t<decltype(typed_out)>;
    const auto kernel = decode_fp8_kernel<T, decltype(chunk_pages)::value>;
    // above 48 KiB a block's dynamic shared memory needs the opt-in (a host call, legal during graph capture)
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = launch_config(grid, kThreads, kSharedBytes, stream, chain, attribute);
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel,
        typed_out, num_splits > 1 ? partial.mutable_data_ptr<float>() : nullptr,
        num_splits > 1 ? partial_lse.mutable_data_ptr<float>() : nullptr, typed_q,
        static_cast<const uint8_t*>(kv_buffer.const_data_ptr()), page_table.const_data_ptr<int32_t>(),
        seq_lens.const_data_ptr<int32_t>(), k_scale.const_data_ptr<float>(), v_scale.const_data_ptr<float>(),
        q.stride(0), q.stride(1), q.stride(2), static_cast<uint32_t>(kv_buffer.stride(0)), kv_buffer.stride(1),
        page_table.stride(0), static_cast<int>(page_table.stride(1)), seq_lens.stride(0),
        static_cast<uint32_t>(kv_buffer.size(0) / page_size), static_cast<int>(page_table.size(1)), page_shift,
        static_cast<int>(num_kv_heads), static_cast<int>(group), static_cast<int>(head_blocks), sm_scale_log2,
        static_cast<int>(num_splits)));
  };
  // the pages a 32-aligned chunk spans: one page-table read a page of the chunk for pages of >= 8 positions
  const auto launch_paged = [&](auto* typed_out, auto* typed_q) {
    if (page_size >= kChunk) {
      launch(typed_out, typed_q, std::integral_constant<int, 1>{});
    } else if (page_size == 16) {
      launch(typed_out, typed_q, std::integral_constant<int, 2>{});
    } else if (page_size == 8) {
      launch(typed_out, typed_q, std::integral_constant<int, 4>{});
    } else {
      launch(typed_out, typed_q, std::integral_constant<int, 0>{});
    }
  };
  const auto merge = [&](auto* typed_out) {
    using T = std::remove_pointer_t<decltype(typed_out)>;
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config =
        launch_config(dim3(static_cast<unsigned int>(batch), static_cast<unsigned int>(num_q_heads)), kHeadDim, 0,
                      stream, kDependentMerge && major >= 9, attribute);  // PDL: sm90+
    C10_CUDA_CHECK(cudaLaunchKernelEx(&config, merge_kernel<T>, typed_out, partial.const_data_ptr<float>(),
                                      partial_lse.const_data_ptr<float>(), static_cast<int>(num_splits)));
  };
  if (q.scalar_type() == at::kHalf) {
    launch_paged(static_cast<__half*>(out.mutable_data_ptr()), static_cast<const __half*>(q.const_data_ptr()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (num_splits > 1) {
      merge(static_cast<__half*>(out.mutable_data_ptr()));
    }
  } else {
    launch_paged(static_cast<__nv_bfloat16*>(out.mutable_data_ptr()),
                 static_cast<const __nv_bfloat16*>(q.const_data_ptr()));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (num_splits > 1) {
      merge(static_cast<__nv_bfloat16*>(out.mutable_data_ptr()));
    }
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace rapid_llm
