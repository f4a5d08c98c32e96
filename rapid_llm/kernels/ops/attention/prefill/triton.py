"""native/prefill, native/mla_prefill, native/prefill_paged: Triton prefill attention by pointer loads,
ragged (attention.prefill, attention.mla_prefill) and paged (attention.prefill_paged): one kernel with a
PAGED switch. It serves any strides, fp32, and any CUDA sm80+ (and the CPU interpreter); on sm90 the TMA
and Gluon rows serve the calls whose strides allow them.

    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // G] * sm_scale) v[j, h // G]     (G = Hq / Hk)

Tiling (FlashAttention-2's forward): one program owns BLOCK_M query rows of one sequence and one
query head, keeps them in registers, and walks the sequence's keys in BLOCK_N tiles with an online
softmax in fp32: running max m, running sum l, accumulator acc [BLOCK_M, Dv]. The logits are taken
in base 2: qk * (sm_scale * log2 e), so each weight is one exp2. Keys a whole query block may see
(before its first query's causal limit) run without a mask; the tiles on the diagonal and the tail
run masked. Output = acc / l rounded once to q's dtype; lse = (m + log2 l) * ln 2, natural log.

Head dims: q/k head_dim = D_A + D_B with D_A a power of two and D_B 0 or a power of two (192 =
128 + 64 for MLA prefill, 96 = 64 + 32): two dot products per tile instead of padding to 256.
fp32 inputs multiply in IEEE fp32 (input_precision="ieee"), fp16/bf16 on the tensor cores.

Grid: (query blocks x sequences, Hq). Axis 0 enumerates (block j, sequence b) as
pid = (num_blocks - 1 - j) * B + b with num_blocks = cdiv(max_seqlen, BLOCK_M): the host-known
bound, so no device value is read on the host; the last (causally heaviest) blocks of every sequence
launch first, and a program past its sequence's end returns at once. Axis 1 (heads) stays far below
65,535; axis 0 holds up to 2**31 - 1 programs.

A sliding window (window_left W >= 0) starts a block's key walk at its first query's position - W
(masked tiles at the window's lower edge, unmasked ones between); a soft cap c > 0 caps the base-2
logits (tiles.soft_cap) before the softmax. Attention sinks: the head's sink logit joins m and l after
the last tile (tiles.sink_step), without a value.

Paged (prefill_paged): keys and values are read through the page table from the [rows, 2*Hk, D]
buffer kvcache.update_kv_buffer writes (K head h at column h, V head at Hk + h); the n_b new
queries of sequence b sit at positions seq_lens[b] - n_b .. seq_lens[b] - 1 (bottom-right aligned
causal mask). Ragged: keys of sequence b are rows cu_seqlens[b] .. cu_seqlens[b+1]-1 of k and v.
Every tensor is read through its strides (any view); offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...launch_fitting import launch_fitting
from ..tiles import LOG2E, attend_tile, paged_rows, sink_step, soft_cap_base2, split_head_dim
from . import launch


def prefill(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen,
    sm_scale,
    causal=True,
    return_lse=False,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
):
    """native/prefill (unchecked kernel entry: the op's check ran)."""
    features = (window_left, logits_soft_cap, sinks)
    return _ragged("native/prefill", q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, *features)


def mla_prefill(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """native/mla_prefill: the ragged kernel with q/k head_dim 192 (128 + 64: two products a tile) and v 128."""
    features = (window_left, logits_soft_cap)
    return _ragged("native/mla_prefill", q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, *features)


def prefill_paged(
    q,
    kv_buffer,
    page_table,
    cu_seqlens_q,
    seq_lens,
    max_seqlen_q,
    page_size,
    sm_scale,
    causal=True,
    return_lse=False,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    custom_mask=None,
    mask_indptr=None,
):
    """native/prefill_paged (unchecked kernel entry): K and V are strided views of the buffer's heads."""
    num_kv_heads = kv_buffer.shape[1] // 2
    keys, values = kv_buffer[:, :num_kv_heads], kv_buffer[:, num_kv_heads:]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device) if return_lse else None
    _launch(
        "native/prefill_paged",
        q,
        keys,
        values,
        out,
        lse,
        cu_seqlens_q=cu_seqlens_q,
        seq_lens=seq_lens,
        page_table=page_table,
        page_size=int(page_size),
        num_kv_heads=num_kv_heads,
        max_seqlen_q=int(max_seqlen_q),
        sm_scale=sm_scale,
        causal=causal,
        window_left=window_left,
        logits_soft_cap=logits_soft_cap,
        sinks=sinks,
        paged=True,
        tree=(custom_mask, mask_indptr) if custom_mask is not None else None,
    )
    return (out, lse) if return_lse else out


def _ragged(
    row, q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap, sinks=None
):
    out = torch.empty((q.shape[0], q.shape[1], v.shape[2]), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[1]), dtype=torch.float32, device=q.device) if return_lse else None
    _launch(
        row,
        q,
        k,
        v,
        out,
        lse,
        cu_seqlens_q=cu_seqlens,
        seq_lens=None,
        page_table=None,
        page_size=1,
        num_kv_heads=k.shape[1],
        max_seqlen_q=int(max_seqlen),
        sm_scale=sm_scale,
        causal=causal,
        window_left=window_left,
        logits_soft_cap=logits_soft_cap,
        sinks=sinks,
        paged=False,
    )
    return (out, lse) if return_lse else out


def _launch(
    row,
    q,
    k,
    v,
    out,
    lse,
    *,
    cu_seqlens_q,
    seq_lens,
    page_table,
    page_size,
    num_kv_heads,
    max_seqlen_q,
    sm_scale,
    causal,
    window_left,
    logits_soft_cap,
    sinks,
    paged,
    tree=None,
):
    """tree: (custom_mask, mask_indptr) of prefill_paged's custom mask, or None."""
    tokens, num_q_heads, head_dim = q.shape
    head_dim_v = out.shape[2]
    batch = cu_seqlens_q.shape[0] - 1
    if tokens == 0 or batch == 0 or max_seqlen_q == 0:
        return
    d_a, d_b = split_head_dim(head_dim)
    knobs = launch.pointer(row, head_dim, head_dim_v, q.dtype, q.device)
    num_blocks = triton.cdiv(max_seqlen_q, knobs["BLOCK_M"])
    grid = (num_blocks * batch, num_q_heads)
    dummy = cu_seqlens_q  # pointer arguments a branch does not read
    custom_mask, mask_indptr = tree if tree is not None else (dummy, dummy)
    launch_fitting(
        _prefill_kernel,
        grid,
        q.device,
        q,
        k,
        v,
        out,
        lse if lse is not None else out,
        cu_seqlens_q,
        seq_lens if paged else dummy,
        page_table if paged else dummy,
        sinks if sinks is not None else dummy,
        custom_mask,
        mask_indptr,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        out.stride(0),
        out.stride(1),
        lse.stride(0) if lse is not None else 0,
        lse.stride(1) if lse is not None else 0,
        cu_seqlens_q.stride(0),
        seq_lens.stride(0) if paged else 0,
        page_table.stride(0) if paged else 0,
        page_table.stride(1) if paged else 0,
        sinks.stride(0) if sinks is not None else 0,
        custom_mask.stride(0),
        mask_indptr.stride(0),
        custom_mask.shape[0] if tree is not None else 1,
        batch,
        num_blocks,
        num_q_heads // num_kv_heads,
        float(sm_scale) * LOG2E,
        int(window_left),
        soft_cap_base2(logits_soft_cap),
        tokens,
        k.shape[0],
        page_table.shape[1] if paged else 1,
        PAGE_SIZE=page_size if paged else 1,
        PAGED=paged,
        CAUSAL=causal and tree is None,
        TREE=tree is not None,
        WINDOW=window_left >= 0,
        SOFT_CAP=logits_soft_cap > 0,
        SINKS=sinks is not None,
        WRITE_LSE=lse is not None,
        D_A=d_a,
        D_B=d_b,
        D_B_PAD=max(d_b, 16),
        DV=head_dim_v,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        **knobs,
    )


@triton.jit
def _kv_rows(
    positions,
    valid,
    sequence,
    kv_start,
    page_table_ptr,
    table_stride0,
    table_stride1,
    kv_rows,
    max_pages,
    PAGE_SIZE: tl.constexpr,
    PAGED: tl.constexpr,
):
    """int64 row ids of the keys at `positions` of `sequence` (0 where not valid), clamped into the page
    table and the K/V rows: index values outside the contract (unchecked on CUDA) give an unspecified
    result, never an out-of-bounds read."""
    if PAGED:
        return paged_rows(
            positions, valid, sequence, page_table_ptr, table_stride0, table_stride1, kv_rows, max_pages, PAGE_SIZE
        )
    rows = tl.minimum(tl.maximum(kv_start + positions, 0), kv_rows - 1)
    return tl.where(valid, rows, 0)


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    lse_ptr,
    cu_q_ptr,
    seq_lens_ptr,
    page_table_ptr,
    sinks_ptr,
    mask_ptr,
    mask_indptr_ptr,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_cu,
    stride_sl,
    table_stride0,
    table_stride1,
    stride_sink,
    stride_mask,
    stride_mask_indptr,
    mask_bytes,
    batch,
    num_blocks,
    group,
    qk_scale,
    window_left,
    cap,
    total_q,
    kv_rows,
    max_pages,
    PAGE_SIZE: tl.constexpr,
    PAGED: tl.constexpr,
    CAUSAL: tl.constexpr,
    TREE: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    SINKS: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    D_A: tl.constexpr,
    D_B: tl.constexpr,
    D_B_PAD: tl.constexpr,
    DV: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    sequence = pid % batch
    block = num_blocks - 1 - pid // batch
    # The sequence's rows, clamped into q (and, ragged, into k/v: the same rows): offsets outside the
    # contract (unchecked on CUDA) give an unspecified result, never an out-of-bounds access.
    q_start = tl.minimum(tl.maximum(tl.load(cu_q_ptr + sequence * stride_cu).to(tl.int64), 0), total_q)
    q_end = tl.minimum(tl.maximum(tl.load(cu_q_ptr + (sequence + 1) * stride_cu).to(tl.int64), q_start), total_q)
    q_len = (q_end - q_start).to(tl.int32)
    if block * BLOCK_M >= q_len:
        return
    if PAGED:
        kv_len = tl.load(seq_lens_ptr + sequence * stride_sl)
    else:
        kv_len = q_len
    # Query i of the sequence sits at key position q_offset + i (bottom-right aligned).
    q_offset = kv_len - q_len
    kv_head = head // group

    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_da = tl.arange(0, D_A)
    offs_db = D_A + tl.arange(0, D_B_PAD)  # D_B_PAD = max(D_B, 16): a valid arange when D_B == 0 (unused)
    offs_dv = tl.arange(0, DV)
    row_valid = offs_m < q_len
    q_rows = q_ptr + (q_start + tl.where(row_valid, offs_m, 0).to(tl.int64))[:, None] * stride_qt + head * stride_qh
    q_a = tl.load(q_rows + offs_da[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
    if D_B > 0:
        q_b = tl.load(q_rows + offs_db[None, :] * stride_qd, mask=row_valid[:, None], other=0.0)
    else:
        q_b = q_a
    k_base = k_ptr + kv_head * stride_kh
    v_base = v_ptr + kv_head * stride_vh
    # the head-dim offsets carry the head-dim strides (any view)
    offs_ka = offs_da * stride_kd
    offs_kb = offs_db * stride_kd
    offs_vd = offs_dv * stride_vd

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, DV), dtype=tl.float32)

    if CAUSAL:
        # keys every query of the block sees: positions < q_offset + block * BLOCK_M
        full_end = ((q_offset + block * BLOCK_M) // BLOCK_N) * BLOCK_N
        end = tl.minimum(kv_len, q_offset + (block + 1) * BLOCK_M)
    else:
        full_end = (kv_len // BLOCK_N) * BLOCK_N
        end = kv_len
    query_pos = q_offset + offs_m
    # A window's lower edge: keys from masked_start are seen by some query of the block, keys from
    # unmasked_start (a tile multiple, <= full_end) by every query.
    masked_start = 0
    unmasked_start = 0
    if WINDOW:
        first_query = q_offset + block * BLOCK_M
        last_query = q_offset + tl.minimum((block + 1) * BLOCK_M, q_len) - 1
        masked_start = (tl.maximum(first_query - window_left, 0) // BLOCK_N) * BLOCK_N
        unmasked_start = tl.minimum(tl.cdiv(tl.maximum(last_query - window_left, 0), BLOCK_N) * BLOCK_N, full_end)
    if TREE:  # every tile from the window's edge (or 0) on is masked by the sequence's bits
        full_end = masked_start
        unmasked_start = masked_start
        # bit i * kv_len + j of the sequence's segment, starting at byte mask_start (clamped into the mask)
        mask_start = tl.load(mask_indptr_ptr + sequence * stride_mask_indptr).to(tl.int64)
        mask_bits = offs_m.to(tl.int64)[:, None] * kv_len
    # Tiles every query of the block sees in full: no logit mask; ragged rows are consecutive and inside
    # k/v (clamped above), so their loads are unmasked too.
    for start in range(unmasked_start, full_end, BLOCK_N):
        positions = start + offs_n
        if PAGED:
            all_keys = positions < full_end
            rows = _kv_rows(
                positions,
                all_keys,
                sequence,
                q_start,
                page_table_ptr,
                table_stride0,
                table_stride1,
                kv_rows,
                max_pages,
                PAGE_SIZE,
                PAGED,
            )
        else:
            all_keys = positions >= 0
            rows = q_start + positions
        acc, m_i, l_i = attend_tile(
            acc,
            m_i,
            l_i,
            q_a,
            q_b,
            (k_base + rows * stride_kt)[:, None],
            (v_base + rows * stride_vt)[:, None],
            all_keys,
            all_keys[None, :],
            offs_ka,
            offs_kb,
            offs_vd,
            qk_scale,
            D_B,
            PRECISION,
            False,
            PAGED,
            cap,
            SOFT_CAP,
        )
    # Masked tiles: the window's lower edge [masked_start, unmasked_start), then [full_end, end)
    low_tiles = (unmasked_start - masked_start) // BLOCK_N
    for tile in range(0, low_tiles + tl.cdiv(end - full_end, BLOCK_N)):
        start = tl.where(tile < low_tiles, masked_start + tile * BLOCK_N, full_end + (tile - low_tiles) * BLOCK_N)
        positions = start + offs_n
        key_valid = positions < end
        rows = _kv_rows(
            positions,
            key_valid,
            sequence,
            q_start,
            page_table_ptr,
            table_stride0,
            table_stride1,
            kv_rows,
            max_pages,
            PAGE_SIZE,
            PAGED,
        )
        visible = key_valid[None, :] & row_valid[:, None]
        if CAUSAL:
            visible = visible & (positions[None, :] <= query_pos[:, None])
        if TREE:
            bit = mask_bits + positions[None, :]
            byte = tl.minimum(tl.maximum(mask_start + (bit >> 3), 0), mask_bytes - 1)
            packed = tl.load(mask_ptr + byte * stride_mask, mask=visible, other=0)
            visible = visible & (((packed >> (bit & 7).to(tl.uint8)) & 1) != 0)
        if WINDOW:
            visible = visible & (positions[None, :] >= query_pos[:, None] - window_left)
        acc, m_i, l_i = attend_tile(
            acc,
            m_i,
            l_i,
            q_a,
            q_b,
            (k_base + rows * stride_kt)[:, None],
            (v_base + rows * stride_vt)[:, None],
            key_valid,
            visible,
            offs_ka,
            offs_kb,
            offs_vd,
            qk_scale,
            D_B,
            PRECISION,
            True,
            True,
            cap,
            SOFT_CAP,
        )

    if SINKS:  # the head's sink logit (natural log units) joins the denominator, base 2 here
        sink = tl.load(sinks_ptr + head * stride_sink) * 1.4426950408889634
        alpha, m_i, l_i = sink_step(m_i, l_i, tl.full((BLOCK_M,), 0.0, tl.float32) + sink)
        acc = acc * alpha[:, None]
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    out_index = q_start + tl.where(row_valid, offs_m, 0).to(tl.int64)
    out_rows = out_ptr + out_index[:, None] * stride_ot + head * stride_oh
    tl.store(out_rows + offs_dv[None, :], out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    if WRITE_LSE:
        lse = (m_i + tl.math.log2(l_safe)) * 0.6931471805599453
        tl.store(lse_ptr + out_index * stride_lt + head * stride_lh, lse, mask=row_valid)
