"""native/mla_decode: the pointer kernel of attention.mla_decode (DeepSeek's absorbed MLA over a paged latent cache).

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

q [B, Hq, 576] (512 latent + 64 rope dims), latent_cache [rows, 576] paged like attention.decode, out
[B, Hq, 512]; any strides. Every query head reads the same latent rows, so one program holds BLOCK_H heads
as the rows of its tiles: per BLOCK_N positions it gathers the latent rows through the page table once,
takes the logits as two tensor-core products (q_nope . c_nope^T + q_rope . c_rope^T) and accumulates
P . c_nope into a [BLOCK_H, 512] fp32 accumulator (online softmax, base-2 logits). Serves any page size,
fp32 and any CUDA sm80+ (and the CPU interpreter); the TMA and Gluon rows serve Hopper where the cache allows.

A sliding window (window_left W) keeps the last W + 1 positions (the splits cover only those); a soft cap
c > 0 caps the base-2 logits (tiles.soft_cap).

Split-K: NUM_SPLITS equal chunks of each sequence's own length (device side), the split count from
host-known sizes (graph-capturable), partials merged by tiles.merge_splits. Grid: (B, cdiv(Hq, BLOCK_H),
NUM_SPLITS).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import LaunchPolicy, cached, cdiv
from ...launch_fitting import launch_fitting
from .. import MLA_ROPE_DIM, MLA_VALUE_DIM
from ..tiles import LOG2E, paged_rows, soft_cap, soft_cap_base2, softmax_step, split_bounds, split_k
from . import launch


def mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, window_left=-1, logits_soft_cap=0.0):
    """native/mla_decode (unchecked kernel entry: the op's check ran)."""
    batch, num_q_heads, _ = q.shape
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    page_size = int(page_size)
    capacity = page_table.shape[1] * page_size
    if window_left >= 0:  # a query reads at most window_left + 1 positions: split that many
        capacity = min(capacity, window_left + 1)
    splits, config = _PLANS.get((batch, num_q_heads, capacity, q.dtype, q.device, page_size))

    def launch_kernel(partial, partial_lse):
        launch_fitting(
            _mla_decode_kernel,
            (batch, cdiv(num_q_heads, config["BLOCK_H"]), splits),
            q.device,
            q,
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
            int(window_left),
            soft_cap_base2(logits_soft_cap),
            splits,
            latent_cache.shape[0],
            page_table.shape[1],
            SOFT_CAP=logits_soft_cap > 0,
            **config,
        )

    return split_k(out, splits, launch_kernel)


def _plan(batch, num_q_heads, capacity, dtype, device, page_size) -> tuple[int, dict]:
    """(splits, the kernel's keyword arguments) of a call: launch.pointer's knobs and the constexprs."""
    knobs = launch.pointer(batch, num_q_heads, capacity, dtype, device)
    splits = knobs.pop("splits")
    constants = {"PAGE_SIZE": page_size, "SINGLE": splits == 1, "DV": MLA_VALUE_DIM, "DR": MLA_ROPE_DIM}
    return splits, {**constants, "PRECISION": "ieee" if dtype == torch.float32 else "tf32", **knobs}


#: _plan per call sizes, built once (launch.pointer applies launch_override itself).
_PLANS = LaunchPolicy(None, _plan)


@triton.jit
def _latent_tile(
    acc,
    m_i,
    l_i,
    q_nope,
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
    offs_v,
    offs_r,
    qk_scale,
    cap,
    PAGE_SIZE: tl.constexpr,
    PRECISION: tl.constexpr,
    MASKED: tl.constexpr,
    SOFT_CAP: tl.constexpr,
):
    """One tile of latent rows at `positions`: logits q . c (base 2; SOFT_CAP: capped at `cap`), online
    softmax, acc += P . c[:, :512]. MASKED: positions at or past `end` load nothing and get -inf logits;
    otherwise every position is valid (a whole tile of the split) and the loads carry no mask."""
    valid = positions < end
    rows = paged_rows(
        positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages, PAGE_SIZE
    )
    row_ptrs = cache_ptr + rows[:, None] * stride_row
    if MASKED:
        c_nope = tl.load(row_ptrs + offs_v[None, :] * stride_d, mask=valid[:, None], other=0.0)
        c_rope = tl.load(row_ptrs + offs_r[None, :] * stride_d, mask=valid[:, None], other=0.0)
    else:
        c_nope = tl.load(row_ptrs + offs_v[None, :] * stride_d)
        c_rope = tl.load(row_ptrs + offs_r[None, :] * stride_d)
    qk = tl.dot(q_nope, tl.trans(c_nope), input_precision=PRECISION)
    qk += tl.dot(q_rope, tl.trans(c_rope), input_precision=PRECISION)
    qk = qk * qk_scale
    if SOFT_CAP:
        qk = soft_cap(qk, cap)
    if MASKED:
        qk = tl.where(valid[None, :], qk, float("-inf"))
    p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i)
    acc = tl.dot(p.to(c_nope.dtype), c_nope, acc * alpha[:, None], input_precision=PRECISION)
    return acc, m_i, l_i


@cached
@triton.jit
def _mla_decode_kernel(
    q_ptr,
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
    window_left,
    cap,
    num_splits,
    num_rows,
    max_pages,
    PAGE_SIZE: tl.constexpr,
    SINGLE: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    DV: tl.constexpr,
    DR: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UNMASKED_BODY: tl.constexpr = False,
):
    sequence = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    head_valid = heads < num_q_heads
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, window_left, 1, BLOCK_N)

    offs_v = tl.arange(0, DV)
    offs_r = DV + tl.arange(0, DR)
    q_rows = q_ptr + sequence * stride_qb + heads[:, None] * stride_qh
    q_nope = tl.load(q_rows + offs_v[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_rope = tl.load(q_rows + offs_r[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    offs_n = tl.arange(0, BLOCK_N)

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, DV), dtype=tl.float32)
    # UNMASKED_BODY: whole tiles of the split first, without load or logit masks, then the tail, masked.
    full_end = start
    if UNMASKED_BODY:
        full_end = start + (tl.maximum(end - start, 0) // BLOCK_N) * BLOCK_N
    for tile in range(start, full_end, BLOCK_N):
        acc, m_i, l_i = _latent_tile(
            acc,
            m_i,
            l_i,
            q_nope,
            q_rope,
            tile + offs_n,
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
            offs_v,
            offs_r,
            qk_scale,
            cap,
            PAGE_SIZE,
            PRECISION,
            False,
            SOFT_CAP,
        )
    for tile in range(full_end, end, BLOCK_N):
        acc, m_i, l_i = _latent_tile(
            acc,
            m_i,
            l_i,
            q_nope,
            q_rope,
            tile + offs_n,
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
            offs_v,
            offs_r,
            qk_scale,
            cap,
            PAGE_SIZE,
            PRECISION,
            True,
            SOFT_CAP,
        )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    result = acc / l_safe[:, None]
    if SINGLE:
        # out: new contiguous [B, Hq, DV]
        out_rows = out_ptr + (sequence * num_q_heads + heads)[:, None] * DV
        tl.store(out_rows + offs_v[None, :], result.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        tl.store(partial_ptr + slots[:, None] * DV + offs_v[None, :], result, mask=head_valid[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(partial_lse_ptr + slots, lse, mask=head_valid)
