"""The attention family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import DECODE, MERGE_STATES, MLA_DECODE, MLA_PREFILL, PREFILL, PREFILL_PAGED

__all__ = ["prefill", "prefill_paged", "decode", "mla_decode", "mla_prefill", "merge_states"]


def prefill(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks=None,
):
    """Ragged self-attention of packed sequences; out [T, Hq, Dv] (and lse [T, Hq]); window_left >= 0 a sliding
    window, logits_soft_cap > 0 tanh capping, sinks [Hq] fp32 per-head sink logits. Contract: attention.prefill."""
    args = (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap, sinks)
    return _call(PREFILL, args)


def prefill_paged(
    q,
    kv_buffer,
    page_table,
    cu_seqlens_q,
    seq_lens,
    max_seqlen_q: int,
    page_size: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks=None,
    custom_mask=None,
    mask_indptr=None,
):
    """New tokens' queries against each sequence's paged KV; custom_mask/mask_indptr a bit-packed tree mask
    per sequence (FlashInfer's packed_custom_mask). Contract: attention.prefill_paged."""
    args = (q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size, sm_scale, causal, return_lse)
    return _call(PREFILL_PAGED, (*args, window_left, logits_soft_cap, sinks, custom_mask, mask_indptr))


def decode(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size: int,
    sm_scale: float,
    k_scale=None,
    v_scale=None,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks=None,
    return_lse: bool = False,
    num_q_tokens: int = 1,
):
    """The last num_q_tokens tokens of each sequence against its paged KV (q's dtype, or fp8 e4m3 with
    k_scale/v_scale); out [B * num_q_tokens, Hq, D] (and lse with return_lse). Contract: attention.decode."""
    args = (q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale, window_left, logits_soft_cap)
    return _call(DECODE, (*args, sinks, return_lse, num_q_tokens))


def merge_states(v_a, s_a, v_b, s_b):
    """Two attention results over disjoint key sets merged: (v [N, H, D], s [N, H] fp32). Contract:
    attention.merge_states."""
    return _call(MERGE_STATES, (v_a, s_a, v_b, s_b))


def mla_decode(
    q,
    latent_cache,
    page_table,
    seq_lens,
    page_size: int,
    sm_scale: float,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    num_q_tokens: int = 1,
    latent_scale=None,
):
    """Absorbed MLA decode over the paged latent cache (q's dtype, or fp8 e4m3 with latent_scale); out
    [B * num_q_tokens, Hq, 512]. Contract: attention.mla_decode."""
    args = (q, latent_cache, page_table, seq_lens, page_size, sm_scale, window_left, logits_soft_cap)
    return _call(MLA_DECODE, (*args, num_q_tokens, latent_scale))


def mla_prefill(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
):
    """Non-absorbed MLA prefill (q/k 192, v 128); out [T, H, 128]. Contract: attention.mla_prefill."""
    args = (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap)
    return _call(MLA_PREFILL, args)
