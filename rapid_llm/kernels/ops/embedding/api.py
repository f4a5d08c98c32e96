"""The embedding family's public op functions (rapid_llm/kernels/__init__.py exports them; one per contract)."""

from __future__ import annotations

from ...dispatcher.plan import call_op as _call
from . import ROTARY, VOCAB_EMBEDDING

__all__ = ["vocab_embedding", "rotary"]


def vocab_embedding(ids, table, vocab_start: int = 0, vocab_end: int | None = None):
    """table[ids - vocab_start], zero rows outside [vocab_start, vocab_end). Contract: embedding.vocab_embedding."""
    return _call(VOCAB_EMBEDDING, (ids, table, vocab_start, vocab_end))


def rotary(positions, q, k, head_dim: int, cos_sin_cache, is_neox: bool):
    """Rotary embedding in place on q and k; returns (q, k). Contract: embedding.rotary."""
    return _call(ROTARY, (positions, q, k, head_dim, cos_sin_cache, is_neox))
