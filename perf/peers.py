"""External-library peers for the GPU suites, called with our op's signature.

    peer/flashinfer   FlashInfer's kernel for the op (norm, activation, rotary), when FlashInfer
                      imports here; otherwise the case is skipped with the import error as reason.

The attention peers are driven as engines drive them (DESIGN §6): the per-step preparation (FlashInfer's
plan(), FlashMLA's split schedule) once, outside the timed region, then the call every layer of the step
makes, timed by CUDA events and, where capturable, in CUDA-graph replay (the captured call reuses what was
prepared). perf/test_attention_bench.py builds them; their names are below, and ENGINE_PEERS says, per op,
which peers (and which library rows: FA3 has no per-step state, so its row is how engines call it) the
report's ratios are taken against.

The peer calls the library directly, outside our contract (an fp32 weight, a strided input or a padding
position reach FlashInfer as they are). The table's own FlashInfer rows (flashinfer/rmsnorm,
flashinfer/fused_add_rmsnorm, flashinfer/silu_and_mul, flashinfer/gelu_tanh_and_mul,
flashinfer/rope_cos_sin_cache: backends/flashinfer/) are timed as table arms under their row names,
so a suite shows both: the adapter's cost is the difference (for rotary, its position remap).

FlashInfer JIT-compiles a module on its first call (25-90 s per module); the suites call every arm
once for the correctness check before timing, so compilation never lands in a timed region.
"""

from __future__ import annotations

import pytest

FLASHINFER = "peer/flashinfer"

#: FlashInfer's BatchDecodeWithPagedKVCacheWrapper planned once per step, run() timed.
FLASHINFER_PLANNED_DECODE = "peer/flashinfer.decode(planned)"
#: The same planned in its CUDA-graph mode (fixed page-list buffers), run() captured and replayed.
FLASHINFER_GRAPH_DECODE = "peer/flashinfer.decode(graph)"
#: BatchPrefillWithRaggedKVCacheWrapper planned once, at head dims 128/128 and 192/128.
FLASHINFER_PLANNED_PREFILL = "peer/flashinfer.prefill(planned)"
FLASHINFER_PLANNED_MLA_PREFILL = "peer/flashinfer.mla_prefill(planned)"
#: BatchPrefillWithPagedKVCacheWrapper planned once (a chunk after a paged history).
FLASHINFER_PLANNED_PREFILL_PAGED = "peer/flashinfer.prefill_paged(planned)"
#: BatchPrefillWithPagedKVCacheWrapper planned once per step with qo_len = q_tokens per request (cu_seqlens_q
#: arange(0, B*n + 1, n), causal, aligned bottom-right: speculative verification as engines run it) in its
#: CUDA-graph mode, run() timed and replayed: attention.decode's several-query-token case.
FLASHINFER_PLANNED_MULTI_TOKEN_DECODE = "peer/flashinfer.multi_token_decode(planned)"
#: BatchMLAPagedAttentionWrapper planned once in its CUDA-graph mode, run() timed and replayed.
FLASHINFER_PLANNED_MLA_DECODE = "peer/flashinfer.mla_decode(planned)"
#: FlashMLA (sgl-flash-mla, dense legacy kernel) with its split schedule computed once per step from seq_lens
#: (get_mla_decoding_metadata) and reused by every call, in graph replay too.
FLASH_MLA_METADATA = "peer/flash_mla.mla_decode(metadata)"
#: torch's scaled_dot_product_attention on the equal-length prefill batch viewed as [B, H, S, D].
SDPA = "peer/torch.sdpa"

#: op -> the arms that run it as an engine does, for the report's ratios (the fastest of them present at a
#: case, per timer). The FA3 rows count: they launch flash_attn_varlen_func with nothing prepared per step.
ENGINE_PEERS = {
    "attention.decode": (FLASHINFER_GRAPH_DECODE, FLASHINFER_PLANNED_DECODE, FLASHINFER_PLANNED_MULTI_TOKEN_DECODE),
    "attention.prefill": ("flash_attn/varlen_fwd", FLASHINFER_PLANNED_PREFILL),
    "attention.mla_prefill": ("flash_attn/varlen_fwd_mla", FLASHINFER_PLANNED_MLA_PREFILL),
    "attention.prefill_paged": (FLASHINFER_PLANNED_PREFILL_PAGED,),
    "attention.mla_decode": (FLASH_MLA_METADATA, FLASHINFER_PLANNED_MLA_DECODE),
}


def flashinfer_peer(op: str, dtype: str):
    """A callable with `op`'s signature (its OpContract, rapid_llm/kernels/ops/<family>/__init__.py) running
    FlashInfer's kernel, or pytest.skip."""
    if dtype not in ("bf16", "fp16"):
        pytest.skip(f"{FLASHINFER}: FlashInfer's kernels for {op} take fp16/bf16 only, not {dtype}")
    try:
        # FlashInfer 0.6.0's JIT reads tvm_ffi.libinfo without importing the submodule (it relies on
        # something else having imported it): import it first, or every first call fails with
        # "module 'tvm_ffi' has no attribute 'libinfo'" (seen on the H200, 2026-11-30).
        import tvm_ffi.libinfo  # noqa: F401
        import flashinfer
    except Exception as error:  # ImportError, or a broken install raising at import
        pytest.skip(f"{FLASHINFER}: FlashInfer does not import here ({type(error).__name__}: {error})")

    def rms_norm(x, weight, eps):
        return flashinfer.norm.rmsnorm(x.view(-1, x.shape[-1]), weight, eps).view(x.shape)

    def fused_add_rms_norm(x, residual, weight, eps):
        flashinfer.norm.fused_add_rmsnorm(x, residual, weight, eps)
        return x, residual

    def silu_and_mul(x, out=None):
        return flashinfer.activation.silu_and_mul(x, out)

    def gelu_tanh_and_mul(x, out=None):
        return flashinfer.activation.gelu_tanh_and_mul(x, out)

    def rotary(positions, q, k, head_dim, cos_sin_cache, is_neox):
        flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(positions, q, k, head_dim, cos_sin_cache, is_neox)
        return q, k

    peers = {
        "norm.rms_norm": rms_norm,
        "norm.fused_add_rms_norm": fused_add_rms_norm,
        "activation.silu_and_mul": silu_and_mul,
        "activation.gelu_tanh_and_mul": gelu_tanh_and_mul,
        "embedding.rotary": rotary,
    }
    if op not in peers:
        pytest.skip(f"{FLASHINFER}: FlashInfer has no kernel for {op} with this contract")
    return peers[op]
