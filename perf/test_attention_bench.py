"""GPU benchmarks of the attention ops: every non-reference row of the table, side by side in one run,
at the shapes of ../shared/ANCHORS.md (Llama-3-8B GQA 32/8 d128; DeepSeek-V3 MLA), plus torch SDPA as
the prefill peer.

    test_decode[flashinfer/paged_decode-B64-L4096-gqa32/8-d128-page16-bf16]
    test_prefill[flash_attn/varlen_fwd-4x4096-gqa32/8-d128-causal-bf16]
    test_mla_decode[flash_mla/dense_decode-B64-L4096-h128-page64-bf16]

Each arm is checked against the reference row (conformance's tolerance) before it is timed with CUDA
events (L2 flushed); rows with graph_safe=True are also timed in CUDA-graph replay at decode sizes.
Peers: torch SDPA (prefill), and FlashInfer driven as an engine drives it, plan() once per step
outside the timing ("peer/flashinfer.decode(planned)", "peer/flashinfer.prefill(planned)"): its rows
plan in every call, which is what a caller of the row pays but not what FlashInfer's kernels cost. Decode
also has FlashInfer planned in its CUDA-graph mode ("peer/flashinfer.decode(graph)": fixed page-list
buffers, run() captured), timed in CUDA-graph replay beside our capturable rows; its output must equal the
plain planned wrapper's.
Decode also runs with the fp8-e4m3 KV buffer kvcache.update_kv_buffer_fp8 writes ("-kvfp8"). The
reference rows are the correctness floor, not a contender: they are checked against, not timed (they
would spend most of the GPU session at these shapes). Decode bytes = the KV (or latent) bytes the
sequences read; prefill and MLA FLOPs count the causal half: 4*B*H*S^2*D/2 (Q.K and P.V).

Paged layouts: pages of a random permutation (no two consecutive), as an engine's allocator leaves them.
On a machine without CUDA every case is skipped with "needs a CUDA device".
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

SDPA = "peer/torch.sdpa"


def _contenders(op):
    from rapid_llm.kernels.dispatcher import default_table

    reference = default_table().reference(op).name
    return [arm for arm in table_arms(op) if arm != reference]


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    length: int          # KV length per sequence (decode), sequence length (prefill)
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int = 16
    new_tokens: int = 0  # prefill_paged: the chunk per sequence (history = length - new_tokens)
    dtype: str = "bf16"
    kv_fp8: bool = False  # decode: the KV buffer in fp8 e4m3 with per-tensor scales

    @property
    def id(self) -> str:
        chunk = f"-chunk{self.new_tokens}" if self.new_tokens else ""
        kv = "-kvfp8" if self.kv_fp8 else ""
        return (f"B{self.batch}-L{self.length}{chunk}-h{self.num_q_heads}/{self.num_kv_heads}-d{self.head_dim}"
                f"-page{self.page_size}-{self.dtype}{kv}")


def _page_table(batch, length, page_size, device):
    import torch

    pages_per_seq = (length + page_size - 1) // page_size
    generator = torch.Generator().manual_seed(batch * 7919 + length)
    order = torch.randperm(batch * pages_per_seq, generator=generator).to(torch.int32)
    return order.view(batch, pages_per_seq).to(device), batch * pages_per_seq


def _randn(shape, dtype, generator):
    import torch

    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=generator).to(dtype)


def _run_arm(op, arm, case_id, dtype, args, shape, layout):
    """(timed fn, graph_safe, correctness extra_info) for a table row, checked against the reference first."""
    import torch

    checked, row = load_row(op, arm, dtype=dtype, shape=shape, layout=layout)
    reference_name, reference = reference_row(op)
    expected = reference(*args)
    got = checked(*args)
    torch.cuda.synchronize()
    check = check_against_reference(op, dtype, got, expected, arm=arm, reference=reference_name, case=case_id)
    del got, expected
    torch.cuda.empty_cache()
    info = {"correctness": describe_check(check, reference_name), "max_abs_diff": check["max_abs_diff"]}
    return (lambda: checked.impl(*args)), row.graph_safe, info


# ---------------------------------------------------------------------------
# attention.decode: Llama-3-8B GQA 32/8, d128, page 16
# ---------------------------------------------------------------------------

DECODE = "attention.decode"
_DECODE_BF16 = [AttentionShape(64, 4096, 32, 8, 128), AttentionShape(8, 8192, 32, 8, 128),
                AttentionShape(1, 32768, 32, 8, 128), AttentionShape(1, 1024, 32, 8, 128)]
DECODE_SHAPES = _DECODE_BF16 + [AttentionShape(c.batch, c.length, 32, 8, 128, kv_fp8=True) for c in _DECODE_BF16[:3]]
#: FlashInfer driven as an engine drives it: plan() once per step outside the timing, run() timed.
FLASHINFER_PLANNED_DECODE = "peer/flashinfer.decode(planned)"
#: The same in FlashInfer's CUDA-graph mode, which engines replay: the decode peer in graph replay.
FLASHINFER_GRAPH_DECODE = "peer/flashinfer.decode(graph)"
FLASHINFER_PLANNED_PREFILL = "peer/flashinfer.prefill(planned)"


def _flashinfer_adapters():
    """rapid_llm.kernels.backends.flashinfer.attention, or pytest.skip when FlashInfer does not load here."""
    from rapid_llm.kernels.backends import flashinfer as backend

    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"FlashInfer peer: {reason}")
    from rapid_llm.kernels.backends.flashinfer import attention

    return attention


def _decode_inputs(case):
    """(args of attention.decode, KV bytes read) for the case: a random-permutation page table, K ~ N(0, 1)."""
    import torch

    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    dtype = TORCH_DTYPES[case.dtype]
    generator = torch.Generator(device="cuda").manual_seed(case.batch + case.length)
    table, pages = _page_table(case.batch, case.length, case.page_size, "cuda")
    buffer = _randn((pages * case.page_size, 2 * case.num_kv_heads, case.head_dim), dtype, generator)
    scales = (None, None)
    if case.kv_fp8:
        # what kvcache.update_kv_buffer_fp8 leaves: values / scale in e4m3, the scales beside
        scale = (buffer.float().abs().amax() / 448.0).reshape(1)
        buffer = (buffer.float() / scale).to(torch.float8_e4m3fn)
        scales = (scale, scale.clone())
    q = _randn((case.batch, case.num_q_heads, case.head_dim), dtype, generator)
    seq_lens = torch.full((case.batch,), case.length, dtype=torch.int32, device="cuda")
    args = (q, buffer, table, seq_lens, case.page_size, case.head_dim ** -0.5, *scales)
    return args, case.batch * case.length * 2 * case.num_kv_heads * case.head_dim * buffer.element_size()


@pytest.mark.parametrize("arm,case", [pytest.param(a, c, id=f"{a}-{c.id}")
                                      for a in _contenders(DECODE) + [FLASHINFER_PLANNED_DECODE,
                                                                      FLASHINFER_GRAPH_DECODE]
                                      for c in DECODE_SHAPES])
def test_decode(benchmark, gpu_session, arm, case):
    from rapid_llm.kernels.ops.attention.checks import check_decode

    args, kv_bytes = _decode_inputs(case)
    _, layout, dims = check_decode(*args)
    if arm in (FLASHINFER_PLANNED_DECODE, FLASHINFER_GRAPH_DECODE):
        if case.kv_fp8:
            pytest.skip("FlashInfer peer: bf16 KV only (the row FlashInfer serves)")
        adapters = _flashinfer_adapters()
        q, buffer = args[0], args[1]
        run = adapters.plan_decode(*args[:6])
        fn, graph_safe, info = (lambda: run(q, buffer)), False, {"correctness": "peer: plan once, run timed"}
        if arm == FLASHINFER_GRAPH_DECODE:
            run_graph = adapters.plan_decode(*args[:6], cuda_graph=True)
            difference = float((run_graph(q, buffer).float() - run(q, buffer).float()).abs().max())
            assert difference <= 1e-2, f"FlashInfer's CUDA-graph mode differs from its plain plan by {difference}"
            fn, graph_safe = (lambda: run_graph(q, buffer)), True
            info = {"correctness": f"peer: plan once in CUDA-graph mode; max |diff| {difference:g} from the plain plan"}
    else:
        fn, graph_safe, info = _run_arm(DECODE, arm, case.id, case.dtype, args, dict(dims), layout)
    benchmark.extra_info.update(op=DECODE, row=arm, case=case.id, **info,
                                bytes_formula="K and V of every sequence read once (q and out are < 1%)")
    # every shape also in graph replay (the rows that can be captured): on a slow host the event timing of an
    # eager call includes the part of its Python enqueue (one Triton launch, plus the merge with splits) that
    # the L2 flush does not hide (variants/call15: B=8 L=8192 read 89-132 us by events, p20-p80)
    gpu_timing.record_case(benchmark, gpu_session, fn, bytes_moved=kv_bytes, graph=True, graph_safe=graph_safe)


# ---------------------------------------------------------------------------
# attention.prefill / mla_prefill: ragged causal prefill, equal lengths (so SDPA can be the peer)
# ---------------------------------------------------------------------------

PREFILL = "attention.prefill"
MLA_PREFILL = "attention.mla_prefill"
PREFILL_SHAPES = [AttentionShape(4, 4096, 32, 8, 128), AttentionShape(16, 1024, 32, 8, 128)]
MLA_PREFILL_SHAPES = [AttentionShape(4, 4096, 16, 16, 192)]


def _ragged_inputs(case, head_dim_v):
    import torch

    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    dtype = TORCH_DTYPES[case.dtype]
    generator = torch.Generator(device="cuda").manual_seed(case.batch * case.length)
    tokens = case.batch * case.length
    q = _randn((tokens, case.num_q_heads, case.head_dim), dtype, generator)
    k = _randn((tokens, case.num_kv_heads, case.head_dim), dtype, generator)
    v = _randn((tokens, case.num_kv_heads, head_dim_v), dtype, generator)
    cu = torch.arange(0, tokens + 1, case.length, dtype=torch.int32, device="cuda")
    return q, k, v, cu


def _sdpa_peer(q, k, v, case):
    import torch.nn.functional as F

    def shaped(t):
        return t.view(case.batch, case.length, t.shape[1], t.shape[2]).transpose(1, 2)

    qb, kb, vb = shaped(q), shaped(k), shaped(v)
    scale = case.head_dim ** -0.5

    def peer():
        return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=scale,
                                              enable_gqa=case.num_q_heads != case.num_kv_heads)
    return peer


def _prefill_case(benchmark, gpu_session, op, arm, case, head_dim_v):
    q, k, v, cu = _ragged_inputs(case, head_dim_v)
    args = (q, k, v, cu, case.length, case.head_dim ** -0.5, True, False)
    if arm == SDPA:
        fn, graph_safe, info = _sdpa_peer(q, k, v, case), True, {"correctness": "peer: not checked"}
    elif arm == FLASHINFER_PLANNED_PREFILL:
        run = _flashinfer_adapters().plan_prefill(q, k, v, cu, case.head_dim ** -0.5, causal=True)
        fn, graph_safe, info = (lambda: run(q, k, v)), False, {"correctness": "peer: plan once, run timed"}
    else:
        shape = {"num_tokens": q.shape[0], "num_q_heads": case.num_q_heads, "num_kv_heads": case.num_kv_heads,
                 "head_dim": case.head_dim, "head_dim_v": head_dim_v}
        layout = {"q:heads", "kv:heads", "index:contiguous"} | ({"v:same_head_dim"} if head_dim_v == case.head_dim
                                                                else set())
        fn, graph_safe, info = _run_arm(op, arm, case.id, case.dtype, args, shape, frozenset(layout))
    flops = 4 * case.batch * case.num_q_heads * case.length ** 2 * (case.head_dim + head_dim_v) / 2 / 2
    benchmark.extra_info.update(op=op, row=arm, case=case.id, **info, flops=flops,
                                flops_formula="2*B*H*S^2*(D + Dv)/2: Q.K and P.V over the causal half")
    gpu_timing.record_case(benchmark, gpu_session, fn, bytes_moved=q.numel() * q.element_size() * 3, graph=False,
                           graph_safe=graph_safe)
    benchmark.extra_info["TFLOPs"] = flops / (benchmark.extra_info["event_median_us"] * 1e-6) / 1e12


@pytest.mark.parametrize("arm,case", [pytest.param(a, c, id=f"{a}-{c.id}")
                                      for a in _contenders(PREFILL) + [SDPA, FLASHINFER_PLANNED_PREFILL]
                                      for c in PREFILL_SHAPES])
def test_prefill(benchmark, gpu_session, arm, case):
    _prefill_case(benchmark, gpu_session, PREFILL, arm, case, case.head_dim)


@pytest.mark.parametrize("arm,case", [pytest.param(a, c, id=f"{a}-{c.id}") for a in _contenders(MLA_PREFILL)
                                      for c in MLA_PREFILL_SHAPES])
def test_mla_prefill(benchmark, gpu_session, arm, case):
    _prefill_case(benchmark, gpu_session, MLA_PREFILL, arm, case, 128)


# ---------------------------------------------------------------------------
# attention.prefill_paged: a 512-token chunk after a 4096-token history, 4 sequences
# ---------------------------------------------------------------------------

PREFILL_PAGED = "attention.prefill_paged"
PREFILL_PAGED_SHAPES = [AttentionShape(4, 4608, 32, 8, 128, new_tokens=512)]


@pytest.mark.parametrize("arm,case", [pytest.param(a, c, id=f"{a}-{c.id}") for a in _contenders(PREFILL_PAGED)
                                      for c in PREFILL_PAGED_SHAPES])
def test_prefill_paged(benchmark, gpu_session, arm, case):
    import torch

    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    dtype = TORCH_DTYPES[case.dtype]
    generator = torch.Generator(device="cuda").manual_seed(case.length)
    table, pages = _page_table(case.batch, case.length, case.page_size, "cuda")
    buffer = _randn((pages * case.page_size, 2 * case.num_kv_heads, case.head_dim), dtype, generator)
    tokens = case.batch * case.new_tokens
    q = _randn((tokens, case.num_q_heads, case.head_dim), dtype, generator)
    cu = torch.arange(0, tokens + 1, case.new_tokens, dtype=torch.int32, device="cuda")
    seq_lens = torch.full((case.batch,), case.length, dtype=torch.int32, device="cuda")
    args = (q, buffer, table, cu, seq_lens, case.new_tokens, case.page_size, case.head_dim ** -0.5, True, False)
    shape = {"num_tokens": tokens, "num_q_heads": case.num_q_heads, "num_kv_heads": case.num_kv_heads,
             "head_dim": case.head_dim, "page_size": case.page_size}
    fn, graph_safe, info = _run_arm(PREFILL_PAGED, arm, case.id, case.dtype, args, shape,
                                    frozenset({"q:heads", "kv:paged", "index:contiguous"}))
    history = case.length - case.new_tokens
    pairs = case.new_tokens * history + case.new_tokens * (case.new_tokens + 1) / 2
    flops = 4 * case.batch * case.num_q_heads * pairs * case.head_dim
    benchmark.extra_info.update(op=PREFILL_PAGED, row=arm, case=case.id, **info, flops=flops,
                                flops_formula="4*B*H*D*(chunk*history + chunk*(chunk+1)/2)")
    gpu_timing.record_case(benchmark, gpu_session, fn, bytes_moved=buffer.numel() * buffer.element_size(),
                           graph=False, graph_safe=graph_safe)
    benchmark.extra_info["TFLOPs"] = flops / (benchmark.extra_info["event_median_us"] * 1e-6) / 1e12


# ---------------------------------------------------------------------------
# attention.mla_decode: DeepSeek-V3 absorbed MLA, latent 512 + rope 64, page 64
# ---------------------------------------------------------------------------

MLA_DECODE = "attention.mla_decode"
MLA_DECODE_SHAPES = [AttentionShape(64, 4096, 128, 1, 576, 64), AttentionShape(64, 4096, 16, 1, 576, 64),
                     AttentionShape(1, 32768, 16, 1, 576, 64), AttentionShape(1, 32768, 128, 1, 576, 64),
                     AttentionShape(8, 32768, 16, 1, 576, 64)]


@pytest.mark.parametrize("arm,case", [pytest.param(a, c, id=f"{a}-{c.id}") for a in _contenders(MLA_DECODE)
                                      for c in MLA_DECODE_SHAPES])
def test_mla_decode(benchmark, gpu_session, arm, case):
    import torch

    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    dtype = TORCH_DTYPES[case.dtype]
    generator = torch.Generator(device="cuda").manual_seed(case.batch * 3 + case.num_q_heads)
    table, pages = _page_table(case.batch, case.length, case.page_size, "cuda")
    cache = _randn((pages * case.page_size, 576), dtype, generator)
    q = _randn((case.batch, case.num_q_heads, 576), dtype, generator)
    seq_lens = torch.full((case.batch,), case.length, dtype=torch.int32, device="cuda")
    args = (q, cache, table, seq_lens, case.page_size, 192 ** -0.5)
    shape = {"num_tokens": case.batch, "num_q_heads": case.num_q_heads, "head_dim": 576, "page_size": case.page_size}
    fn, graph_safe, info = _run_arm(MLA_DECODE, arm, case.id, case.dtype, args, shape,
                                    frozenset({"q:heads", "latent:rows", "index:contiguous"}))
    latent_bytes = case.batch * case.length * 576 * dtype.itemsize
    flops = 2 * case.batch * case.num_q_heads * case.length * (576 + 512)
    benchmark.extra_info.update(op=MLA_DECODE, row=arm, case=case.id, **info, flops=flops,
                                bytes_formula="the latent cache rows of every sequence read once",
                                flops_formula="2*B*Hq*L*(576 + 512)")
    # every shape also in graph replay: the event timing of a call shorter than the host's ~170 us enqueue (H200
    # host, perf/results/h200/attention_2026-12-01/variants/call7/host_profile.txt) includes the part of that
    # enqueue the L2 flush before it does not hide; engines replay decode steps from CUDA graphs
    gpu_timing.record_case(benchmark, gpu_session, fn, bytes_moved=latent_bytes, graph=True, graph_safe=graph_safe)
    benchmark.extra_info["TFLOPs"] = flops / (benchmark.extra_info["event_median_us"] * 1e-6) / 1e12
