"""native/mla_decode and native/mla_decode_fp8: the pointer kernel of attention.mla_decode (DeepSeek's absorbed
MLA over a paged latent cache).

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

q [B * n, Hq, 576] (512 latent + 64 rope dims; n = num_q_tokens), latent_cache [rows, 576] paged like
attention.decode, out [B * n, Hq, 512]; any strides. Every query head of every query token reads the same
latent rows, so one program holds BLOCK_H (token, head) rows r = t * Hq + h of one sequence as the rows of
its tiles: per BLOCK_N positions it gathers the latent rows through the page table once, takes the logits as
two tensor-core products (q_nope . c_nope^T + q_rope . c_rope^T) and accumulates P . c_nope into a
[BLOCK_H, 512] fp32 accumulator (online softmax, base-2 logits). Serves any page size, fp32 and any CUDA
sm80+ (and the CPU interpreter); the TMA and Gluon rows serve Hopper where the cache allows.

Several query tokens (MULTI): token t sits at position seq_len - n + t and sees positions up to its own; the
tiles every row sees entirely (before the first token's position) load and multiply without masks.
A sliding window (window_left W) keeps the last W + n positions (the splits cover only those); a soft cap
c > 0 caps the base-2 logits (tiles.soft_cap).

fp8 latent cache (FP8: the cache kvcache.update_mla_buffer_fp8 writes, per-tensor latent_scale s): tiles
load as e4m3 and the products run in fp16 for a bf16 or fp16 q (fp32 for an fp32 q), as native/decode_fp8:
a bf16 q enters fp16 times a power of two (tiles.fp16_range_scale), s and that power fold into the logit
scale, s into the output's normalisation. The bytes read halve.

Split-K: NUM_SPLITS equal chunks of each sequence's own length (device side), the split count from
host-known sizes (graph-capturable), partials merged by tiles.merge_splits. Grid: (B, cdiv(n * Hq,
BLOCK_H), NUM_SPLITS).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...fast_launch import LaunchPolicy, cached, cdiv
from ...launch_fitting import launch_fitting
from .. import MLA_ROPE_DIM, MLA_VALUE_DIM
from ..tiles import (
    LOG2E,
    fp16_range_scale,
    paged_rows,
    soft_cap,
    soft_cap_base2,
    softmax_step,
    split_bounds,
    split_k,
    widen_fp8,
)
from . import launch


def mla_decode(
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
    """native/mla_decode: a latent cache of q's dtype (unchecked kernel entry: the op's check ran)."""
    features = (window_left, logits_soft_cap, num_q_tokens)
    return _run(False, q, latent_cache, page_table, seq_lens, page_size, sm_scale, *features, seq_lens)


def mla_decode_fp8(
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
    """native/mla_decode_fp8: an fp8-e4m3 latent cache, latent_scale its one-element fp32 dequantization scale
    (a device tensor the kernel reads). Unchecked kernel entry: the op's check ran."""
    features = (window_left, logits_soft_cap, num_q_tokens)
    return _run(True, q, latent_cache, page_table, seq_lens, page_size, sm_scale, *features, latent_scale)


def _run(fp8, q, latent_cache, page_table, seq_lens, page_size, sm_scale, window_left, cap, q_tokens, scale):
    """scale: the fp8 cache's scale tensor (with fp8 False any int32 tensor: a pointer the kernel never reads)."""
    rows, num_q_heads, _ = q.shape
    out = torch.empty((rows, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if rows == 0:
        return out
    batch = rows // q_tokens
    page_size = int(page_size)
    capacity = page_table.shape[1] * page_size
    if window_left >= 0:  # a sequence's queries read at most window_left + n positions: split that many
        capacity = min(capacity, window_left + q_tokens)
    sizes = (fp8, batch, num_q_heads, q_tokens, capacity, q.dtype, q.device, page_size)
    splits, config = _PLANS.get(sizes)
    # one launch's rows: the partials and the merge see [B, n * Hq] rows of one sequence each
    merged = out.view(batch, q_tokens * num_q_heads, MLA_VALUE_DIM)

    def launch_kernel(partial, partial_lse):
        launch_fitting(
            _mla_decode_kernel,
            (batch, cdiv(q_tokens * num_q_heads, config["BLOCK_H"]), splits),
            q.device,
            q,
            latent_cache,
            page_table,
            seq_lens,
            out,
            partial,
            partial_lse,
            scale,
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
            soft_cap_base2(cap),
            q_tokens,
            splits,
            latent_cache.shape[0],
            page_table.shape[1],
            SOFT_CAP=cap > 0,
            **config,
        )

    split_k(merged, splits, launch_kernel)
    return out


def _plan(fp8, batch, num_q_heads, q_tokens, capacity, dtype, device, page_size) -> tuple[int, dict]:
    """(splits, the kernel's keyword arguments) of a call: launch.pointer's knobs and the constexprs."""
    knobs = launch.pointer(batch, q_tokens * num_q_heads, capacity, dtype, device, fp8)
    splits = knobs.pop("splits")
    constants = {
        "PAGE_SIZE": page_size,
        "SINGLE": splits == 1,
        "MULTI": q_tokens > 1,
        "FP8": fp8,
        "DV": MLA_VALUE_DIM,
        "DR": MLA_ROPE_DIM,
    }
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
    query_position,
    lowest,
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
    MULTI: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    CVT_ASM: tl.constexpr,
):
    """One tile of latent rows at `positions`: logits q . c (base 2; SOFT_CAP: capped at `cap`), online
    softmax, acc += P . c[:, :512]. MASKED: positions at or past `end` load nothing and get -inf logits, and
    with MULTI a row sees only positions in [lowest, query_position] (its token's); otherwise every position
    is visible to every row (a whole tile of the split) and the loads carry no mask. The tile is widened to
    q_nope's dtype (widen_fp8: an fp8 cache; a no-op otherwise)."""
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
    c_nope = widen_fp8(c_nope, q_nope.dtype, CVT_ASM)
    c_rope = widen_fp8(c_rope, q_nope.dtype, CVT_ASM)
    qk = tl.dot(q_nope, tl.trans(c_nope), input_precision=PRECISION)
    qk += tl.dot(q_rope, tl.trans(c_rope), input_precision=PRECISION)
    qk = qk * qk_scale
    if SOFT_CAP:
        qk = soft_cap(qk, cap)
    if MASKED:
        visible = valid[None, :]
        if MULTI:
            visible = (
                visible & (positions[None, :] <= query_position[:, None]) & (positions[None, :] >= lowest[:, None])
            )
        qk = tl.where(visible, qk, float("-inf"))
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
    scale_ptr,
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
    q_tokens,
    num_splits,
    num_rows,
    max_pages,
    PAGE_SIZE: tl.constexpr,
    SINGLE: tl.constexpr,
    MULTI: tl.constexpr,
    FP8: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    DV: tl.constexpr,
    DR: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UNMASKED_BODY: tl.constexpr = False,
    CVT_ASM: tl.constexpr = False,
):
    sequence = tl.program_id(0).to(tl.int64)
    # tile row r = t * Hq + h: head h of the sequence's query token t (q row sequence * q_tokens + t)
    tile_rows = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    row_valid = tile_rows < q_tokens * num_q_heads
    token = tile_rows // num_q_heads
    heads = tile_rows % num_q_heads
    seq_len = tl.load(seq_lens_ptr + sequence * stride_sl)
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, window_left, q_tokens, BLOCK_N)
    query_position = seq_len - q_tokens + token
    lowest = tl.where(window_left >= 0, query_position - window_left, 0)

    offs_v = tl.arange(0, DV)
    offs_r = DV + tl.arange(0, DR)
    q_rows = q_ptr + (sequence * q_tokens + token)[:, None] * stride_qb + heads[:, None] * stride_qh
    q_nope = tl.load(q_rows + offs_v[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
    q_rope = tl.load(q_rows + offs_r[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
    if FP8:
        latent_scale = tl.load(scale_ptr)
        qk_scale = qk_scale * latent_scale
        if q_nope.dtype == tl.bfloat16:
            # q -> fp16 scaled by 2^s (exact), 2^-s folded into the logit scale
            q_max = tl.max(tl.max(tl.abs(q_nope.to(tl.float32)), 1), 0)
            q_max = tl.maximum(q_max, tl.max(tl.max(tl.abs(q_rope.to(tl.float32)), 1), 0))
            q_scale = fp16_range_scale(q_max)
            q_nope = (q_nope.to(tl.float32) * q_scale).to(tl.float16)
            q_rope = (q_rope.to(tl.float32) * q_scale).to(tl.float16)
            qk_scale = qk_scale / q_scale
    offs_n = tl.arange(0, BLOCK_N)

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, DV), dtype=tl.float32)
    # UNMASKED_BODY: whole tiles every row sees first, without load or logit masks, then the rest, masked.
    # Several tokens see every position before the first token's (after it, masks); with a window as
    # well, each token's window starts elsewhere: every tile masked.
    full_end = start
    if UNMASKED_BODY:
        body_end = end
        if MULTI:
            body_end = tl.where(window_left >= 0, start, tl.minimum(end, seq_len - q_tokens + 1))
        full_end = start + (tl.maximum(body_end - start, 0) // BLOCK_N) * BLOCK_N
    for tile in range(start, full_end, BLOCK_N):
        acc, m_i, l_i = _latent_tile(
            acc,
            m_i,
            l_i,
            q_nope,
            q_rope,
            tile + offs_n,
            end,
            query_position,
            lowest,
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
            MULTI,
            SOFT_CAP,
            CVT_ASM,
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
            query_position,
            lowest,
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
            MULTI,
            SOFT_CAP,
            CVT_ASM,
        )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    norm = 1.0 / l_safe
    if FP8:
        norm = norm * latent_scale
    result = acc * norm[:, None]
    # out and the partials: rows sequence * (q_tokens * Hq) + r (out: new contiguous [B * n, Hq, DV])
    slot_rows = sequence * (q_tokens * num_q_heads) + tile_rows
    if SINGLE:
        out_rows = out_ptr + slot_rows[:, None] * DV
        tl.store(out_rows + offs_v[None, :], result.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    else:
        slots = slot_rows * num_splits + split
        tl.store(partial_ptr + slots[:, None] * DV + offs_v[None, :], result, mask=row_valid[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(partial_lse_ptr + slots, lse, mask=row_valid)
