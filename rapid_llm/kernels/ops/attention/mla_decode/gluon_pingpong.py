"""native/mla_decode_gluon_pingpong: attention.mla_decode for 64+ query heads in Gluon (sm90), warp-specialised.

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

Grid (B, cdiv(Hq, 64), splits), split bounds and partials as native/mla_decode's; 64 heads a program, one
program per SM. Why two partitions: if both warpgroups ran every step of every tile together, the tensor
cores would idle while the softmax runs. Here (the schedule of FlashMLA's sm90 dense decode, written anew) the two warpgroups are
separate partitions (gl.warp_specialize) that own alternate tiles of a pair: warpgroup 0 the even tile in
buffer 0, warpgroup 1 the odd tile in buffer 1. Each computes its own tile's logits whole (m64n64, K = 576)
and its own softmax, while the other's products keep the tensor cores busy. O [64 heads, 512] is split by
columns: warpgroup 0 holds O[:, :256], warpgroup 1 O[:, 256:]; each adds its own tile's P (from registers)
times its half of that tile's values, and the other tile's P (from shared memory) times its half of the
other tile's values.

One running row maximum M for both (shared memory), updated in order within a pair:

    warpgroup 0 (tile 2k):   M0 = max(M, rowmax S0),  s0 = 2^(M - M0),   P0 = 2^(S0 - M0)
    warpgroup 1 (tile 2k+1): M1 = max(M0, rowmax S1), s1 = 2^(M0 - M1),  P1 = 2^(S1 - M1),  M = M1
    O[:, :256] = (O[:, :256] s0 + P0 V0[:, :256]) s1 + P1 V1[:, :256]          (warpgroup 0)
    O[:, 256:] = O[:, 256:] s0 s1 + P1 V1[:, 256:] + (P0 s1) V0[:, 256:]      (warpgroup 1; P0 s1 stored by 0)

and each warpgroup's row sums l the same way (added at the end). The handshakes are mbarriers, one phase
a pair: SCALE0 (M0, s0 written), SCALE1 (M1, s1 written), P0 / P1 (that P in its tile's rope slot, whose
rope columns are dead once the logits are done).

Refills: each buffer is three TMA parts (value columns 0-255, 256-511, rope columns), each on its own
barrier. The part a warpgroup's own value product reads is refilled by that warpgroup as soon as that
product is done (buffer 0's columns 0-255 by warpgroup 0, buffer 1's 256-511 by warpgroup 1); the other
value half and the rope slot (P) by the other warpgroup once its product on them is done. The next
tile's logits start on the own half: the product over the half refilled first is issued first.

Tiles: a split's tiles are whole 64-position pages' worth (the row's condition: pages of whole tiles); the last
tile of a sequence may be partial: its logits past the end are masked and its value rows past the end
zeroed in shared memory before any value product (unwritten rows may hold NaN). A split with an odd tile
count gets a masked, zeroed last tile for warpgroup 1 (its rows re-read from the split's last tile).
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

#: Positions per tile and query heads per program.
BLOCK_N = 64
BLOCK_H = 64


@functools.lru_cache(maxsize=None)
def _layouts(dtype: torch.dtype) -> dict:
    element = GL_DTYPES[dtype]
    default = gl.NVMMASharedLayout.get_default_for
    return {
        "half": default([BLOCK_N, VALUE_HALF], element),
        "rope": default([BLOCK_N, MLA_ROPE_DIM], element),
        "DTYPE": element,
        "Q_VALUE_LAYOUT": default([BLOCK_H, VALUE_HALF], element),
        "Q_ROPE_LAYOUT": default([BLOCK_H, MLA_ROPE_DIM], element),
    }


def mla_decode_gluon_pingpong(
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
    """native/mla_decode_gluon_pingpong (unchecked kernel entry: the op's check ran and the row's conditions
    hold). Launch over (B, cdiv(Hq, 64), splits) with 4 warps and one 4-warp worker."""
    batch, num_q_heads, _ = q.shape
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    page_size = int(page_size)
    splits, knobs = _PLANS.get((batch, num_q_heads, page_table.shape[1] * page_size, q.device))

    def launch_kernel(partial, partial_lse):
        layouts = _layouts(latent_cache.dtype)
        boxes = ((VALUE_HALF, layouts["half"]), (MLA_ROPE_DIM, layouts["rope"]))
        halves, rope = _DESCRIPTORS.row_boxes(TensorDescriptor, latent_cache, BLOCK_N, boxes)
        _mla_decode_pingpong_kernel[(batch, cdiv(num_q_heads, BLOCK_H), splits)](
            q,
            halves,
            rope,
            page_table,
            seq_lens,
            out,
            partial,
            partial_lse,
            q.stride(0),
            q.stride(1),
            q.stride(2),
            page_table.stride(0),
            page_table.stride(1),
            seq_lens.stride(0),
            num_q_heads,
            float(sm_scale) * LOG2E,
            splits,
            page_table.shape[1],
            PAGE_SIZE=page_size,
            SINGLE=splits == 1,
            DTYPE=layouts["DTYPE"],
            Q_VALUE_LAYOUT=layouts["Q_VALUE_LAYOUT"],
            Q_ROPE_LAYOUT=layouts["Q_ROPE_LAYOUT"],
            HALF=VALUE_HALF,
            DR=MLA_ROPE_DIM,
            BLOCK_H=BLOCK_H,
            BLOCK_N=BLOCK_N,
            num_warps=4,
            **knobs,
        )

    return split_k(out, splits, launch_kernel)


@gluon.jit
def _q_to_shared(
    q_ptr,
    sequence,
    stride_qb,
    stride_qh,
    stride_qd,
    head0,
    num_q_heads,
    DTYPE: gl.constexpr,
    Q_VALUE_LAYOUT: gl.constexpr,
    Q_ROPE_LAYOUT: gl.constexpr,
    ROWS: gl.constexpr,
    ROPE_ROWS: gl.constexpr,
    BLOCK_H: gl.constexpr,
    HALF: gl.constexpr,
    DR: gl.constexpr,
):
    """The program's BLOCK_H query heads as three [heads, dims] tiles in shared memory (value halves, rope);
    heads past num_q_heads read as zeros. ROWS / ROPE_ROWS: register layouts of [*, HALF] / [*, DR] tiles."""
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ROWS))
    dims = gl.arange(0, HALF, layout=gl.SliceLayout(0, ROWS))
    rows = q_ptr + sequence * stride_qb + gl.expand_dims(heads, 1) * stride_qh
    mask = gl.expand_dims(heads < num_q_heads, 1)
    q_lo = gl.allocate_shared_memory(
        DTYPE,
        [BLOCK_H, HALF],
        Q_VALUE_LAYOUT,
        gl.load(rows + gl.expand_dims(dims, 0) * stride_qd, mask=mask, other=0.0),
    )
    q_hi = gl.allocate_shared_memory(
        DTYPE,
        [BLOCK_H, HALF],
        Q_VALUE_LAYOUT,
        gl.load(rows + gl.expand_dims(HALF + dims, 0) * stride_qd, mask=mask, other=0.0),
    )
    r_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ROPE_ROWS))
    r_dims = 2 * HALF + gl.arange(0, DR, layout=gl.SliceLayout(0, ROPE_ROWS))
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
    return q_lo, q_hi, q_rope


@gluon.jit
def _issue_part(desc, column, bar, dst, row, pred):
    """One TMA part of a tile (a value half or the rope columns) into `dst`, completing on `bar`."""
    mbarrier.expect(bar, desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(desc, [row, column], bar, dst, pred=pred)


@gluon.jit
def _tile_row(
    table_row, table_stride1, max_pages, start, tile, n_tiles, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr
):
    """First cache row of the split's tile `tile`; a tile past the split's last (the odd count's padding tile)
    re-reads the last one (its result is masked away)."""
    return cache_row(table_row, table_stride1, max_pages, start + gl.minimum(tile, n_tiles - 1) * BLOCK_N, PAGE_SIZE)


@gluon.jit
def _masked_logits(s, qk_scale, tile_start, end, S_LAYOUT: gl.constexpr, BLOCK_N: gl.constexpr):
    """S * scale (base 2) with the positions at or past `end` at -inf (only a split's last tile has them)."""
    s = s * qk_scale
    if tile_start + BLOCK_N > end:
        positions = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, S_LAYOUT))
        s = gl.where(gl.expand_dims(positions < end, 0), s, float("-inf"))
    return s


@gluon.jit
def _zero_rows_past_end(values, tile_start, end, BLOCK_N: gl.constexpr, HALF: gl.constexpr):
    """Value rows of a tile at or past `end` set to zero in shared memory (both halves), so P = 0 there cannot
    meet an unwritten (NaN) row in a value product. Only a split's last tile has such rows."""
    if tile_start + BLOCK_N > end:
        chunk_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # [64, 64], 4 warps
        rows = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, chunk_layout))
        keep = gl.expand_dims(rows < end, 1)
        for c in gl.static_range(2 * HALF // 64):
            chunk = values.slice(c * 64, 64, dim=1)
            chunk.store(gl.where(keep, chunk.load(chunk_layout), 0.0).to(values.dtype))
        fence_async_shared()
        gl.thread_barrier()


@gluon.jit
def _own_logits(q_first, q_second, q_rope, first, second, rope, bar_first, bar_second, bar_rope, phase, s):
    """S = Q . C^T of this warpgroup's tile, issued part by part as the parts land: first the value half its
    own value product reads (refilled first), then the other half, then the rope columns. `s`: the previous
    tile's logits, whose registers the product overwrites (use_acc=False: no zero tile held in registers)."""
    mbarrier.wait(bar_first, phase)
    s = warpgroup_mma(q_first, first.permute((1, 0)), s, use_acc=False, is_async=True)
    mbarrier.wait(bar_second, phase)
    s = warpgroup_mma(q_second, second.permute((1, 0)), s, is_async=True)
    mbarrier.wait(bar_rope, phase)
    s = warpgroup_mma(q_rope, rope.permute((1, 0)), s, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(s,))


@gluon.jit
def _even_partition(
    q_lo,
    q_hi,
    q_rope,
    values,
    ropes,
    bar_lo,
    bar_hi,
    bar_rope,
    scale0_ready,
    scale1_ready,
    p0_ready,
    p1_ready,
    l_even_ready,
    l_odd_ready,
    shared_max,
    shared_scale0,
    shared_scale1,
    shared_l_even,
    shared_l_odd,
    halves_desc,
    rope_desc,
    table_row,
    table_stride1,
    max_pages,
    start,
    end,
    n_tiles,
    qk_scale,
    out_ptr,
    partial_ptr,
    sequence,
    head0,
    num_q_heads,
    num_splits,
    split,
    PAGE_SIZE: gl.constexpr,
    SINGLE: gl.constexpr,
    HALF: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    S_LAYOUT: gl.constexpr,
    O_LAYOUT: gl.constexpr,
):
    """Warpgroup 0: the even tiles (buffer 0) and O[:, :HALF]."""
    rows: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    o_rows: gl.constexpr = gl.SliceLayout(1, O_LAYOUT)
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=O_LAYOUT)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=rows)
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=S_LAYOUT)
    own, other = values.index(0), values.index(1)
    for pair in range((n_tiles + 1) // 2):
        phase = pair & 1
        tile_start = start + 2 * pair * BLOCK_N
        s = _own_logits(
            q_lo,
            q_hi,
            q_rope,
            own.slice(0, HALF, dim=1),
            own.slice(HALF, HALF, dim=1),
            ropes.index(0),
            bar_lo.index(0),
            bar_hi.index(0),
            bar_rope.index(0),
            phase,
            s,
        )
        s = _masked_logits(s, qk_scale, tile_start, end, S_LAYOUT, BLOCK_N)
        m_old = shared_max.load(rows)  # M of the previous pair (warpgroup 1 wrote it before SCALE1)
        m_new = gl.maximum(m_old, gl.max(s, 1))
        scale0 = gl.exp2(m_old - m_new)
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
        l_i = l_i * scale0 + gl.sum(p, 1)
        shared_max.store(m_new)
        shared_scale0.store(scale0)
        gl.thread_barrier()
        mbarrier.arrive(scale0_ready)
        _zero_rows_past_end(own, tile_start, end, BLOCK_N, HALF)
        acc = acc * gl.expand_dims(gl.convert_layout(scale0, o_rows), 1)
        acc = warpgroup_mma(
            gl.convert_layout(p.to(own.dtype), p_operand), own.slice(0, HALF, dim=1), acc, is_async=True
        )
        # P0 rescaled to warpgroup 1's maximum, into this tile's rope slot for warpgroup 1's product
        mbarrier.wait(scale1_ready, phase)
        scale1 = shared_scale1.load(rows)
        ropes.index(0).store((p * gl.expand_dims(scale1, 1)).to(own.dtype))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(p0_ready)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()  # every warp's product is done with columns 0-255 of buffer 0: the next even tile's
        more = 2 * pair + 2 < n_tiles
        next_row = _tile_row(table_row, table_stride1, max_pages, start, 2 * pair + 2, n_tiles, PAGE_SIZE, BLOCK_N)
        _issue_part(halves_desc, 0, bar_lo.index(0), own.slice(0, HALF, dim=1), next_row, more)
        acc = acc * gl.expand_dims(gl.convert_layout(scale1, o_rows), 1)
        l_i = l_i * scale1
        mbarrier.wait(p1_ready, phase)
        acc = warpgroup_mma(ropes.index(1), other.slice(0, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()  # done with buffer 1's columns 0-255 and its rope slot (P1): the next odd tile's
        more_odd = 2 * pair + 2 < n_tiles  # a next pair (its odd tile may be the padding tile)
        odd_row = _tile_row(table_row, table_stride1, max_pages, start, 2 * pair + 3, n_tiles, PAGE_SIZE, BLOCK_N)
        _issue_part(halves_desc, 0, bar_lo.index(1), other.slice(0, HALF, dim=1), odd_row, more_odd)
        _issue_part(rope_desc, 2 * HALF, bar_rope.index(1), ropes.index(1), odd_row, more_odd)
    l_total = _both_row_sums(l_i, shared_l_even, shared_l_odd, l_even_ready, l_odd_ready, rows)
    _store_half(
        acc,
        gl.where(l_total == 0.0, 1.0, l_total),
        0,
        out_ptr,
        partial_ptr,
        sequence,
        head0,
        num_q_heads,
        num_splits,
        split,
        SINGLE,
        HALF,
        BLOCK_H,
        O_LAYOUT,
    )


@gluon.jit
def _odd_partition(
    q_lo,
    q_hi,
    q_rope,
    values,
    ropes,
    bar_lo,
    bar_hi,
    bar_rope,
    scale0_ready,
    scale1_ready,
    p0_ready,
    p1_ready,
    l_even_ready,
    l_odd_ready,
    shared_max,
    shared_scale0,
    shared_scale1,
    shared_l_even,
    shared_l_odd,
    halves_desc,
    rope_desc,
    table_row,
    table_stride1,
    max_pages,
    start,
    end,
    n_tiles,
    qk_scale,
    out_ptr,
    partial_ptr,
    partial_lse_ptr,
    sequence,
    head0,
    num_q_heads,
    num_splits,
    split,
    PAGE_SIZE: gl.constexpr,
    SINGLE: gl.constexpr,
    HALF: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    S_LAYOUT: gl.constexpr,
    O_LAYOUT: gl.constexpr,
):
    """Warpgroup 1: the odd tiles (buffer 1) and O[:, HALF:]; writes the split's log-sum-exp."""
    rows: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
    o_rows: gl.constexpr = gl.SliceLayout(1, O_LAYOUT)
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=O_LAYOUT, k_width=2)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=O_LAYOUT)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=rows)
    m_i = gl.full([BLOCK_H], -1.0e30, gl.float32, layout=rows)
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=S_LAYOUT)
    own, other = values.index(1), values.index(0)
    for pair in range((n_tiles + 1) // 2):
        phase = pair & 1
        tile_start = start + (2 * pair + 1) * BLOCK_N
        s = _own_logits(
            q_hi,
            q_lo,
            q_rope,
            own.slice(HALF, HALF, dim=1),
            own.slice(0, HALF, dim=1),
            ropes.index(1),
            bar_hi.index(1),
            bar_lo.index(1),
            bar_rope.index(1),
            phase,
            s,
        )
        s = _masked_logits(s, qk_scale, tile_start, end, S_LAYOUT, BLOCK_N)
        mbarrier.wait(scale0_ready, phase)
        m_mid = shared_max.load(rows)
        scale0 = shared_scale0.load(rows)
        m_i = gl.maximum(m_mid, gl.max(s, 1))
        scale1 = gl.exp2(m_mid - m_i)
        p = gl.exp2(s - gl.expand_dims(m_i, 1))
        shared_max.store(m_i)
        shared_scale1.store(scale1)
        gl.thread_barrier()
        mbarrier.arrive(scale1_ready)
        both = scale0 * scale1
        l_i = l_i * both + gl.sum(p, 1)
        _zero_rows_past_end(own, tile_start, end, BLOCK_N, HALF)
        acc = acc * gl.expand_dims(gl.convert_layout(both, o_rows), 1)
        acc = warpgroup_mma(
            gl.convert_layout(p.to(own.dtype), p_operand), own.slice(HALF, HALF, dim=1), acc, is_async=True
        )
        ropes.index(1).store(p.to(own.dtype))  # P1 into this tile's rope slot for warpgroup 0's product
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(p1_ready)
        mbarrier.wait(p0_ready, phase)
        acc = warpgroup_mma(ropes.index(0), other.slice(HALF, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        gl.thread_barrier()  # done with buffer 1's columns 256-511: the next odd tile's
        more_odd = 2 * pair + 2 < n_tiles
        odd_row = _tile_row(table_row, table_stride1, max_pages, start, 2 * pair + 3, n_tiles, PAGE_SIZE, BLOCK_N)
        _issue_part(halves_desc, HALF, bar_hi.index(1), own.slice(HALF, HALF, dim=1), odd_row, more_odd)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        gl.thread_barrier()  # done with buffer 0's columns 256-511 and its rope slot (P0): the next even tile's
        more = 2 * pair + 2 < n_tiles
        next_row = _tile_row(table_row, table_stride1, max_pages, start, 2 * pair + 2, n_tiles, PAGE_SIZE, BLOCK_N)
        _issue_part(halves_desc, HALF, bar_hi.index(0), other.slice(HALF, HALF, dim=1), next_row, more)
        _issue_part(rope_desc, 2 * HALF, bar_rope.index(0), ropes.index(0), next_row, more)
    l_total = _both_row_sums(l_i, shared_l_odd, shared_l_even, l_odd_ready, l_even_ready, rows)
    l_safe = gl.where(l_total == 0.0, 1.0, l_total)
    _store_half(
        acc,
        l_safe,
        HALF,
        out_ptr,
        partial_ptr,
        sequence,
        head0,
        num_q_heads,
        num_splits,
        split,
        SINGLE,
        HALF,
        BLOCK_H,
        O_LAYOUT,
    )
    if not SINGLE:
        heads = head0 + gl.arange(0, BLOCK_H, layout=rows)
        lse = gl.where(l_total == 0.0, float("-inf"), m_i + gl.log2(l_safe))
        gl.store(partial_lse_ptr + (sequence * num_q_heads + heads) * num_splits + split, lse, mask=heads < num_q_heads)


@gluon.jit
def _both_row_sums(l_i, mine, theirs, mine_ready, theirs_ready, ROWS: gl.constexpr):
    """The row sums of both warpgroups: this one's stored and announced on `mine_ready`, the other's awaited
    on `theirs_ready` (one phase: once a launch) and added."""
    mine.store(l_i)
    gl.thread_barrier()
    mbarrier.arrive(mine_ready)
    mbarrier.wait(theirs_ready, 0)
    return l_i + theirs.load(ROWS)


@gluon.jit
def _store_half(
    acc,
    l_safe,
    column0,
    out_ptr,
    partial_ptr,
    sequence,
    head0,
    num_q_heads,
    num_splits,
    split,
    SINGLE: gl.constexpr,
    HALF: gl.constexpr,
    BLOCK_H: gl.constexpr,
    O_LAYOUT: gl.constexpr,
):
    """A warpgroup's half O[:, column0 : column0 + HALF] = acc / l (l_safe: the row sums, 1 where none) into out
    (SINGLE: new contiguous [B, Hq, 2 * HALF]) or the split's fp32 partial [B, Hq, splits, 2 * HALF]."""
    o = acc / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, O_LAYOUT)), 1)
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, O_LAYOUT))
    dims = gl.expand_dims(column0 + gl.arange(0, HALF, layout=gl.SliceLayout(0, O_LAYOUT)), 0)
    head_valid = gl.expand_dims(heads < num_q_heads, 1)
    if SINGLE:
        rows = out_ptr + (sequence * num_q_heads + gl.expand_dims(heads, 1)) * (2 * HALF)
        gl.store(rows + dims, o.to(out_ptr.dtype.element_ty), mask=head_valid)
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        gl.store(partial_ptr + gl.expand_dims(slots, 1) * (2 * HALF) + dims, o, mask=head_valid)


@cached
@gluon.jit
def _mla_decode_pingpong_kernel(
    q_ptr,
    halves_desc,
    rope_desc,
    table_ptr,
    seq_lens_ptr,
    out_ptr,
    partial_ptr,
    partial_lse_ptr,
    stride_qb,
    stride_qh,
    stride_qd,
    table_stride0,
    table_stride1,
    stride_sl,
    num_q_heads,
    qk_scale,
    num_splits,
    max_pages,
    PAGE_SIZE: gl.constexpr,
    SINGLE: gl.constexpr,
    DTYPE: gl.constexpr,
    Q_VALUE_LAYOUT: gl.constexpr,
    Q_ROPE_LAYOUT: gl.constexpr,
    HALF: gl.constexpr,
    DR: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    WORKER_REGISTERS: gl.constexpr,
):
    # one warpgroup's products: S [64 heads, 64 positions] and its half of O [64 heads, 256]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16])
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # [*, 256] tiles, 4 warps
    rope_rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # [*, 64] tiles
    vector_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    sequence = gl.program_id(0).to(gl.int64)
    head0 = gl.program_id(1) * BLOCK_H
    split = gl.program_id(2)
    seq_len = gl.load(seq_lens_ptr + sequence * stride_sl)
    chunk = gl.cdiv(gl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N  # decode.split_bounds' rule
    start = split * chunk
    end = gl.minimum(start + chunk, seq_len)
    n_tiles = gl.cdiv(gl.maximum(end - start, 0), BLOCK_N)
    table_row = table_ptr + sequence * table_stride0

    # Q [heads, dims] in shared memory: both warpgroups' logit products read it (heads past Hq as zeros)
    q_lo, q_hi, q_rope = _q_to_shared(
        q_ptr,
        sequence,
        stride_qb,
        stride_qh,
        stride_qd,
        head0,
        num_q_heads,
        DTYPE,
        Q_VALUE_LAYOUT,
        Q_ROPE_LAYOUT,
        rows_layout,
        rope_rows_layout,
        BLOCK_H,
        HALF,
        DR,
    )

    # two tile buffers (value columns [positions, 2 * HALF], rope columns), a barrier per part and buffer
    values = gl.allocate_shared_memory(DTYPE, [2, BLOCK_N, 2 * HALF], halves_desc.layout)
    ropes = gl.allocate_shared_memory(DTYPE, [2, BLOCK_N, DR], rope_desc.layout)
    bar_lo = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    bar_hi = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    bar_rope = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    handshakes = gl.allocate_shared_memory(gl.int64, [6, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bar_lo.index(i), count=1)
        mbarrier.init(bar_hi.index(i), count=1)
        mbarrier.init(bar_rope.index(i), count=1)
    for i in gl.static_range(6):
        mbarrier.init(handshakes.index(i), count=1)
    shared_max = gl.allocate_shared_memory(
        gl.float32,
        [BLOCK_H],
        vector_layout,
        gl.full([BLOCK_H], -1.0e30, gl.float32, layout=gl.SliceLayout(1, rows_layout)),
    )
    shared_scale0 = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vector_layout)
    shared_scale1 = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vector_layout)
    shared_l_even = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vector_layout)
    shared_l_odd = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vector_layout)
    fence_async_shared()
    gl.thread_barrier()
    # the first pair's tiles (the second re-reads the first when the split has one tile)
    for side in gl.static_range(2):
        row = _tile_row(table_row, table_stride1, max_pages, start, side, n_tiles, PAGE_SIZE, BLOCK_N)
        _issue_part(halves_desc, 0, bar_lo.index(side), values.index(side).slice(0, HALF, dim=1), row, n_tiles > 0)
        _issue_part(
            halves_desc, HALF, bar_hi.index(side), values.index(side).slice(HALF, HALF, dim=1), row, n_tiles > 0
        )
        _issue_part(rope_desc, 2 * HALF, bar_rope.index(side), ropes.index(side), row, n_tiles > 0)

    gl.warp_specialize(
        [
            (
                _even_partition,
                (
                    q_lo,
                    q_hi,
                    q_rope,
                    values,
                    ropes,
                    bar_lo,
                    bar_hi,
                    bar_rope,
                    handshakes.index(0),
                    handshakes.index(1),
                    handshakes.index(2),
                    handshakes.index(3),
                    handshakes.index(4),
                    handshakes.index(5),
                    shared_max,
                    shared_scale0,
                    shared_scale1,
                    shared_l_even,
                    shared_l_odd,
                    halves_desc,
                    rope_desc,
                    table_row,
                    table_stride1,
                    max_pages,
                    start,
                    end,
                    n_tiles,
                    qk_scale,
                    out_ptr,
                    partial_ptr,
                    sequence,
                    head0,
                    num_q_heads,
                    num_splits,
                    split,
                    PAGE_SIZE,
                    SINGLE,
                    HALF,
                    BLOCK_H,
                    BLOCK_N,
                    s_layout,
                    o_layout,
                ),
            ),
            (
                _odd_partition,
                (
                    q_lo,
                    q_hi,
                    q_rope,
                    values,
                    ropes,
                    bar_lo,
                    bar_hi,
                    bar_rope,
                    handshakes.index(0),
                    handshakes.index(1),
                    handshakes.index(2),
                    handshakes.index(3),
                    handshakes.index(4),
                    handshakes.index(5),
                    shared_max,
                    shared_scale0,
                    shared_scale1,
                    shared_l_even,
                    shared_l_odd,
                    halves_desc,
                    rope_desc,
                    table_row,
                    table_stride1,
                    max_pages,
                    start,
                    end,
                    n_tiles,
                    qk_scale,
                    out_ptr,
                    partial_ptr,
                    partial_lse_ptr,
                    sequence,
                    head0,
                    num_q_heads,
                    num_splits,
                    split,
                    PAGE_SIZE,
                    SINGLE,
                    HALF,
                    BLOCK_H,
                    BLOCK_N,
                    s_layout,
                    o_layout,
                ),
            ),
        ],
        [4],
        [WORKER_REGISTERS],
    )


__all__ = ["BLOCK_H", "BLOCK_N", "mla_decode_gluon_pingpong"]


def _plan(batch, num_q_heads, capacity, device) -> tuple[int, dict]:
    """(splits, the kernel's other launch knobs): launch.gluon_pingpong's, computed once per call sizes."""
    knobs = launch.gluon_pingpong(batch, num_q_heads, capacity, device)
    return knobs.pop("splits"), knobs


#: _plan per call sizes (launch.gluon_pingpong applies launch_override itself).
_PLANS = LaunchPolicy(None, _plan)
#: The latent cache's two descriptors, reused while the cache lives (built per call, they cost more than the launch).
_DESCRIPTORS = DescriptorCache()
