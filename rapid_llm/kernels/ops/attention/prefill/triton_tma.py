"""native/prefill_tma, native/mla_prefill_tma: ragged prefill with TMA tile loads (CUDA sm90+, fp16/bf16).

    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // G] * sm_scale) v[j, h // G]     (G = Hq / Hk)

Same tiling, grid, block order and results as native/prefill's pointer kernel (FlashAttention-2's
forward, base-2 logits, fp32 online softmax); what differs is how the bulk of the tiles reach shared
memory. The query block and every key/value tile the whole query block sees (the causal off-band tiles,
or every full tile without causal) are copied by the Tensor Memory Accelerator from 2D descriptors, one
instruction per tile and no per-element address arithmetic, so the registers and issue slots go to the
two products and the softmax. On those tiles the logit scale is one fused multiply-add (qk * scale - m)
and the row maximum is taken on the raw products (scale > 0; a negative scale takes the row minimum).
The diagonal and tail tiles (keys past the query or the sequence) run the masked step with pointer
loads, which never reads a row of another sequence into the products.

Descriptors: a [T, H, D] tensor with unit head-dim stride is the 2D array rows = tokens, columns =
h * stride_h + d (width (H - 1) * stride_h + D, row stride stride_t): a query block is the box
[BLOCK_M, D] at (first token, h * stride_h), a key tile [BLOCK_N, D] at (token, kv_head * stride_h).
Layout tags q:tma and kv:tma (the op's check) guarantee what TMA needs: a 16-byte aligned base, 16-byte
multiples for stride_t and stride_h, unit head-dim stride, heads and tokens that do not overlap. Rows of
a query box past the sequence's end hold other sequences' queries (or TMA's zero fill past T): their
rows of the result are never stored. Head dims D_A + D_B (192 = 128 + 64 for MLA) use two descriptors
per tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ...launch_fitting import launch_fitting
from ..tiles import LOG2E, attend_tile, split_head_dim
from . import launch


def prefill_tma(
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
    """native/prefill_tma (unchecked kernel entry: the op's check ran and the row's conditions hold)."""
    return _prefill("native/prefill_tma", q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse)


def mla_prefill_tma(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """native/mla_prefill_tma: q/k head dim 192 as 128 + 64 (two descriptors a tensor), v 128."""
    return _prefill("native/mla_prefill_tma", q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse)


def _descriptor(tensor: torch.Tensor, rows: int, first: int, width: int) -> TensorDescriptor:
    """Descriptor of the [T, H, D] tensor as 2D (tokens x h * stride_h + d), boxes [rows, width] that
    start at column `first` of a head (the caller adds h * stride_h)."""
    tokens, heads, dim = tensor.shape
    columns = (heads - 1) * tensor.stride(1) + dim
    view = tensor if first == 0 else tensor[:, :, first:]
    # the base moves to column `first` (a 16-byte multiple: first is D_A, a power of two >= 16)
    return TensorDescriptor(
        view, shape=[tokens, columns - first], strides=[tensor.stride(0), 1], block_shape=[rows, width]
    )


def _prefill(row, q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse):
    tokens, num_q_heads, head_dim = q.shape
    head_dim_v = v.shape[2]
    out = torch.empty((tokens, num_q_heads, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((tokens, num_q_heads), dtype=torch.float32, device=q.device) if return_lse else None
    batch = cu_seqlens.shape[0] - 1
    max_seqlen = int(max_seqlen)
    if tokens == 0 or batch == 0 or max_seqlen == 0:
        return (out, lse) if return_lse else out
    knobs = launch.tma(row, head_dim, head_dim_v)
    d_a, d_b = split_head_dim(head_dim)
    block_m, block_n = knobs["BLOCK_M"], knobs["BLOCK_N"]
    q_a = _descriptor(q, block_m, 0, d_a)
    k_a = _descriptor(k, block_n, 0, d_a)
    q_b = _descriptor(q, block_m, d_a, d_b) if d_b else q_a
    k_b = _descriptor(k, block_n, d_a, d_b) if d_b else k_a
    v_desc = _descriptor(v, block_n, 0, head_dim_v)
    num_blocks = triton.cdiv(max_seqlen, block_m)
    launch_fitting(
        _prefill_tma_kernel,
        (num_blocks * batch, num_q_heads),
        q.device,
        q_a,
        q_b,
        k_a,
        k_b,
        v_desc,
        q,
        k,
        v,
        out,
        lse if lse is not None else out,
        cu_seqlens,
        q.stride(1),
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
        cu_seqlens.stride(0),
        batch,
        num_blocks,
        num_q_heads // k.shape[1],
        float(sm_scale) * LOG2E,
        tokens,
        CAUSAL=causal,
        WRITE_LSE=lse is not None,
        NEGATIVE_SCALE=sm_scale < 0,
        D_A=d_a,
        D_B=d_b,
        D_B_PAD=max(d_b, 16),
        DV=head_dim_v,
        **knobs,
    )
    return (out, lse) if return_lse else out


@triton.jit
def _prefill_tma_kernel(
    q_desc_a,
    q_desc_b,
    k_desc_a,
    k_desc_b,
    v_desc,
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    lse_ptr,
    cu_q_ptr,
    stride_qh,
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
    batch,
    num_blocks,
    group,
    qk_scale,
    total_q,
    CAUSAL: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    NEGATIVE_SCALE: tl.constexpr,
    D_A: tl.constexpr,
    D_B: tl.constexpr,
    D_B_PAD: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    sequence = pid % batch
    block = num_blocks - 1 - pid // batch
    # clamped as in the pointer kernel: offsets outside the contract give an unspecified result, never a fault
    q_start = tl.minimum(tl.maximum(tl.load(cu_q_ptr + sequence * stride_cu), 0), total_q)
    q_end = tl.minimum(tl.maximum(tl.load(cu_q_ptr + (sequence + 1) * stride_cu), q_start), total_q)
    q_len = q_end - q_start
    if block * BLOCK_M >= q_len:
        return
    kv_head = head // group
    first_row = q_start + block * BLOCK_M

    q_a = q_desc_a.load([first_row, head * stride_qh])
    if D_B > 0:
        q_b = q_desc_b.load([first_row, head * stride_qh])
    else:
        q_b = q_a
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_da = tl.arange(0, D_A)
    offs_db = D_A + tl.arange(0, D_B_PAD)
    offs_dv = tl.arange(0, DV)
    row_valid = offs_m < q_len

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, DV), dtype=tl.float32)
    if CAUSAL:
        full_end = ((block * BLOCK_M) // BLOCK_N) * BLOCK_N
        end = tl.minimum(q_len, (block + 1) * BLOCK_M)
    else:
        full_end = (q_len // BLOCK_N) * BLOCK_N
        end = q_len
    k_column = kv_head * stride_kh
    v_column = kv_head * stride_vh
    # Off-band: every query of the block sees every key of these tiles (all inside the sequence).
    for start in tl.range(0, full_end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        row = q_start + start
        qk = tl.dot(q_a, k_desc_a.load([row, k_column]).T)
        if D_B > 0:
            qk = tl.dot(q_b, k_desc_b.load([row, k_column]).T, qk)
        if NEGATIVE_SCALE:
            m_new = tl.maximum(m_i, tl.min(qk, 1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([row, v_column])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    # Diagonal and tail tiles: masked logits and pointer loads of the sequence's own rows only.
    k_base = k_ptr + kv_head * stride_kh
    v_base = v_ptr + kv_head * stride_vh
    query_pos = offs_m
    for start in range(full_end, end, BLOCK_N):
        positions = start + offs_n
        key_valid = positions < end
        rows = q_start.to(tl.int64) + tl.where(key_valid, positions, 0)
        visible = key_valid[None, :] & row_valid[:, None]
        if CAUSAL:
            visible = visible & (positions[None, :] <= query_pos[:, None])
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
            offs_da * stride_kd,
            offs_db * stride_kd,
            offs_dv * stride_vd,
            qk_scale,
            D_B,
            "tf32",
            True,
            True,
        )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc / l_safe[:, None]
    out_index = q_start.to(tl.int64) + tl.where(row_valid, offs_m, 0).to(tl.int64)
    out_rows = out_ptr + out_index[:, None] * stride_ot + head * stride_oh
    tl.store(out_rows + offs_dv[None, :], out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    if WRITE_LSE:
        lse = (m_i + tl.math.log2(l_safe)) * 0.6931471805599453
        tl.store(lse_ptr + out_index * stride_lt + head * stride_lh, lse, mask=row_valid)


__all__ = ["mla_prefill_tma", "prefill_tma"]
