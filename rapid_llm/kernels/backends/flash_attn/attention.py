"""FlashAttention-3 adapters of the ragged prefill ops (fa3-fwd 0.0.3, module fa3_fwd_interface; imported only
through the rows' targets).

    prefill / mla_prefill -> flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                                    softmax_scale=sm_scale, causal=causal)

Our ragged layout is FA3's varlen layout: q [T, Hq, D], k [T, Hk, D], v [T, Hk, Dv], one cu_seqlens for queries
and keys (self-attention), no copies when the last dim is contiguous (the rows require q:heads and kv:heads;
fa3_fwd_interface.maybe_contiguous would copy otherwise). FA3's softmax_lse is [Hq, T], natural log: we return
its transposed view [T, Hq] (no copy). Launch-only on the host (no sync, no per-batch host planning), so the
rows are CUDA-graph capturable.

This build (fa3_fwd_config.CONFIG) has fp16 and paged KV compiled out (FLASHATTENTION_DISABLE_FP16,
FLASHATTENTION_DISABLE_PAGEDKV): the rows serve bf16 ragged prefill only, head dims 64/96/128/192/256, and the
MLA split 192/128 (FLASH_ATTENTION_DISABLE_HDIMDIFF192 is off).
"""

from __future__ import annotations

from fa3_fwd_interface import flash_attn_varlen_func


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
    """attention.prefill on FA3's varlen forward."""
    out, lse = flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens,
        cu_seqlens,
        max_seqlen,
        max_seqlen,
        softmax_scale=float(sm_scale),
        causal=causal,
        return_attn_probs=True,
    )
    return (out, lse.t()) if return_lse else out


def mla_prefill(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """attention.mla_prefill: FA3's varlen forward with head_dim 192 for q/k and 128 for v."""
    return prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse)
