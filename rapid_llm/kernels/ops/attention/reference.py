"""Pure-PyTorch reference rows of the attention family (fp32 math, one rounding to q's dtype).

Every op is computed the same way. Per step (a chunk of sequences, of KV
heads, of query rows and of key positions), each sequence's queries and the
keys it owns are gathered into padded tensors using only host-known bounds
(max_seqlen, the page table's width); a boolean mask says which (query, key)
pairs attend, and an online softmax in fp32 (flash attention's recurrence
over the key chunks) weighs the values:

    s   = q . k * sm_scale (fp32) over the keys the query attends
    s   = c * tanh(s / c)                   (logits_soft_cap c > 0 only)
    m   = max(s),  l = sum exp(s - m)       (running over key chunks)
    m'  = max(m, sink), l' = l e^(m - m') + e^(sink - m')   (sinks only: a logit without a value)
    out = sum exp(s - m) v / l  -> q's dtype,  lse = m + log(l)  (natural log)

Subtracting the running max keeps exp() exact at the max: exp(s - lse) in
fp32 loses |lse| * 2**-24 of the logit (0.2% of a weight at |lse| ~ 5e4).

A sliding window (window_left W >= 0) is one more mask: a query at position i
attends keys at positions >= i - W.

Isolation and NaN (the semantics every attention row follows): a query's
out and lse depend only on its q and on K/V at the positions it attends. A
NaN in its q or in an attended K row makes its whole out and lse NaN; a NaN
in an attended V element makes that out element NaN (an inf there: inf or
NaN). Positions it does not attend (masked by causality, past its seq_len,
other sequences' tokens, buffer rows no sequence uses) never affect it, even
if NaN or inf: a padded position is gathered from a row its own sequence
owns and replaced by 0 with where(); masks select (where, masked_fill),
never multiply by 0; and where a mask hides keys a step gathered (causal,
a window), the non-finite values of v are kept out of p @ v (a masked
key's 0 * NaN is NaN) and put back as NaN in the rows that attend them.

GQA folds the query heads of one KV head into the query rows, and MLA's
query heads are rows against the one latent: K and V are never repeated per
query head. A step's temporaries stay within the call's inputs + output
bytes (at least 64 MiB, at most 1 GiB). No value is read back to the host
(no device sync), so a CUDA graph can capture these rows; index values
outside the contract are clamped before any gather, so an unchecked bad
value gives a wrong answer, never an out-of-bounds read.
"""

from __future__ import annotations

import torch

from . import MLA_VALUE_DIM

_MIN_STEP_BYTES = 64 << 20
_MAX_STEP_BYTES = 1 << 30
_NEG_INF = float("-inf")


def _step_budget(*tensors, out_bytes: int) -> int:
    """Bytes one step's temporaries may take: the call's inputs + output, clamped to [64 MiB, 1 GiB]."""
    inputs = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return min(max(_MIN_STEP_BYTES, inputs + out_bytes), _MAX_STEP_BYTES)


def _key_bytes(head_dim: int, value_dim: int, shared: bool = False) -> int:
    """Bytes a step holds per key position and KV head: K and V gathered (as stored, fp32, masked: 3 fp32
    copies; V a view of K: none of its own), and for causal masks V without its non-finite values and their
    flags (fp32, bool, fp32)."""
    return 12 * (head_dim if shared else head_dim + value_dim) + 9 * value_dim


def _row_key_bytes(group: int) -> int:
    """Bytes a step holds per (query row, key position, KV head): four fp32 tensors of the logits' shape
    (logits, weights, the rescaled or masked copy, attended as fp32) and two bool masks per query head."""
    return 18 * group


def _plan(budget: int, sequences: int, heads: int, rows: int, keys: int, per_key: int, per_row_key: int):
    """Chunk sizes (sequences, heads, rows, keys) of a step holding about sequences * heads * keys *
    (per_key + rows * per_row_key) bytes: one (sequence, head) whole if it fits the budget, then as many
    heads and sequences as fit; else key chunks (their K/V within half the budget) and row chunks of it."""
    whole = max(1, keys * (per_key + rows * per_row_key))
    if whole <= budget:
        head_chunk = min(heads, budget // whole)
        if head_chunk < heads:
            return 1, head_chunk, rows, keys
        return max(1, min(sequences, budget // (heads * whole))), heads, rows, keys
    key_chunk = max(1, min(keys, budget // (2 * per_key)))
    row_chunk = max(1, min(rows, (budget - key_chunk * per_key) // (key_chunk * per_row_key)))
    return 1, 1, row_chunk, key_chunk


def _spans(count: int, step: int):
    step = max(step, 1)
    return [(start, min(start + step, count)) for start in range(0, count, step)]


def _online_attention(queries, blocks, sm_scale, value_dim: int, soft_cap: float = 0.0, sinks=None):
    """queries [G, H, S, g, D] fp32 (S query rows, g query heads per KV head) against key blocks, each
    (keys [G, H, L, D], values [G, H, L, Dv] fp32, 0 at positions not gathered; attended: bool
    [G, 1, S or 1, 1, L]; hides: whether attended hides gathered positions) -> out [G, H, S, g, Dv], lse
    [G, H, S, g]. soft_cap c > 0 caps each scaled logit to c * tanh(s / c). A row attending no key (padding
    rows; unchecked out-of-contract lengths) gets out 0 and lse -inf, as the native rows give. sinks [H, g]
    fp32 (or None): each query head's sink logit joins its softmax's denominator (out 0 where no key is
    attended, lse the sink's).

    Where attended hides no gathered position, the keys a row does not attend hold 0 and p @ v is exact.
    Where it does (causal, a window), p @ v would turn a masked key's 0 * NaN into NaN: the product takes
    v without its non-finite values, and a row attending one of them gets NaN in that element."""
    groups, heads, rows, group, dim = queries.shape
    flat = queries.reshape(groups, heads, rows * group, dim)
    maximum = queries.new_full((groups, heads, rows, group, 1), _NEG_INF)
    total = queries.new_zeros((groups, heads, rows, group, 1))
    acc = queries.new_zeros((groups, heads, rows, group, value_dim))
    poisoned = None
    for keys, values, attended, hides in blocks:
        length = keys.shape[2]
        logits = torch.matmul(flat, keys.transpose(-1, -2)).view(groups, heads, rows, group, length)
        logits.mul_(sm_scale)
        if soft_cap > 0:
            logits = torch.tanh(logits.div_(soft_cap)).mul_(soft_cap)
        logits.masked_fill_(~attended, _NEG_INF)
        new_max = torch.maximum(maximum, logits.amax(-1, keepdim=True))  # NaN propagates
        # nothing attended before (max -inf): acc and total are 0, their scale 0 (not exp(-inf + inf) = NaN)
        rescale = torch.where(maximum == _NEG_INF, 0.0, torch.exp(maximum - new_max))
        weights = torch.where(attended, torch.exp(logits.sub_(new_max)), 0.0)
        del logits
        total = total * rescale + weights.sum(-1, keepdim=True)
        weights = weights.view(groups, heads, rows * group, length)
        if hides:
            finite = torch.isfinite(values)
            product = torch.matmul(weights, torch.where(finite, values, 0.0))
            del weights
            hits = attended.expand(groups, 1, rows, group, length).reshape(groups, 1, rows * group, length)
            hits = torch.matmul(hits.float(), (~finite).float()) > 0  # a non-finite value this row attends
            poisoned = hits if poisoned is None else poisoned | hits
        else:
            product = torch.matmul(weights, values)
            del weights
        product = product.view(groups, heads, rows, group, value_dim)
        acc = acc * rescale + product
        maximum = new_max
    if sinks is not None:  # one more logit, without a value
        sink = sinks.view(1, heads, 1, group, 1)
        new_max = torch.maximum(maximum, sink)
        rescale = torch.where(maximum == _NEG_INF, 0.0, torch.exp(maximum - new_max))
        total = total * rescale + torch.exp(sink - new_max)
        acc, maximum = acc * rescale, new_max
    out = acc / torch.where(total == 0.0, 1.0, total)  # a NaN total stays NaN
    if poisoned is not None:
        out = torch.where(poisoned.view(groups, heads, rows, group, -1), float("nan"), out)
    return out, (maximum + torch.log(total)).squeeze(-1)


def _head_sinks(sinks, q_heads: slice, kv_heads: int):
    """sinks[q_heads] as fp32 [kv_heads, g] (the g query heads of each KV head), or None."""
    return None if sinks is None else sinks[q_heads].float().view(kv_heads, -1)


def _ragged_queries(cu_seqlens, first: int, last: int, span: int, total: int):
    """Token ids [G, span] of sequences first..last-1 and which exist; a padded position is given its own
    sequence's first token (clamped to [0, total)), never a neighbour's. Also the lengths [G]."""
    starts = cu_seqlens[first:last].long()
    lengths = cu_seqlens[first + 1 : last + 1].long() - starts
    offsets = torch.arange(span, device=cu_seqlens.device)
    valid = offsets.unsqueeze(0) < lengths.unsqueeze(1)
    ids = torch.where(valid, starts.unsqueeze(1) + offsets.unsqueeze(0), starts.unsqueeze(1))
    return ids.clamp(0, max(total - 1, 0)), valid, lengths


def _paged_rows(page_table, seq_lens, page_size: int, rows: int, first: int, last: int, window: int = -1):
    """Cache rows [G, L] of positions 0..L-1 (L = max_pages * page_size) of sequences first..last-1 and which
    positions exist (< seq_lens[b]; window W >= 0: and >= seq_lens[b] - 1 - W, decode's window); a position
    past the end is given the sequence's position-0 row, so only the page-table entries a sequence uses are
    read. Rows clamped into the buffer."""
    width = page_table.shape[1] * page_size
    positions = torch.arange(width, device=page_table.device)
    lengths = seq_lens[first:last].long().unsqueeze(1)
    valid = positions.unsqueeze(0) < lengths
    if window >= 0:
        valid = valid & (positions.unsqueeze(0) >= lengths - 1 - window)
    owned = torch.where(valid, positions.unsqueeze(0), 0)
    pages = page_table[first:last].long().gather(1, owned // page_size)
    return (pages * page_size + owned % page_size).clamp(0, max(rows - 1, 0)), valid


def _gather(source, ids, valid, scale=None):
    """source [N, H, D] rows ids [G, L] -> fp32 [G, H, L, D] (times a dequant scale), 0 where not valid."""
    gathered = source[ids].float()
    if scale is not None:  # fp8 buffer: K = k * k_scale (a device scalar, no sync)
        gathered = gathered * scale.reshape(())
    return torch.where(valid[:, :, None, None], gathered, 0.0).transpose(1, 2)


def _scatter_rows(out_padded, ids, valid, values):
    """out_padded[ids[g, i]] = values[g, i] where valid; invalid rows go to the spare last row."""
    spare = out_padded.shape[0] - 1
    target = torch.where(valid, ids, torch.full_like(ids, spare)).reshape(-1)
    out_padded.index_copy_(0, target, values.reshape(target.shape[0], *values.shape[2:]))


def _query_rows(q, heads, ids, kv_heads: int):
    """q[:, heads] at token ids [G, S] -> fp32 [G, Hk, S, g, D] (the g query heads of each KV head)."""
    rows = q[:, heads][ids].float()
    groups, span, num_heads, dim = rows.shape
    return rows.view(groups, span, kv_heads, num_heads // kv_heads, dim).permute(0, 2, 1, 3, 4)


def _store_rows(out, lse, heads, ids, valid, out_rows, lse_rows):
    """Scatter [G, Hk, S, g, ...] results of query tokens ids [G, S] into out / lse [T + 1, Hq, ...]."""
    groups, _, span, _, value_dim = out_rows.shape
    _scatter_rows(out[:, heads], ids, valid, out_rows.permute(0, 2, 1, 3, 4).reshape(groups, span, -1, value_dim))
    _scatter_rows(lse[:, heads], ids, valid, lse_rows.permute(0, 2, 1, 3).reshape(groups, span, -1))


def _position_mask(key_positions, query_positions, causal: bool, window: int):
    """bool [G or 1, 1, S, 1, L]: key positions [L] a query at query_positions [G or 1, S] attends (causal:
    not later; window W >= 0: not before the query's position - W), or None when every key is."""
    keys = key_positions.view(1, 1, 1, 1, -1)
    queries = query_positions.view(query_positions.shape[0], 1, -1, 1, 1)
    mask = keys <= queries if causal else None
    if window >= 0:
        inside = keys >= queries - window
        mask = inside if mask is None else mask & inside
    return mask


def _ragged_blocks(k, v, ids, valid, rows, key_chunk: int, causal: bool, window: int):
    """Key blocks of a ragged prefill step: the sequences' own tokens ids [G, L] (valid where they exist),
    attended by query rows `rows` (positions in the sequence) when valid and inside _position_mask."""
    positions = torch.arange(ids.shape[1], device=ids.device)
    for first, last in _spans(ids.shape[1], key_chunk):
        attended = valid[:, None, None, None, first:last]
        mask = _position_mask(positions[first:last], positions[rows].unsqueeze(0), causal, window)
        if mask is not None:
            attended = attended & mask
        yield (
            _gather(k, ids[:, first:last], valid[:, first:last]),
            _gather(v, ids[:, first:last], valid[:, first:last]),
            attended,
            mask is not None,
        )


def _paged_blocks(
    k,
    v,
    ids,
    valid,
    key_chunk: int,
    query_positions=None,
    causal=True,
    window=-1,
    k_scale=None,
    v_scale=None,
    value_dim=None,
    tree=None,
):
    """Key blocks of a paged step: cache rows ids [G, L] of positions 0..L-1 (valid below seq_lens), attended
    when valid and, with query_positions [G, S], inside _position_mask; tree(first, last): a custom mask's
    bool [G, 1, S, 1, last - first] of those positions (ANDed in). v None: the values are the keys' first
    value_dim dims (MLA's latent)."""
    positions = torch.arange(ids.shape[1], device=ids.device)
    for first, last in _spans(ids.shape[1], key_chunk):
        attended = valid[:, None, None, None, first:last]
        mask = None
        if query_positions is not None:
            mask = _position_mask(positions[first:last], query_positions, causal, window)
        if tree is not None:
            mask = tree(first, last) if mask is None else mask & tree(first, last)
        if mask is not None:
            attended = attended & mask
        keys = _gather(k, ids[:, first:last], valid[:, first:last], k_scale)
        values = keys[..., :value_dim] if v is None else _gather(v, ids[:, first:last], valid[:, first:last], v_scale)
        yield keys, values, attended, mask is not None


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
    """attention.prefill: ragged self-attention, each sequence padded to max_seqlen with its own tokens."""
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads, value_dim = v.shape[1], v.shape[2]
    group = num_q_heads // num_kv_heads
    batch = cu_seqlens.shape[0] - 1
    out = torch.zeros((tokens + 1, num_q_heads, value_dim), dtype=torch.float32, device=q.device)
    lse = torch.zeros((tokens + 1, num_q_heads), dtype=torch.float32, device=q.device)
    span = max(int(max_seqlen), 1)
    if tokens and batch:
        budget = _step_budget(q, k, v, out_bytes=out.numel() * (4 + q.element_size()))
        chunks = _plan(budget, batch, num_kv_heads, span, span, _key_bytes(head_dim, value_dim), _row_key_bytes(group))
        for first, last in _spans(batch, chunks[0]):
            ids, valid, _ = _ragged_queries(cu_seqlens, first, last, span, tokens)
            for head_first, head_last in _spans(num_kv_heads, chunks[1]):
                kv_heads, q_heads = slice(head_first, head_last), slice(head_first * group, head_last * group)
                for row_first, row_last in _spans(span, chunks[2]):
                    rows = slice(row_first, row_last)
                    blocks = _ragged_blocks(
                        k[:, kv_heads], v[:, kv_heads], ids, valid, rows, chunks[3], causal, window_left
                    )
                    queries = _query_rows(q, q_heads, ids[:, rows], head_last - head_first)
                    head_sinks = _head_sinks(sinks, q_heads, head_last - head_first)
                    out_rows, lse_rows = _online_attention(
                        queries, blocks, sm_scale, value_dim, logits_soft_cap, head_sinks
                    )
                    _store_rows(out, lse, q_heads, ids[:, rows], valid[:, rows], out_rows, lse_rows)
    result = out[:tokens].to(q.dtype)
    return (result, lse[:tokens]) if return_lse else result


def mla_prefill(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """attention.mla_prefill: attention.prefill with q/k head_dim 192 and v head_dim 128."""
    return prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap)


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
    """attention.decode: each query against the positions 0..seq_lens[b]-1 of its pages (an fp8 buffer
    dequantized by its scales), those before seq_lens[b] - 1 - window_left left out of a window. Several
    query tokens per sequence (q [B * n, Hq, D], row b * n + t at position seq_lens[b] - n + t): rows of one
    step, each masked past its own position and before its window."""
    rows, num_q_heads, head_dim = q.shape
    tokens = num_q_tokens
    batch = rows // tokens
    num_kv_heads = kv_buffer.shape[1] // 2
    group = num_q_heads // num_kv_heads
    width = page_table.shape[1] * page_size
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    budget = _step_budget(q, kv_buffer, page_table, out_bytes=out.numel() * out.element_size())
    chunks = _plan(budget, batch, num_kv_heads, tokens, width, _key_bytes(head_dim, head_dim), _row_key_bytes(group))
    # one token: its window is part of the positions' validity (gathered as 0); several: a mask per row
    row_window, steps = (window_left, None) if tokens == 1 else (-1, torch.arange(tokens, device=q.device))
    for first, last in _spans(batch, chunks[0]):
        ids, valid = _paged_rows(page_table, seq_lens, page_size, kv_buffer.shape[0], first, last, row_window)
        positions = None if steps is None else (seq_lens[first:last].long() - tokens).unsqueeze(1) + steps
        for head_first, head_last in _spans(num_kv_heads, chunks[1]):
            blocks = _paged_blocks(
                kv_buffer[:, head_first:head_last],
                kv_buffer[:, num_kv_heads + head_first : num_kv_heads + head_last],
                ids,
                valid,
                chunks[3],
                positions,
                True,
                window_left,
                k_scale,
                v_scale,
            )
            q_heads = slice(head_first * group, head_last * group)
            kv_count = head_last - head_first
            token_rows = slice(first * tokens, last * tokens)
            queries = q[token_rows, q_heads].float().view(last - first, tokens, kv_count, group, head_dim)
            head_sinks = _head_sinks(sinks, q_heads, kv_count)
            out_rows, lse_rows = _online_attention(
                queries.permute(0, 2, 1, 3, 4), blocks, sm_scale, head_dim, logits_soft_cap, head_sinks
            )
            # [G, Hk, tokens, g, ...] -> rows b * tokens + t
            out[token_rows, q_heads] = (
                out_rows.permute(0, 2, 1, 3, 4).reshape(-1, kv_count * group, head_dim).to(q.dtype)
            )
            lse[token_rows, q_heads] = lse_rows.permute(0, 2, 1, 3).reshape(-1, kv_count * group)
    return (out, lse) if return_lse else out


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
    """attention.mla_decode: absorbed MLA; every (query token, head) is a row against the one gathered latent
    (its rows are the keys, their first 512 dims the values; an fp8 cache dequantized by latent_scale),
    windowed and masked per token as attention.decode."""
    rows, num_q_heads, dim = q.shape
    tokens = num_q_tokens
    batch = rows // tokens
    width = page_table.shape[1] * page_size
    out = torch.empty((rows, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    budget = _step_budget(q, latent_cache, page_table, out_bytes=out.numel() * out.element_size())
    per_key = _key_bytes(dim, MLA_VALUE_DIM, shared=True)
    chunks = _plan(budget, batch, 1, tokens * num_q_heads, width, per_key, _row_key_bytes(1))
    latent_rows = latent_cache.unsqueeze(1)  # [rows, 1, 576]: the one KV head
    # a sequence's query rows r = t * Hq + h: token t at position seq_lens[b] - n + t
    queries_all = q.reshape(batch, tokens * num_q_heads, dim)
    out_all = out.view(batch, tokens * num_q_heads, MLA_VALUE_DIM)
    row_token = torch.arange(tokens * num_q_heads, device=q.device) // num_q_heads
    # one token: its window is part of the positions' validity (gathered as 0); several: a mask per row
    row_window = window_left if tokens == 1 else -1
    for first, last in _spans(batch, chunks[0]):
        ids, valid = _paged_rows(page_table, seq_lens, page_size, latent_cache.shape[0], first, last, row_window)
        for row_first, row_last in _spans(tokens * num_q_heads, chunks[2]):
            positions = None
            if tokens > 1:
                positions = (seq_lens[first:last].long() - tokens).unsqueeze(1) + row_token[row_first:row_last]
            blocks = _paged_blocks(
                latent_rows,
                None,
                ids,
                valid,
                chunks[3],
                positions,
                True,
                window_left,
                latent_scale,
                value_dim=MLA_VALUE_DIM,
            )
            queries = queries_all[first:last, row_first:row_last].float()[:, None, :, None, :]  # [G, 1, R, 1, 576]
            out_rows, _ = _online_attention(queries, blocks, sm_scale, MLA_VALUE_DIM, logits_soft_cap)
            out_all[first:last, row_first:row_last] = out_rows.reshape(last - first, -1, MLA_VALUE_DIM).to(q.dtype)
    return out


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
    """attention.prefill_paged: the new tokens' queries against the positions of their sequence's pages; a
    custom (tree) mask's bits replace causality."""
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = kv_buffer.shape[1] // 2
    group = num_q_heads // num_kv_heads
    batch = cu_seqlens_q.shape[0] - 1
    width = page_table.shape[1] * page_size
    span = max(int(max_seqlen_q), 1)
    out = torch.zeros((tokens + 1, num_q_heads, head_dim), dtype=torch.float32, device=q.device)
    lse = torch.zeros((tokens + 1, num_q_heads), dtype=torch.float32, device=q.device)
    bits = None
    if custom_mask is not None:  # bit e % 8 of byte e // 8, as bool [bytes * 8]
        shifts = torch.arange(8, device=q.device, dtype=torch.uint8)
        bits = ((custom_mask.unsqueeze(1) >> shifts) & 1).bool().reshape(-1)
        causal = False
    if tokens and batch:
        budget = _step_budget(q, kv_buffer, page_table, out_bytes=out.numel() * (4 + q.element_size()))
        chunks = _plan(budget, batch, num_kv_heads, span, width, _key_bytes(head_dim, head_dim), _row_key_bytes(group))
        for first, last in _spans(batch, chunks[0]):
            ids, valid_q, new_tokens = _ragged_queries(cu_seqlens_q, first, last, span, tokens)
            rows_k, valid_k = _paged_rows(page_table, seq_lens, page_size, kv_buffer.shape[0], first, last)
            # query i of sequence b sits at position seq_lens[b] - n_b + i
            query_positions = (seq_lens[first:last].long() - new_tokens).unsqueeze(1) + torch.arange(
                span, device=q.device
            )
            for head_first, head_last in _spans(num_kv_heads, chunks[1]):
                k_heads = kv_buffer[:, head_first:head_last]
                v_heads = kv_buffer[:, num_kv_heads + head_first : num_kv_heads + head_last]
                q_heads = slice(head_first * group, head_last * group)
                for row_first, row_last in _spans(span, chunks[2]):
                    rows = slice(row_first, row_last)
                    tree = None if bits is None else _tree_bits(bits, mask_indptr, seq_lens, first, last, rows)
                    blocks = _paged_blocks(
                        k_heads,
                        v_heads,
                        rows_k,
                        valid_k,
                        chunks[3],
                        query_positions[:, rows],
                        causal,
                        window_left,
                        tree=tree,
                    )
                    queries = _query_rows(q, q_heads, ids[:, rows], head_last - head_first)
                    head_sinks = _head_sinks(sinks, q_heads, head_last - head_first)
                    out_rows, lse_rows = _online_attention(
                        queries, blocks, sm_scale, head_dim, logits_soft_cap, head_sinks
                    )
                    _store_rows(out, lse, q_heads, ids[:, rows], valid_q[:, rows], out_rows, lse_rows)
    result = out[:tokens].to(q.dtype)
    return (result, lse[:tokens]) if return_lse else result


def _tree_bits(bits, mask_indptr, seq_lens, first: int, last: int, rows: slice):
    """tree(key_first, key_last) -> bool [G, 1, S, 1, L]: M_b[i, j] of sequences first..last-1, query rows
    `rows` and key positions key_first..key_last-1, bit mask_indptr[b] * 8 + i * seq_lens[b] + j of `bits`
    (indices clamped into it: an unchecked bad offset gives a wrong answer, never an out-of-bounds read)."""
    base = mask_indptr[first:last].long().view(-1, 1, 1) * 8
    lengths = seq_lens[first:last].long().view(-1, 1, 1)
    queries = torch.arange(rows.start, rows.stop, device=bits.device).view(1, -1, 1)

    def tree(key_first: int, key_last: int):
        keys = torch.arange(key_first, key_last, device=bits.device).view(1, 1, -1)
        index = (base + queries * lengths + keys).clamp(0, max(bits.numel() - 1, 0))
        picked = bits[index] if bits.numel() else torch.zeros(index.shape, dtype=torch.bool, device=bits.device)
        return picked[:, None, :, None, :]

    return tree


def merge_states(v_a, s_a, v_b, s_b):
    """attention.merge_states: s = logaddexp(s_a, s_b), v = v_a e^(s_a - s) + v_b e^(s_b - s) in fp32; both
    parts empty (-inf): v 0, s -inf; a NaN s stays NaN."""
    top = torch.maximum(s_a, s_b)
    safe = torch.where(top == _NEG_INF, 0.0, top)  # both empty: weights e^-inf = 0, not e^(-inf + inf)
    weight_a, weight_b = torch.exp(s_a - safe), torch.exp(s_b - safe)
    total = weight_a + weight_b
    merged = (v_a.float() * weight_a[..., None] + v_b.float() * weight_b[..., None]) / torch.where(
        total == 0.0, 1.0, total
    )[..., None]
    return merged.to(v_a.dtype), safe + torch.log(total)
