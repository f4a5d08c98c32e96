"""native/mla_decode_gluon: attention.mla_decode for few query heads (Hq < 64: one GPU of TP >= 2) in Gluon (sm90).

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

The split-K mapping, split bounds and partial layout of native/mla_decode (one program per sequence, block
of 16 heads and split; base-2 online softmax in fp32; partials merged by tiles.merge_splits), with the
products transposed: the 64 positions of a latent tile are the m64 rows of warpgroup products and the 16
heads their n16 columns (16 heads as rows are too few for a warpgroup product):

    S^T [64, 16]     = C [64, 576] . Q^T [576, 16]          (three products: 256 + 256 + 64 columns)
    O^T [512, 16]   += C[:, :512]^T [512, 64] . P^T [64, 16]

Why Gluon: the copies are issued by hand into a ring of STAGES slots, each completing on its own mbarrier,
and a slot is refilled with the tile STAGES ahead as soon as its products finish, so STAGES - 1 tiles are
in flight while one is computed (Triton's pipeliner issued each copy after the previous tile's products).
Ring shapes (launch.gluon): ROPE_RING, STAGES = 2 slots of whole tiles (value halves and rope columns,
72 KiB a slot); or STAGES = 3 slots of value halves and one rope slot. Q (18 KiB) and P^T (2 KiB) also
sit in shared memory.

Tiles: with pages of whole 64-position tiles (the row's condition) a whole tile of a split is 64
contiguous cache rows: TMA boxes. The split's partial tail tile is read by masked pointer loads (no row
past the sequence's end reaches a product: unwritten rows may hold NaN). A page id past the cache
(unchecked on CUDA) makes a box read rows past the descriptor's end, which TMA fills with zeros: an
unspecified result, never a fault.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ...fast_launch import DescriptorCache, LaunchPolicy, cached, cdiv
from .. import MLA_ROPE_DIM, MLA_VALUE_DIM
from ..gluon_tiles import GL_DTYPES, cache_row
from ..tiles import LOG2E, split_k
from . import VALUE_HALF, launch

#: Positions per tile: the m64 rows of one warpgroup product.
BLOCK_N = 64
#: Query heads per program: the products' n16 columns.
BLOCK_H = 16


@functools.lru_cache(maxsize=None)
def _layouts(dtype: torch.dtype) -> dict:
    """Shared-memory layouts per element type (computed once: they are part of every launch)."""
    element = GL_DTYPES[dtype]
    default = gl.NVMMASharedLayout.get_default_for
    return {
        "value": default([BLOCK_N, VALUE_HALF], element),
        "rope": default([BLOCK_N, MLA_ROPE_DIM], element),
        "DTYPE": element,
        "Q_VALUE_LAYOUT": default([BLOCK_H, VALUE_HALF], element),
        "Q_ROPE_LAYOUT": default([BLOCK_H, MLA_ROPE_DIM], element),
        "P_LAYOUT": default([BLOCK_N, BLOCK_H], element),
    }


def mla_decode_gluon(
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
    """native/mla_decode_gluon (unchecked kernel entry: the op's check ran and the row's conditions hold)."""
    batch, num_q_heads, _ = q.shape
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    page_size = int(page_size)
    splits, knobs = _PLANS.get((batch, num_q_heads, page_table.shape[1] * page_size, q.device))

    def launch_kernel(partial, partial_lse):
        layouts = _layouts(latent_cache.dtype)
        boxes = ((VALUE_HALF, layouts["value"]), (MLA_ROPE_DIM, layouts["rope"]))
        values, rope = _DESCRIPTORS.row_boxes(TensorDescriptor, latent_cache, BLOCK_N, boxes)
        _mla_decode_gluon_kernel[(batch, cdiv(num_q_heads, BLOCK_H), splits)](
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
            PAGE_SIZE=page_size,
            SINGLE=splits == 1,
            DTYPE=layouts["DTYPE"],
            Q_VALUE_LAYOUT=layouts["Q_VALUE_LAYOUT"],
            Q_ROPE_LAYOUT=layouts["Q_ROPE_LAYOUT"],
            P_LAYOUT=layouts["P_LAYOUT"],
            HALF=VALUE_HALF,
            DR=MLA_ROPE_DIM,
            BLOCK_H=BLOCK_H,
            BLOCK_N=BLOCK_N,
            num_warps=4,
            **knobs,
        )

    return split_k(out, splits, launch_kernel)


@gluon.jit
def _issue_values(value_desc, rope_desc, lo_ring, hi_ring, rope_ring, ready, slot, row, pred, ROPE_RING: gl.constexpr):
    """The value halves of one tile (and with ROPE_RING its rope columns: the whole row span in one go) into
    ring slot `slot`, completing on ready[slot]."""
    bar = ready.index(slot)
    NBYTES: gl.constexpr = 2 * value_desc.block_type.nbytes + (rope_desc.block_type.nbytes if ROPE_RING else 0)
    mbarrier.expect(bar, NBYTES, pred=pred)
    half = value_desc.block_type.shape[1]
    tma.async_copy_global_to_shared(value_desc, [row, 0], bar, lo_ring.index(slot), pred=pred)
    tma.async_copy_global_to_shared(value_desc, [row, half], bar, hi_ring.index(slot), pred=pred)
    if ROPE_RING:
        tma.async_copy_global_to_shared(rope_desc, [row, 2 * half], bar, rope_ring.index(slot), pred=pred)


@gluon.jit
def _issue_rope(rope_desc, rope_smem, rope_ready, row, pred, HALF: gl.constexpr):
    mbarrier.expect(rope_ready, rope_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(rope_desc, [row, 2 * HALF], rope_ready, rope_smem, pred=pred)


@gluon.jit
def _logits(lo, hi, rope_smem, q_lo, q_hi, q_rope, s_zero):
    """S^T = C . Q^T for one tile in shared memory: three products issued back to back, one wait."""
    s = warpgroup_mma(lo, q_lo.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma(hi, q_hi.permute((1, 0)), s, is_async=True)
    s = warpgroup_mma(rope_smem, q_rope.permute((1, 0)), s, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(s,))


@gluon.jit
def _softmax_and_values(s, valid, acc_lo, acc_hi, m_i, l_i, lo, hi, p_smem, qk_scale, MASKED: gl.constexpr):
    """Online softmax along the tile's positions (axis 0) per head, then O^T += C_v^T . P^T."""
    s = s * qk_scale
    if MASKED:
        s = gl.where(gl.expand_dims(valid, 1), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 0))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - gl.expand_dims(m_safe, 0))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 0)
    p_smem.store(p.to(p_smem.dtype))
    fence_async_shared()
    gl.thread_barrier()  # every warp's P^T rows are in shared memory before the product reads them
    acc_lo = warpgroup_mma(lo.permute((1, 0)), p_smem, acc_lo * gl.expand_dims(alpha, 0), is_async=True)
    acc_hi = warpgroup_mma(hi.permute((1, 0)), p_smem, acc_hi * gl.expand_dims(alpha, 0), is_async=True)
    acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(acc_lo, acc_hi))
    return acc_lo, acc_hi, m_new, l_i


@cached
@gluon.jit
def _mla_decode_gluon_kernel(
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
    PAGE_SIZE: gl.constexpr,
    SINGLE: gl.constexpr,
    DTYPE: gl.constexpr,
    Q_VALUE_LAYOUT: gl.constexpr,
    Q_ROPE_LAYOUT: gl.constexpr,
    P_LAYOUT: gl.constexpr,
    HALF: gl.constexpr,
    DR: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    ROPE_RING: gl.constexpr,
):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16])
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # [*, 256] tiles
    rope_rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # [*, 64] tiles

    sequence = gl.program_id(0).to(gl.int64)
    head0 = gl.program_id(1) * BLOCK_H
    split = gl.program_id(2)
    seq_len = gl.load(seq_lens_ptr + sequence * stride_sl)
    chunk = gl.cdiv(gl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = gl.minimum(start + chunk, seq_len)
    n_full = gl.maximum(end - start, 0) // BLOCK_N
    table_row = table_ptr + sequence * table_stride0

    # Q tiles [heads, dims] in shared memory: the products' B operand (permuted to [dims, heads]).
    q_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, rows_layout))
    q_dims = gl.arange(0, HALF, layout=gl.SliceLayout(0, rows_layout))
    q_rows = q_ptr + sequence * stride_qb + gl.expand_dims(q_heads, 1) * stride_qh
    q_mask = gl.expand_dims(q_heads < num_q_heads, 1)
    q_lo = gl.allocate_shared_memory(
        DTYPE,
        [BLOCK_H, HALF],
        Q_VALUE_LAYOUT,
        gl.load(q_rows + gl.expand_dims(q_dims, 0) * stride_qd, mask=q_mask, other=0.0),
    )
    q_hi = gl.allocate_shared_memory(
        DTYPE,
        [BLOCK_H, HALF],
        Q_VALUE_LAYOUT,
        gl.load(q_rows + gl.expand_dims(HALF + q_dims, 0) * stride_qd, mask=q_mask, other=0.0),
    )
    r_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, rope_rows_layout))
    r_dims = 2 * HALF + gl.arange(0, DR, layout=gl.SliceLayout(0, rope_rows_layout))
    q_rope = gl.allocate_shared_memory(
        DTYPE,
        [BLOCK_H, DR],
        Q_ROPE_LAYOUT,
        gl.load(
            q_ptr
            + sequence * stride_qb
            + gl.expand_dims(r_heads, 1) * stride_qh
            + gl.expand_dims(r_dims, 0) * stride_qd,
            mask=gl.expand_dims(r_heads < num_q_heads, 1),
            other=0.0,
        ),
    )

    lo_ring = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HALF], value_desc.layout)
    hi_ring = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HALF], value_desc.layout)
    gl.static_assert(ROPE_RING or STAGES == 3, "the rope columns' own slot follows the tile rows of a 3-slot ring")
    ROPE_SLOTS: gl.constexpr = STAGES if ROPE_RING else 1
    rope_ring = gl.allocate_shared_memory(DTYPE, [ROPE_SLOTS, BLOCK_N, DR], rope_desc.layout)
    rope_smem = rope_ring.index(0)
    p_smem = gl.allocate_shared_memory(DTYPE, [BLOCK_N, BLOCK_H], P_LAYOUT)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    rope_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    mbarrier.init(rope_ready, count=1)
    fence_async_shared()
    gl.thread_barrier()  # q tiles and barrier inits visible before the products and copies

    # Prologue: the value halves of the first STAGES tiles, the rope columns of the first.
    row_0 = cache_row(table_row, table_stride1, max_pages, start, PAGE_SIZE)
    row_1 = cache_row(table_row, table_stride1, max_pages, start + BLOCK_N, PAGE_SIZE)
    row_2 = cache_row(table_row, table_stride1, max_pages, start + 2 * BLOCK_N, PAGE_SIZE)
    _issue_values(value_desc, rope_desc, lo_ring, hi_ring, rope_ring, ready, 0, row_0, n_full > 0, ROPE_RING)
    _issue_values(value_desc, rope_desc, lo_ring, hi_ring, rope_ring, ready, 1, row_1, n_full > 1, ROPE_RING)
    if STAGES > 2:
        _issue_values(value_desc, rope_desc, lo_ring, hi_ring, rope_ring, ready, 2, row_2, n_full > 2, ROPE_RING)
    if not ROPE_RING:
        _issue_rope(rope_desc, rope_smem, rope_ready, row_0, n_full > 0, HALF)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(0, mma))
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(0, mma))
    acc_lo = gl.zeros([HALF, BLOCK_H], gl.float32, layout=mma)
    acc_hi = gl.zeros([HALF, BLOCK_H], gl.float32, layout=mma)
    s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma)
    always = gl.full([BLOCK_N], 1, gl.int1, layout=gl.SliceLayout(1, mma))
    # rows of the tiles after this one (t + 1, t + 2) ride along: the rope copy of t + 1 needs row_1
    for t in range(n_full):
        slot = t % STAGES
        row_next = cache_row(table_row, table_stride1, max_pages, start + (t + STAGES) * BLOCK_N, PAGE_SIZE)
        mbarrier.wait(ready.index(slot), (t // STAGES) & 1)
        lo = lo_ring.index(slot)
        hi = hi_ring.index(slot)
        if ROPE_RING:
            s = _logits(lo, hi, rope_ring.index(slot), q_lo, q_hi, q_rope, s_zero)
        else:
            mbarrier.wait(rope_ready, t & 1)
            s = _logits(lo, hi, rope_smem, q_lo, q_hi, q_rope, s_zero)
            gl.thread_barrier()  # every warp is done with the rope slot before it is refilled
            _issue_rope(rope_desc, rope_smem, rope_ready, row_1, t + 1 < n_full, HALF)
        acc_lo, acc_hi, m_i, l_i = _softmax_and_values(
            s, always, acc_lo, acc_hi, m_i, l_i, lo, hi, p_smem, qk_scale, False
        )
        gl.thread_barrier()  # every warp is done with this slot before tile t + STAGES lands in it
        _issue_values(
            value_desc, rope_desc, lo_ring, hi_ring, rope_ring, ready, slot, row_next, t + STAGES < n_full, ROPE_RING
        )
        row_1 = row_2
        row_2 = row_next

    # The split's partial tail tile (at most one): masked pointer loads into the ring's first slot, whose
    # copies have all been consumed.
    tail = start + n_full * BLOCK_N
    if tail < end:
        positions = tail + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rows_layout))
        valid = positions < end
        pages = gl.load(
            table_row + gl.minimum(positions // PAGE_SIZE, max_pages - 1) * table_stride1, mask=valid, other=0
        )
        rows = gl.minimum(gl.maximum(pages.to(gl.int64) * PAGE_SIZE + positions % PAGE_SIZE, 0), num_rows - 1)
        row_ptrs = cache_ptr + gl.expand_dims(rows, 1) * stride_row
        dims = gl.arange(0, HALF, layout=gl.SliceLayout(0, rows_layout))
        lo = lo_ring.index(0)
        hi = hi_ring.index(0)
        lo.store(gl.load(row_ptrs + gl.expand_dims(dims, 0) * stride_d, mask=gl.expand_dims(valid, 1), other=0.0))
        hi.store(
            gl.load(row_ptrs + gl.expand_dims(HALF + dims, 0) * stride_d, mask=gl.expand_dims(valid, 1), other=0.0)
        )
        r_positions = tail + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, rope_rows_layout))
        r_valid = r_positions < end
        r_pages = gl.load(
            table_row + gl.minimum(r_positions // PAGE_SIZE, max_pages - 1) * table_stride1, mask=r_valid, other=0
        )
        r_rows = gl.minimum(gl.maximum(r_pages.to(gl.int64) * PAGE_SIZE + r_positions % PAGE_SIZE, 0), num_rows - 1)
        r_cols = 2 * HALF + gl.arange(0, DR, layout=gl.SliceLayout(0, rope_rows_layout))
        rope_smem.store(
            gl.load(
                cache_ptr + gl.expand_dims(r_rows, 1) * stride_row + gl.expand_dims(r_cols, 0) * stride_d,
                mask=gl.expand_dims(r_valid, 1),
                other=0.0,
            )
        )
        fence_async_shared()
        gl.thread_barrier()
        s = _logits(lo, hi, rope_smem, q_lo, q_hi, q_rope, s_zero)
        s_valid = (tail + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))) < end
        acc_lo, acc_hi, m_i, l_i = _softmax_and_values(
            s, s_valid, acc_lo, acc_hi, m_i, l_i, lo, hi, p_smem, qk_scale, True
        )

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    mbarrier.invalidate(rope_ready)

    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    out_lo = acc_lo / gl.expand_dims(l_safe, 0)
    out_hi = acc_hi / gl.expand_dims(l_safe, 0)
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, mma))
    head_valid = gl.expand_dims(heads < num_q_heads, 0)
    dims = gl.expand_dims(gl.arange(0, HALF, layout=gl.SliceLayout(1, mma)), 1)
    if SINGLE:
        # out: new contiguous [B, Hq, 2 * HALF]; element (d, h) of O^T goes to out[b, h, d]
        out_cols = out_ptr + gl.expand_dims(sequence * num_q_heads + heads, 0) * (2 * HALF)
        gl.store(out_cols + dims, out_lo.to(out_ptr.dtype.element_ty), mask=head_valid)
        gl.store(out_cols + HALF + dims, out_hi.to(out_ptr.dtype.element_ty), mask=head_valid)
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        partial_cols = partial_ptr + gl.expand_dims(slots, 0) * (2 * HALF)
        gl.store(partial_cols + dims, out_lo, mask=head_valid)
        gl.store(partial_cols + HALF + dims, out_hi, mask=head_valid)
        lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(l_safe))
        gl.store(partial_lse_ptr + slots, lse, mask=heads < num_q_heads)


__all__ = ["BLOCK_H", "BLOCK_N", "mla_decode_gluon"]


def _plan(batch, num_q_heads, capacity, device) -> tuple[int, dict]:
    """(splits, the kernel's other launch knobs): launch.gluon's, computed once per call sizes."""
    knobs = launch.gluon(batch, num_q_heads, capacity, device)
    return knobs.pop("splits"), knobs


#: _plan per call sizes (launch.gluon applies launch_override itself).
_PLANS = LaunchPolicy(None, _plan)
#: The latent cache's two descriptors, reused while the cache lives (built per call, they cost more than the launch).
_DESCRIPTORS = DescriptorCache()
