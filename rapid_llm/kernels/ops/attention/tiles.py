"""Shared pieces of the attention family's Triton kernels (one definition each).

softmax_step   one online-softmax step over a tile of base-2 logits (running max m, sum l)
soft_cap       logit soft-capping c * tanh(s / c) of base-2 logits (the cap given in base 2 too)
soft_cap_base2 the base-2 cap a kernel takes for a logits_soft_cap c (c * LOG2E; 0: none)
sink_step      an attention sink's logit added to an online softmax (no value)
attend_tile    one key tile of a prefill query block: logits (one or two products), softmax step, P . V
paged_rows     cache rows of token positions through a page table (clamped: never out of bounds)
split_bounds   [start, end) of one split of a sequence's positions, or of its window's (split-K decode)
merge_splits   the split-K merge: out = sum_s w_s partial_s / sum_s w_s, w_s = exp2(lse_s - max lse)
split_k        a split-K launch: the partial buffers, the kernel, then the merge
split_head_dim a head dim as D_A + D_B (two tensor-core products per tile instead of padding)
e4m3_to_fp16   fp8 e4m3 -> fp16 by inline PTX (sm89+), two elements an instruction
widen_fp8      a loaded fp8 cache tile in the product dtype (e4m3_to_fp16, or a plain conversion)
fp16_range_scale  the power of two that puts a bf16 query's largest element in fp16's [2^14, 2^15)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import cached, cdiv, next_power_of_2
from .splits import split_partials

#: log2(e): the kernels take logits in base 2 (qk * sm_scale * LOG2E), so each weight is one exp2.
LOG2E = 1.4426950408889634
#: Head-dim columns per merge program.
MERGE_BLOCK_D = 64


def split_head_dim(head_dim: int) -> tuple[int, int]:
    """(D_A, D_B): D_A the largest power of two <= head_dim, D_B the rest (0 or a power of two >= 16)."""
    first = 1 << (head_dim.bit_length() - 1)
    rest = head_dim - first
    if rest and (rest & (rest - 1) or rest < 16):
        raise ValueError(f"head_dim {head_dim} is not a power of two or the sum of two (the rest >= 16)")
    return first, rest


@triton.jit
def softmax_step(qk, m_i, l_i):
    """One online-softmax step over a tile of base-2 logits qk [rows, keys] (masked ones -inf):
    returns (p, alpha, m_new, l_new) with p = exp2(qk - m_new), alpha = exp2(m_i - m_new) the factor the
    running sums are rescaled by. A row with no visible key so far keeps m = -inf: its exponents are taken
    against 0 instead (all 0), so no -inf - -inf NaN appears."""
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(qk - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


def soft_cap_base2(logits_soft_cap: float) -> float:
    """The cap of base-2 logits: c * tanh(s / c) in natural-log units is (c * LOG2E) * tanh(s2 / (c * LOG2E))
    for s2 = s * LOG2E. 0.0 (no cap) stays 0.0."""
    return float(logits_soft_cap) * LOG2E


@triton.jit
def soft_cap(x, cap):
    """cap * tanh(x / cap), tanh as 1 - 2 / (e^(2x / cap) + 1): one exp2, exact limits (+-cap at +-inf), NaN
    kept, absolute error about cap * 2^-23 near 0; the same code on CUDA and in the interpreter."""
    e = tl.math.exp2(x * (2.8853900817779268 / cap))  # e^(2x / cap) = 2^(2 log2(e) x / cap)
    return cap * (1.0 - 2.0 / (e + 1.0))


@triton.jit
def sink_step(m_i, l_i, sink):
    """One base-2 logit `sink` [rows] without a value added to an online softmax (attention sinks): returns
    (alpha, m', l') with m' = max(m, sink), l' = l alpha + 2^(sink - m'), alpha = 2^(m - m') the factor the
    accumulators are rescaled by; a sink of -inf changes nothing."""
    m_new = tl.maximum(m_i, sink)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - m_safe)
    return alpha, m_new, l_i * alpha + tl.math.exp2(sink - m_safe)


@triton.jit
def attend_tile(
    acc,
    m_i,
    l_i,
    q_a,
    q_b,
    k_rows,
    v_rows,
    key_valid,
    visible,
    offs_da,
    offs_db,
    offs_dv,
    qk_scale,
    D_B: tl.constexpr,
    PRECISION: tl.constexpr,
    MASKED: tl.constexpr,
    LOAD_MASK: tl.constexpr,
    cap=0.0,
    SOFT_CAP: tl.constexpr = False,
):
    """One key tile of the online softmax: acc, m, l updated for the keys whose rows start at k_rows / v_rows
    ([BLOCK_N, 1] pointers; base-2 logits). MASKED: apply `visible` to the logits; LOAD_MASK: load only the
    `key_valid` rows (a tile whose rows are all valid loads unmasked: straight vector loads); SOFT_CAP: cap
    the base-2 logits at `cap` (soft_cap). PRECISION: "ieee" for fp32 inputs (no tf32 rounding), ignored by
    fp16/bf16 dot products."""
    precision: tl.constexpr = PRECISION
    if LOAD_MASK:
        k_a = tl.load(k_rows + offs_da[None, :], mask=key_valid[:, None], other=0.0)
    else:
        k_a = tl.load(k_rows + offs_da[None, :])
    qk = tl.dot(q_a, tl.trans(k_a), input_precision=precision)
    if D_B > 0:
        if LOAD_MASK:
            k_b = tl.load(k_rows + offs_db[None, :], mask=key_valid[:, None], other=0.0)
        else:
            k_b = tl.load(k_rows + offs_db[None, :])
        qk += tl.dot(q_b, tl.trans(k_b), input_precision=precision)
    qk = qk * qk_scale
    if SOFT_CAP:
        qk = soft_cap(qk, cap)
    if MASKED:
        qk = tl.where(visible, qk, float("-inf"))
    p, alpha, m_new, l_i = softmax_step(qk, m_i, l_i)
    if LOAD_MASK:
        v = tl.load(v_rows + offs_dv[None, :], mask=key_valid[:, None], other=0.0)
    else:
        v = tl.load(v_rows + offs_dv[None, :])
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=precision)
    return acc, m_new, l_i


@triton.jit
def e4m3_to_fp16(x):
    """e4m3 -> fp16 (exact) with PTX's cvt.rn.f16x2.e4m3x2 (sm89+): two elements per instruction on four
    packed bytes, fewer integer instructions than the compiler's conversion. Opaque to the compiler."""
    return tl.inline_asm_elementwise(
        asm="{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        constraints="=r,=r,r",
        args=[x.to(tl.uint8, bitcast=True)],
        dtype=tl.float16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def widen_fp8(x, dtype: tl.constexpr, CVT_ASM: tl.constexpr):
    """A loaded cache tile in the product dtype: e4m3 through e4m3_to_fp16 when CVT_ASM (CUDA, fp16
    products), else a plain conversion (the interpreter; fp32 products; a tile already of dtype: no-op) with
    e4m3's NaN (magnitude bits 0x7f) kept NaN: the Triton interpreter widens it to 480."""
    if CVT_ASM:
        return e4m3_to_fp16(x)
    if x.dtype == tl.float8e4nv:
        is_nan = (x.to(tl.uint8, bitcast=True) & 0x7F) == 0x7F
        return tl.where(is_nan, float("nan"), x.to(tl.float32)).to(dtype)
    return x.to(dtype)


@triton.jit
def fp16_range_scale(q_max):
    """2^s with q_max * 2^s in [2^14, 2^15): a bf16 query times it is exact in fp16 down to 2^-14 (2^28 below
    its largest element; fp16's 11 significant bits hold bf16's 8), so an fp8 cache's products can run in
    fp16; 1 for q_max 0 or subnormal."""
    exponent = (q_max.to(tl.int32, bitcast=True) >> 23) & 0xFF  # biased: 2^(e-127) <= q_max
    scale_bits = tl.minimum(tl.maximum(268 - exponent, 1), 254)  # 2^(141 - e) as an fp32 exponent
    scale_bits = tl.where(exponent == 0, 127, scale_bits)
    return (scale_bits << 23).to(tl.float32, bitcast=True)


@triton.jit
def paged_rows(
    positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages, PAGE_SIZE: tl.constexpr
):
    """int64 cache rows of `positions` of `sequence` through its page table row (0 where not valid), clamped
    into the page table and the buffer: index values outside the contract (unchecked on CUDA) give an
    unspecified result, never an out-of-bounds read."""
    page_index = tl.minimum(positions // PAGE_SIZE, max_pages - 1)
    pages = tl.load(table_ptr + sequence * table_stride0 + page_index * table_stride1, mask=valid, other=0)
    rows = tl.minimum(tl.maximum(pages.to(tl.int64) * PAGE_SIZE + positions % PAGE_SIZE, 0), num_rows - 1)
    return tl.where(valid, rows, 0)


@triton.jit
def split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, window_left, q_tokens, BLOCK_N: tl.constexpr):
    """[start, end) of split `split` of `sequence`: NUM_SPLITS equal chunks of the positions its q_tokens
    queries (the last q_tokens positions) attend: 0 .. seq_len - 1, or with window_left >= 0 from the first
    query's position - window_left on; each chunk rounded up to whole BLOCK_N tiles (a split past the end is
    empty: end <= start)."""
    seq_len = tl.load(seq_lens_ptr + sequence * stride_sl)
    first = tl.where(window_left >= 0, tl.maximum(seq_len - q_tokens - window_left, 0), 0)
    chunk = tl.cdiv(tl.cdiv(seq_len - first, num_splits), BLOCK_N) * BLOCK_N
    start = first + split * chunk
    return start, tl.minimum(start + chunk, seq_len)


def split_k(out, splits: int, launch, lse=None):
    """Run `launch(partial, partial_lse)` (a kernel over `splits` splits writing `out` [B, H, Dv] directly with
    one split, else fp32 partials) and merge the partials into `out` (and their log-sum-exp into `lse` [B, H],
    natural log, when given; with one split the kernel writes it); returns `out`."""
    partial, partial_lse = split_partials(out, splits)
    launch(partial, partial_lse)
    if splits > 1:
        merge_splits(partial, partial_lse, out, lse)
    return out


def merge_splits(partial: torch.Tensor, partial_lse: torch.Tensor, out: torch.Tensor, lse=None) -> None:
    """out[b, h] = sum_s w_s partial[b, h, s] / sum_s w_s, w_s = exp2(lse_s - max_s lse_s) (base-2 lse).
    partial [B, H, S, Dv] fp32 contiguous, partial_lse [B, H, S]; out [B, H, Dv] any strides; lse (optional)
    new contiguous fp32 [B, H]: log(sum_s 2^lse_s), natural log (-inf where every split is empty).
    Grid (B, H, Dv / MERGE_BLOCK_D): a small batch still spreads the partials' read over many SMs
    (B=1, 16 MLA heads, 128 splits: 4 MiB of partials in 64 programs, not 16)."""
    batch, heads, splits, width = partial.shape
    block_d = min(next_power_of_2(width), MERGE_BLOCK_D)
    _merge_kernel[(batch, heads, cdiv(width, block_d))](
        partial,
        partial_lse,
        out,
        lse if lse is not None else partial_lse,
        out.stride(0),
        out.stride(1),
        out.stride(2),
        heads,
        splits,
        width,
        SPLITS_PAD=next_power_of_2(splits),
        BLOCK_D=block_d,
        WRITE_LSE=lse is not None,
        num_warps=4,
    )


@cached
@triton.jit
def _merge_kernel(
    partial_ptr,
    partial_lse_ptr,
    out_ptr,
    lse_ptr,
    stride_ob,
    stride_oh,
    stride_od,
    heads,
    splits,
    width,
    SPLITS_PAD: tl.constexpr,
    BLOCK_D: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    sequence = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    chunk = tl.program_id(2)
    slot = sequence * heads + head
    offs_s = tl.arange(0, SPLITS_PAD)
    lse = tl.load(partial_lse_ptr + slot * splits + offs_s, mask=offs_s < splits, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    weights = tl.math.exp2(lse - top)
    total = tl.sum(weights, 0)
    if WRITE_LSE:  # once per (sequence, head): the first head-dim chunk's program
        merged_lse = tl.where(total == 0.0, float("-inf"), (top + tl.math.log2(total)) * 0.6931471805599453)
        tl.store(lse_ptr + slot, merged_lse, mask=chunk == 0)
    weights = weights / tl.where(total == 0.0, 1.0, total)  # a NaN partial stays NaN
    offs_d = chunk * BLOCK_D + tl.arange(0, BLOCK_D)
    values = tl.load(
        partial_ptr + (slot * splits + offs_s)[:, None] * width + offs_d[None, :],
        mask=(offs_s < splits)[:, None] & (offs_d < width)[None, :],
        other=0.0,
    )
    merged = tl.sum(values * weights[:, None], 0)
    tl.store(
        out_ptr + sequence * stride_ob + head * stride_oh + offs_d * stride_od,
        merged.to(out_ptr.dtype.element_ty),
        mask=offs_d < width,
    )
