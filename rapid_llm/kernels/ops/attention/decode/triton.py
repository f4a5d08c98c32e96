"""native/decode and native/decode_fp8: Triton paged decode attention (attention.decode), one kernel for a KV
buffer of q's dtype (kv:q_dtype) and, specialised by FP8, an fp8-e4m3 buffer with per-tensor scales (kv:fp8_e4m3).

    out[b, h] = sum_j softmax_j(q[b, h] . k[j, h // G] * sm_scale) v[j, h // G],  j < seq_lens[b]

Several query tokens per sequence (num_q_tokens n: speculative decoding's verification, MTP): the tile's
rows are the n tokens' G heads each (n G rows), every K/V tile is read once for all of them, and each row
masks the positions after its own (seq_lens[b] - n + t) and before its window.

A sliding window (window_left W >= 0) keeps positions j >= seq_lens[b] - 1 - W: the splits cover only
those (split_bounds), so the bytes read follow the window, not the context. A soft cap c > 0 maps
each base-2 logit through (c log2 e) tanh(. / (c log2 e)) (tiles.soft_cap) before the softmax. A head's
sink logit joins split 0's softmax (tiles.sink_step), so the split merge counts it once.

Mapping (memory-bound: the KV read is the cost): one program per (sequence b, KV head, split s). It
holds all G = Hq / Hk query heads of its KV head as the rows of one [G_PAD, D] tile (G_PAD = G
rounded up to 16, the tensor-core minimum), so each K/V row is read from memory once for the whole
group; it walks its split's positions in BLOCK_N tiles, gathering rows through the page table
(token position p of b is row page_table[b, p // P] * P + p % P; P = PAGE_SIZE is a constexpr, so
the division is a shift for powers of two), with an online softmax in fp32 and base-2 logits.

Split-K (long contexts, small batches): sequence b's positions are cut into NUM_SPLITS equal
chunks of its own length (rounded up to BLOCK_N), computed on the device from seq_lens[b], so the
work per program follows the real lengths and no device value is read on the host: the launch is
capturable in a CUDA graph. NUM_SPLITS comes from host-known sizes only (batch, KV heads, the page
table's reach, the SM count: `num_splits`). Each split writes its normalised partial output and
its base-2 log-sum-exp; tiles.merge_splits weighs them by exp2(lse_s - max lse) (an empty split has
lse = -inf, weight 0). With one split the kernel writes the output directly.

fp8 KV (the buffer kvcache.update_kv_buffer_fp8 writes, per-tensor k_scale / v_scale): K and V are
loaded as e4m3 and the products run in fp16 for a bf16 or fp16 q (fp32 for an fp32 q): e4m3 -> fp16
is exact and one conversion per two elements on sm89+, while e4m3 -> bf16 detours through fp32 (bf16 products measured
slower in the decode fp8 sweep).
A bf16 q enters fp16 scaled by a power of two 2^s chosen on the device so its largest element of
the group lands in [2^14, 2^15) (exact: fp16 holds every bf16 value of that range); 2^-s, k_scale
and the logit scale fold into one multiplier, v_scale into the final normalisation. P enters the
P.V product in fp16 (10 mantissa bits against bf16's 7). The bytes read halve and no per-element
multiply is added.

Grid: (B, Hk, NUM_SPLITS): B on axis 0 (up to 2**31 - 1), Hk and the splits (<= 256) on axes 1-2.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ...fast_launch import LaunchPolicy, cached, next_power_of_2
from ...launch_fitting import launch_fitting
from ..tiles import (
    LOG2E,
    fp16_range_scale,
    paged_rows,
    sink_step,
    soft_cap,
    soft_cap_base2,
    softmax_step,
    split_bounds,
    split_head_dim,
    split_k,
    widen_fp8,
)
from . import launch


def _plan(
    fp8, batch, num_q_heads, num_kv_heads, head_dim, capacity, page_size, dtype, device, q_tokens=1
) -> tuple[int, dict]:
    """(splits, the kernel's keyword arguments) of a call: the launch policy's knobs (launch.decode or
    launch.decode_fp8, which apply launch_override) and the constexprs derived from the sizes."""
    if fp8:
        knobs = launch.decode_fp8(batch, num_kv_heads, head_dim, capacity, dtype, device)
    else:
        knobs = launch.decode(batch, num_kv_heads, head_dim, capacity, device)
    splits = knobs.pop("splits")
    d_a, d_b = split_head_dim(head_dim)
    constants = {
        "PAGE_SIZE": page_size,
        "SINGLE": splits == 1,
        # the tile's rows: each query token's G = Hq / Hk heads of the KV head
        "G_PAD": max(16, next_power_of_2(q_tokens * (num_q_heads // num_kv_heads))),
        "MULTI": q_tokens > 1,
        "D_A": d_a,
        "D_B": d_b,
        "D_B_PAD": max(d_b, 16),
        "FP8": fp8,
        "PRECISION": "ieee" if dtype == torch.float32 else "tf32",
    }
    return splits, {**constants, **knobs}


#: _plan per call sizes, built once per sizes (its policies apply launch_override themselves).
_PLANS = LaunchPolicy(None, _plan)


def _plan_of(fp8, q, kv_buffer, page_table, page_size, window_left=-1, q_tokens=1) -> tuple[int, dict]:
    rows, num_q_heads, head_dim = q.shape
    page_size = int(page_size)
    capacity = page_table.shape[1] * page_size
    if window_left >= 0:  # a sequence's queries read at most window_left + q_tokens positions: split that many
        capacity = min(capacity, window_left + q_tokens)
    sizes = (fp8, rows // q_tokens, num_q_heads, kv_buffer.shape[1] // 2, head_dim, capacity, page_size, q.dtype)
    return _PLANS.get((*sizes, q.device, q_tokens))


def _run(
    fp8,
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return out
    # the plan of this call's own sizes (a cache lookup), so a layer's call never runs with another's constexprs
    plan = _plan_of(fp8, q, kv_buffer, page_table, page_size, window_left, num_q_tokens)
    if not fp8:  # seq_lens stands in for the scale pointers, which a launch without FP8 never reads
        k_scale = v_scale = seq_lens
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device) if return_lse else None
    features = (window_left, logits_soft_cap, sinks)
    _launch(q, kv_buffer, page_table, seq_lens, sm_scale, k_scale, v_scale, *features, num_q_tokens, out, lse, plan)
    return (out, lse) if return_lse else out


def decode(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    """native/decode: a KV buffer of q's dtype (unchecked kernel entry: the op's check ran; no scales)."""
    features = (window_left, logits_soft_cap, sinks, return_lse, num_q_tokens)
    return _run(False, q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale, *features)


def decode_fp8(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    """native/decode_fp8: an fp8-e4m3 KV buffer; k_scale and v_scale its one-element fp32 dequantization scales
    (device tensors, read by the kernel). Unchecked kernel entry: the op's check ran."""
    features = (window_left, logits_soft_cap, sinks, return_lse, num_q_tokens)
    return _run(True, q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale, *features)


def prepare_decode(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    """native/decode's per-step preparation: the launch plan (tiles, split count, constexprs) of the step's
    host-known sizes, computed here once and cached; returns the op's callable that every layer's call runs."""
    _plan_of(False, q, kv_buffer, page_table, page_size, window_left, num_q_tokens)
    return functools.partial(_run, False)


def prepare_decode_fp8(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    """native/decode_fp8's per-step preparation, as prepare_decode."""
    _plan_of(True, q, kv_buffer, page_table, page_size, window_left, num_q_tokens)
    return functools.partial(_run, True)


def _launch(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    sm_scale,
    k_scale,
    v_scale,
    window_left,
    logits_soft_cap,
    sinks,
    q_tokens,
    out,
    lse,
    plan,
):
    batch, num_q_heads = q.shape[0] // q_tokens, q.shape[1]
    num_kv_heads = kv_buffer.shape[1] // 2
    splits, config = plan

    def launch_kernel(partial, partial_lse):
        launch_fitting(
            _decode_kernel,
            (batch, num_kv_heads, splits),
            q.device,
            q,
            kv_buffer,
            page_table,
            seq_lens,
            out,
            lse if lse is not None else partial_lse,
            partial,
            partial_lse,
            k_scale,
            v_scale,
            sinks if sinks is not None else seq_lens,  # a stand-in pointer SINKS=False never reads
            q.stride(0),
            q.stride(1),
            q.stride(2),
            kv_buffer.stride(0),
            kv_buffer.stride(1),
            kv_buffer.stride(2),
            page_table.stride(0),
            page_table.stride(1),
            seq_lens.stride(0),
            sinks.stride(0) if sinks is not None else 0,
            num_kv_heads,
            num_q_heads // num_kv_heads,
            float(sm_scale) * LOG2E,
            int(window_left),
            soft_cap_base2(logits_soft_cap),
            q_tokens,
            splits,
            kv_buffer.shape[0],
            page_table.shape[1],
            SOFT_CAP=logits_soft_cap > 0,
            SINKS=sinks is not None,
            WRITE_LSE=lse is not None,
            **config,
        )

    split_k(out, splits, launch_kernel, lse)


@cached
@triton.jit
def _decode_kernel(
    q_ptr,
    kv_ptr,
    table_ptr,
    seq_lens_ptr,
    out_ptr,
    lse_ptr,
    partial_ptr,
    partial_lse_ptr,
    k_scale_ptr,
    v_scale_ptr,
    sinks_ptr,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_row,
    stride_head,
    stride_d,
    table_stride0,
    table_stride1,
    stride_sl,
    stride_sink,
    num_kv_heads,
    group,
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
    SOFT_CAP: tl.constexpr,
    SINKS: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    G_PAD: tl.constexpr,
    D_A: tl.constexpr,
    D_B: tl.constexpr,
    D_B_PAD: tl.constexpr,
    FP8: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CVT_ASM: tl.constexpr = False,
):
    sequence = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, window_left, q_tokens, BLOCK_N)

    # tile row r: query token r // G of the sequence (q row sequence * q_tokens + r // G), head r % G of the group
    tile_rows = tl.arange(0, G_PAD)
    token = tile_rows // group
    heads = kv_head * group + tile_rows % group
    head_valid = tile_rows < q_tokens * group
    q_index = sequence * q_tokens + token
    if MULTI:  # each query token sees positions up to its own (the last q_tokens positions), within its window
        query_position = tl.load(seq_lens_ptr + sequence * stride_sl) - q_tokens + token
        lowest = tl.where(window_left >= 0, query_position - window_left, 0)
    offs_da = tl.arange(0, D_A)
    offs_db = D_A + tl.arange(0, D_B_PAD)
    q_rows = q_ptr + q_index[:, None] * stride_qb + heads[:, None] * stride_qh
    q_a = tl.load(q_rows + offs_da[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    if D_B > 0:
        q_b = tl.load(q_rows + offs_db[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    if FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr)
        if q_a.dtype == tl.bfloat16:
            # q -> fp16 scaled by 2^s (exact; see the module docstring), 2^-s folded into the logit scale
            q_max = tl.max(tl.max(tl.abs(q_a.to(tl.float32)), 1), 0)
            if D_B > 0:
                q_max = tl.maximum(q_max, tl.max(tl.max(tl.abs(q_b.to(tl.float32)), 1), 0))
            scale = fp16_range_scale(q_max)
            q_a = (q_a.to(tl.float32) * scale).to(tl.float16)
            if D_B > 0:
                q_b = (q_b.to(tl.float32) * scale).to(tl.float16)
            qk_scale = qk_scale / scale
    k_base = kv_ptr + kv_head * stride_head
    v_base = kv_ptr + (num_kv_heads + kv_head) * stride_head
    offs_n = tl.arange(0, BLOCK_N)

    m_i = tl.full((G_PAD,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((G_PAD,), dtype=tl.float32)
    acc_a = tl.zeros((G_PAD, D_A), dtype=tl.float32)
    acc_b = tl.zeros((G_PAD, D_B_PAD), dtype=tl.float32)
    for tile in range(start, end, BLOCK_N):
        positions = tile + offs_n
        valid = positions < end
        rows = paged_rows(
            positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages, PAGE_SIZE
        )
        k_a = tl.load(k_base + rows[:, None] * stride_row + offs_da[None, :] * stride_d, mask=valid[:, None], other=0.0)
        if FP8:
            k_a = widen_fp8(k_a, q_a.dtype, CVT_ASM)
        qk = tl.dot(q_a, tl.trans(k_a), input_precision=PRECISION)
        if D_B > 0:
            k_b = tl.load(
                k_base + rows[:, None] * stride_row + offs_db[None, :] * stride_d, mask=valid[:, None], other=0.0
            )
            if FP8:
                k_b = widen_fp8(k_b, q_a.dtype, CVT_ASM)
            qk += tl.dot(q_b, tl.trans(k_b), input_precision=PRECISION)
        qk = qk * qk_scale
        if SOFT_CAP:
            qk = soft_cap(qk, cap)
        visible = valid[None, :]
        if MULTI:
            visible = (
                visible & (positions[None, :] <= query_position[:, None]) & (positions[None, :] >= lowest[:, None])
            )
        qk = tl.where(visible, qk, float("-inf"))
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i)
        # q_a.dtype is the product dtype: q's, or fp16 for a bf16 q with an fp8 buffer
        v_a = widen_fp8(
            tl.load(v_base + rows[:, None] * stride_row + offs_da[None, :] * stride_d, mask=valid[:, None], other=0.0),
            q_a.dtype,
            CVT_ASM,
        )
        acc_a = tl.dot(p.to(q_a.dtype), v_a, acc_a * alpha[:, None], input_precision=PRECISION)
        if D_B > 0:
            v_b = widen_fp8(
                tl.load(
                    v_base + rows[:, None] * stride_row + offs_db[None, :] * stride_d, mask=valid[:, None], other=0.0
                ),
                q_a.dtype,
                CVT_ASM,
            )
            acc_b = tl.dot(p.to(q_a.dtype), v_b, acc_b * alpha[:, None], input_precision=PRECISION)

    if SINKS:  # the head's sink logit joins split 0's softmax only (the merge then counts it once)
        sink = tl.load(sinks_ptr + heads * stride_sink, mask=head_valid, other=0.0) * 1.4426950408889634
        alpha, m_i, l_i = sink_step(m_i, l_i, tl.where(split == 0, sink, float("-inf")))
        acc_a = acc_a * alpha[:, None]
        acc_b = acc_b * alpha[:, None]
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    norm = 1.0 / l_safe
    if FP8:
        norm = norm * tl.load(v_scale_ptr)
    out_a = acc_a * norm[:, None]
    out_b = acc_b * norm[:, None]
    if SINGLE:
        # out: new contiguous [B * q_tokens, Hq, D]
        out_rows = out_ptr + (q_index * (num_kv_heads * group) + heads)[:, None] * (D_A + D_B)
        tl.store(out_rows + offs_da[None, :], out_a.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
        if D_B > 0:
            tl.store(out_rows + offs_db[None, :], out_b.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
        if WRITE_LSE:  # lse: new contiguous [B, Hq] fp32, natural log
            lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
            tl.store(lse_ptr + q_index * (num_kv_heads * group) + heads, lse, mask=head_valid)
    else:
        # partial [B, Hq, S, D] and partial_lse [B, Hq, S], contiguous
        slots = (q_index * (num_kv_heads * group) + heads) * num_splits + split
        partial_rows = partial_ptr + slots[:, None] * (D_A + D_B)
        tl.store(partial_rows + offs_da[None, :], out_a, mask=head_valid[:, None])
        if D_B > 0:
            tl.store(partial_rows + offs_db[None, :], out_b, mask=head_valid[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(partial_lse_ptr + slots, lse, mask=head_valid)
