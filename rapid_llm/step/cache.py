"""The paged KV cache of one run (SGLang's layout) and the batch's bookkeeping.

Every sequence owns ceil(capacity / page_size) pages, handed out in a seeded shuffled order, so a
sequence's pages are not contiguous and not in order (a cache bug that mixes pages shows in the
logits). A token at position p of sequence b lives in buffer row
    slot(b, p) = page_table[b, p // page_size] * page_size + p % page_size.
GQA buffer: [rows, 2 Hk, D] per layer, K heads then V heads (kvcache.update_kv_buffer, attention.decode).
MLA buffer: [rows, kv_lora_rank + rope] per layer, the normalised latent then the rotated rope key
(kvcache.update_mla_buffer, attention.mla_decode). seq_lens: int32 [B], tokens cached per sequence.
"""

from __future__ import annotations

import torch

from ..models import MLA_PAGE_SIZE, PAGE_SIZE, ModelPreset


class PagedCache:
    def __init__(self, p: ModelPreset, layers: int, batch: int, capacity: int, *, dtype, device, seed: int):
        self.page_size = MLA_PAGE_SIZE if p.is_mla else PAGE_SIZE
        pages_per_sequence = -(-capacity // self.page_size)
        pages = batch * pages_per_sequence
        order = torch.randperm(pages, generator=torch.Generator().manual_seed(seed))
        self.page_table = order.view(batch, pages_per_sequence).to(device, torch.int32)
        self.seq_lens = torch.zeros(batch, dtype=torch.int32, device=device)
        rows = pages * self.page_size
        row_shape = (p.kv_lora_rank + p.qk_rope_head_dim,) if p.is_mla else (2 * p.num_kv_heads, p.head_dim)
        self.buffers = [torch.zeros(rows, *row_shape, dtype=dtype, device=device) for _ in range(layers)]

    def slots(self, sequence: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Buffer rows of (sequence, position) pairs (int64 [T])."""
        pages = self.page_table[sequence, positions // self.page_size].long()
        return pages * self.page_size + positions % self.page_size
