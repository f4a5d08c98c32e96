"""Pure-PyTorch reference rows of the attention family (fp32 math, one rounding to q's dtype).

Every op is computed the same way: the queries and keys of a group of
sequences are gathered into padded [G, S, ...] tensors using only host-known
bounds (max_seqlen, the page table's width), a boolean mask says which
(query, key) pairs exist, and a masked softmax in fp32 weighs the values:

    logits = q . k * sm_scale  (fp32),  masked pairs -> -inf
    lse    = logsumexp(logits)           (natural log)
    out    = exp(logits - lse) @ v       -> q's dtype

No value is read back to the host (no device sync), so a CUDA graph can
capture these rows; index values outside the contract are clamped before
any gather, so an unchecked bad value gives a wrong answer, never an
out-of-bounds read. Sequences are processed in groups sized to keep the
padded logits under ~1 GiB.
"""

from __future__ import annotations

import torch

from . import MLA_VALUE_DIM

_GROUP_BYTES = 1 << 30


def _group_size(count: int, bytes_per_item: int) -> int:
    return max(1, min(count, _GROUP_BYTES // max(bytes_per_item, 1)))


def _masked_attention(q, k, v, mask, sm_scale):
    """q [G, Hq, S, D], k [G, Hk, L, D], v [G, Hk, L, Dv] fp32; mask [G, S, L] -> out [G, Hq, S, Dv], lse [G, Hq, S]."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    logits = torch.matmul(q, k.transpose(-1, -2)) * sm_scale
    logits = logits.masked_fill(~mask.unsqueeze(1), float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    # Rows with no key (padding rows of the group) have lse = -inf: their weights are set to 0.
    weights = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(nan=0.0)
    return torch.matmul(weights, v), lse


def _ragged_queries(cu_seqlens, first: int, last: int, span: int, total: int):
    """Token ids [G, span] of sequences first..last-1 (clamped to [0, total)), their validity, and lengths [G]."""
    starts = cu_seqlens[first:last].long()
    lengths = cu_seqlens[first + 1:last + 1].long() - starts
    offsets = torch.arange(span, device=cu_seqlens.device)
    valid = offsets.unsqueeze(0) < lengths.unsqueeze(1)
    ids = (starts.unsqueeze(1) + offsets.unsqueeze(0)).clamp(0, max(total - 1, 0))
    return ids, valid, lengths


def _scatter_rows(out_padded, ids, valid, values):
    """out_padded[ids[g, i]] = values[g, i] where valid; invalid rows go to the spare last row."""
    spare = out_padded.shape[0] - 1
    target = torch.where(valid, ids, torch.full_like(ids, spare)).reshape(-1)
    out_padded.index_copy_(0, target, values.reshape(target.shape[0], *values.shape[2:]))


def prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False):
    """attention.prefill: ragged self-attention, per group of sequences padded to max_seqlen."""
    tokens, num_q_heads, _ = q.shape
    batch = cu_seqlens.shape[0] - 1
    out = torch.zeros((tokens + 1, num_q_heads, v.shape[2]), dtype=torch.float32, device=q.device)
    lse = torch.zeros((tokens + 1, num_q_heads), dtype=torch.float32, device=q.device)
    span = max(int(max_seqlen), 1)
    if tokens and batch:
        step = _group_size(batch, 4 * num_q_heads * span * span * 3)
        for first in range(0, batch, step):
            last = min(first + step, batch)
            ids, valid, _ = _ragged_queries(cu_seqlens, first, last, span, tokens)
            mask = valid.unsqueeze(2) & valid.unsqueeze(1)
            if causal:
                mask = mask & torch.ones(span, span, dtype=torch.bool, device=q.device).tril()
            qg, kg, vg = (t[ids].float().transpose(1, 2) for t in (q, k, v))
            out_g, lse_g = _masked_attention(qg, kg, vg, mask, sm_scale)
            _scatter_rows(out, ids, valid, out_g.transpose(1, 2))
            _scatter_rows(lse, ids, valid, lse_g.transpose(1, 2))
    result = out[:tokens].to(q.dtype)
    return (result, lse[:tokens]) if return_lse else result


def mla_prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False):
    """attention.mla_prefill: attention.prefill with q/k head_dim 192 and v head_dim 128."""
    return prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse)


def _paged_rows(page_table, seq_lens, page_size: int, rows: int, first: int, last: int):
    """Cache rows [G, L] of positions 0..L-1 (L = max_pages * page_size) of sequences first..last-1,
    clamped into the buffer, and which positions exist (< seq_lens[b])."""
    width = page_table.shape[1] * page_size
    positions = torch.arange(width, device=page_table.device)
    valid = positions.unsqueeze(0) < seq_lens[first:last].long().unsqueeze(1)
    pages = page_table[first:last].long()[:, positions // page_size]
    ids = (pages * page_size + positions % page_size).clamp(0, max(rows - 1, 0))
    return torch.where(valid, ids, torch.zeros_like(ids)), valid


def decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale=None, v_scale=None):
    """attention.decode: each query against its gathered pages (an fp8 buffer dequantized by its scales)."""
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = kv_buffer.shape[1] // 2
    width = page_table.shape[1] * page_size
    out = torch.empty((batch, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    step = _group_size(batch, 4 * width * (2 * kv_buffer.shape[1] * head_dim + 2 * num_q_heads))
    for first in range(0, batch, step):
        last = min(first + step, batch)
        ids, valid = _paged_rows(page_table, seq_lens, page_size, kv_buffer.shape[0], first, last)
        kv = kv_buffer[ids].float()                                     # [G, L, 2*Hk, D]
        keys = kv[:, :, :num_kv_heads].transpose(1, 2)
        values = kv[:, :, num_kv_heads:].transpose(1, 2)
        if k_scale is not None:  # fp8 buffer: K = k * k_scale, V = v * v_scale (device scalars, no sync)
            keys, values = keys * k_scale.reshape(()), values * v_scale.reshape(())
        queries = q[first:last].float().unsqueeze(2)                   # [G, Hq, 1, D]
        out_g, _ = _masked_attention(queries, keys, values, valid.unsqueeze(1), sm_scale)
        out[first:last] = out_g.squeeze(2).to(q.dtype)
    return out


def mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale):
    """attention.mla_decode: absorbed MLA, the latent rows are the keys and their first 512 dims the values."""
    batch, num_q_heads, _ = q.shape
    width = page_table.shape[1] * page_size
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    step = _group_size(batch, 4 * width * (2 * latent_cache.shape[1] + 2 * num_q_heads))
    for first in range(0, batch, step):
        last = min(first + step, batch)
        ids, valid = _paged_rows(page_table, seq_lens, page_size, latent_cache.shape[0], first, last)
        latent = latent_cache[ids].float().unsqueeze(1)                 # [G, 1, L, 576]
        queries = q[first:last].float().unsqueeze(2)                    # [G, Hq, 1, 576]
        out_g, _ = _masked_attention(queries, latent, latent[..., :MLA_VALUE_DIM], valid.unsqueeze(1), sm_scale)
        out[first:last] = out_g.squeeze(2).to(q.dtype)
    return out


def prefill_paged(q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size, sm_scale,
                  causal=True, return_lse=False):
    """attention.prefill_paged: the new tokens' queries against each sequence's gathered pages."""
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = kv_buffer.shape[1] // 2
    batch = cu_seqlens_q.shape[0] - 1
    width = page_table.shape[1] * page_size
    span = max(int(max_seqlen_q), 1)
    out = torch.zeros((tokens + 1, num_q_heads, head_dim), dtype=torch.float32, device=q.device)
    lse = torch.zeros((tokens + 1, num_q_heads), dtype=torch.float32, device=q.device)
    if tokens and batch:
        per_sequence = 4 * (width * 2 * kv_buffer.shape[1] * head_dim + 3 * num_q_heads * span * width)
        step = _group_size(batch, per_sequence)
        for first in range(0, batch, step):
            last = min(first + step, batch)
            ids, valid_q, new_tokens = _ragged_queries(cu_seqlens_q, first, last, span, tokens)
            rows, valid_k = _paged_rows(page_table, seq_lens, page_size, kv_buffer.shape[0], first, last)
            mask = valid_q.unsqueeze(2) & valid_k.unsqueeze(1)
            if causal:
                # query i of sequence b sits at position seq_lens[b] - n_b + i
                query_pos = (seq_lens[first:last].long() - new_tokens).unsqueeze(1) + torch.arange(span, device=q.device)
                key_pos = torch.arange(width, device=q.device)
                mask = mask & (key_pos.view(1, 1, -1) <= query_pos.unsqueeze(2))
            kv = kv_buffer[rows].float()
            keys = kv[:, :, :num_kv_heads].transpose(1, 2)
            values = kv[:, :, num_kv_heads:].transpose(1, 2)
            out_g, lse_g = _masked_attention(q[ids].float().transpose(1, 2), keys, values, mask, sm_scale)
            _scatter_rows(out, ids, valid_q, out_g.transpose(1, 2))
            _scatter_rows(lse, ids, valid_q, lse_g.transpose(1, 2))
    result = out[:tokens].to(q.dtype)
    return (result, lse[:tokens]) if return_lse else result
