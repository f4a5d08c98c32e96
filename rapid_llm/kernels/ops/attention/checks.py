"""Argument checks of the attention family: each op's one validation site (see ops/checks.py).

Each check returns (q, layout tags, dims). Tags the arguments may provide:
  q:heads           q [N, Hq, D] has unit stride along D, its other strides and its data pointer
                    16-byte aligned (what TMA-based library kernels load without a copy)
  kv:heads          the same for k and v of the ragged prefill ops
  kv:paged          kv_buffer [rows, 2*Hk, D] likewise (any row stride that keeps the alignment)
  latent:rows       latent_cache [rows, 576] likewise
  kv:q_dtype        decode's kv_buffer holds q's dtype (no scales)
  kv:fp8_e4m3       decode's kv_buffer is float8_e4m3fn, with its k_scale and v_scale
  v:same_head_dim   v's head_dim equals q's (ragged prefill ops)
  index:contiguous  cu_seqlens / seq_lens / page_table are contiguous
  q:tma             q [N, H, D] is a 2D TMA array (tokens x h * stride_h + d): q:heads, and heads and tokens
                    that do not overlap (stride_h >= D, stride_t >= (H - 1) * stride_h + D)
  kv:tma            the same for k and v (ragged prefill)
  latent:tma        latent_cache [rows, 576], rows > 0, unit column stride, 16-byte aligned base and row
                    stride, rows that do not overlap
  scale:positive    sm_scale > 0 (kernels that take the row maximum on the raw logits)
  window:none       window_left == -1 (no sliding window)
  softcap:none      logits_soft_cap == 0 (no tanh soft cap)
  sinks:none        sinks is None (prefill, prefill_paged, decode)
  mask:none         prefill_paged's custom_mask is None (no tree mask)
  lse:none          decode's return_lse is False
  q:one_token       decode's or mla_decode's num_q_tokens is 1
  latent:q_dtype    mla_decode's latent cache holds q's dtype (no scale)
  latent:fp8_e4m3   mla_decode's latent cache is float8_e4m3fn, with its latent_scale
"""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_bool,
    expect_float_tensor,
    expect_int,
    expect_real_number,
    expect_same_device,
    expect_tensor,
    tag_table,
    values_checked,
)
from . import DECODE, MERGE_STATES, MLA_DECODE, MLA_LATENT_DIM, MLA_PREFILL, MLA_VALUE_DIM, PREFILL, PREFILL_PAGED

_ALIGN_BYTES = 16
_FEATURE_TAGS = ("window:none", "softcap:none")
_RAGGED_TAGS = tag_table(
    "q:heads",
    "kv:heads",
    "v:same_head_dim",
    "index:contiguous",
    "q:tma",
    "kv:tma",
    "scale:positive",
    *_FEATURE_TAGS,
    "sinks:none",
)
_PAGED_TAGS = tag_table("q:heads", "kv:paged", "index:contiguous", *_FEATURE_TAGS, "sinks:none", "mask:none")
_DECODE_TAGS = tag_table(
    "q:heads",
    "kv:paged",
    "index:contiguous",
    "kv:q_dtype",
    "kv:fp8_e4m3",
    *_FEATURE_TAGS,
    "sinks:none",
    "lse:none",
    "q:one_token",
)
#: Query tokens per sequence a decode call may take (speculative decoding's drafts, MTP).
MAX_Q_TOKENS = 8
_LATENT_TAGS = tag_table(
    "q:heads",
    "latent:rows",
    "index:contiguous",
    "latent:tma",
    "latent:q_dtype",
    "latent:fp8_e4m3",
    *_FEATURE_TAGS,
    "q:one_token",
)


def heads_aligned(t) -> bool:
    """Unit stride along the last dim; every other stride and the data pointer 16-byte aligned."""
    if t.numel() == 0:
        return True
    if t.shape[-1] != 1 and t.stride(-1) != 1:
        return False
    size = t.element_size()
    if (t.data_ptr() % _ALIGN_BYTES) != 0:
        return False
    return all(t.shape[d] == 1 or (t.stride(d) * size) % _ALIGN_BYTES == 0 for d in range(t.dim() - 1))


def tma_array(t) -> bool:
    """A [T, H, D] tensor readable as the 2D TMA array tokens x (h * stride_h + d): unit stride along D,
    16-byte aligned data pointer and token/head strides, heads and tokens that do not overlap."""
    if t.numel() == 0:
        return True
    size = t.element_size()
    stride_t, stride_h, stride_d = t.stride()
    tokens, heads, dim = t.shape
    return (
        stride_d == 1
        and t.data_ptr() % _ALIGN_BYTES == 0
        and (stride_t * size) % _ALIGN_BYTES == 0
        and (stride_h * size) % _ALIGN_BYTES == 0
        and stride_h >= dim
        and stride_t >= (heads - 1) * stride_h + dim
    )


def tma_rows(t, width: int) -> bool:
    """A [rows, width] tensor readable as a 2D TMA array: rows > 0, unit column stride, 16-byte aligned data
    pointer and row stride, rows that do not overlap."""
    row_stride, column_stride = t.stride()
    return (
        t.shape[0] > 0
        and column_stride == 1
        and row_stride >= width
        and t.data_ptr() % _ALIGN_BYTES == 0
        and (row_stride * t.element_size()) % _ALIGN_BYTES == 0
    )


def _expect_same_dtype(op, argument, value, reference_argument, reference):
    if value.dtype != reference.dtype:
        raise OpInputError(op, argument, f"the dtype of {reference_argument!r} ({reference.dtype})", str(value.dtype))


def _expect_int32_vector(op, argument, value, length: int | None, anchor) -> None:
    expect_tensor(op, argument, value)
    if value.dtype != torch.int32:
        raise OpInputError(op, argument, "dtype torch.int32", str(value.dtype))
    if value.dim() != 1 or (length is not None and value.shape[0] != length):
        expected = "a 1-D tensor" if length is None else f"shape [{length}]"
        raise OpInputError(op, argument, expected, f"shape {list(value.shape)}")
    expect_same_device(op, argument, value, "q", anchor)


def _expect_scale(op, sm_scale) -> None:
    expect_real_number(op, "sm_scale", sm_scale)
    if not abs(float(sm_scale)) < float("inf"):
        raise OpInputError(op, "sm_scale", "a finite number", repr(sm_scale))


def _window_and_cap_off(op, window_left, logits_soft_cap) -> tuple[bool, bool]:
    """Checks the optional features (window_left an int >= -1; logits_soft_cap a finite number >= 0) and
    returns the flags of their off-tags (window:none, softcap:none)."""
    expect_int(op, "window_left", window_left, minimum=-1)
    expect_real_number(op, "logits_soft_cap", logits_soft_cap, minimum=0)
    if not float(logits_soft_cap) < float("inf"):
        raise OpInputError(op, "logits_soft_cap", "a finite number >= 0 (0: no cap)", repr(logits_soft_cap))
    return window_left == -1, logits_soft_cap == 0


def _sinks_off(op, sinks, q) -> bool:
    """Checks sinks (None, or a float32 [Hq] tensor on q's device, any stride); True when None (sinks:none)."""
    if sinks is None:
        return True
    expect_tensor(op, "sinks", sinks)
    if sinks.dtype != torch.float32 or sinks.dim() != 1 or sinks.shape[0] != q.shape[1]:
        expected = f"None or a torch.float32 tensor [{q.shape[1]}] (one sink logit per query head)"
        raise OpInputError(op, "sinks", expected, f"{sinks.dtype} of shape {list(sinks.shape)}")
    expect_same_device(op, "sinks", sinks, "q", q)
    return False


def _expect_offsets(op, argument, cu_seqlens, anchor) -> int:
    """An int32 [B + 1] offsets tensor on q's device; returns B."""
    _expect_int32_vector(op, argument, cu_seqlens, None, anchor)
    if cu_seqlens.shape[0] < 1:
        raise OpInputError(op, argument, "shape [B + 1] (at least one offset)", "shape [0]")
    return cu_seqlens.shape[0] - 1


def _check_cu_seqlens(op, argument, cu_seqlens, total: int, max_seqlen: int, max_argument: str):
    """cu_seqlens[0] == 0, non-decreasing, last == total, every length <= max_seqlen (value checks).
    Returns the lengths (int64, on the CPU) when the values were checked, else None."""
    if not values_checked(cu_seqlens):
        return None
    values = cu_seqlens.to("cpu", torch.int64)
    lengths = values[1:] - values[:-1]
    if int(values[0]) != 0:
        raise OpInputError(op, argument, "cu_seqlens[0] == 0", f"{int(values[0])}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise OpInputError(op, argument, "non-decreasing offsets", f"a negative length {int(lengths.min())}")
    if int(values[-1]) != total:
        raise OpInputError(op, argument, f"last offset == {total} (the number of query tokens)", f"{int(values[-1])}")
    if lengths.numel() and int(lengths.max()) > max_seqlen:
        raise OpInputError(
            op, argument, f"every length <= {max_argument} ({max_seqlen})", f"a length of {int(lengths.max())}"
        )
    return lengths


def _check_ragged(
    op, q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap, sinks=None
):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        expect_float_tensor(op, name, tensor)
        if tensor.dim() != 3:
            raise OpInputError(op, name, "shape [T, heads, head_dim]", f"shape {list(tensor.shape)}")
    for name, tensor in (("k", k), ("v", v)):
        _expect_same_dtype(op, name, tensor, "q", q)
        expect_same_device(op, name, tensor, "q", q)
        if tensor.shape[0] != q.shape[0]:
            raise OpInputError(op, name, f"{q.shape[0]} tokens (q's)", f"shape {list(tensor.shape)}")
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if head_dim == 0 or k.shape[2] != head_dim:
        raise OpInputError(op, "k", f"shape [T, Hk, {head_dim}] (q's head_dim, > 0)", f"shape {list(k.shape)}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        raise OpInputError(op, "k", f"a number of heads dividing q's {num_q_heads}", f"{num_kv_heads} heads")
    if v.shape[1] != num_kv_heads or v.shape[2] == 0:
        raise OpInputError(op, "v", f"shape [T, {num_kv_heads}, Dv] (k's heads, Dv > 0)", f"shape {list(v.shape)}")
    _expect_offsets(op, "cu_seqlens", cu_seqlens, q)
    expect_int(op, "max_seqlen", max_seqlen, minimum=0)
    _expect_scale(op, sm_scale)
    expect_bool(op, "causal", causal)
    expect_bool(op, "return_lse", return_lse)
    # mla_prefill takes no sinks: its check never derives sinks:none
    features_off = (*_window_and_cap_off(op, window_left, logits_soft_cap), _sinks_off(op, sinks, q) and op == PREFILL)
    _check_cu_seqlens(op, "cu_seqlens", cu_seqlens, tokens, max_seqlen, "max_seqlen")
    tags = _RAGGED_TAGS[
        (
            heads_aligned(q),
            heads_aligned(k) and heads_aligned(v),
            v.shape[2] == head_dim,
            cu_seqlens.is_contiguous(),
            tma_array(q),
            tma_array(k) and tma_array(v),
            float(sm_scale) > 0,
            *features_off,
        )
    ]
    dims = (
        ("num_tokens", tokens),
        ("max_seqlen", max_seqlen),
        ("num_q_heads", num_q_heads),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("head_dim_v", v.shape[2]),
    )
    return q, tags, dims


def check_prefill(
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
    """attention.prefill's check: (q, tags, (num_tokens, max_seqlen, num_q_heads, num_kv_heads, head_dim,
    head_dim_v))."""
    features = (window_left, logits_soft_cap, sinks)
    return _check_ragged(PREFILL, q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, *features)


def check_mla_prefill(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """attention.mla_prefill's check: the prefill check, plus q/k head_dim 192, v 128, Hq == Hk."""
    op = MLA_PREFILL
    features = (window_left, logits_soft_cap)
    result = _check_ragged(op, q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, *features)
    if q.shape[2] != 192:
        raise OpInputError(op, "q", "head_dim 192 (128 nope + 64 rope dims)", f"shape {list(q.shape)}")
    if v.shape[2] != 128:
        raise OpInputError(op, "v", "head_dim 128", f"shape {list(v.shape)}")
    if k.shape[1] != q.shape[1]:
        raise OpInputError(
            op, "k", f"{q.shape[1]} heads (q's: MLA prefill has one KV head per query head)", f"{k.shape[1]} heads"
        )
    return result


def _check_pages(op, page_table, seq_lens, page_size, rows, min_lens, min_lens_text) -> None:
    """seq_lens 0 (an empty sequence) or in [min_lens, max_pages * page_size], and the used page ids
    < rows / page_size."""
    if not values_checked(seq_lens) or seq_lens.numel() == 0:
        return
    lens = seq_lens.to("cpu", torch.int64)
    table = page_table.to("cpu", torch.int64)
    capacity = table.shape[1] * page_size
    low_ok = (lens >= min_lens) | (lens == 0)
    if not bool(low_ok.all()):
        bad = int(torch.nonzero(~low_ok)[0, 0])
        raise OpInputError(op, "seq_lens", min_lens_text, f"seq_lens[{bad}] = {int(lens[bad])}")
    if int(lens.max()) > capacity:
        raise OpInputError(
            op,
            "seq_lens",
            f"lengths <= max_pages * page_size = {capacity} (the page table's reach)",
            f"a length of {int(lens.max())}",
        )
    used = torch.arange(table.shape[1]).unsqueeze(0) < ((lens + page_size - 1) // page_size).unsqueeze(1)
    pages = rows // page_size
    ids = table[used]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= pages):
        bad = int(ids.max()) if int(ids.max()) >= pages else int(ids.min())
        raise OpInputError(
            op,
            "page_table",
            f"page ids in [0, {pages}) (the buffer's {rows} rows / page_size) for the pages a sequence uses",
            f"a page id of {bad}",
        )


def _check_paged_common(op, q, cache, cache_name, page_table, seq_lens, page_size, sm_scale, fp8_scales=""):
    """fp8_scales: the scale arguments an fp8 e4m3 cache comes with ("" where the op takes none)."""
    expect_float_tensor(op, "q", q)
    if q.dim() != 3 or q.shape[1] == 0 or q.shape[2] == 0:
        raise OpInputError(op, "q", "shape [N, Hq, D] with Hq, D > 0", f"shape {list(q.shape)}")
    expect_tensor(op, cache_name, cache)
    if cache.dtype != q.dtype and not (fp8_scales and cache.dtype == torch.float8_e4m3fn):
        expected = f"q's dtype ({q.dtype})" + (f" or torch.float8_e4m3fn (with {fp8_scales})" if fp8_scales else "")
        raise OpInputError(op, cache_name, expected, str(cache.dtype))
    expect_same_device(op, cache_name, cache, "q", q)
    expect_int(op, "page_size", page_size, minimum=1)
    if cache.shape[0] % page_size:
        raise OpInputError(
            op, cache_name, f"a number of rows divisible by page_size {page_size}", f"{cache.shape[0]} rows"
        )
    expect_tensor(op, "page_table", page_table)
    if page_table.dtype != torch.int32:
        raise OpInputError(op, "page_table", "dtype torch.int32", str(page_table.dtype))
    expect_same_device(op, "page_table", page_table, "q", q)
    _expect_scale(op, sm_scale)


def _kv_buffer_heads(op, kv_buffer, num_q_heads: int, head_dim: int) -> int:
    """Hk of a [rows, 2*Hk, D] KV buffer whose D is q's and whose Hk divides q's heads."""
    if kv_buffer.dim() != 3 or kv_buffer.shape[1] == 0 or kv_buffer.shape[1] % 2 or kv_buffer.shape[2] != head_dim:
        raise OpInputError(
            op,
            "kv_buffer",
            f"shape [rows, 2*Hk, {head_dim}] (K heads then V heads, q's head_dim)",
            f"shape {list(kv_buffer.shape)}",
        )
    num_kv_heads = kv_buffer.shape[1] // 2
    if num_q_heads % num_kv_heads:
        raise OpInputError(op, "kv_buffer", f"a number of KV heads dividing q's {num_q_heads}", f"{num_kv_heads}")
    return num_kv_heads


def _check_cache_scales(op, cache, scales, q) -> bool:
    """True for an fp8 cache with valid (name, scale) pairs; False for a cache of q's dtype without scales."""
    fp8 = cache.dtype == torch.float8_e4m3fn
    for name, scale in scales:
        if not fp8:
            if scale is not None:
                raise OpInputError(op, name, "None (scales belong to an fp8 cache)", type(scale).__name__)
            continue
        if scale is None:
            raise OpInputError(op, name, "a one-element torch.float32 tensor (an fp8 cache's dequant scale)", "None")
        expect_tensor(op, name, scale)
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise OpInputError(
                op,
                name,
                "a one-element torch.float32 tensor (the per-tensor dequant scale)",
                f"{scale.dtype} with {scale.numel()} elements",
            )
        expect_same_device(op, name, scale, "q", q)
        if values_checked(scale):
            value = float(scale.reshape(()))
            if not 0.0 < value < float("inf"):
                raise OpInputError(op, name, "a positive, finite scale", repr(value))
    return fp8


def check_decode(
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
    """attention.decode's check: (q, tags, (num_tokens = B, num_q_heads, num_kv_heads, head_dim, page_size))."""
    op = DECODE
    _check_paged_common(op, q, kv_buffer, "kv_buffer", page_table, seq_lens, page_size, sm_scale, "k_scale, v_scale")
    fp8 = _check_cache_scales(op, kv_buffer, (("k_scale", k_scale), ("v_scale", v_scale)), q)
    expect_bool(op, "return_lse", return_lse)
    batch = _expect_q_tokens(op, num_q_tokens, q)
    features_off = (
        *_window_and_cap_off(op, window_left, logits_soft_cap),
        _sinks_off(op, sinks, q),
        not return_lse,
        num_q_tokens == 1,
    )
    _, num_q_heads, head_dim = q.shape
    num_kv_heads = _kv_buffer_heads(op, kv_buffer, num_q_heads, head_dim)
    if page_table.dim() != 2 or page_table.shape[0] != batch:
        raise OpInputError(op, "page_table", f"shape [{batch}, max_pages]", f"shape {list(page_table.shape)}")
    _expect_int32_vector(op, "seq_lens", seq_lens, batch, q)
    _check_pages(op, page_table, seq_lens, page_size, kv_buffer.shape[0], num_q_tokens, _min_lens(num_q_tokens))
    tags = _DECODE_TAGS[
        (
            heads_aligned(q),
            heads_aligned(kv_buffer),
            page_table.is_contiguous() and seq_lens.is_contiguous(),
            not fp8,
            fp8,
            *features_off,
        )
    ]
    dims = (
        ("num_tokens", batch),
        ("num_q_heads", num_q_heads),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("page_size", page_size),
    )
    return q, tags, dims


def _expect_q_tokens(op, num_q_tokens, q) -> int:
    """num_q_tokens an int in 1..MAX_Q_TOKENS dividing q's rows; returns the batch B = rows / num_q_tokens."""
    expect_int(op, "num_q_tokens", num_q_tokens, minimum=1)
    if num_q_tokens > MAX_Q_TOKENS or q.shape[0] % num_q_tokens:
        expected = f"an int in 1..{MAX_Q_TOKENS} dividing q's {q.shape[0]} rows (B * num_q_tokens)"
        raise OpInputError(op, "num_q_tokens", expected, repr(num_q_tokens))
    return q.shape[0] // num_q_tokens


def _min_lens(num_q_tokens: int) -> str:
    if num_q_tokens == 1:
        return "lengths >= 0"
    return f"lengths 0 (empty) or >= num_q_tokens ({num_q_tokens}: the queries' positions are in the cache)"


def check_mla_decode(
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
    """attention.mla_decode's check: (q, tags, (num_tokens = B, num_q_heads, head_dim, page_size))."""
    op = MLA_DECODE
    cache = (q, latent_cache, "latent_cache", page_table, seq_lens, page_size, sm_scale, "latent_scale")
    _check_paged_common(op, *cache)
    fp8 = _check_cache_scales(op, latent_cache, (("latent_scale", latent_scale),), q)
    batch = _expect_q_tokens(op, num_q_tokens, q)
    features_off = (*_window_and_cap_off(op, window_left, logits_soft_cap), num_q_tokens == 1)
    _, num_q_heads, head_dim = q.shape
    if head_dim != MLA_LATENT_DIM:
        raise OpInputError(
            op,
            "q",
            f"shape [B, Hq, {MLA_LATENT_DIM}] ({MLA_VALUE_DIM} latent + 64 rope dims)",
            f"shape {list(q.shape)}",
        )
    if latent_cache.dim() != 2 or latent_cache.shape[1] != MLA_LATENT_DIM:
        raise OpInputError(op, "latent_cache", f"shape [rows, {MLA_LATENT_DIM}]", f"shape {list(latent_cache.shape)}")
    if page_table.dim() != 2 or page_table.shape[0] != batch:
        raise OpInputError(op, "page_table", f"shape [{batch}, max_pages]", f"shape {list(page_table.shape)}")
    _expect_int32_vector(op, "seq_lens", seq_lens, batch, q)
    _check_pages(op, page_table, seq_lens, page_size, latent_cache.shape[0], num_q_tokens, _min_lens(num_q_tokens))
    tags = _LATENT_TAGS[
        (
            heads_aligned(q),
            heads_aligned(latent_cache),
            page_table.is_contiguous() and seq_lens.is_contiguous(),
            tma_rows(latent_cache, MLA_LATENT_DIM),
            not fp8,
            fp8,
            *features_off,
        )
    ]
    dims = (("num_tokens", batch), ("num_q_heads", num_q_heads), ("head_dim", head_dim), ("page_size", page_size))
    return q, tags, dims


def check_prefill_paged(
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
    """attention.prefill_paged's check: (q, tags, (num_tokens, num_q_heads, num_kv_heads, head_dim, page_size))."""
    op = PREFILL_PAGED
    _check_paged_common(op, q, kv_buffer, "kv_buffer", page_table, seq_lens, page_size, sm_scale)
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = _kv_buffer_heads(op, kv_buffer, num_q_heads, head_dim)
    batch = _expect_offsets(op, "cu_seqlens_q", cu_seqlens_q, q)
    if page_table.dim() != 2 or page_table.shape[0] != batch:
        raise OpInputError(
            op,
            "page_table",
            f"shape [{batch}, max_pages] (one row per sequence of cu_seqlens_q)",
            f"shape {list(page_table.shape)}",
        )
    _expect_int32_vector(op, "seq_lens", seq_lens, batch, q)
    expect_int(op, "max_seqlen_q", max_seqlen_q, minimum=0)
    expect_bool(op, "causal", causal)
    expect_bool(op, "return_lse", return_lse)
    features_off = (*_window_and_cap_off(op, window_left, logits_soft_cap), _sinks_off(op, sinks, q))
    mask_off = _tree_mask_off(op, custom_mask, mask_indptr, batch, q)
    new_tokens = _check_cu_seqlens(op, "cu_seqlens_q", cu_seqlens_q, tokens, max_seqlen_q, "max_seqlen_q")
    if new_tokens is not None and batch:
        short = seq_lens.to("cpu", torch.int64) < new_tokens
        if bool(short.any()):
            bad = int(torch.nonzero(short)[0, 0])
            raise OpInputError(
                op,
                "seq_lens",
                "seq_lens[b] >= the sequence's new tokens (they are in the cache)",
                f"seq_lens[{bad}] = {int(seq_lens[bad])} < {int(new_tokens[bad])} new tokens",
            )
    _check_pages(op, page_table, seq_lens, page_size, kv_buffer.shape[0], 0, "lengths >= 0")
    if not mask_off and new_tokens is not None and values_checked(mask_indptr):
        _check_mask_segments(op, custom_mask, mask_indptr, new_tokens, seq_lens)
    tags = _PAGED_TAGS[
        (
            heads_aligned(q),
            heads_aligned(kv_buffer),
            page_table.is_contiguous() and seq_lens.is_contiguous() and cu_seqlens_q.is_contiguous(),
            *features_off,
            mask_off,
        )
    ]
    dims = (
        ("num_tokens", tokens),
        ("num_q_heads", num_q_heads),
        ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("page_size", page_size),
    )
    return q, tags, dims


def _tree_mask_off(op, custom_mask, mask_indptr, batch: int, q) -> bool:
    """Checks a tree mask (both None, or custom_mask uint8 1-D and mask_indptr int32 [B + 1] on q's device);
    True when there is none (mask:none)."""
    if custom_mask is None and mask_indptr is None:
        return True
    if custom_mask is None or mask_indptr is None:
        given, missing = ("custom_mask", "mask_indptr") if mask_indptr is None else ("mask_indptr", "custom_mask")
        raise OpInputError(op, missing, f"a tensor (it comes with {given})", "None")
    expect_tensor(op, "custom_mask", custom_mask)
    if custom_mask.dtype != torch.uint8 or custom_mask.dim() != 1:
        expected = "a 1-D torch.uint8 tensor (the bit-packed masks)"
        raise OpInputError(op, "custom_mask", expected, f"{custom_mask.dtype} of shape {list(custom_mask.shape)}")
    expect_same_device(op, "custom_mask", custom_mask, "q", q)
    _expect_int32_vector(op, "mask_indptr", mask_indptr, batch + 1, q)
    return False


def _check_mask_segments(op, custom_mask, mask_indptr, new_tokens, seq_lens) -> None:
    """Each sequence's segment holds its ceil(n_b * seq_lens[b] / 8) bytes inside custom_mask."""
    offsets = mask_indptr.to("cpu", torch.int64)
    needed = (new_tokens * seq_lens.to("cpu", torch.int64) + 7) // 8
    if int(offsets[0]) < 0:
        raise OpInputError(op, "mask_indptr", "mask_indptr[0] >= 0", f"{int(offsets[0])}")
    short = (offsets[1:] - offsets[:-1]) < needed
    if bool(short.any()):
        bad = int(torch.nonzero(short)[0, 0])
        got = int(offsets[bad + 1] - offsets[bad])
        expected = f"segments of ceil(n_b * seq_lens[b] / 8) bytes ({int(needed[bad])} for sequence {bad})"
        raise OpInputError(op, "mask_indptr", expected, f"{got} bytes")
    if int(offsets[-1]) > custom_mask.shape[0]:
        expected = f"mask_indptr[B] <= custom_mask's {custom_mask.shape[0]} bytes"
        raise OpInputError(op, "mask_indptr", expected, f"{int(offsets[-1])}")


def check_merge_states(v_a, s_a, v_b, s_b):
    """attention.merge_states's check: (v_a, no tags, (num_tokens, num_heads, head_dim))."""
    op = MERGE_STATES
    expect_float_tensor(op, "v_a", v_a)
    if v_a.dim() != 3:
        raise OpInputError(op, "v_a", "shape [N, H, D]", f"shape {list(v_a.shape)}")
    expect_float_tensor(op, "v_b", v_b)
    if v_b.shape != v_a.shape:
        raise OpInputError(op, "v_b", f"v_a's shape {list(v_a.shape)}", f"shape {list(v_b.shape)}")
    _expect_same_dtype(op, "v_b", v_b, "v_a", v_a)
    expect_same_device(op, "v_b", v_b, "v_a", v_a)
    for name, lse in (("s_a", s_a), ("s_b", s_b)):
        expect_tensor(op, name, lse)
        if lse.dtype != torch.float32 or lse.shape != v_a.shape[:2]:
            expected = f"a torch.float32 tensor {list(v_a.shape[:2])} (v_a's tokens and heads)"
            raise OpInputError(op, name, expected, f"{lse.dtype} of shape {list(lse.shape)}")
        expect_same_device(op, name, lse, "v_a", v_a)
    dims = (("num_tokens", v_a.shape[0]), ("num_heads", v_a.shape[1]), ("head_dim", v_a.shape[2]))
    return v_a, frozenset(), dims
