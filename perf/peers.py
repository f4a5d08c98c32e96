"""External-library peers for the GPU suites, called with our op's signature.

    peer/flashinfer   FlashInfer's kernel for the op (norm, activation, rotary), when FlashInfer
                      imports here; otherwise the case is skipped with the import error as reason.

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

    peers = {"norm.rms_norm": rms_norm, "norm.fused_add_rms_norm": fused_add_rms_norm,
             "activation.silu_and_mul": silu_and_mul, "activation.gelu_tanh_and_mul": gelu_tanh_and_mul,
             "embedding.rotary": rotary}
    if op not in peers:
        pytest.skip(f"{FLASHINFER}: FlashInfer has no kernel for {op} with this contract")
    return peers[op]
