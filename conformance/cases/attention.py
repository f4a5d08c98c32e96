"""Parity cases of the attention family: ragged and paged inputs, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
Inputs are seeded random; the paged cases shuffle page order and share pages between sequences
(prefix sharing), so a row that assumes monotonic or private pages fails. Layout tags and dims come
from the op's own check (the tags are what a call site of those tensors provides); the ragged cases
also make the promise qkv:finite (their values are finite).

The oracle is written independently of the reference row: host loops over sequences and keys, float64.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, index_view, randn as _randn
from rapid_llm.kernels.ops.attention import (
    DECODE,
    FINITE,
    MERGE_STATES,
    MLA_DECODE,
    MLA_PREFILL,
    PREFILL,
    PREFILL_PAGED,
    checks,
)

_HALF_AND_FP32 = frozenset({"fp32", "fp16", "bf16"})

# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def _cu_seqlens(lengths, device, strided=False):
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return index_view(torch.tensor(offsets, dtype=torch.int32, device=device), "every_other" if strided else None)


def _heads(tokens, heads, dim, dtype, device, generator, scale=1.0, fused_with=0):
    """[T, heads, dim]; with fused_with > 0, a view into a wider [T, (heads + fused_with) * dim] tensor (the
    way q, k, v come out of one fused qkv projection: token stride > heads * dim, still aligned)."""
    if not fused_with:
        return _randn((tokens, heads, dim), dtype, device, generator, scale)
    wide = _randn((tokens, (heads + fused_with) * dim), dtype, device, generator, scale)
    return wide[:, fused_with * dim :].view(tokens, heads, dim)


def _features_and_sinks(features, sinks, num_q_heads, device, generator):
    """The optional trailing arguments: the features (window_left, logits_soft_cap), then with `sinks` (a mean)
    per-head sink logits N(sinks, 1) as fp32 [Hq], an every-other-element view (any stride)."""
    if sinks is None:
        return tuple(features)
    wide = torch.randn((2 * num_q_heads,), generator=generator) + sinks
    return (*(features or (-1, 0.0)), wide.to(device)[::2])


def _ragged_case(
    lengths,
    num_q_heads,
    num_kv_heads,
    head_dim,
    *,
    head_dim_v=None,
    causal=True,
    return_lse=False,
    scale=1.0,
    fused=False,
    strided_index=False,
    transposed_q=False,
    op=PREFILL,
    features=(),
    sinks=None,
):
    """features: (window_left, logits_soft_cap) appended to the arguments (default: the op's defaults); sinks:
    the mean of per-head sink logits drawn around it (appended after the features)."""

    def make(dtype, device, generator):
        tokens = sum(lengths)
        fused_heads = num_kv_heads if fused else 0
        q = _heads(tokens, num_q_heads, head_dim, dtype, device, generator, scale, fused_with=2 * fused_heads)
        k = _heads(tokens, num_kv_heads, head_dim, dtype, device, generator, fused_with=fused_heads)
        v = _heads(tokens, num_kv_heads, head_dim_v or head_dim, dtype, device, generator, fused_with=fused_heads)
        if transposed_q:
            # head_dim not contiguous: no library row may claim q:heads (the reference serves it)
            q = _randn((tokens, head_dim, num_q_heads), dtype, device, generator, scale).transpose(1, 2)
        cu = _cu_seqlens(lengths, device, strided_index)
        max_seqlen = max(lengths, default=0)
        tail = _features_and_sinks(features, sinks, num_q_heads, device, generator)
        args = (q, k, v, cu, max_seqlen, head_dim**-0.5, causal, return_lse, *tail)
        check = checks.check_mla_prefill if op == MLA_PREFILL else checks.check_prefill
        _, layout, dims = check(*args)
        # the case's values are finite, so it makes the promise the ragged library rows need
        return args, dict(dims), layout | {FINITE}

    return make


def _pages_for(seq_lens, page_size, generator, *, share_prefix=False, extra_pages=3):
    """A shuffled page table [B, max_pages] covering seq_lens; entries past a sequence's pages are -1
    (never read). With share_prefix, sequence 1 reuses sequence 0's first page (prefix caching)."""
    needed = [(length + page_size - 1) // page_size for length in seq_lens]
    total = sum(needed) + extra_pages
    order = torch.randperm(total, generator=generator).tolist()
    width = max(max(needed, default=1), 1) + 1
    table = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(needed):
        for p in range(count):
            table[b, p] = order[cursor]
            cursor += 1
    if share_prefix and len(seq_lens) > 1 and needed[0] and needed[1] > 1:
        table[1, 0] = table[0, 0]
    return table, total


def _index_views(table, seq_lens, device, strided):
    """The page table and seq_lens on `device`; with `strided`, as every-other-element views (the table's
    columns interleaved with junk) that a row reading them as contiguous would misread."""
    lens = index_view(torch.tensor(seq_lens, dtype=torch.int32, device=device), "every_other" if strided else None)
    table = table.to(device)
    if strided:
        wide = torch.full((table.shape[0], 2 * table.shape[1]), -7, dtype=torch.int32, device=device)
        wide[:, ::2] = table
        table = wide[:, ::2]
    return table, lens


def _cache(rows, width_shape, dtype, device, generator, row_pad=0):
    """[rows, *width_shape]; with row_pad, rows of a wider buffer (row stride larger than the row)."""
    if not row_pad:
        return _randn((rows, *width_shape), dtype, device, generator)
    flat = 1
    for size in width_shape:
        flat *= size
    wide = _randn((rows, flat + row_pad), dtype, device, generator)
    return wide[:, :flat].view(rows, *width_shape)


def _fp8_cache(rows, num_kv_heads, head_dim, device, generator, row_pad=0, scale_views=False):
    """An e4m3 KV buffer [rows, 2*Hk, D] as kvcache.update_kv_buffer_fp8 leaves it (K ~ N(0, 1) * 3, V ~ N(0, 1),
    each quantized by its own per-tensor scale absmax / 448), and its (k_scale, v_scale) on `device`; with
    scale_views, the scales are offset views into one table (an engine's per-layer scale table)."""
    values = _cache(rows, (2 * num_kv_heads, head_dim), torch.float32, "cpu", generator, row_pad)
    values[:, :num_kv_heads] *= 3.0
    k_scale = values[:, :num_kv_heads].abs().amax().clamp_min(1e-6) / 448.0
    v_scale = values[:, num_kv_heads:].abs().amax().clamp_min(1e-6) / 448.0
    quantized = torch.cat([values[:, :num_kv_heads] / k_scale, values[:, num_kv_heads:] / v_scale], dim=1)
    buffer = torch.zeros((rows, 2 * num_kv_heads * head_dim + row_pad), dtype=torch.float8_e4m3fn)
    flat = buffer[:, : 2 * num_kv_heads * head_dim]
    flat.copy_(quantized.reshape(rows, -1).to(torch.float8_e4m3fn))
    buffer = buffer.to(device)[:, : 2 * num_kv_heads * head_dim].view(rows, 2 * num_kv_heads, head_dim)
    if scale_views:
        table = torch.tensor([9.0, float(k_scale), 9.0, float(v_scale)], device=device)
        return buffer, table[1:2], table[3:4]
    return buffer, k_scale.reshape(1).to(device), v_scale.reshape(1).to(device)


def _decode_case(
    seq_lens,
    num_q_heads,
    num_kv_heads,
    head_dim,
    page_size,
    *,
    scale=1.0,
    share_prefix=True,
    strided_q=False,
    strided_index=False,
    row_pad=0,
    fp8=False,
    features=(),
    sinks=None,
    return_lse=False,
    q_tokens=1,
):
    """features: (window_left, logits_soft_cap) appended to the arguments (default: the op's defaults); sinks:
    the mean of per-head sink logits drawn around it (appended after the features); then return_lse and
    q_tokens (num_q_tokens: q has q_tokens rows per sequence)."""

    def make(dtype, device, generator):
        table, pages = _pages_for(seq_lens, page_size, generator, share_prefix=share_prefix)
        if fp8:
            buffer, k_scale, v_scale = _fp8_cache(
                pages * page_size, num_kv_heads, head_dim, device, generator, row_pad, scale_views=strided_index
            )
        else:
            buffer = _cache(pages * page_size, (2 * num_kv_heads, head_dim), dtype, device, generator, row_pad)
            k_scale = v_scale = None
        rows = len(seq_lens) * q_tokens
        if strided_q:
            q = _randn((rows, num_q_heads, 2 * head_dim), dtype, device, generator, scale)[..., head_dim:]
        else:
            q = _randn((rows, num_q_heads, head_dim), dtype, device, generator, scale)
        table, lens = _index_views(table, seq_lens, device, strided_index)
        tail = _features_and_sinks(features, sinks, num_q_heads, device, generator)
        if return_lse or q_tokens > 1:
            tail = (*(tail or (-1, 0.0)), *((None,) if len(tail) < 3 else ()), return_lse, q_tokens)
        args = (q, buffer, table, lens, page_size, head_dim**-0.5, k_scale, v_scale, *tail)
        _, layout, dims = checks.check_decode(*args)
        return args, dict(dims), layout

    return make


def _mla_decode_case(
    seq_lens,
    num_q_heads,
    page_size,
    *,
    scale=1.0,
    strided_q=False,
    strided_index=False,
    row_pad=0,
    features=(),
    q_tokens=1,
    fp8=False,
):
    """features: (window_left, logits_soft_cap); q_tokens: num_q_tokens (q has q_tokens rows per sequence);
    fp8: the e4m3 latent cache kvcache.update_mla_buffer_fp8 writes (N(0, 1) latents, scale absmax / 448)
    with its latent_scale (an offset view into a scale table with strided_index)."""

    def make(dtype, device, generator):
        table, pages = _pages_for(seq_lens, page_size, generator, share_prefix=True)
        latent_scale = None
        if fp8:
            values = _cache(pages * page_size, (576,), torch.float32, "cpu", generator, row_pad)
            latent_scale = values.abs().amax().clamp_min(1e-6).reshape(1) / 448.0
            quantized = torch.zeros((values.shape[0], 576 + row_pad), dtype=torch.float8_e4m3fn)
            quantized[:, :576] = (values / latent_scale).to(torch.float8_e4m3fn)
            cache = quantized.to(device)[:, :576]
            latent_scale = latent_scale.to(device)
            if strided_index:
                latent_scale = torch.tensor([9.0, float(latent_scale)], device=device)[1:]
        else:
            cache = _cache(pages * page_size, (576,), dtype, device, generator, row_pad)
        rows = len(seq_lens) * q_tokens
        if strided_q:
            q = _randn((rows, 2 * num_q_heads, 576), dtype, device, generator, scale)[:, ::2]
        else:
            q = _randn((rows, num_q_heads, 576), dtype, device, generator, scale)
        table, lens = _index_views(table, seq_lens, device, strided_index)
        tail = tuple(features)
        if q_tokens > 1 or fp8:
            tail = (*(tail or (-1, 0.0)), q_tokens, latent_scale)
        # sm_scale of DeepSeek-V3 (1 / sqrt(192), the un-absorbed q/k head dim)
        args = (q, cache, table, lens, page_size, 192**-0.5, *tail)
        _, layout, dims = checks.check_mla_decode(*args)
        return args, dict(dims), layout

    return make


def _paged_prefill_case(
    seq_lens,
    new_tokens,
    num_q_heads,
    num_kv_heads,
    head_dim,
    page_size,
    *,
    causal=True,
    return_lse=False,
    strided_index=False,
    fused=False,
    row_pad=0,
    scale=1.0,
    features=(),
    sinks=None,
    tree=None,
):
    """tree: "tree" (each sequence's new tokens a random draft tree of depth <= 4 after its history) or "random"
    (every bit drawn; rows that see nothing included): a bit-packed custom mask appended after the sinks."""

    def make(dtype, device, generator):
        table, pages = _pages_for(seq_lens, page_size, generator, share_prefix=True)
        buffer = _cache(pages * page_size, (2 * num_kv_heads, head_dim), dtype, device, generator, row_pad)
        tokens = sum(new_tokens)
        fused_with = 2 * num_kv_heads if fused else 0
        q = _heads(tokens, num_q_heads, head_dim, dtype, device, generator, scale, fused_with=fused_with)
        table, lens = _index_views(table, seq_lens, device, strided_index)
        cu = _cu_seqlens(new_tokens, device, strided_index)
        longest = max(new_tokens, default=0)
        tail = _features_and_sinks(features, sinks, num_q_heads, device, generator)
        if tree is not None:
            masks = [_tree_mask(n, length, tree, generator) for n, length in zip(new_tokens, seq_lens)]
            tail = (
                *(tail or (-1, 0.0)),
                *((None,) if len(tail) < 3 else ()),
                *_pack_masks(masks, device, strided_index),
            )
        args = (q, buffer, table, cu, lens, longest, page_size, head_dim**-0.5, causal, return_lse, *tail)
        _, layout, dims = checks.check_prefill_paged(*args)
        return args, dict(dims), layout

    return make


def _tree_mask(new_tokens, length, kind, generator):
    """bool [n, length]: "tree": the history (the first length - n positions) seen by every new token, and
    among the new tokens each sees itself and its ancestors (token 0 the root, token i's parent drawn among
    the earlier tokens of depth < 4); "random": every bit drawn with probability 1/2."""
    if kind == "random":
        return torch.rand((new_tokens, length), generator=generator) < 0.5
    history = length - new_tokens
    mask = torch.zeros((new_tokens, length), dtype=torch.bool)
    mask[:, :history] = True
    depth = []
    for i in range(new_tokens):
        mask[i, history + i] = True
        shallow = [p for p in range(i) if depth[p] < 3]
        if i and shallow:
            parent = shallow[int(torch.randint(len(shallow), (1,), generator=generator))]
            mask[i, history : history + i] |= mask[parent, history : history + i]
            depth.append(depth[parent] + 1)
        else:
            depth.append(0)
    return mask


def _pack_masks(masks, device, strided):
    """(custom_mask uint8, mask_indptr int32): each [n_b, L_b] matrix flattened row-major, bit e of a segment
    in byte e // 8 at bit e % 8, segments whole bytes, one junk byte between them (offsets, not lengths, locate
    a segment); strided: both as every-other-element views."""
    chunks, offsets = [], [0]
    for mask in masks:
        bits = mask.flatten()
        bits = torch.cat([bits, torch.zeros((-bits.numel()) % 8, dtype=torch.bool)])
        weights = 2 ** torch.arange(8)
        packed = (bits.view(-1, 8).long() * weights).sum(-1).to(torch.uint8)
        chunks += [packed, torch.tensor([0xA5], dtype=torch.uint8)]
        offsets.append(offsets[-1] + packed.numel() + 1)
    custom = torch.cat(chunks).to(device) if chunks else torch.zeros(0, dtype=torch.uint8, device=device)
    indptr = torch.tensor(offsets, dtype=torch.int32, device=device)
    return index_view(custom, "every_other" if strided else None), index_view(
        indptr, "every_other" if strided else None
    )


# ---------------------------------------------------------------------------
# float64 oracles (host loops, independent of the reference row)
# ---------------------------------------------------------------------------


def _attend64(q, k, v, scale, visible, soft_cap=0.0, sinks=None):
    """q [Sq, H, D], k [Sk, H, D], v [Sk, H, Dv] (heads already matched), visible [Sq, Sk] -> out, lse;
    soft_cap c > 0: each scaled logit s becomes c * tanh(s / c); sinks [H]: one more logit per head, as a
    key whose value is 0 (visible to every query)."""
    logits = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * scale
    if soft_cap > 0:
        logits = soft_cap * torch.tanh(logits / soft_cap)
    logits = logits.masked_fill(~visible.unsqueeze(0), float("-inf"))
    if sinks is not None:
        column = sinks.double().view(-1, 1, 1).expand(logits.shape[0], logits.shape[1], 1)
        logits = torch.cat([logits, column], dim=-1)
        v = torch.cat([v.double(), torch.zeros_like(v[:1], dtype=torch.float64)], dim=0)
    lse = torch.logsumexp(logits, dim=-1)
    # a query attending nothing (an empty sequence, no sink): out 0, lse -inf (softmax would give NaN)
    weights = torch.softmax(logits, dim=-1).masked_fill((lse == float("-inf")).unsqueeze(-1), 0.0)
    return torch.einsum("hqk,khd->qhd", weights, v.double()), lse.t()


def _expand(t, group):
    return t.repeat_interleave(group, dim=1)


def _visible(query_positions, length, causal, window_left):
    """[Sq, length]: key position j visible to a query at position i (causal: j <= i; a window: j >= i - W)."""
    keys = torch.arange(length, device=query_positions.device).unsqueeze(0)
    queries = query_positions.unsqueeze(1)
    visible = keys <= queries if causal else torch.ones_like(keys <= queries)
    if window_left >= 0:
        visible = visible & (keys >= queries - window_left)
    return visible


def prefill_oracle(
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
    group = q.shape[1] // k.shape[1]
    out = torch.zeros((q.shape[0], q.shape[1], v.shape[2]), dtype=torch.float64, device=q.device)
    lse = torch.zeros((q.shape[0], q.shape[1]), dtype=torch.float64, device=q.device)
    offsets = cu_seqlens.tolist()
    for start, end in zip(offsets[:-1], offsets[1:]):
        if end == start:
            continue
        visible = _visible(torch.arange(end - start, device=q.device), end - start, causal, window_left)
        out[start:end], lse[start:end] = _attend64(
            q[start:end],
            _expand(k[start:end], group),
            _expand(v[start:end], group),
            sm_scale,
            visible,
            logits_soft_cap,
            sinks,
        )
    return (out.to(q.dtype), lse.float()) if return_lse else out.to(q.dtype)


def _gather_positions(table_row, length, page_size):
    return [int(table_row[p // page_size]) * page_size + p % page_size for p in range(length)]


def decode_oracle(
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
    heads = kv_buffer.shape[1] // 2
    group = q.shape[1] // heads
    n = num_q_tokens
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float64, device=q.device)
    for b, length in enumerate(seq_lens.tolist()):
        rows = torch.tensor(
            _gather_positions(page_table[b].tolist(), length, page_size), dtype=torch.long, device=q.device
        )
        kv = kv_buffer[rows].double()
        keys, values = kv[:, :heads], kv[:, heads:]
        if k_scale is not None:  # an fp8 buffer: dequantize (exact in float64)
            keys, values = keys * float(k_scale), values * float(v_scale)
        visible = _visible(torch.arange(length - n, length, device=q.device), length, True, window_left)
        expanded = (_expand(keys, group), _expand(values, group))
        rows = slice(b * n, (b + 1) * n)
        out[rows], lse[rows] = _attend64(q[rows], *expanded, sm_scale, visible, logits_soft_cap, sinks)
    return (out.to(q.dtype), lse.float()) if return_lse else out.to(q.dtype)


def mla_decode_oracle(
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
    n = num_q_tokens
    out = torch.empty((q.shape[0], q.shape[1], 512), dtype=torch.float64, device=q.device)
    for b, length in enumerate(seq_lens.tolist()):
        rows = torch.tensor(
            _gather_positions(page_table[b].tolist(), length, page_size), dtype=torch.long, device=q.device
        )
        latent = latent_cache[rows].double()
        if latent_scale is not None:  # an fp8 cache: dequantize (exact in float64)
            latent = latent * float(latent_scale)
        latent = latent.unsqueeze(1).expand(length, q.shape[1], 576)
        visible = _visible(torch.arange(length - n, length, device=q.device), length, True, window_left)
        token_rows = slice(b * n, (b + 1) * n)
        out[token_rows], _ = _attend64(q[token_rows], latent, latent[..., :512], sm_scale, visible, logits_soft_cap)
    return out.to(q.dtype)


def prefill_paged_oracle(
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
    heads = kv_buffer.shape[1] // 2
    group = q.shape[1] // heads
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.zeros(q.shape[:2], dtype=torch.float64, device=q.device)
    offsets = cu_seqlens_q.tolist()
    mask_bytes = None if custom_mask is None else custom_mask.tolist()
    for b, length in enumerate(seq_lens.tolist()):
        start, end = offsets[b], offsets[b + 1]
        if end == start:
            continue
        rows = torch.tensor(
            _gather_positions(page_table[b].tolist(), length, page_size), dtype=torch.long, device=q.device
        )
        kv = kv_buffer[rows]
        query_pos = torch.arange(length - (end - start), length, device=q.device)
        visible = _visible(query_pos, length, causal and mask_bytes is None, window_left)
        if mask_bytes is not None:  # bit e of the segment: query e // length, key e % length
            first = int(mask_indptr[b]) * 8
            tree = [(mask_bytes[(first + e) // 8] >> ((first + e) % 8)) & 1 for e in range((end - start) * length)]
            visible = visible & torch.tensor(tree, dtype=torch.bool, device=q.device).view(end - start, length)
        expanded = (_expand(kv[:, :heads], group), _expand(kv[:, heads:], group))
        out[start:end], lse[start:end] = _attend64(q[start:end], *expanded, sm_scale, visible, logits_soft_cap, sinks)
    return (out.to(q.dtype), lse.float()) if return_lse else out.to(q.dtype)


def _merge_case(tokens, heads, dim, *, spread=4.0, empty=(), strided=False):
    """Two parts' (v, s): s ~ N(0, spread) (large spreads: one part dominates); `empty` ("a", "b", "both") sets a
    part's s to -inf on every other token; strided: v as every-other-head views, s as column views."""

    def make(dtype, device, generator):
        parts = []
        for name in ("a", "b"):
            width = 2 * heads if strided else heads
            v = _randn((tokens, width, dim), dtype, device, generator)[:, :: 2 if strided else 1]
            s = (torch.randn((tokens, width), generator=generator) * spread).to(device)[:, :: 2 if strided else 1]
            if name in empty or "both" in empty:
                s[::2] = float("-inf")
            parts += [v, s]
        args = tuple(parts)
        _, layout, dims = checks.check_merge_states(*args)
        return args, dict(dims), layout

    return make


def merge_states_oracle(v_a, s_a, v_b, s_b):
    s = torch.logaddexp(s_a.double(), s_b.double())
    safe = torch.where(s == float("-inf"), 0.0, s)
    v = (
        v_a.double() * torch.exp(s_a.double() - safe)[..., None]
        + v_b.double() * torch.exp(s_b.double() - safe)[..., None]
    )
    return v.to(v_a.dtype), s.float()


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

_RAGGED = (17, 1, 100, 33)

PREFILL_CASES = (
    Case("one_token", _ragged_case((1,), 4, 1, 64)),
    Case("ragged_gqa4_d64", _ragged_case(_RAGGED, 4, 1, 64)),
    Case("ragged_non_causal", _ragged_case(_RAGGED, 4, 2, 64, causal=False)),
    Case("ragged_with_lse", _ragged_case(_RAGGED, 4, 2, 64, return_lse=True)),
    Case("mha_d128_lse_non_causal", _ragged_case((40, 9), 2, 2, 128, causal=False, return_lse=True)),
    Case("gqa8_d128", _ragged_case((5, 64, 1), 8, 1, 128)),
    Case("head_dim_256", _ragged_case((3, 20), 2, 1, 256)),
    Case("empty_sequences", _ragged_case((0, 7, 0, 12), 4, 2, 64)),
    Case("empty_batch", _ragged_case((), 4, 2, 64)),
    # logits of magnitude ~1e3: a kernel that exponentiates without subtracting the max overflows
    Case("large_logits", _ragged_case((30, 5), 4, 2, 64, scale=40.0, return_lse=True)),
    # q, k, v as views into one fused qkv projection (token stride > heads * head_dim)
    Case("fused_qkv_views", _ragged_case((12, 31), 4, 2, 64, fused=True)),
    Case("strided_cu_seqlens", _ragged_case((12, 31), 4, 2, 64, strided_index=True)),
    Case("q_head_dim_not_contiguous", _ragged_case((9, 4), 4, 2, 64, transposed_q=True)),
    Case("value_dim_differs", _ragged_case((9, 14), 4, 2, 128, head_dim_v=64)),
    # sliding windows (window_left) and logit soft-capping
    Case("window_8", _ragged_case(_RAGGED, 4, 2, 64, features=(8, 0.0))),
    Case("window_0_with_lse", _ragged_case(_RAGGED, 4, 2, 64, return_lse=True, features=(0, 0.0))),
    Case("window_past_the_context", _ragged_case(_RAGGED, 4, 2, 64, features=(5000, 0.0))),
    Case(
        "non_causal_window_with_lse", _ragged_case(_RAGGED, 4, 2, 64, causal=False, return_lse=True, features=(6, 0.0))
    ),
    Case("soft_cap_5_large_logits", _ragged_case((30, 5), 4, 2, 64, scale=40.0, return_lse=True, features=(-1, 5.0))),
    Case("window_16_soft_cap_30", _ragged_case(_RAGGED, 4, 1, 128, features=(16, 30.0))),
    # attention sinks: comparable to the logits, dominating them, with a window and a cap, with empty sequences
    Case("sinks_with_lse", _ragged_case(_RAGGED, 4, 2, 64, return_lse=True, sinks=0.0)),
    Case("sinks_that_dominate", _ragged_case(_RAGGED, 4, 2, 64, return_lse=True, sinks=12.0)),
    Case("sinks_window_8_soft_cap_20", _ragged_case(_RAGGED, 8, 2, 64, features=(8, 20.0), sinks=1.0)),
    Case("sinks_empty_sequences", _ragged_case((0, 7, 0, 12), 4, 2, 64, return_lse=True, sinks=0.0)),
    Case("lengths_1_17_1000_4097", _ragged_case((1, 17, 1000, 4097), 8, 2, 128, return_lse=True), gpu_only=True),
    Case(
        "window_1024_lengths_1_4097",
        _ragged_case((1, 4097, 2000), 8, 2, 128, return_lse=True, features=(1024, 0.0)),
        gpu_only=True,
    ),
    # 4096 sequences x 32 heads: more than 65,535 (sequence, head) programs
    Case("many_short_sequences", _ragged_case(tuple(1 + (i * 7) % 13 for i in range(4096)), 32, 8, 128), gpu_only=True),
)

MLA_PREFILL_CASES = (
    Case("ragged", _ragged_case((17, 1, 60), 4, 4, 192, head_dim_v=128, op=MLA_PREFILL)),
    Case(
        "window_9_soft_cap_20_with_lse",
        _ragged_case((17, 1, 60), 4, 4, 192, head_dim_v=128, return_lse=True, op=MLA_PREFILL, features=(9, 20.0)),
    ),
    Case(
        "ragged_lse_non_causal",
        _ragged_case((9, 33), 2, 2, 192, head_dim_v=128, causal=False, return_lse=True, op=MLA_PREFILL),
    ),
    Case(
        "fused_views_strided_index",
        _ragged_case((12, 5), 2, 2, 192, head_dim_v=128, fused=True, strided_index=True, op=MLA_PREFILL),
    ),
    Case(
        "long_16_heads",
        _ragged_case((1000, 3000), 16, 16, 192, head_dim_v=128, return_lse=True, op=MLA_PREFILL),
        gpu_only=True,
    ),
)

DECODE_CASES = (
    Case("ragged_page16", _decode_case((1, 17, 100, 33), 4, 1, 64, 16)),
    Case("page_size_1", _decode_case((1, 17, 40), 4, 2, 64, 1)),
    Case("page_size_64", _decode_case((70, 3, 128), 8, 1, 128, 64)),
    Case("mha_d128", _decode_case((5, 30), 2, 2, 128, 16)),
    Case("head_dim_256", _decode_case((5, 30), 4, 2, 256, 16)),
    Case("large_logits", _decode_case((50, 9), 4, 2, 64, 16, scale=40.0)),
    Case("strided_q_and_index", _decode_case((9, 33, 2), 4, 2, 64, 16, strided_q=True, strided_index=True)),
    # the buffer's rows inside a wider allocation (row stride > 2 * Hk * D), still 16-byte aligned
    Case("padded_buffer_rows", _decode_case((9, 33), 4, 2, 64, 16, row_pad=64)),
    Case("long_context_32k", _decode_case((32768,), 32, 8, 128, 16), gpu_only=True),
    Case("batch_64_len_4096", _decode_case((4096,) * 64, 32, 8, 128, 16), gpu_only=True),
    Case("many_sequences", _decode_case(tuple(1 + (i * 37) % 300 for i in range(3000)), 32, 8, 128, 16), gpu_only=True),
    # the fp8 KV buffer kvcache.update_kv_buffer_fp8 writes, with its per-tensor scales
    Case("fp8_kv_ragged_page16", _decode_case((1, 17, 100, 33), 8, 2, 64, 16, fp8=True)),
    Case(
        "fp8_kv_page_size_1_strided", _decode_case((9, 40), 4, 1, 128, 1, fp8=True, strided_q=True, strided_index=True)
    ),
    Case("fp8_kv_padded_rows_large_logits", _decode_case((50, 9), 4, 2, 64, 16, fp8=True, row_pad=64, scale=10.0)),
    Case("fp8_kv_batch_64_len_4096", _decode_case((4096,) * 64, 32, 8, 128, 16, fp8=True), gpu_only=True),
    Case("fp8_kv_long_context_32k", _decode_case((32768,), 32, 8, 128, 16, fp8=True), gpu_only=True),
    # sliding windows (window_left: smaller than a page, a page, past the context) and logit soft-capping
    Case("window_0", _decode_case((1, 17, 100, 33), 4, 1, 64, 16, features=(0, 0.0))),
    Case("window_3_below_a_page", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, features=(3, 0.0))),
    Case("window_of_one_page", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, features=(15, 0.0))),
    Case("window_past_the_context", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, features=(500, 0.0))),
    Case("window_page_size_1", _decode_case((1, 17, 40), 4, 2, 64, 1, features=(7, 0.0))),
    Case("soft_cap_5_large_logits", _decode_case((50, 9), 4, 2, 64, 16, scale=40.0, features=(-1, 5.0))),
    Case("window_20_soft_cap_30_head_dim_256", _decode_case((5, 30), 4, 2, 256, 16, features=(20, 30.0))),
    Case("fp8_kv_window_soft_cap", _decode_case((1, 17, 100, 33), 8, 2, 64, 16, fp8=True, features=(20, 10.0))),
    Case("window_4096_context_32k", _decode_case((32768, 5000), 32, 8, 128, 16, features=(4095, 0.0)), gpu_only=True),
    Case("sinks", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, sinks=0.0)),
    Case("with_lse", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, return_lse=True)),
    Case("with_lse_large_logits", _decode_case((50, 9), 4, 2, 64, 16, scale=40.0, return_lse=True)),
    Case(
        "fp8_kv_with_lse_sinks_window",
        _decode_case((1, 17, 100, 33), 8, 2, 64, 16, fp8=True, features=(20, 0.0), sinks=1.0, return_lse=True),
    ),
    Case("with_lse_batch_64_len_4096", _decode_case((4096,) * 64, 32, 8, 128, 16, return_lse=True), gpu_only=True),
    # several query tokens per sequence (speculative decoding, MTP): causal among themselves
    Case("q_tokens_2", _decode_case((3, 17, 100, 33), 4, 2, 64, 16, q_tokens=2)),
    Case("q_tokens_4_with_lse", _decode_case((4, 17, 100, 33), 4, 1, 64, 16, q_tokens=4, return_lse=True)),
    Case("q_tokens_8_page_size_1", _decode_case((8, 17, 40), 4, 2, 64, 1, q_tokens=8)),
    Case("q_tokens_3_window_5_soft_cap", _decode_case((3, 17, 100, 33), 4, 2, 64, 16, features=(5, 20.0), q_tokens=3)),
    Case("q_tokens_4_sinks", _decode_case((4, 17, 100, 33), 8, 2, 128, 16, sinks=1.0, q_tokens=4, return_lse=True)),
    Case("fp8_kv_q_tokens_4", _decode_case((4, 17, 100, 33), 8, 2, 64, 16, fp8=True, q_tokens=4)),
    Case("q_tokens_4_batch_64_len_4096", _decode_case((4096,) * 64, 32, 8, 128, 16, q_tokens=4), gpu_only=True),
    Case("sinks_that_dominate", _decode_case((1, 17, 100, 33), 4, 2, 64, 16, sinks=12.0)),
    # empty sequences (an engine's padding requests): out 0, lse -inf (with sinks: the sink's logit)
    Case("empty_sequences_with_lse", _decode_case((0, 17, 0, 33), 4, 2, 64, 16, return_lse=True)),
    Case("every_sequence_empty", _decode_case((0, 0, 0), 4, 1, 64, 16, return_lse=True)),
    Case("fp8_kv_empty_sequences", _decode_case((0, 17, 100, 0), 8, 2, 64, 16, fp8=True)),
    Case(
        "q_tokens_4_empty_sequences_sinks",
        _decode_case((0, 17, 0, 33), 4, 2, 64, 16, sinks=1.0, q_tokens=4, return_lse=True),
    ),
    Case("empty_sequences_d128_page_size_1", _decode_case((0, 40, 0), 8, 1, 128, 1)),
    Case(
        "empty_sequences_batch_64_len_4096",
        _decode_case((0, 4096) * 32, 32, 8, 128, 16, return_lse=True),
        gpu_only=True,
    ),
    Case(
        "fp8_kv_sinks_window_20", _decode_case((1, 17, 100, 33), 8, 2, 64, 16, fp8=True, features=(20, 0.0), sinks=1.0)
    ),
    # gpt-oss's attention: 64 query heads over 8 KV heads of 64 dims, window 128, sinks
    Case(
        "gpt_oss_window_128_sinks_context_32k",
        _decode_case((32768, 100, 4000), 64, 8, 64, 16, features=(127, 0.0), sinks=0.0),
        gpu_only=True,
    ),
)

MLA_DECODE_CASES = (
    Case("ragged_page64", _mla_decode_case((1, 65, 200), 16, 64)),
    Case("page_size_1", _mla_decode_case((1, 20, 9), 16, 1)),
    Case("page_size_16", _mla_decode_case((33, 4), 8, 16)),
    Case("large_logits", _mla_decode_case((40, 70), 16, 64, scale=5.0)),
    Case("strided_q_and_index", _mla_decode_case((30, 70), 16, 64, strided_q=True, strided_index=True)),
    Case("padded_cache_rows", _mla_decode_case((30, 70), 16, 64, row_pad=64)),
    Case("heads_128", _mla_decode_case((100, 300), 128, 64), gpu_only=True),
    Case("batch_64_len_4096_heads_16", _mla_decode_case((4096,) * 64, 16, 64), gpu_only=True),
    Case("long_context_32k", _mla_decode_case((32768,), 16, 64), gpu_only=True),
    Case("window_70_soft_cap_15", _mla_decode_case((1, 65, 200), 16, 64, features=(70, 15.0))),
    Case("window_5_page_size_1", _mla_decode_case((1, 20, 9), 16, 1, features=(5, 0.0))),
    # empty sequences (an engine's padding requests): out 0
    Case("empty_sequences", _mla_decode_case((0, 65, 0, 200), 16, 64)),
    Case("every_sequence_empty", _mla_decode_case((0, 0), 16, 16)),
    # several query tokens per sequence (DeepSeek-V3's MTP, speculative decoding): causal among themselves
    Case("q_tokens_2", _mla_decode_case((2, 65, 200), 16, 64, q_tokens=2)),
    Case("q_tokens_4_page_size_1_strided", _mla_decode_case((4, 20, 9), 8, 1, q_tokens=4, strided_q=True)),
    Case("q_tokens_3_window_5_soft_cap", _mla_decode_case((3, 65, 70), 16, 16, features=(5, 20.0), q_tokens=3)),
    Case("q_tokens_4_empty_sequences", _mla_decode_case((0, 65, 0, 33), 16, 16, q_tokens=4)),
    # the fp8 e4m3 latent cache kvcache.update_mla_buffer_fp8 writes, with its per-tensor scale
    Case("fp8_latent_ragged_page64", _mla_decode_case((1, 65, 200), 16, 64, fp8=True)),
    Case(
        "fp8_latent_page_size_1_strided",
        _mla_decode_case((1, 20, 9), 16, 1, fp8=True, strided_q=True, strided_index=True, row_pad=64),
    ),
    Case(
        "fp8_latent_q_tokens_4_window_20",
        _mla_decode_case((4, 65, 200), 16, 16, fp8=True, q_tokens=4, features=(20, 0.0)),
    ),
    Case("fp8_latent_empty_sequences_soft_cap", _mla_decode_case((0, 65, 200), 16, 64, fp8=True, features=(-1, 15.0))),
    Case("fp8_latent_batch_64_len_4096_heads_16", _mla_decode_case((4096,) * 64, 16, 64, fp8=True), gpu_only=True),
    Case("q_tokens_4_batch_64_len_4096_heads_16", _mla_decode_case((4096,) * 64, 16, 64, q_tokens=4), gpu_only=True),
    Case(
        "fp8_latent_heads_128_q_tokens_2", _mla_decode_case((100, 3000), 128, 64, fp8=True, q_tokens=2), gpu_only=True
    ),
)

PREFILL_PAGED_CASES = (
    Case("chunk_after_history", _paged_prefill_case((40, 17, 100), (8, 17, 1), 4, 2, 64, 16)),
    Case("page_size_1", _paged_prefill_case((20, 9), (5, 9), 4, 1, 64, 1)),
    Case("page_size_64_d128", _paged_prefill_case((130, 64), (30, 2), 8, 2, 128, 64)),
    Case("non_causal_with_lse", _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, causal=False, return_lse=True)),
    Case("with_lse", _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, return_lse=True)),
    Case("empty_chunk", _paged_prefill_case((40, 0, 17), (8, 0, 3), 4, 2, 64, 16)),
    Case("fused_q_strided_index", _paged_prefill_case((33, 12), (6, 12), 4, 2, 64, 16, fused=True, strided_index=True)),
    Case("padded_buffer_rows", _paged_prefill_case((33, 12), (6, 12), 4, 2, 64, 16, row_pad=64)),
    # sliding windows and logit soft-capping
    Case("window_5_after_history", _paged_prefill_case((40, 17, 100), (8, 17, 1), 4, 2, 64, 16, features=(5, 0.0))),
    Case(
        "non_causal_window_with_lse",
        _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, causal=False, return_lse=True, features=(10, 0.0)),
    ),
    Case(
        "soft_cap_5_large_logits",
        _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, scale=40.0, return_lse=True, features=(-1, 5.0)),
    ),
    Case("window_past_the_context", _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, features=(1000, 0.0))),
    Case(
        "sinks_window_5_with_lse",
        _paged_prefill_case((40, 17, 100), (8, 17, 1), 4, 2, 64, 16, return_lse=True, features=(5, 0.0), sinks=1.0),
    ),
    # tree masks (speculative decoding's draft trees, FlashInfer's packed custom mask)
    Case("draft_trees_after_history", _paged_prefill_case((40, 17, 100), (8, 5, 16), 4, 2, 64, 16, tree="tree")),
    Case(
        "draft_trees_strided_with_lse",
        _paged_prefill_case((40, 9), (6, 9), 4, 1, 64, 1, tree="tree", return_lse=True, strided_index=True),
    ),
    Case(
        "random_mask_sinks_soft_cap",
        _paged_prefill_case((33, 12), (7, 12), 4, 2, 64, 16, tree="random", sinks=1.0, features=(-1, 20.0)),
    ),
    Case(
        "random_mask_window_4_with_lse",
        _paged_prefill_case((40, 17), (8, 3), 4, 2, 64, 16, tree="random", return_lse=True, features=(4, 0.0)),
    ),
    Case("tree_with_empty_chunk", _paged_prefill_case((40, 0, 17), (8, 0, 3), 4, 2, 64, 16, tree="tree")),
    Case(
        "draft_trees_64_tokens_prefix_4096",
        _paged_prefill_case((4160, 1088), (64, 64), 32, 8, 128, 16, tree="tree", return_lse=True),
        gpu_only=True,
    ),
    Case(
        "long_prefix_4096_chunk_512",
        _paged_prefill_case((4608, 1024), (512, 1024), 32, 8, 128, 16, return_lse=True),
        gpu_only=True,
    ),
)

MERGE_STATES_CASES = (
    Case("tokens_7_heads_4_d64", _merge_case(7, 4, 64)),
    Case("one_part_dominates", _merge_case(9, 2, 128, spread=60.0)),
    Case("empty_parts", _merge_case(8, 4, 64, empty=("a",))),
    Case("both_parts_empty", _merge_case(6, 2, 64, empty=("both",))),
    Case("strided_views_d512", _merge_case(5, 3, 512, strided=True)),
    Case("no_tokens", _merge_case(0, 4, 64)),
    Case("tokens_4096_heads_32_d128", _merge_case(4096, 32, 128), gpu_only=True),
)

CASES = {
    PREFILL: PREFILL_CASES,
    MLA_PREFILL: MLA_PREFILL_CASES,
    DECODE: DECODE_CASES,
    MLA_DECODE: MLA_DECODE_CASES,
    PREFILL_PAGED: PREFILL_PAGED_CASES,
    MERGE_STATES: MERGE_STATES_CASES,
}

ORACLES = {
    PREFILL: prefill_oracle,
    MLA_PREFILL: prefill_oracle,
    DECODE: decode_oracle,
    MLA_DECODE: mla_decode_oracle,
    PREFILL_PAGED: prefill_paged_oracle,
    MERGE_STATES: merge_states_oracle,
}

# Outputs are convex combinations of values of magnitude ~1-4. Library kernels round the softmax
# weights to the input dtype before the PV product (FA3, FlashInfer): about one input ulp of the
# output's magnitude, so bf16 gets 2 bf16 ulps at 4, fp16 likewise; fp32 (reference vs float64) only
# accumulation-order error. lse (second output) is compared with a relative bound: it reaches ~1e3
# in the large-logit cases.
_OUT = {"fp32": (2e-4, 2e-4), "fp16": (4e-3, 4e-3), "bf16": (3e-2, 2e-2)}
_LSE = {"fp32": (1e-4, 1e-5), "fp16": (2e-3, 1e-3), "bf16": (1e-2, 2e-3)}

TOLERANCES = {}
for _op in CASES:
    for _dtype in _HALF_AND_FP32:
        TOLERANCES[(_op, _dtype)] = (_OUT[_dtype], _LSE[_dtype])
