"""MLA decode with TMA tile loads (sm90+): attention.mla_decode on Hopper when the cache allows it.

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

Same mapping, split-K, grid and results as mla_decode.py's kernel (one program per sequence, block of
BLOCK_H query heads and split; online softmax with base-2 logits; partials merged by
decode.merge_splits). What differs is how the latent tiles reach shared memory. A whole tile of
BLOCK_N positions of a split (every position < the split's end) lies inside one page when the page
size is a multiple of BLOCK_N (splits and tiles start at multiples of BLOCK_N), so its rows are the
contiguous cache rows page * P + (position % P) ...: the Tensor Memory Accelerator copies it from a
2D descriptor of the cache ([rows, 576]) with one instruction per box and no per-element address
arithmetic or load masks in registers (the pointer kernel's SASS is mostly ISETP / SEL / IMAD for
the 576-wide masked rows). Boxes are at most 256 elements wide, so a tile arrives as three boxes:
columns 0-255 and 256-511 (the value half of each product: two [BLOCK_H, 256] accumulators) and the
64 rope columns 512-575. The split's last, partial tile keeps masked pointer loads, so no row past the
sequence's end (possibly NaN: unwritten cache) reaches a product.

Descriptors need a 16-byte aligned base and row stride, unit column stride and fp16/bf16
(`tma_ready`); other caches (fp32, odd strides, page sizes that are not a multiple of BLOCK_N, pre-sm90,
the CPU) take mla_decode.py's pointer kernel. A page id past the cache (unchecked on CUDA) makes the
box read rows past the descriptor's end, which TMA fills with zeros: an unspecified result, never a
fault.

Host cost: Triton encodes the two descriptors at every launch. On the H200's host one eager call at B=1
enqueues in 95 us against the pointer kernel's 83 (mla_tma/host_profile.txt), which only shows where
the GPU work is shorter than the host's (B=1 outside a CUDA graph); graph replay has no host part.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device_facts import capability_major
from ..launch_fitting import launch_fitting
from . import MLA_LATENT_DIM, MLA_VALUE_DIM
from .decode import split_bounds
from .prefill import paged_rows, softmax_step

try:  # triton >= 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton: the pointer kernel serves
    TensorDescriptor = None

#: Width of one value box (TMA boxes are at most 256 elements per dimension).
_HALF = MLA_VALUE_DIM // 2
_ROPE_DIM = MLA_LATENT_DIM - MLA_VALUE_DIM


def tma_ready(latent_cache: torch.Tensor, page_size: int, block_n: int) -> bool:
    """True when the [rows, 576] latent cache can be read through 2D TMA descriptors in BLOCK_N-row boxes:
    CUDA sm90+, fp16/bf16, unit column stride, 16-byte aligned base and row stride, rows that do not
    overlap, and a page size that is a multiple of BLOCK_N (a whole tile is one page's contiguous rows)."""
    if TensorDescriptor is None or latent_cache.device.type != "cuda":
        return False
    if capability_major(latent_cache.device) < 9:
        return False
    if latent_cache.dtype not in (torch.float16, torch.bfloat16) or latent_cache.shape[0] == 0:
        return False
    size = latent_cache.element_size()
    row_stride, column_stride = latent_cache.stride()
    return (column_stride == 1 and row_stride >= MLA_LATENT_DIM and (row_stride * size) % 16 == 0
            and latent_cache.data_ptr() % 16 == 0 and int(page_size) % block_n == 0)


def descriptors(latent_cache: torch.Tensor, block_n: int) -> tuple:
    """Two descriptors of the whole [rows, 576] cache: value boxes [BLOCK_N, 256] (loaded at columns 0 and
    256) and rope boxes [BLOCK_N, 64] (loaded at column 512)."""
    shape = list(latent_cache.shape)
    strides = [latent_cache.stride(0), 1]
    return (TensorDescriptor(latent_cache, shape=shape, strides=strides, block_shape=[block_n, _HALF]),
            TensorDescriptor(latent_cache, shape=shape, strides=strides, block_shape=[block_n, _ROPE_DIM]))


def launch(q, latent_cache, page_table, seq_lens, page_size, sm_scale_log2, out, partial, partial_lse, splits,
           head_blocks, config):
    """Launch the TMA kernel over (B, head_blocks, splits); mla_decode.mla_decode allocates and merges."""
    values, rope = descriptors(latent_cache, config["BLOCK_N"])
    launch_fitting(_mla_decode_tma_kernel, (q.shape[0], head_blocks, splits), q.device,
        q, values, rope, latent_cache, page_table, seq_lens, out, partial, partial_lse,
        q.stride(0), q.stride(1), q.stride(2), latent_cache.stride(0), latent_cache.stride(1),
        page_table.stride(0), page_table.stride(1), seq_lens.stride(0), q.shape[1], sm_scale_log2,
        splits, latent_cache.shape[0], page_table.shape[1],
        PAGE_SIZE=int(page_size), SINGLE=splits == 1, HALF=_HALF, DR=_ROPE_DIM, **config,
    )


@triton.jit
def _tail_tile(acc_lo, acc_hi, m_i, l_i, q_lo, q_hi, q_rope, positions, end, sequence, cache_ptr, table_ptr,
               stride_row, stride_d, table_stride0, table_stride1, num_rows, max_pages, qk_scale,
               PAGE_SIZE: tl.constexpr, HALF: tl.constexpr, DR: tl.constexpr):
    """The split's partial tile: positions at or past `end` load nothing and get -inf logits."""
    valid = positions < end
    rows = paged_rows(positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages,
                      PAGE_SIZE)
    row_ptrs = cache_ptr + rows[:, None] * stride_row
    offs_h = tl.arange(0, HALF)
    c_lo = tl.load(row_ptrs + offs_h[None, :] * stride_d, mask=valid[:, None], other=0.0)
    c_hi = tl.load(row_ptrs + (HALF + offs_h)[None, :] * stride_d, mask=valid[:, None], other=0.0)
    c_rope = tl.load(row_ptrs + (2 * HALF + tl.arange(0, DR))[None, :] * stride_d, mask=valid[:, None], other=0.0)
    qk = tl.dot(q_lo, tl.trans(c_lo))
    qk = tl.dot(q_hi, tl.trans(c_hi), qk)
    qk = tl.dot(q_rope, tl.trans(c_rope), qk)
    qk = tl.where(valid[None, :], qk * qk_scale, float("-inf"))
    p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i)
    p = p.to(c_lo.dtype)
    acc_lo = tl.dot(p, c_lo, acc_lo * alpha[:, None])
    acc_hi = tl.dot(p, c_hi, acc_hi * alpha[:, None])
    return acc_lo, acc_hi, m_i, l_i


@triton.jit
def _mla_decode_tma_kernel(
    q_ptr, value_desc, rope_desc, cache_ptr, table_ptr, seq_lens_ptr, out_ptr, partial_ptr, partial_lse_ptr,
    stride_qb, stride_qh, stride_qd, stride_row, stride_d, table_stride0, table_stride1, stride_sl,
    num_q_heads, qk_scale,
    num_splits, num_rows, max_pages,
    PAGE_SIZE: tl.constexpr, SINGLE: tl.constexpr, HALF: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
):
    sequence = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    head_valid = heads < num_q_heads
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, BLOCK_N)

    offs_h = tl.arange(0, HALF)
    q_rows = q_ptr + sequence * stride_qb + heads[:, None] * stride_qh
    q_lo = tl.load(q_rows + offs_h[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_hi = tl.load(q_rows + (HALF + offs_h)[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_rope = tl.load(q_rows + (2 * HALF + tl.arange(0, DR))[None, :] * stride_qd, mask=head_valid[:, None],
                     other=0.0)

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc_lo = tl.zeros((BLOCK_H, HALF), dtype=tl.float32)
    acc_hi = tl.zeros((BLOCK_H, HALF), dtype=tl.float32)
    full_end = start + (tl.maximum(end - start, 0) // BLOCK_N) * BLOCK_N
    table_row = table_ptr + sequence * table_stride0
    # Whole tiles: one page's contiguous rows each (PAGE_SIZE % BLOCK_N == 0), copied by TMA.
    for tile in range(start, full_end, BLOCK_N):
        page = tl.load(table_row + tl.minimum(tile // PAGE_SIZE, max_pages - 1) * table_stride1)
        row = page * PAGE_SIZE + tile % PAGE_SIZE
        c_lo = value_desc.load([row, 0])
        c_hi = value_desc.load([row, HALF])
        c_rope = rope_desc.load([row, 2 * HALF])
        qk = tl.dot(q_lo, c_lo.T)
        qk = tl.dot(q_hi, c_hi.T, qk)
        qk = tl.dot(q_rope, c_rope.T, qk)
        p, alpha, m_i, l_i = softmax_step(qk * qk_scale, m_i, l_i)
        p = p.to(c_lo.dtype)
        acc_lo = tl.dot(p, c_lo, acc_lo * alpha[:, None])
        acc_hi = tl.dot(p, c_hi, acc_hi * alpha[:, None])
    for tile in range(full_end, end, BLOCK_N):  # at most one: the split's partial tile
        acc_lo, acc_hi, m_i, l_i = _tail_tile(acc_lo, acc_hi, m_i, l_i, q_lo, q_hi, q_rope, tile + tl.arange(0, BLOCK_N),
                                              end, sequence, cache_ptr, table_ptr, stride_row, stride_d,
                                              table_stride0, table_stride1, num_rows, max_pages, qk_scale,
                                              PAGE_SIZE, HALF, DR)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    out_lo = acc_lo / l_safe[:, None]
    out_hi = acc_hi / l_safe[:, None]
    if SINGLE:
        # out: new contiguous [B, Hq, 2 * HALF]
        out_rows = out_ptr + (sequence * num_q_heads + heads)[:, None] * (2 * HALF)
        tl.store(out_rows + offs_h[None, :], out_lo.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
        tl.store(out_rows + (HALF + offs_h)[None, :], out_hi.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        partial_rows = partial_ptr + slots[:, None] * (2 * HALF)
        tl.store(partial_rows + offs_h[None, :], out_lo, mask=head_valid[:, None])
        tl.store(partial_rows + (HALF + offs_h)[None, :], out_hi, mask=head_valid[:, None])
        lse = tl.where(l_i > 0.0, m_i + tl.math.log2(l_safe), float("-inf"))
        tl.store(partial_lse_ptr + slots, lse, mask=head_valid)


__all__ = ["launch", "tma_ready"]
