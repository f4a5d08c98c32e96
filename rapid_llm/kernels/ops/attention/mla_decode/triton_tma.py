"""native/mla_decode_tma: attention.mla_decode with TMA tile loads (CUDA sm90+, fp16/bf16).

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

Same mapping, split-K, grid and results as native/mla_decode's pointer kernel; what differs is how the
latent tiles reach shared memory. With the page size a multiple of BLOCK_N (the row's condition), a
whole tile of a split lies inside one page: BLOCK_N contiguous cache rows, which the Tensor Memory
Accelerator copies from a 2D descriptor of the cache ([rows, 576]) with one instruction per box and no
per-element address arithmetic. Boxes are at most 256 elements wide, so a tile arrives as three boxes:
columns 0-255 and 256-511 (two [BLOCK_H, 256] accumulators) and the 64 rope columns. The split's last,
partial tile keeps masked pointer loads, so no row past the sequence's end (possibly NaN: unwritten
cache) reaches a product. Layout tag latent:tma (the op's check): unit column stride, 16-byte aligned
base and row stride, rows that do not overlap. A page id past the cache (unchecked on CUDA) makes a box
read rows past the descriptor's end, which TMA fills with zeros: an unspecified result, never a fault.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ...fast_launch import DescriptorCache, LaunchPolicy, cached, cdiv
from ...launch_fitting import launch_fitting
from .. import MLA_ROPE_DIM, MLA_VALUE_DIM
from ..tiles import LOG2E, paged_rows, softmax_step, split_bounds, split_k
from . import VALUE_HALF, launch


def mla_decode_tma(
    q,
    latent_cache,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    window_left=-1,
    logits_soft_cap=0.0,
    num_q_tokens=1,
    latent_scale=None,
):
    """native/mla_decode_tma (unchecked kernel entry: the op's check ran and the row's conditions hold)."""
    batch, num_q_heads, _ = q.shape
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    page_size = int(page_size)
    splits, config = _PLANS.get((batch, num_q_heads, page_table.shape[1] * page_size, q.device, page_size))

    def launch_kernel(partial, partial_lse):
        boxes = ((VALUE_HALF, None), (MLA_ROPE_DIM, None))
        values, rope = _DESCRIPTORS.row_boxes(TensorDescriptor, latent_cache, config["BLOCK_N"], boxes)
        launch_fitting(
            _mla_decode_tma_kernel,
            (batch, cdiv(num_q_heads, config["BLOCK_H"]), splits),
            q.device,
            q,
            values,
            rope,
            latent_cache,
            page_table,
            seq_lens,
            out,
            partial,
            partial_lse,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            latent_cache.stride(0),
            latent_cache.stride(1),
            page_table.stride(0),
            page_table.stride(1),
            seq_lens.stride(0),
            num_q_heads,
            float(sm_scale) * LOG2E,
            splits,
            latent_cache.shape[0],
            page_table.shape[1],
            **config,
        )

    return split_k(out, splits, launch_kernel)


def _plan(batch, num_q_heads, capacity, device, page_size) -> tuple[int, dict]:
    """(splits, the kernel's keyword arguments) of a call: launch.tma's knobs and the constexprs."""
    knobs = launch.tma(batch, num_q_heads, capacity, device)
    splits = knobs.pop("splits")
    return splits, {"PAGE_SIZE": page_size, "SINGLE": splits == 1, "HALF": VALUE_HALF, "DR": MLA_ROPE_DIM, **knobs}


#: _plan per call sizes, built once (launch.tma applies launch_override itself).
_PLANS = LaunchPolicy(None, _plan)
#: The latent cache's two descriptors, reused while the cache lives (built per call, they cost more than the launch).
_DESCRIPTORS = DescriptorCache()


@triton.jit
def _tail_tile(
    acc_lo,
    acc_hi,
    m_i,
    l_i,
    q_lo,
    q_hi,
    q_rope,
    positions,
    end,
    sequence,
    cache_ptr,
    table_ptr,
    stride_row,
    stride_d,
    table_stride0,
    table_stride1,
    num_rows,
    max_pages,
    qk_scale,
    PAGE_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    DR: tl.constexpr,
):
    """The split's partial tile: positions at or past `end` load nothing and get -inf logits."""
    valid = positions < end
    rows = paged_rows(
        positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages, PAGE_SIZE
    )
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


@cached
@triton.jit
def _mla_decode_tma_kernel(
    q_ptr,
    value_desc,
    rope_desc,
    cache_ptr,
    table_ptr,
    seq_lens_ptr,
    out_ptr,
    partial_ptr,
    partial_lse_ptr,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_row,
    stride_d,
    table_stride0,
    table_stride1,
    stride_sl,
    num_q_heads,
    qk_scale,
    num_splits,
    num_rows,
    max_pages,
    PAGE_SIZE: tl.constexpr,
    SINGLE: tl.constexpr,
    HALF: tl.constexpr,
    DR: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    sequence = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    head_valid = heads < num_q_heads
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, -1, 1, BLOCK_N)

    offs_h = tl.arange(0, HALF)
    q_rows = q_ptr + sequence * stride_qb + heads[:, None] * stride_qh
    q_lo = tl.load(q_rows + offs_h[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_hi = tl.load(q_rows + (HALF + offs_h)[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_rope = tl.load(q_rows + (2 * HALF + tl.arange(0, DR))[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)

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
        acc_lo, acc_hi, m_i, l_i = _tail_tile(
            acc_lo,
            acc_hi,
            m_i,
            l_i,
            q_lo,
            q_hi,
            q_rope,
            tile + tl.arange(0, BLOCK_N),
            end,
            sequence,
            cache_ptr,
            table_ptr,
            stride_row,
            stride_d,
            table_stride0,
            table_stride1,
            num_rows,
            max_pages,
            qk_scale,
            PAGE_SIZE,
            HALF,
            DR,
        )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
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
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(partial_lse_ptr + slots, lse, mask=head_valid)


__all__ = ["mla_decode_tma"]
