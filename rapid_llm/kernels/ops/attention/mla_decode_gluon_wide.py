"""MLA decode for 64+ query heads in Gluon (sm90): 64 heads per program, two warpgroups splitting each product.

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

Opt-in ("GLUON_WIDE" in a launch config) for Hq >= 64 on sm90: mla_decode_gluon_pingpong.py, the
warp-specialised schedule, serves there and runs faster (mla_decode.launch_config's docstring has both
kernels' H200 runs); this one stays opt-in as the sweeps' reference.

Why: at Hq = 128 the op is compute-bound (2 * 128 * (576 + 512) FLOPs per 1152 cache bytes). The Triton
TMA kernel (mla_decode_tma.py) holds 64 heads with 8 warps, and Triton lays the [64 heads, 64 positions]
logits out as [8, 1] warps: both warpgroups compute the whole logit product (1.5x the FLOPs), and every
product is waited on before the next (277.5 us at B=64 L=4096 in graph replay, FlashMLA 136.9). Here the
two warpgroups split the products instead: the logits S [64, 64] by positions (warps [4, 2]: each
warpgroup 32 positions; the row maximum and sum combine across them), the value products by columns
(each warpgroup 128 of each 256-column half of O).

    S [64 heads, 64]      = Q [64, 576] . C^T [576, 64]            (three products: 256 + 256 + 64 columns)
    O [64 heads, 512]    += P [64, 64] . C[:, :512]                (P from shared memory: both halves)

Shared memory: Q (72 KiB, the logits' A operand), a ring of two whole latent tiles (value halves and rope
columns, 72 KiB a slot, the three TMA boxes of a tile issued together as in mla_decode_gluon.py's
ROPE_RING), and P [64, 64] written into the finished tile's rope slot (its rope columns are dead once the
logits are done; the same 8 KiB shape and layout). The split's tail tile by masked pointer loads into
the ring's first slot. Same split-K mapping and partials as mla_decode.py.

Two schedule switches (constexprs; launch_config sets both for long splits, LEAN alone for short ones):
- EARLY_NEXT: tile t+1's logits are issued right behind tile t's value products, so the tensor cores run
  them back to back while the warps wait for the values, refill slot t and loop; the last whole tile is
  peeled off so no logits are issued past it. (Issuing them before tile t's softmax would need tile t+1's
  successor in flight as well: a third 72 KiB slot, past the 227 KiB of shared memory.)
- LEAN: each warpgroup takes its half of a row's maximum within its warps and the halves meet in a
  [2, 64] exchange behind one barrier (the generic cross-warp reduction takes three); the row sums are kept
  elementwise ([64, 64], 16 registers a thread) and reduced once after the last tile. 7 barriers a tile
  instead of 11 (SASS of the loop).
"""

from __future__ import annotations

import functools

import torch

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from . import MLA_LATENT_DIM, MLA_VALUE_DIM
from .mla_decode_gluon import _GL_DTYPES, _cache_row

_HALF = MLA_VALUE_DIM // 2
_ROPE_DIM = MLA_LATENT_DIM - MLA_VALUE_DIM
#: Positions per tile and query heads per program.
BLOCK_N = 64
BLOCK_H = 64


@functools.lru_cache(maxsize=None)
def _layouts(dtype: torch.dtype) -> dict:
    element = _GL_DTYPES[dtype]
    default = gl.NVMMASharedLayout.get_default_for
    return {"value": default([BLOCK_N, 2 * _HALF], element), "rope": default([BLOCK_N, _ROPE_DIM], element),
            "DTYPE": element, "Q_VALUE_LAYOUT": default([BLOCK_H, _HALF], element),
            "Q_ROPE_LAYOUT": default([BLOCK_H, _ROPE_DIM], element)}


def launch(q, latent_cache, page_table, seq_lens, page_size, sm_scale_log2, out, partial, partial_lse, splits,
           head_blocks, early_next=False, lean=False):
    """Launch over (B, cdiv(Hq, 64), splits); mla_decode.mla_decode allocates and merges. `early_next`: issue
    each tile's logits behind the previous tile's value products (EARLY_NEXT); `lean`: row maxima through one
    exchange barrier, row sums once at the end (LEAN)."""
    layouts = _layouts(latent_cache.dtype)
    shape, strides = list(latent_cache.shape), [latent_cache.stride(0), 1]
    values = TensorDescriptor(latent_cache, shape, strides, [BLOCK_N, 2 * _HALF], layouts["value"])
    rope = TensorDescriptor(latent_cache, shape, strides, [BLOCK_N, _ROPE_DIM], layouts["rope"])
    _mla_decode_gluon_wide_kernel[(q.shape[0], head_blocks, splits)](
        q, values, rope, latent_cache, page_table, seq_lens, out, partial, partial_lse,
        q.stride(0), q.stride(1), q.stride(2), latent_cache.stride(0), latent_cache.stride(1),
        page_table.stride(0), page_table.stride(1), seq_lens.stride(0), q.shape[1], sm_scale_log2,
        splits, latent_cache.shape[0], page_table.shape[1],
        PAGE_SIZE=int(page_size), SINGLE=splits == 1, DTYPE=layouts["DTYPE"], Q_VALUE_LAYOUT=layouts["Q_VALUE_LAYOUT"],
        Q_ROPE_LAYOUT=layouts["Q_ROPE_LAYOUT"], HALF=_HALF, DR=_ROPE_DIM, BLOCK_H=BLOCK_H, BLOCK_N=BLOCK_N,
        EARLY_NEXT=bool(early_next), LEAN=bool(lean), num_warps=8,
    )


# The helpers below restate steps of mla_decode_gluon.py's kernel (which inlines them): that kernel's binary is
# the one its H200 evidence ran, and its refactor onto these helpers changes its SASS (register allocation of
# the partial stores), so the two share them only after a GPU parity run of both.


@gluon.jit
def _split_range(seq_lens_ptr, sequence, stride_sl, num_splits, split, BLOCK_N: gl.constexpr):
    """[start, end) of this split (decode.split_bounds' rule) and its count of whole BLOCK_N tiles."""
    seq_len = gl.load(seq_lens_ptr + sequence * stride_sl)
    chunk = gl.cdiv(gl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = gl.minimum(start + chunk, seq_len)
    return start, end, gl.maximum(end - start, 0) // BLOCK_N


@gluon.jit
def _q_to_shared(q_ptr, sequence, stride_qb, stride_qh, stride_qd, head0, num_q_heads, DTYPE: gl.constexpr,
                 Q_VALUE_LAYOUT: gl.constexpr, Q_ROPE_LAYOUT: gl.constexpr, ROWS: gl.constexpr,
                 ROPE_ROWS: gl.constexpr, BLOCK_H: gl.constexpr, HALF: gl.constexpr, DR: gl.constexpr):
    """The program's BLOCK_H query heads as three [heads, dims] tiles in shared memory (value halves, rope);
    heads past num_q_heads read as zeros. ROWS / ROPE_ROWS: register layouts of [*, HALF] / [*, DR] tiles."""
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ROWS))
    dims = gl.arange(0, HALF, layout=gl.SliceLayout(0, ROWS))
    rows = q_ptr + sequence * stride_qb + gl.expand_dims(heads, 1) * stride_qh
    mask = gl.expand_dims(heads < num_q_heads, 1)
    q_lo = gl.allocate_shared_memory(DTYPE, [BLOCK_H, HALF], Q_VALUE_LAYOUT,
                                     gl.load(rows + gl.expand_dims(dims, 0) * stride_qd, mask=mask, other=0.0))
    q_hi = gl.allocate_shared_memory(DTYPE, [BLOCK_H, HALF], Q_VALUE_LAYOUT,
                                     gl.load(rows + gl.expand_dims(HALF + dims, 0) * stride_qd, mask=mask, other=0.0))
    r_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ROPE_ROWS))
    r_dims = 2 * HALF + gl.arange(0, DR, layout=gl.SliceLayout(0, ROPE_ROWS))
    q_rope = gl.allocate_shared_memory(
        DTYPE, [BLOCK_H, DR], Q_ROPE_LAYOUT,
        gl.load(q_ptr + sequence * stride_qb + gl.expand_dims(r_heads, 1) * stride_qh
                + gl.expand_dims(r_dims, 0) * stride_qd, mask=gl.expand_dims(r_heads < num_q_heads, 1), other=0.0))
    return q_lo, q_hi, q_rope


@gluon.jit
def _tile_rows(table_row, table_stride1, max_pages, num_rows, stride_row, cache_ptr, tail, end,
               PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, LAYOUT: gl.constexpr):
    """Row pointers [BLOCK_N, 1] of the cache rows of positions tail .. tail + BLOCK_N through the page table,
    clamped into the cache, and which of them lie before `end`."""
    positions = tail + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, LAYOUT))
    valid = positions < end
    pages = gl.load(table_row + gl.minimum(positions // PAGE_SIZE, max_pages - 1) * table_stride1, mask=valid,
                    other=0)
    rows = gl.minimum(gl.maximum(pages.to(gl.int64) * PAGE_SIZE + positions % PAGE_SIZE, 0), num_rows - 1)
    return cache_ptr + gl.expand_dims(rows, 1) * stride_row, gl.expand_dims(valid, 1)


@gluon.jit
def _tail_to_shared(lo, hi, rope, cache_ptr, table_row, table_stride1, max_pages, num_rows, stride_row, stride_d,
                    tail, end, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, HALF: gl.constexpr, DR: gl.constexpr,
                    ROWS: gl.constexpr, ROPE_ROWS: gl.constexpr):
    """The split's partial tail tile into ring slots whose copies have all been consumed: masked pointer loads
    (zeros at or past `end`: no unwritten row is read), then the fence and barrier the products' asynchronous
    reads need."""
    row_ptrs, valid = _tile_rows(table_row, table_stride1, max_pages, num_rows, stride_row, cache_ptr, tail, end,
                                 PAGE_SIZE, BLOCK_N, ROWS)
    dims = gl.arange(0, HALF, layout=gl.SliceLayout(0, ROWS))
    lo.store(gl.load(row_ptrs + gl.expand_dims(dims, 0) * stride_d, mask=valid, other=0.0))
    hi.store(gl.load(row_ptrs + gl.expand_dims(HALF + dims, 0) * stride_d, mask=valid, other=0.0))
    r_ptrs, r_valid = _tile_rows(table_row, table_stride1, max_pages, num_rows, stride_row, cache_ptr, tail, end,
                                 PAGE_SIZE, BLOCK_N, ROPE_ROWS)
    r_cols = 2 * HALF + gl.arange(0, DR, layout=gl.SliceLayout(0, ROPE_ROWS))
    rope.store(gl.load(r_ptrs + gl.expand_dims(r_cols, 0) * stride_d, mask=r_valid, other=0.0))
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _store_result(out_lo, out_hi, l_i, l_safe, m_i, out_ptr, partial_ptr, partial_lse_ptr, sequence, heads,
                  lse_heads, num_q_heads, num_splits, split, dims, HEAD_AXIS: gl.constexpr, SINGLE: gl.constexpr,
                  HALF: gl.constexpr):
    """O (already divided by l) into out (SINGLE) or the split's partial with its base-2 lse. `heads` / `dims`
    index O's HEAD_AXIS and the other axis in O's layout; `lse_heads` indexes l_i / l_safe / m_i."""
    head_index = gl.expand_dims(heads, HEAD_AXIS)
    head_valid = gl.expand_dims(heads < num_q_heads, HEAD_AXIS)
    if SINGLE:
        # out: new contiguous [B, Hq, 2 * HALF]
        rows = out_ptr + (sequence * num_q_heads + head_index) * (2 * HALF)
        gl.store(rows + dims, out_lo.to(out_ptr.dtype.element_ty), mask=head_valid)
        gl.store(rows + HALF + dims, out_hi.to(out_ptr.dtype.element_ty), mask=head_valid)
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        rows = partial_ptr + gl.expand_dims(slots, HEAD_AXIS) * (2 * HALF)
        gl.store(rows + dims, out_lo, mask=head_valid)
        gl.store(rows + HALF + dims, out_hi, mask=head_valid)
        lse = gl.where(l_i > 0.0, m_i + gl.log2(l_safe), float("-inf"))
        gl.store(partial_lse_ptr + (sequence * num_q_heads + lse_heads) * num_splits + split, lse,
                 mask=lse_heads < num_q_heads)


@gluon.jit
def _logits(lo, hi, rope, q_lo, q_hi, q_rope, s_zero):
    """S = Q . C^T of a latent tile in shared memory, issued (three products: value halves, rope); the caller
    waits on the returned accumulator."""
    s = warpgroup_mma(q_lo, lo.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma(q_hi, hi.permute((1, 0)), s, is_async=True)
    return warpgroup_mma(q_rope, rope.permute((1, 0)), s, is_async=True)


@gluon.jit
def _row_max(s, exchange, LEAN: gl.constexpr, S_LAYOUT: gl.constexpr):
    """Row maxima of S [heads, positions] (each warpgroup holds half of every row's positions). LEAN: each
    warpgroup reduces its half within its warps (S as [heads, 2, positions / 2]: axis 1 is the warpgroup) and
    the two halves meet in `exchange` [2 * heads] behind one barrier, instead of the generic cross-warp
    reduction's three."""
    if LEAN:
        halves = gl.max(gl.reshape(s, [s.shape[0], 2, s.shape[1] // 2]), 2)  # [heads, 2]: within each warp
        heads: gl.constexpr = s.shape[0]
        exchange.reshape([2, heads]).permute((1, 0)).store(halves)
        gl.thread_barrier()
        rows: gl.constexpr = gl.SliceLayout(1, S_LAYOUT)
        return gl.maximum(exchange.slice(0, heads).load(rows), exchange.slice(heads, heads).load(rows))
    else:
        return gl.max(s, 1)


@gluon.jit
def _softmax_into_rope(s, rope, valid, m_i, l_i, qk_scale, exchange, MASKED: gl.constexpr, LEAN: gl.constexpr,
                       S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """The online softmax of waited logits S along positions (axis 1; both warpgroups' halves combine in the
    row maxima), P written over the tile's rope columns (dead once S is done: the same [64, 64] shape and
    layout), and the accumulator's rescale factor in O's layout. l_i: the row sums [heads], or with LEAN their
    elementwise terms [heads, positions] (summed once after the last tile: no cross-warp sum per tile)."""
    s = s * qk_scale
    if MASKED:
        s = gl.where(gl.expand_dims(valid, 0), s, float("-inf"))
    m_new = gl.maximum(m_i, _row_max(s, exchange, LEAN, S_LAYOUT))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    if LEAN:
        l_i = l_i * gl.expand_dims(alpha, 1) + p
    else:
        l_i = l_i * alpha + gl.sum(p, 1)
    if not LEAN:  # (LEAN: the exchange barrier in _row_max follows every warpgroup's wait on its logits)
        gl.thread_barrier()  # both warpgroups' logit products have read the rope columns: P may replace them
    rope.store(p.to(rope.dtype))
    fence_async_shared()
    gl.thread_barrier()  # all of P is in shared memory before either warpgroup's value products read it
    alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    return alpha_o, m_new, l_i


@gluon.jit
def _values(values, rope, acc_lo, acc_hi, alpha_o):
    """O = O * alpha + P . C_v, P from the tile's rope slot, `values` the tile's [positions, 2 * HALF] value
    columns, issued (the caller waits). Each warpgroup holds 128 columns of each half of O."""
    half: gl.constexpr = values.shape[1] // 2
    acc_lo = warpgroup_mma(rope, values.slice(0, half, dim=1), acc_lo * alpha_o, is_async=True)
    acc_hi = warpgroup_mma(rope, values.slice(half, half, dim=1), acc_hi * alpha_o, is_async=True)
    return acc_lo, acc_hi


@gluon.jit
def _arm_tile(value_desc, rope_desc, ready_values, ready_rope, slot, pred):
    """Expect a tile's bytes on slot `slot`'s two barriers (value columns, rope columns). Armed before the
    barrier that frees the slot, so that no barrier has to sit between the expect and the copies."""
    mbarrier.expect(ready_values.index(slot), value_desc.block_type.nbytes, pred=pred)
    mbarrier.expect(ready_rope.index(slot), rope_desc.block_type.nbytes, pred=pred)


@gluon.jit
def _copy_tile(value_desc, rope_desc, value_ring, rope_ring, ready_values, ready_rope, slot, row, pred):
    """One whole latent tile into ring slot `slot`: its value columns in one copy ([positions, 2 * HALF]) and
    its rope columns in another, each completing on its own barrier (copies into one allocation or onto one
    barrier get a CTA barrier between them from Triton's shared-memory hazard analysis)."""
    half: gl.constexpr = value_desc.block_type.shape[1] // 2
    tma.async_copy_global_to_shared(value_desc, [row, 0], ready_values.index(slot), value_ring.index(slot),
                                    pred=pred)
    tma.async_copy_global_to_shared(rope_desc, [row, 2 * half], ready_rope.index(slot), rope_ring.index(slot),
                                    pred=pred)


@gluon.jit
def _wait_tile(ready_values, ready_rope, slot, phase, pred=True):
    mbarrier.wait(ready_values.index(slot), phase, pred=pred)
    mbarrier.wait(ready_rope.index(slot), phase, pred=pred)


@gluon.jit
def _tile(values, rope, q_lo, q_hi, q_rope, s_zero, valid, acc_lo, acc_hi, m_i, l_i, qk_scale, exchange,
          MASKED: gl.constexpr, LEAN: gl.constexpr, S_LAYOUT: gl.constexpr, O_LAYOUT: gl.constexpr):
    """One latent tile in shared memory, each step waited before the next: S = Q . C^T, the online softmax,
    P into the rope slot, O += P . C_v."""
    half: gl.constexpr = values.shape[1] // 2
    s = _logits(values.slice(0, half, dim=1), values.slice(half, half, dim=1), rope, q_lo, q_hi, q_rope, s_zero)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    alpha_o, m_i, l_i = _softmax_into_rope(s, rope, valid, m_i, l_i, qk_scale, exchange, MASKED, LEAN, S_LAYOUT,
                                           O_LAYOUT)
    acc_lo, acc_hi = _values(values, rope, acc_lo, acc_hi, alpha_o)
    acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(acc_lo, acc_hi))
    return acc_lo, acc_hi, m_i, l_i


@gluon.jit
def _mla_decode_gluon_wide_kernel(
    q_ptr, value_desc, rope_desc, cache_ptr, table_ptr, seq_lens_ptr, out_ptr, partial_ptr, partial_lse_ptr,
    stride_qb, stride_qh, stride_qd, stride_row, stride_d, table_stride0, table_stride1, stride_sl,
    num_q_heads, qk_scale,
    num_splits, num_rows, max_pages,
    PAGE_SIZE: gl.constexpr, SINGLE: gl.constexpr, DTYPE: gl.constexpr,
    Q_VALUE_LAYOUT: gl.constexpr, Q_ROPE_LAYOUT: gl.constexpr,
    HALF: gl.constexpr, DR: gl.constexpr, BLOCK_H: gl.constexpr, BLOCK_N: gl.constexpr,
    EARLY_NEXT: gl.constexpr, LEAN: gl.constexpr,
):
    STAGES: gl.constexpr = 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, BLOCK_N // 2, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, HALF // 2, 16])
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [8, 1], [1, 0])  # [*, 256] tiles
    rope_rows_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])  # [*, 64] tiles

    sequence = gl.program_id(0).to(gl.int64)
    head0 = gl.program_id(1) * BLOCK_H
    split = gl.program_id(2)
    start, end, n_full = _split_range(seq_lens_ptr, sequence, stride_sl, num_splits, split, BLOCK_N)
    table_row = table_ptr + sequence * table_stride0
    # Q [heads, dims]: the logit products' A operand, the value columns in shared memory and the rope columns
    # in registers (16 a thread; variants/call48: 1-2% faster than re-reading them from shared memory each tile)
    q_lo, q_hi, q_rope = _q_to_shared(q_ptr, sequence, stride_qb, stride_qh, stride_qd, head0, num_q_heads, DTYPE,
                                      Q_VALUE_LAYOUT, Q_ROPE_LAYOUT, rows_layout, rope_rows_layout, BLOCK_H, HALF, DR)
    q_rope = q_rope.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))

    # a slot: the tile's value columns [positions, 2 * HALF] (the two TMA boxes side by side) and rope columns
    value_ring = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, 2 * HALF], value_desc.layout)
    rope_ring = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, DR], rope_desc.layout)
    ready_values = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ready_rope = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_values.index(i), count=1)
        mbarrier.init(ready_rope.index(i), count=1)
    fence_async_shared()
    gl.thread_barrier()

    for i in gl.static_range(STAGES):
        row = _cache_row(table_row, table_stride1, max_pages, start + i * BLOCK_N, PAGE_SIZE)
        _arm_tile(value_desc, rope_desc, ready_values, ready_rope, i, n_full > i)
        _copy_tile(value_desc, rope_desc, value_ring, rope_ring, ready_values, ready_rope, i, row, n_full > i)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    if LEAN:
        l_i = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    else:
        l_i = gl.zeros([BLOCK_H], gl.float32, layout=gl.SliceLayout(1, s_layout))
    # the two warpgroups' row maxima of a tile (LEAN): [2 * BLOCK_H], warpgroup-major
    exchange = gl.allocate_shared_memory(gl.float32, [2 * BLOCK_H], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    acc_lo = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    acc_hi = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    always = gl.full([BLOCK_N], 1, gl.int1, layout=gl.SliceLayout(0, s_layout))
    if EARLY_NEXT:
        # tile t + 1's logits are issued right behind tile t's value products (the tensor cores run them back
        # to back); the value products are waited first, slot t refilled, then the logits. The last whole tile
        # is peeled off: no logits are issued past it.
        _wait_tile(ready_values, ready_rope, 0, 0, pred=n_full > 0)
        first = value_ring.index(0)
        s = warpgroup_mma_wait(num_outstanding=0,
                               deps=(_logits(first.slice(0, HALF, dim=1), first.slice(HALF, HALF, dim=1),
                                             rope_ring.index(0), q_lo, q_hi, q_rope, s_zero), ))
        for t in range(n_full - 1):  # (the logits above are dropped when the split has no whole tile)
            slot = t % STAGES
            row_next = _cache_row(table_row, table_stride1, max_pages, start + (t + STAGES) * BLOCK_N, PAGE_SIZE)
            alpha_o, m_i, l_i = _softmax_into_rope(s, rope_ring.index(slot), always, m_i, l_i, qk_scale, exchange,
                                                   False, LEAN, s_layout, o_layout)
            acc_lo, acc_hi = _values(value_ring.index(slot), rope_ring.index(slot), acc_lo, acc_hi, alpha_o)
            following = (t + 1) % STAGES
            _wait_tile(ready_values, ready_rope, following, ((t + 1) // STAGES) & 1)
            values_next = value_ring.index(following)
            s_next = _logits(values_next.slice(0, HALF, dim=1), values_next.slice(HALF, HALF, dim=1),
                             rope_ring.index(following), q_lo, q_hi, q_rope, s_zero)
            acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=3, deps=(acc_lo, acc_hi))
            _arm_tile(value_desc, rope_desc, ready_values, ready_rope, slot, t + STAGES < n_full)
            gl.thread_barrier()  # both warpgroups' value products are done with this slot: tile t + STAGES may land
            _copy_tile(value_desc, rope_desc, value_ring, rope_ring, ready_values, ready_rope, slot, row_next,
                       t + STAGES < n_full)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_next, ))
        if n_full > 0:  # the last whole tile: its logits are waited in s
            last = (n_full - 1) % STAGES
            alpha_o, m_i, l_i = _softmax_into_rope(s, rope_ring.index(last), always, m_i, l_i, qk_scale, exchange,
                                                   False, LEAN, s_layout, o_layout)
            acc_lo, acc_hi = _values(value_ring.index(last), rope_ring.index(last), acc_lo, acc_hi, alpha_o)
            acc_lo, acc_hi = warpgroup_mma_wait(num_outstanding=0, deps=(acc_lo, acc_hi))
        gl.thread_barrier()  # every product is done with the slots the tail tile overwrites
    else:
        for t in range(n_full):
            slot = t % STAGES
            row_next = _cache_row(table_row, table_stride1, max_pages, start + (t + STAGES) * BLOCK_N, PAGE_SIZE)
            _wait_tile(ready_values, ready_rope, slot, (t // STAGES) & 1)
            acc_lo, acc_hi, m_i, l_i = _tile(value_ring.index(slot), rope_ring.index(slot), q_lo, q_hi, q_rope,
                                             s_zero, always, acc_lo, acc_hi, m_i, l_i, qk_scale, exchange, False,
                                             LEAN, s_layout, o_layout)
            _arm_tile(value_desc, rope_desc, ready_values, ready_rope, slot, t + STAGES < n_full)
            gl.thread_barrier()  # both warpgroups are done with this slot before tile t + STAGES lands in it
            _copy_tile(value_desc, rope_desc, value_ring, rope_ring, ready_values, ready_rope, slot, row_next,
                       t + STAGES < n_full)

    tail = start + n_full * BLOCK_N
    if tail < end:  # the split's partial tile: masked pointer loads into slot 0, whose copies are consumed
        tail_values = value_ring.index(0)
        _tail_to_shared(tail_values.slice(0, HALF, dim=1), tail_values.slice(HALF, HALF, dim=1), rope_ring.index(0),
                        cache_ptr, table_row, table_stride1, max_pages, num_rows, stride_row, stride_d, tail, end,
                        PAGE_SIZE, BLOCK_N, HALF, DR, rows_layout, rope_rows_layout)
        s_valid = (tail + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))) < end
        acc_lo, acc_hi, m_i, l_i = _tile(tail_values, rope_ring.index(0), q_lo, q_hi, q_rope, s_zero, s_valid,
                                         acc_lo, acc_hi, m_i, l_i, qk_scale, exchange, True, LEAN,
                                         s_layout, o_layout)

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready_values.index(i))
        mbarrier.invalidate(ready_rope.index(i))

    if LEAN:
        l_i = gl.sum(l_i, 1)
    l_safe = gl.where(l_i > 0.0, l_i, 1.0)
    l_o = gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout)), 1)
    heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, o_layout))
    lse_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, s_layout))
    dims = gl.expand_dims(gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout)), 0)
    _store_result(acc_lo / l_o, acc_hi / l_o, l_i, l_safe, m_i, out_ptr, partial_ptr, partial_lse_ptr, sequence, heads,
                  lse_heads, num_q_heads, num_splits, split, dims, 1, SINGLE, HALF)


__all__ = ["BLOCK_H", "BLOCK_N", "launch"]
