"""FlashInfer adapters of the attention ops (flashinfer-python 0.6.0, imported only through the rows' targets).

Our contracts hand over a page table [B, max_pages] + seq_lens [B] and the KV
buffer kvcache.update_kv_buffer writes, [rows, 2*Hk, D]. FlashInfer wants:
  - the paged KV as (k_cache, v_cache), each [pages, page_size, Hk, D] ("NHD"):
    two strided views of our buffer (K heads, then V heads, of each row), no copy
    (FlashInfer reads the page/token/head strides: csrc/batch_decode.cu);
  - the pages in CSR form: indptr [B + 1], indices (the used page ids, packed),
    last_page_len [B]: built on the device from page_table and seq_lens;
  - a plan() per batch, which copies indptr to the host (a device sync) and
    sizes the split-KV schedule. The rows plan inside every call, so they are
    not CUDA-graph capturable (graph_safe=False); a plan made with
    graph_safe_only=True picks another row. The preparation is also exposed
    on its own: plan_decode / plan_prefill / plan_prefill_paged /
    plan_mla_decode plan once and return a run function for every layer of
    the step (what an engine driving FlashInfer does; the benchmarks time
    FlashInfer that way too, as a peer).
FlashInfer's lse is base 2; ours is natural log (lse * ln 2).

Buffers reused across calls (not per-step state): one 128 MiB float workspace
and one wrapper object (with its pinned host staging buffer) per (device,
kind); every call re-plans before it runs, so nothing of a previous batch is
read. Calls on one device are assumed to come from one stream at a time
(the workspace is shared), as in an engine's step loop.

FlashInfer JIT-compiles each kernel module on its first call (minutes on the
H200, evidence h200.libraries.probe): jit_log.first_call_logged() logs what
compiled and how long it took.
"""

from __future__ import annotations

import math

import torch
import tvm_ffi.libinfo  # noqa: F401  (FlashInfer 0.6.0's JIT reads this submodule without importing it)
import flashinfer

from .jit_log import first_call_logged

_WORKSPACE_BYTES = 128 << 20
_LN2 = math.log(2.0)
_STATE: dict = {}

#: BatchMLAPagedAttentionWrapper's compressed-KV width (head_dim_ckv): the latent rank it is built for; the
#: rest of a latent row (64) is the rope part (head_dim_kpe).
CKV_DIM = 512


def _workspace(device) -> torch.Tensor:
    key = ("workspace", device)
    if key not in _STATE:
        _STATE[key] = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _STATE[key]


def _wrapper(kind: str, device, factory):
    key = (kind, device)
    if key not in _STATE:
        _STATE[key] = factory(_workspace(device))
    return _STATE[key]


def _paged_views(kv_buffer, page_size: int):
    """(k_cache, v_cache) [pages, page_size, Hk, D] views of the [rows, 2*Hk, D] buffer, no copy."""
    rows, two_heads, head_dim = kv_buffer.shape
    heads = two_heads // 2
    row_stride, head_stride, _ = kv_buffer.stride()
    paged = kv_buffer.as_strided(
        (rows // page_size, page_size, two_heads, head_dim), (page_size * row_stride, row_stride, head_stride, 1)
    )
    return paged[:, :, :heads], paged[:, :, heads:]


def _csr_pages(page_table, seq_lens, page_size: int):
    """indptr [B + 1], indices (used page ids, packed), last_page_len [B], all int32 on the device."""
    pages = (seq_lens + (page_size - 1)) // page_size
    indptr = torch.zeros(seq_lens.shape[0] + 1, dtype=torch.int32, device=seq_lens.device)
    torch.cumsum(pages, 0, out=indptr[1:])
    used = torch.arange(page_table.shape[1], device=page_table.device).unsqueeze(0) < pages.unsqueeze(1)
    indices = page_table[used]  # boolean gather: a device sync, like plan() itself
    last_page_len = torch.where(pages > 0, seq_lens - (pages - 1) * page_size, torch.zeros_like(seq_lens))
    return indptr, indices.to(torch.int32), last_page_len.to(torch.int32)


def _page_list_buffers(page_table, seq_lens) -> dict:
    """Fixed-capacity page lists of a CUDA-graph plan: indptr [B + 1], indices [every page of the page table],
    last_page_len [B] (int32), so any batch contents of this page table fit without reallocating."""
    batch, device = seq_lens.shape[0], seq_lens.device
    return {
        "indptr": torch.empty(batch + 1, dtype=torch.int32, device=device),
        "indices": torch.empty(page_table.numel(), dtype=torch.int32, device=device),
        "last_page_len": torch.empty(batch, dtype=torch.int32, device=device),
    }


def plan_decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, *, cuda_graph=False):
    """The per-step preparation of attention.decode, exposed: plan once (host sync, schedule), run per layer.

    Returns run(q, kv_buffer) -> out for tensors of the planned shapes and dtypes (every layer of one decode
    step shares page_table and seq_lens), and run.update(): plan again from the same page_table and seq_lens
    tensors after their contents changed (outside a captured region). The plan owns its wrapper and workspace
    (128 MiB), so several plans can be alive at once; an engine keeps one per step. This is how FlashInfer is
    meant to be driven and how the benchmarks time it beside our rows ("planned"); the row itself plans in
    every call. cuda_graph: FlashInfer's CUDA-graph mode (use_cuda_graph=True): plan() copies the page lists
    into buffers fixed for the wrapper's life (sized for every page of page_table), so run() can be captured
    once and replayed after update() for any contents of page_table and seq_lens (how engines replay decode)."""
    fixed = {}
    if cuda_graph:
        buffers = _page_list_buffers(page_table, seq_lens)
        fixed = {
            "use_cuda_graph": True,
            "paged_kv_indptr_buffer": buffers["indptr"],
            "paged_kv_indices_buffer": buffers["indices"],
            "paged_kv_last_page_len_buffer": buffers["last_page_len"],
        }
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device), "NHD", **fixed
    )

    def update():
        indptr, indices, last_page_len = _csr_pages(page_table, seq_lens, page_size)
        _plan_decode(wrapper, q, kv_buffer, indptr, indices, last_page_len, page_size, sm_scale)

    def run(q, kv_buffer):
        return wrapper.run(q, _paged_views(kv_buffer, page_size))

    update()
    run.update = update
    return run


def plan_prefill(q, k, v, cu_seqlens, sm_scale, causal=True):
    """The per-step preparation of attention.prefill, exposed like plan_decode: returns run(q, k, v) -> out."""
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
        torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device), "NHD"
    )
    _plan_ragged(wrapper, q, k, v, cu_seqlens, sm_scale, causal)

    def run(q, k, v):
        return wrapper.run(q, k, v)

    return run


def plan_prefill_paged(
    q,
    kv_buffer,
    page_table,
    cu_seqlens_q,
    seq_lens,
    page_size,
    sm_scale,
    causal=True,
    return_lse=False,
    *,
    cuda_graph=False,
):
    """The per-step preparation of attention.prefill_paged, exposed like plan_decode: returns run(q, kv_buffer) ->
    out, or (out, lse) with return_lse (the page lists and the plan of this step, reused by every layer), and
    run.update(). cuda_graph: the wrapper's CUDA-graph mode, its page lists and query offsets in fixed buffers
    (the batch's token count fixed by q's shape)."""
    fixed = {}
    if cuda_graph:
        buffers = _page_list_buffers(page_table, seq_lens)
        fixed = {
            "use_cuda_graph": True,
            "qo_indptr_buf": torch.empty_like(cu_seqlens_q, dtype=torch.int32),
            "paged_kv_indptr_buf": buffers["indptr"],
            "paged_kv_indices_buf": buffers["indices"],
            "paged_kv_last_page_len_buf": buffers["last_page_len"],
        }
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device), "NHD", **fixed
    )

    def update():
        _plan_paged_prefill(wrapper, q, kv_buffer, page_table, cu_seqlens_q, seq_lens, page_size, sm_scale, causal)

    def run(q, kv_buffer):
        return _run_paged_prefill(wrapper, q, kv_buffer, page_size, return_lse)

    update()
    run.update = update
    return run


def _latent_pages(latent_cache, page_size: int):
    """[pages, page_size, 576] view of the [rows, 576] latent cache (its row stride kept, no copy)."""
    rows, width = latent_cache.shape
    row_stride = latent_cache.stride(0)
    return latent_cache.as_strided((rows // page_size, page_size, width), (page_size * row_stride, row_stride, 1))


def plan_mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, *, cuda_graph=True):
    """The per-step preparation of attention.mla_decode, exposed like plan_decode: returns run(q, latent_cache) ->
    out and run.update(). cuda_graph (the default: how engines drive MLA decode): BatchMLAPagedAttentionWrapper's
    CUDA-graph mode, plan() copies the page lists into buffers fixed for the wrapper's life (sized for every page
    of page_table), so run() can be captured and replayed after update(); the kernels and the plan are those of
    the plain mode."""
    batch = q.shape[0]
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
    fixed = {}
    if cuda_graph:
        buffers = _page_list_buffers(page_table, seq_lens)
        fixed = {
            "use_cuda_graph": True,
            "qo_indptr": torch.empty_like(qo_indptr),
            "kv_indptr": buffers["indptr"],
            "kv_indices": buffers["indices"],
            "kv_len_arr": torch.empty_like(seq_lens),
        }
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(
        torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device), **fixed
    )

    def update():
        indptr, indices, _ = _csr_pages(page_table, seq_lens, page_size)
        _plan_mla(wrapper, q, latent_cache, qo_indptr, indptr, indices, seq_lens, page_size, sm_scale)

    def run(q, latent_cache):
        return _run_mla(wrapper, q, latent_cache, page_size)

    update()
    run.update = update
    return run


def _plan_decode(wrapper, q, kv_buffer, indptr, indices, last_page_len, page_size, sm_scale) -> None:
    """plan() of a decode wrapper, the row's and plan_decode's. plan() builds (JIT-compiles on first use) the
    module: it sits inside the logged first call."""
    num_kv_heads = kv_buffer.shape[1] // 2
    with first_call_logged(f"flashinfer decode {q.dtype} D={q.shape[2]} Hq/Hk={q.shape[1] // num_kv_heads}"):
        wrapper.plan(
            indptr,
            indices,
            last_page_len,
            q.shape[1],
            num_kv_heads,
            q.shape[2],
            page_size,
            q_data_type=q.dtype,
            kv_data_type=kv_buffer.dtype,
            sm_scale=float(sm_scale),
        )


def _plan_ragged(wrapper, q, k, v, cu_seqlens, sm_scale, causal) -> None:
    """plan() of a ragged prefill wrapper (q and kv share cu_seqlens)."""
    with first_call_logged(f"flashinfer ragged prefill {q.dtype} D={q.shape[2]}/{v.shape[2]} causal={causal}"):
        wrapper.plan(
            cu_seqlens,
            cu_seqlens,
            q.shape[1],
            k.shape[1],
            q.shape[2],
            head_dim_vo=v.shape[2],
            causal=causal,
            sm_scale=float(sm_scale),
            q_data_type=q.dtype,
            kv_data_type=k.dtype,
        )


def _plan_paged_prefill(wrapper, q, kv_buffer, page_table, cu_seqlens_q, seq_lens, page_size, sm_scale, causal):
    """plan() of a paged prefill wrapper, from the page table's CSR page lists."""
    indptr, indices, last_page_len = _csr_pages(page_table, seq_lens, page_size)
    num_kv_heads = kv_buffer.shape[1] // 2
    with first_call_logged(f"flashinfer paged prefill {q.dtype} D={q.shape[2]} causal={causal}"):
        wrapper.plan(
            cu_seqlens_q,
            indptr,
            indices,
            last_page_len,
            q.shape[1],
            num_kv_heads,
            q.shape[2],
            page_size,
            causal=causal,
            sm_scale=float(sm_scale),
            q_data_type=q.dtype,
            kv_data_type=kv_buffer.dtype,
        )


def _plan_mla(wrapper, q, latent_cache, qo_indptr, indptr, indices, seq_lens, page_size, sm_scale) -> None:
    """plan() of an MLA wrapper: one query token per sequence, ckv 512 and kpe 64 dims, not causal."""
    with first_call_logged(f"flashinfer MLA decode {q.dtype} Hq={q.shape[1]} page={page_size}"):
        wrapper.plan(
            qo_indptr,
            indptr,
            indices,
            seq_lens,
            q.shape[1],
            CKV_DIM,
            latent_cache.shape[1] - CKV_DIM,
            page_size,
            False,
            float(sm_scale),
            q.dtype,
            latent_cache.dtype,
        )


def _run_mla(wrapper, q, latent_cache, page_size):
    """run() of a planned MLA wrapper: q and the paged cache split into their latent and rope parts (views)."""
    paged = _latent_pages(latent_cache, page_size)
    return wrapper.run(q[..., :CKV_DIM], q[..., CKV_DIM:], paged[..., :CKV_DIM], paged[..., CKV_DIM:])


def decode(
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
    """attention.decode through BatchDecodeWithPagedKVCacheWrapper (CUDA-core kernel: faster than its tensor-core
    variant at GQA 4 on the H200, ../shared/ANCHORS.md). The row requires kv:q_dtype: the scales are
    always None here (an fp8 buffer goes to another row)."""
    wrapper = _wrapper("decode", q.device, lambda ws: flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD"))
    indptr, indices, last_page_len = _csr_pages(page_table, seq_lens, page_size)
    _plan_decode(wrapper, q, kv_buffer, indptr, indices, last_page_len, page_size, sm_scale)
    return wrapper.run(q, _paged_views(kv_buffer, page_size))


def _ragged(q, k, v, cu_seqlens, sm_scale, causal, return_lse, kind):
    wrapper = _wrapper(kind, q.device, lambda ws: flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD"))
    _plan_ragged(wrapper, q, k, v, cu_seqlens, sm_scale, causal)
    if not return_lse:
        return wrapper.run(q, k, v)
    out, lse = wrapper.run(q, k, v, return_lse=True)
    return out, lse * _LN2


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
    """attention.prefill through BatchPrefillWithRaggedKVCacheWrapper (q and kv share cu_seqlens)."""
    return _ragged(q, k, v, cu_seqlens, sm_scale, causal, return_lse, "ragged")


def mla_prefill(
    q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0
):
    """attention.mla_prefill: the ragged wrapper with head_dim_qk 192 and head_dim_vo 128 (SGLang's MLA prefill)."""
    return _ragged(q, k, v, cu_seqlens, sm_scale, causal, return_lse, "ragged_mla")


def prefill_paged(
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
    """attention.prefill_paged through BatchPrefillWithPagedKVCacheWrapper (causal mask aligned bottom-right:
    the new tokens are the last of each sequence, as our contract says)."""
    wrapper = _wrapper("paged_prefill", q.device, lambda ws: flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD"))
    _plan_paged_prefill(wrapper, q, kv_buffer, page_table, cu_seqlens_q, seq_lens, page_size, sm_scale, causal)
    return _run_paged_prefill(wrapper, q, kv_buffer, page_size, return_lse)


def _run_paged_prefill(wrapper, q, kv_buffer, page_size, return_lse):
    """run() of a planned paged-prefill wrapper; lse converted from FlashInfer's base 2 to the contract's natural log."""
    if not return_lse:
        return wrapper.run(q, _paged_views(kv_buffer, page_size))
    out, lse = wrapper.run(q, _paged_views(kv_buffer, page_size), return_lse=True)
    return out, lse * _LN2


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
    """attention.mla_decode through BatchMLAPagedAttentionWrapper: q split into its 512 latent and 64 rope
    dims, the latent cache into ckv [pages, page_size, 512] and kpe [pages, page_size, 64] views (no copies:
    FlashInfer reads their page and token strides, csrc/batch_mla_sm90_run.cu)."""
    wrapper = _wrapper("mla", q.device, lambda ws: flashinfer.mla.BatchMLAPagedAttentionWrapper(ws))
    batch = q.shape[0]
    indptr, indices, _ = _csr_pages(page_table, seq_lens, page_size)
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
    _plan_mla(wrapper, q, latent_cache, qo_indptr, indptr, indices, seq_lens, page_size, sm_scale)
    return _run_mla(wrapper, q, latent_cache, page_size)


# Per-step preparations (KernelSpec.step; rapid_llm/step/plans.py): plan once per forward step, then every
# layer's call of that step runs the planned wrapper. The step guarantees its page table, sequence lengths
# and scale are the ones planned with, so the returned callables read only each layer's q and cache. They plan
# in FlashInfer's CUDA-graph mode (fixed-capacity page lists): a call captured once replays for new contents of
# the step's page table and lengths after the callable's update() (StepPlan.update). The decode, paged prefill
# and MLA decode rows are step_graph_safe (captured and replayed on the H200 by conformance/test_step_plans.py).


def _layer_call(run):
    """The op's callable of a step (the step's own arguments ignored: the plan holds them), with run.update."""

    def call(q, cache, *step_arguments):
        return run(q, cache)

    call.update = run.update
    return call


def step_decode(
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
    """flashinfer/paged_decode's per-step preparation: plan_decode once, in CUDA-graph mode."""
    return _layer_call(plan_decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, cuda_graph=True))


def step_prefill_paged(
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
    """flashinfer/paged_prefill's per-step preparation: plan_prefill_paged once, in CUDA-graph mode."""
    run = plan_prefill_paged(
        q, kv_buffer, page_table, cu_seqlens_q, seq_lens, page_size, sm_scale, causal, return_lse, cuda_graph=True
    )
    return _layer_call(run)


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
    """flashinfer/mla_decode's per-step preparation: plan_mla_decode once (its CUDA-graph mode)."""
    return _layer_call(plan_mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale))
