"""Public functional ops: one function per op, each a call through the default planner.

    y = rms_norm(x, weight, eps)   # same table, same plans as Planner(env).plan(...)

Each call runs the op's argument check once (its contract's `check`: bad
input raises OpInputError naming the op, the argument and what was
expected), looks the plan up by what the check found (device, dtype, layout
tags, named dims; resolved once per bucket), and calls the selected kernel.
Contracts (shapes, layouts, semantics): `rapid_llm.kernels.ops.<family>`,
or `default_table().contracts[op].doc`.
"""

from __future__ import annotations

from .dispatcher import plan as _plan
from .ops.activation import GELU_TANH_AND_MUL, SILU_AND_MUL
from .ops.attention import DECODE, MLA_DECODE, MLA_PREFILL, PREFILL, PREFILL_PAGED
from .ops.elementwise import SCALE
from .ops.embedding import ROTARY, VOCAB_EMBEDDING
from .ops.gemm import FP8_BLOCK_MM, FP8_GROUPED_MM_CONTIGUOUS, FP8_GROUPED_MM_MASKED
from .ops.kvcache import UPDATE_KV_BUFFER, UPDATE_KV_BUFFER_FP8, UPDATE_MLA_BUFFER, UPDATE_MLA_BUFFER_FP8
from .ops.norm import FUSED_ADD_RMS_NORM, RMS_NORM
from .ops.quantization import PER_TOKEN_FP8, PER_TOKEN_GROUP_FP8

__all__ = ["scale", "rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_tanh_and_mul", "vocab_embedding",
           "rotary", "update_kv_buffer", "update_kv_buffer_fp8", "update_mla_buffer", "update_mla_buffer_fp8",
           "per_token_fp8", "per_token_group_fp8",
           "prefill", "prefill_paged", "decode", "mla_decode", "mla_prefill",
           "fp8_block_mm", "fp8_grouped_mm_contiguous", "fp8_grouped_mm_masked"]


def _call(op, args):
    planner = _plan._DEFAULT_PLANNER or _plan.default_planner()
    return planner.call(op, args)


def scale(x, factor: float):
    """x * factor (fp32 math, x's dtype out). Contract: elementwise.scale."""
    return _call(SCALE, (x, factor))


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x**2, -1) + eps) * weight. Contract: norm.rms_norm."""
    return _call(RMS_NORM, (x, weight, eps))


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    """In place: residual += x; x = rms_norm(residual); returns (x, residual). Contract: norm.fused_add_rms_norm."""
    return _call(FUSED_ADD_RMS_NORM, (x, residual, weight, eps))


def silu_and_mul(x, out=None):
    """silu(x[..., :d]) * x[..., d:]. Contract: activation.silu_and_mul."""
    return _call(SILU_AND_MUL, (x, out))


def gelu_tanh_and_mul(x, out=None):
    """gelu_tanh(x[..., :d]) * x[..., d:]. Contract: activation.gelu_tanh_and_mul."""
    return _call(GELU_TANH_AND_MUL, (x, out))


def vocab_embedding(ids, table, vocab_start: int = 0, vocab_end: int | None = None):
    """table[ids - vocab_start], zero rows outside [vocab_start, vocab_end). Contract: embedding.vocab_embedding."""
    return _call(VOCAB_EMBEDDING, (ids, table, vocab_start, vocab_end))


def rotary(positions, q, k, head_dim: int, cos_sin_cache, is_neox: bool):
    """Rotary embedding in place on q and k; returns (q, k). Contract: embedding.rotary."""
    return _call(ROTARY, (positions, q, k, head_dim, cos_sin_cache, is_neox))


def update_kv_buffer(kv, loc, buffer):
    """buffer[loc[i]] = kv[i], in place; returns buffer. Contract: kvcache.update_kv_buffer."""
    return _call(UPDATE_KV_BUFFER, (kv, loc, buffer))


def update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale):
    """buffer[loc[i]] = e4m3(kv[i] / scale), in place; returns buffer. Contract: kvcache.update_kv_buffer_fp8."""
    return _call(UPDATE_KV_BUFFER_FP8, (kv, loc, buffer, k_scale, v_scale))


def update_mla_buffer(latent, rope, loc, buffer):
    """buffer[loc[i]] = latent[i] | rope[i] (the MLA latent cache row), in place; returns buffer.
    Contract: kvcache.update_mla_buffer."""
    return _call(UPDATE_MLA_BUFFER, (latent, rope, loc, buffer))


def update_mla_buffer_fp8(latent, rope, loc, buffer, scale):
    """buffer[loc[i]] = e4m3((latent[i] | rope[i]) / scale), in place; returns buffer.
    Contract: kvcache.update_mla_buffer_fp8."""
    return _call(UPDATE_MLA_BUFFER_FP8, (latent, rope, loc, buffer, scale))


def per_token_fp8(x):
    """(q e4m3 [T, H], scale fp32 [T, 1]). Contract: quantization.per_token_fp8."""
    return _call(PER_TOKEN_FP8, (x,))


def per_token_group_fp8(x, group_size: int = 128, column_major_scales: bool = False):
    """(q e4m3 [T, H], scale fp32 [T, H/g]). Contract: quantization.per_token_group_fp8."""
    return _call(PER_TOKEN_GROUP_FP8, (x, group_size, column_major_scales))


def prefill(q, k, v, cu_seqlens, max_seqlen: int, sm_scale: float, causal: bool = True, return_lse: bool = False):
    """Ragged self-attention of packed sequences; out [T, Hq, Dv] (and lse [T, Hq]). Contract: attention.prefill."""
    return _call(PREFILL, (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse))


def prefill_paged(q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q: int, page_size: int,
                  sm_scale: float, causal: bool = True, return_lse: bool = False):
    """New tokens' queries against each sequence's paged KV. Contract: attention.prefill_paged."""
    return _call(PREFILL_PAGED, (q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size, sm_scale,
                                 causal, return_lse))


def decode(q, kv_buffer, page_table, seq_lens, page_size: int, sm_scale: float, k_scale=None, v_scale=None):
    """One query token per sequence against its paged KV (q's dtype, or fp8 e4m3 with k_scale/v_scale);
    out [B, Hq, D]. Contract: attention.decode."""
    return _call(DECODE, (q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale))


def mla_decode(q, latent_cache, page_table, seq_lens, page_size: int, sm_scale: float):
    """Absorbed MLA decode over the paged latent cache; out [B, Hq, 512]. Contract: attention.mla_decode."""
    return _call(MLA_DECODE, (q, latent_cache, page_table, seq_lens, page_size, sm_scale))


def mla_prefill(q, k, v, cu_seqlens, max_seqlen: int, sm_scale: float, causal: bool = True,
                return_lse: bool = False):
    """Non-absorbed MLA prefill (q/k 192, v 128); out [T, H, 128]. Contract: attention.mla_prefill."""
    return _call(MLA_PREFILL, (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse))


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """(a * a_scale) @ (b * b_scale).T in bf16, fp8 e4m3 a [M, K] and b [N, K], 1x128 / 128x128 scales.
    Contract: gemm.fp8_block_mm."""
    return _call(FP8_BLOCK_MM, (a, a_scale, b, b_scale, out))


def fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None):
    """Row m of a times the weights of group m_indices[m] (negative: padding), bf16 [M, N].
    Contract: gemm.fp8_grouped_mm_contiguous."""
    return _call(FP8_GROUPED_MM_CONTIGUOUS, (a, a_scale, b, b_scale, m_indices, out))


def fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m: int, out=None):
    """a[g, :masked_m[g]] times the weights of group g, bf16 [G, M_max, N]. Contract: gemm.fp8_grouped_mm_masked."""
    return _call(FP8_GROUPED_MM_MASKED, (a, a_scale, b, b_scale, masked_m, expected_m, out))
