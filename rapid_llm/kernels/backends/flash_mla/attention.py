"""FlashMLA adapter of attention.mla_decode (sgl-flash-mla 1.0.0, module flash_mla; imported only through the
row's target).

    mla_decode -> flash_mla_with_kvcache(q[:, None], cache, page_table, seq_lens, 512, FlashMLASchedMeta(),
                                         softmax_scale=sm_scale, causal=False, use_legacy=True)

The dense bf16 MLA decode exists only on this fork's legacy side (use_legacy=True). Layouts: q [B, Hq, 576]
becomes [B, 1, Hq, 576] (a view: one query token per sequence); the latent cache [rows, 576] becomes
[pages, 64, 1, 576] (a view with the cache's row stride: FlashMLA's block size is fixed at 64 tokens, so the
row requires page_size 64). A fresh FlashMLASchedMeta per call makes the kernel compute its split schedule on
the device from seq_lens in the same call (no host sync): captured in a CUDA graph on the H200, the replay
equals the eager call (perf/results/h200/libraries_2026-12-01/library_probe.json), so the row is graph_safe.
"""

from __future__ import annotations

from flash_mla import flash_mla_with_kvcache, get_mla_metadata

from ...ops.attention import MLA_VALUE_DIM


def mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale):
    """attention.mla_decode on FlashMLA's dense legacy kernel."""
    rows, width = latent_cache.shape
    row_stride = latent_cache.stride(0)
    cache = latent_cache.as_strided((rows // page_size, page_size, 1, width),
                                    (page_size * row_stride, row_stride, row_stride, 1))
    schedule, _ = get_mla_metadata()
    out, _ = flash_mla_with_kvcache(q.unsqueeze(1), cache, page_table, seq_lens, MLA_VALUE_DIM, schedule,
                                    softmax_scale=float(sm_scale), causal=False, use_legacy=True)
    return out.squeeze(1)
