"""FlashMLA adapter of attention.mla_decode (sgl-flash-mla 1.0.0, module flash_mla; imported only through the
row's target).

    mla_decode -> flash_mla_with_kvcache(q[:, None], cache, page_table, seq_lens, 512, FlashMLASchedMeta(),
                                         softmax_scale=sm_scale, causal=False, use_legacy=True)

The dense bf16 MLA decode exists only on this fork's legacy side (use_legacy=True). Layouts: q [B, Hq, 576]
becomes [B, 1, Hq, 576] (a view: one query token per sequence); the latent cache [rows, 576] becomes
[pages, 64, 1, 576] (a view with the cache's row stride: FlashMLA's block size is fixed at 64 tokens, so the
row requires page_size 64). A fresh FlashMLASchedMeta per call makes the kernel compute its split schedule on
the device from seq_lens in the same call (no host sync): captured in a CUDA graph, the replay equals the eager
call, so the row is graph_safe.

plan_mla_decode exposes the per-step preparation an engine does instead: the split schedule computed once from
seq_lens (get_mla_decoding_metadata, FlashMLA's scheduler hoisted out of the decode call, with
num_q_tokens_per_head_k = s_q * Hq / Hk = Hq) into one FlashMLASchedMeta that every layer's call of the step
reuses; handed a filled schedule, the decode call skips its scheduler kernel. The benchmarks time FlashMLA that
way beside the row, as a peer.
"""

from __future__ import annotations

import flash_mla
from flash_mla import flash_mla_with_kvcache, get_mla_metadata

#: The value width FlashMLA's dense MLA decode is built for (head_dim_v: the latent rank, 512).
HEAD_DIM_V = 512


def _paged_cache(latent_cache, page_size: int):
    """[pages, page_size, 1, 576] view of the [rows, 576] latent cache (its row stride kept, no copy)."""
    rows, width = latent_cache.shape
    row_stride = latent_cache.stride(0)
    return latent_cache.as_strided(
        (rows // page_size, page_size, 1, width), (page_size * row_stride, row_stride, row_stride, 1)
    )


def _decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, schedule):
    out, _ = flash_mla_with_kvcache(
        q.unsqueeze(1),
        _paged_cache(latent_cache, page_size),
        page_table,
        seq_lens,
        HEAD_DIM_V,
        schedule,
        softmax_scale=float(sm_scale),
        causal=False,
        use_legacy=True,
    )
    return out.squeeze(1)


def mla_decode(
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
    """attention.mla_decode on FlashMLA's dense legacy kernel (its schedule computed inside the call)."""
    schedule, _ = get_mla_metadata()
    return _decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, schedule)


def plan_mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, *, hoist=True):
    """The per-step preparation of attention.mla_decode, exposed: the split schedule once, run per layer.

    Returns run(q, latent_cache) -> out for tensors of the planned shapes (every layer of one decode step
    shares page_table and seq_lens, and reads the schedule computed here: on the device, from seq_lens, no
    host sync). run.schedule is the FlashMLASchedMeta it reuses; run.metadata says how it was computed.
    run.update() recomputes the schedule from seq_lens's new contents into the same tensors (outside a captured
    region), so a captured call replays for any lengths of the step's batch.
    With hoist=False, or a build without get_mla_decoding_metadata, the schedule is filled by one call here
    instead (FlashMLA's own first-call initialisation), which later calls reuse the same way; update() then
    runs that call again on the first layer's q and cache."""
    schedule, _ = get_mla_metadata()
    num_q_heads = q.shape[1]
    hoisted = getattr(flash_mla, "get_mla_decoding_metadata", None) if hoist else None
    if hoisted is not None:
        schedule.tile_scheduler_metadata, schedule.num_splits = hoisted(
            seq_lens, num_q_heads, 1, h_q=num_q_heads, use_legacy=True
        )
        how = f"get_mla_decoding_metadata(seq_lens, {num_q_heads}, 1, h_q={num_q_heads}, use_legacy=True)"

        def update():
            metadata, splits = hoisted(seq_lens, num_q_heads, 1, h_q=num_q_heads, use_legacy=True)
            schedule.tile_scheduler_metadata.copy_(metadata)
            schedule.num_splits.copy_(splits)

    else:
        _decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, schedule)
        how = "the first call's schedule (FlashMLASchedMeta filled by flash_mla_with_kvcache)"

        def update():
            fresh, _ = get_mla_metadata()
            _decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, fresh)
            schedule.tile_scheduler_metadata.copy_(fresh.tile_scheduler_metadata)
            schedule.num_splits.copy_(fresh.num_splits)

    def run(q, latent_cache):
        return _decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, schedule)

    run.schedule = schedule
    run.metadata = how
    run.update = update
    return run


def step_mla_decode(
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
    """flash_mla/dense_decode's per-step preparation (KernelSpec.step): the split schedule once, from seq_lens
    (plan_mla_decode); every layer's call of the step reuses it, and update() refreshes it for new lengths. The
    step guarantees the page table, sequence lengths and scale are the planned ones, so the callable reads only
    each layer's q and cache."""
    run = plan_mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale)

    def call(q, latent_cache, *step_arguments):
        return run(q, latent_cache)

    call.update = run.update
    return call
