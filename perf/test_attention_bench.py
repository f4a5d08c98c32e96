"""GPU benchmarks of the attention ops: every non-reference row of the table, side by side in one run,
at the shapes of ../shared/ANCHORS.md (Llama-3-8B GQA 32/8 d128; DeepSeek-V3 MLA), beside the libraries'
kernels driven as engines drive them.

    test_decode[flashinfer/paged_decode-B64-L4096-h32/8-d128-page16-bf16]
    test_decode_features[native/decode-B16-L32768-h32/8-d128-page16-bf16-win4095]
    test_prefill[flash_attn/varlen_fwd-B4-L4096-h32/8-d128-page16-bf16]
    test_mla_decode[peer/flash_mla.mla_decode(metadata)-B64-L4096-h128/1-d576-page64-bf16]

Every library is timed both ways (DESIGN §6):
  - as its row, as our dispatch calls it (`flashinfer/paged_decode`, `flash_mla/dense_decode`, ...). The paged
    attention ops (decode, mla_decode, prefill_paged) are called through a step plan (rapid_llm.step.StepPlan:
    the row's per-step preparation once, outside the timing, then every layer's call timed; capturable rows,
    FlashInfer's through their step plan, also in graph replay): the cost dispatch ranks them by. The same
    row called per call (its preparation in every call: FlashInfer plans, a host sync; FlashMLA computes its
    schedule) is recorded beside it, extra_info per_call_us (event timing) and step_prepare_us (host time of
    one step plan's construction);
  - as an engine drives it (`peer/...`, perf/peers.py): the per-step preparation once, outside the timed
    region, then the call each layer makes:
      peer/flashinfer.decode(planned)        BatchDecodeWithPagedKVCacheWrapper.plan() once, run() timed
      peer/flashinfer.decode(graph)          the same in its CUDA-graph mode (fixed page-list buffers), run()
                                             captured and replayed; equal to the plain plan's output
      peer/flashinfer.prefill(planned)       BatchPrefillWithRaggedKVCacheWrapper planned once (128/128)
      peer/flashinfer.mla_prefill(planned)   the same at MLA's 192/128
      peer/flashinfer.prefill_paged(planned) BatchPrefillWithPagedKVCacheWrapper planned once
      peer/flashinfer.multi_token_decode(planned)
                                             the same with q_tokens queries per request (causal, bottom-right:
                                             speculative verification) in its CUDA-graph mode, at decode's
                                             several-query-token case
      peer/flashinfer.mla_decode(planned)    BatchMLAPagedAttentionWrapper planned once in its CUDA-graph mode
      peer/flash_mla.mla_decode(metadata)    FlashMLA with its split schedule computed once per step from
                                             seq_lens (get_mla_decoding_metadata) and reused by every call:
                                             in graph replay the captured calls read the precomputed schedule
      peer/torch.sdpa                        scaled_dot_product_attention on the equal-length batch (prefill)
    FA3 (`flash_attn/varlen_fwd*`) prepares nothing per step: its row is how engines call it.
perf/gpu_report.py states every row's ratio against the fastest engine-driven peer of its op (perf/peers.py
ENGINE_PEERS) at the same case, per timer.

Each arm, peers included, is checked against the reference row (conformance's tolerance) before it is timed
with CUDA events (L2 flushed); capturable arms are also timed in CUDA-graph replay at decode sizes (a peer whose
capture fails keeps its event timing and records graph_error). Decode also runs with the fp8-e4m3 KV buffer
kvcache.update_kv_buffer_fp8 writes ("-kvfp8"). test_decode_features times decode's features at issue 32's
targets (FEATURE_TARGETS: a sliding window "-win", a logits soft cap "-cap", per-head sinks "-sinks", several
query tokens "-q"); a row without the feature skips with its explain() tree. MLA decode also runs with the fp8
latent cache kvcache.update_mla_buffer_fp8 writes and with 4 query tokens (the MLA peers skip both). The
reference rows are the correctness floor, not a contender: they are checked against, not timed. Decode bytes =
the KV (or latent) bytes the sequences read (a window case: the window's rows); prefill and MLA
FLOPs count the causal half (prefill) or every position (decode). The MLA cases use the softmax scale engines
use for DeepSeek-V3's absorbed MLA, 192 ** -0.5 (qk head dim 128 nope + 64 rope), not 576 ** -0.5.

Paged layouts: pages of a random permutation (no two consecutive), as an engine's allocator leaves them.
On a machine without CUDA every case is skipped with "needs a CUDA device"; a peer whose library does not
load here is skipped with the load error as its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, forcing_planner, load_row, reference_row, table_arms
from perf.peers import (
    FLASHINFER_GRAPH_DECODE,
    FLASHINFER_PLANNED_DECODE,
    FLASHINFER_PLANNED_MLA_DECODE,
    FLASHINFER_PLANNED_MLA_PREFILL,
    FLASHINFER_PLANNED_MULTI_TOKEN_DECODE,
    FLASHINFER_PLANNED_PREFILL,
    FLASHINFER_PLANNED_PREFILL_PAGED,
    FLASH_MLA_METADATA,
    SDPA,
)

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

#: The softmax scale of DeepSeek-V3's absorbed MLA as engines pass it: the qk head dim before absorption,
#: 128 nope + 64 rope dims.
MLA_SM_SCALE = 192**-0.5
ROW_DRIVEN = "row: as our dispatch calls it (the planned row's kernel, per-call preparation included)"
STEP_DRIVEN = (
    "row: through its step plan, as rapid-llm run and engines call it (the row's per-step preparation once, "
    "outside the timing; the call each layer makes timed)"
)


def _contenders(op):
    from rapid_llm.kernels.dispatcher import default_table

    reference = default_table().reference(op).name
    return [arm for arm in table_arms(op) if arm != reference]


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    length: int  # KV length per sequence (decode), sequence length (prefill)
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int = 16
    new_tokens: int = 0  # prefill_paged: the chunk per sequence (history = length - new_tokens)
    dtype: str = "bf16"
    kv_fp8: bool = False  # decode: the KV buffer in fp8 e4m3 with per-tensor scales; mla_decode: the latent cache
    window_left: int = -1  # decode: a sliding window of window_left keys before each query (-1: none)
    soft_cap: float = 0.0  # decode: tanh logits soft cap (0: none)
    sinks: bool = False  # decode: a per-head sink logit (fp32 [Hq])
    q_tokens: int = 1  # decode, mla_decode: the last q_tokens tokens of each sequence queried (q has B * n rows)

    @property
    def id(self) -> str:
        chunk = f"-chunk{self.new_tokens}" if self.new_tokens else ""
        kv = "-kvfp8" if self.kv_fp8 else ""
        return (
            f"B{self.batch}-L{self.length}{chunk}-h{self.num_q_heads}/{self.num_kv_heads}-d{self.head_dim}"
            f"-page{self.page_size}-{self.dtype}{kv}{self._feature_suffix}"
        )

    @property
    def _feature_suffix(self) -> str:
        """The id's -win{W}, -cap{c}, -sinks and -q{n}, each only when its feature is set (plain ids unchanged)."""
        window = f"-win{self.window_left}" if self.window_left >= 0 else ""
        cap = f"-cap{self.soft_cap:g}" if self.soft_cap else ""
        sinks = "-sinks" if self.sinks else ""
        tokens = f"-q{self.q_tokens}" if self.q_tokens != 1 else ""
        return f"{window}{cap}{sinks}{tokens}"


def _page_table(batch, length, page_size, device):
    import torch

    pages_per_seq = (length + page_size - 1) // page_size
    generator = torch.Generator().manual_seed(batch * 7919 + length)
    order = torch.randperm(batch * pages_per_seq, generator=generator).to(torch.int32)
    return order.view(batch, pages_per_seq).to(device), batch * pages_per_seq


def _randn(shape, dtype, generator):
    import torch

    return torch.randn(shape, device="cuda", dtype=torch.float32, generator=generator).to(dtype)


def _layout(op, args):
    """(layout tags, shape dims) the op's own argument check derives from args: what dispatch plans with."""
    from rapid_llm.kernels.ops.attention import checks

    check = {
        DECODE: checks.check_decode,
        PREFILL: checks.check_prefill,
        MLA_PREFILL: checks.check_mla_prefill,
        PREFILL_PAGED: checks.check_prefill_paged,
        MLA_DECODE: checks.check_mla_decode,
    }[op]
    _, layout, dims = check(*args)
    return layout, dict(dims)


def _checked(op, arm, case_id, dtype, args, call):
    """Run `call` once and compare its output with the reference row's on `args` (conformance's tolerance, the
    same for rows and peers): the correctness fields of extra_info. A mismatch fails the case."""
    import torch

    reference_name, reference = reference_row(op)
    expected = reference(*args)
    got = call()
    torch.cuda.synchronize()
    check = check_against_reference(op, dtype, got, expected, arm=arm, reference=reference_name, case=case_id)
    del got, expected
    torch.cuda.empty_cache()
    return {"correctness": describe_check(check, reference_name), "max_abs_diff": check["max_abs_diff"]}


def _run_arm(op, arm, case_id, dtype, args):
    """(timed fn, graph_safe, extra_info) for a table row, checked against the reference first."""
    from rapid_llm.kernels.dispatcher import default_table

    layout, shape = _layout(op, args)
    # the inputs are finite: the benchmark makes the contract's promises (qkv:finite), as an engine may
    layout = layout | default_table().contracts[op].promises
    checked, row = load_row(op, arm, dtype=dtype, shape=shape, layout=layout)
    info = _checked(op, arm, case_id, dtype, args, lambda: checked(*args))
    # the contract dims and dtype of the call: perf/write_rankings.py buckets the measurement by them
    info.update(driven=ROW_DRIVEN, dims=shape, dtype=dtype)
    if row.step is None:
        return (lambda: checked.impl(*args)), row.graph_safe, info
    return _through_step_plan(op, arm, args, checked, info)


def _through_step_plan(op, arm, args, checked, info):
    """(timed fn, graph_safe, extra_info) of a row with a per-step preparation, called through its StepPlan
    (module docstring); the per-call cost and the preparation's host time recorded beside."""
    import time

    import torch

    from rapid_llm.step.plans import StepPlan

    planner = forcing_planner(op, arm)
    promises = planner.table.contracts[op].promises
    StepPlan(planner, op, *args, promises=promises, graph_safe_only=True)  # first: loads, compiles
    torch.cuda.synchronize()
    start = time.perf_counter()
    step = StepPlan(planner, op, *args, promises=promises, graph_safe_only=True)
    torch.cuda.synchronize()
    prepare_us = 1e6 * (time.perf_counter() - start)
    got, expected = step.impl(*args), checked.impl(*args)
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    difference = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, expected))
    per_call_us = None  # the warm-up (compile only) times nothing
    if not gpu_timing.compile_only():
        per_call_us = gpu_timing.event_timer(lambda: checked.impl(*args), iterations=20, warmup=2).median_us
    info.update(
        driven=STEP_DRIVEN,
        step_prepare_us=prepare_us,
        per_call_us=per_call_us,
        step_vs_per_call_max_abs_diff=difference,
    )
    info["correctness"] += f"; through its step plan: max |diff| {difference:g} from the per-call row"
    return (lambda: step.impl(*args)), step.row.graph_safe or step.row.step_graph_safe, info


def _peer(op, arm, case_id, dtype, args, run, driven):
    """(timed fn, extra_info) for a peer whose per-step preparation is done: `run` is the per-layer call."""
    info = _checked(op, arm, case_id, dtype, args, run)
    info["driven"] = driven
    return run, info


def _flashinfer_adapters():
    """rapid_llm.kernels.backends.flashinfer.attention, or pytest.skip when FlashInfer does not load here."""
    from rapid_llm.kernels.backends import flashinfer as backend

    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"FlashInfer peer: {reason}")
    from rapid_llm.kernels.backends.flashinfer import attention

    return attention


def _flash_mla_adapter():
    """rapid_llm.kernels.backends.flash_mla.attention, or pytest.skip when FlashMLA does not load here."""
    from rapid_llm.kernels.backends import flash_mla as backend

    ok, reason = backend.available()
    if not ok:
        pytest.skip(f"FlashMLA peer: {reason}")
    from rapid_llm.kernels.backends.flash_mla import attention

    return attention


def _record(benchmark, gpu_session, fn, *, peer, **kwargs):
    """gpu_timing.record_case; a peer that cannot be captured keeps its event timing (graph_error)."""
    gpu_timing.record_case(benchmark, gpu_session, fn, graph_optional=peer, **kwargs)


# ---------------------------------------------------------------------------
# attention.decode: Llama-3-8B GQA 32/8, d128, page 16
# ---------------------------------------------------------------------------

DECODE = "attention.decode"
_DECODE_BF16 = [
    AttentionShape(64, 4096, 32, 8, 128),
    AttentionShape(8, 8192, 32, 8, 128),
    AttentionShape(1, 32768, 32, 8, 128),
    AttentionShape(1, 1024, 32, 8, 128),
]
DECODE_SHAPES = _DECODE_BF16 + [AttentionShape(c.batch, c.length, 32, 8, 128, kv_fp8=True) for c in _DECODE_BF16[:3]]
DECODE_PEERS = [FLASHINFER_PLANNED_DECODE, FLASHINFER_GRAPH_DECODE]


def _decode_inputs(case):
    """(args of attention.decode up to v_scale, KV bytes read) for the case: a random-permutation page table,
    K ~ N(0, 1); q [B * q_tokens, Hq, D]."""
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
    q = _randn((case.batch * case.q_tokens, case.num_q_heads, case.head_dim), dtype, generator)
    seq_lens = torch.full((case.batch,), case.length, dtype=torch.int32, device="cuda")
    args = (q, buffer, table, seq_lens, case.page_size, case.head_dim**-0.5, *scales)
    return args, case.batch * case.length * 2 * case.num_kv_heads * case.head_dim * buffer.element_size()


@pytest.mark.parametrize(
    "arm,case",
    [pytest.param(a, c, id=f"{a}-{c.id}") for a in _contenders(DECODE) + DECODE_PEERS for c in DECODE_SHAPES],
)
def test_decode(benchmark, gpu_session, arm, case):
    args, kv_bytes = _decode_inputs(case)
    if arm in DECODE_PEERS:
        if case.kv_fp8:
            pytest.skip("FlashInfer peer: bf16 KV only (the row FlashInfer serves)")
        adapters = _flashinfer_adapters()
        q, buffer = args[0], args[1]
        if arm == FLASHINFER_PLANNED_DECODE:
            run = adapters.plan_decode(*args[:6])
            fn, info = _peer(
                DECODE,
                arm,
                case.id,
                case.dtype,
                args,
                lambda: run(q, buffer),
                "engine: plan() once per step outside the timing, run() timed",
            )
            graph_safe = False
        else:
            run_plain = adapters.plan_decode(*args[:6])
            run_graph = adapters.plan_decode(*args[:6], cuda_graph=True)
            difference = float((run_graph(q, buffer).float() - run_plain(q, buffer).float()).abs().max())
            assert difference <= 1e-2, f"FlashInfer's CUDA-graph mode differs from its plain plan by {difference}"
            fn, info = _peer(
                DECODE,
                arm,
                case.id,
                case.dtype,
                args,
                lambda: run_graph(q, buffer),
                "engine: plan() once per step in FlashInfer's CUDA-graph mode (fixed page-list "
                "buffers), run() timed and captured",
            )
            info["correctness"] += f"; max |diff| {difference:g} from the plain plan"
            graph_safe = True
    else:
        fn, graph_safe, info = _run_arm(DECODE, arm, case.id, case.dtype, args)
    benchmark.extra_info.update(
        op=DECODE,
        row=arm,
        case=case.id,
        **info,
        bytes_formula="K and V of every sequence read once (q and out are < 1%)",
    )
    # every shape also in graph replay (the rows that can be captured): on a slow host the event timing of an
    # eager call includes the part of its Python enqueue (one Triton launch, plus the merge with splits) that
    # the L2 flush does not hide; engines replay decode steps from CUDA graphs
    _record(
        benchmark, gpu_session, fn, peer=arm in DECODE_PEERS, bytes_moved=kv_bytes, graph=True, graph_safe=graph_safe
    )


# ---------------------------------------------------------------------------
# attention.decode with its features (issue 32's targets): sliding window, soft cap, sinks, several query tokens
# ---------------------------------------------------------------------------

_PLAIN_B16 = AttentionShape(16, 4096, 32, 8, 128)
_PLAIN_B64 = AttentionShape(64, 4096, 32, 8, 128)  # test_decode's case: the baseline of the cap, sinks, q4 targets
#: case -> the issue 32 target it measures (Llama-3-8B GQA 32/8 d128, page 16, bf16).
FEATURE_TARGETS = {
    _PLAIN_B16: f"baseline of the window target (B16-L32768-win4095 within 10% of {_PLAIN_B16.id})",
    AttentionShape(16, 32768, 32, 8, 128, window_left=4095): f"within 10% of {_PLAIN_B16.id} (the same KV read)",
    AttentionShape(64, 4096, 32, 8, 128, soft_cap=30.0): f"<= 5% over test_decode's {_PLAIN_B64.id}",
    AttentionShape(64, 4096, 32, 8, 128, sinks=True): f"<= 5% over test_decode's {_PLAIN_B64.id}",
    AttentionShape(64, 4096, 32, 8, 128, q_tokens=4): (
        f"<= 1.3x test_decode's single-token {_PLAIN_B64.id}, beside {FLASHINFER_PLANNED_MULTI_TOKEN_DECODE}"
    ),
}
FEATURE_SHAPES = list(FEATURE_TARGETS)


def _feature_inputs(case):
    """(the 13 args of attention.decode, KV bytes read): _decode_inputs' args (q [B * q_tokens, Hq, D]) then
    (window_left, logits_soft_cap, sinks fp32 [Hq] ~ N(0, 1) or None, return_lse False, num_q_tokens). The bytes
    of a window case are the window's KV, B * min(L, window_left + q_tokens) rows; otherwise every row."""
    import torch

    args, kv_bytes = _decode_inputs(case)
    sinks = None
    if case.sinks:
        generator = torch.Generator(device="cuda").manual_seed(case.num_q_heads)
        sinks = torch.randn((case.num_q_heads,), device="cuda", dtype=torch.float32, generator=generator)
    if case.window_left >= 0:
        kv_bytes = kv_bytes * min(case.length, case.window_left + case.q_tokens) // case.length
    return (*args, case.window_left, case.soft_cap, sinks, False, case.q_tokens), kv_bytes


def _multi_token_peer(case, args):
    """(timed fn, extra_info) of FlashInfer's paged prefill driven as speculative verification: planned once per
    step in its CUDA-graph mode with q_tokens queries per request (causal, aligned bottom-right), run() timed;
    checked against the decode reference on the full decode args. Skips a single-token case."""
    import torch

    if case.q_tokens == 1:
        pytest.skip(
            f"{FLASHINFER_PLANNED_MULTI_TOKEN_DECODE}: several query tokens only (test_decode's peers time one)"
        )
    q, buffer, table, seq_lens = args[:4]
    cu_seqlens_q = torch.arange(0, q.shape[0] + 1, case.q_tokens, dtype=torch.int32, device="cuda")
    run = _flashinfer_adapters().plan_prefill_paged(
        q, buffer, table, cu_seqlens_q, seq_lens, case.page_size, args[5], causal=True, cuda_graph=True
    )
    return _peer(
        DECODE,
        FLASHINFER_PLANNED_MULTI_TOKEN_DECODE,
        case.id,
        case.dtype,
        args,
        lambda: run(q, buffer),
        f"engine: BatchPrefillWithPagedKVCacheWrapper plan() once per step in its CUDA-graph mode (qo_len "
        f"{case.q_tokens} per request, causal, bottom-right: speculative verification), run() timed and captured",
    )


@pytest.mark.parametrize(
    "arm,case",
    [
        pytest.param(a, c, id=f"{a}-{c.id}")
        for a in _contenders(DECODE) + [FLASHINFER_PLANNED_MULTI_TOKEN_DECODE]
        for c in FEATURE_SHAPES
    ],
)
def test_decode_features(benchmark, gpu_session, arm, case):
    """Decode's features at issue 32's targets (FEATURE_TARGETS); a row without the feature skips (load_row)."""
    args, kv_bytes = _feature_inputs(case)
    peer = arm == FLASHINFER_PLANNED_MULTI_TOKEN_DECODE
    if peer:
        (fn, info), graph_safe = _multi_token_peer(case, args), True
    else:
        fn, graph_safe, info = _run_arm(DECODE, arm, case.id, case.dtype, args)
    benchmark.extra_info.update(
        op=DECODE,
        row=arm,
        case=case.id,
        **info,
        window_left=case.window_left,
        logits_soft_cap=case.soft_cap,
        sinks=case.sinks,
        num_q_tokens=case.q_tokens,
        target=FEATURE_TARGETS[case],
        bytes_formula="K and V read once: the window's B*min(L, window_left + q_tokens) rows with a window, else "
        "every row (q and out are < 1%)",
    )
    _record(benchmark, gpu_session, fn, peer=peer, bytes_moved=kv_bytes, graph=True, graph_safe=graph_safe)


# ---------------------------------------------------------------------------
# attention.prefill / mla_prefill: ragged causal prefill, equal lengths (so SDPA can be the peer)
# ---------------------------------------------------------------------------

PREFILL = "attention.prefill"
MLA_PREFILL = "attention.mla_prefill"
#: 4 x 4096 and 16 x 1024 are one num_tokens bucket (16384) whose fastest rows differ: max_seqlen separates them.
PREFILL_SHAPES = [
    AttentionShape(4, 4096, 32, 8, 128),
    AttentionShape(16, 1024, 32, 8, 128),
    AttentionShape(32, 512, 32, 8, 128),
    AttentionShape(1, 8192, 32, 8, 128),
]
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
    scale = case.head_dim**-0.5

    def peer():
        return F.scaled_dot_product_attention(
            qb, kb, vb, is_causal=True, scale=scale, enable_gqa=case.num_q_heads != case.num_kv_heads
        )

    return peer


def _prefill_case(benchmark, gpu_session, op, arm, case, head_dim_v):
    q, k, v, cu = _ragged_inputs(case, head_dim_v)
    args = (q, k, v, cu, case.length, case.head_dim**-0.5, True, False)
    peer = arm.startswith("peer/")
    if arm == SDPA:
        sdpa = _sdpa_peer(q, k, v, case)
        # checked as [T, H, Dv] (the reference's layout); timed as it returns, [B, H, S, Dv]
        fn, info = _peer(
            op,
            arm,
            case.id,
            case.dtype,
            args,
            lambda: sdpa().transpose(1, 2).reshape(q.shape[0], case.num_q_heads, head_dim_v),
            "dense batch of equal lengths, no per-step state",
        )
        fn, graph_safe = sdpa, True
    elif arm in (FLASHINFER_PLANNED_PREFILL, FLASHINFER_PLANNED_MLA_PREFILL):
        run = _flashinfer_adapters().plan_prefill(q, k, v, cu, case.head_dim**-0.5, causal=True)
        fn, info = _peer(
            op,
            arm,
            case.id,
            case.dtype,
            args,
            lambda: run(q, k, v),
            "engine: plan() once per step outside the timing, run() timed",
        )
        graph_safe = False
    else:
        fn, graph_safe, info = _run_arm(op, arm, case.id, case.dtype, args)
    flops = 4 * case.batch * case.num_q_heads * case.length**2 * (case.head_dim + head_dim_v) / 2 / 2
    benchmark.extra_info.update(
        op=op, row=arm, case=case.id, **info, flops_formula="2*B*H*S^2*(D + Dv)/2: Q.K and P.V over the causal half"
    )
    _record(
        benchmark,
        gpu_session,
        fn,
        peer=peer,
        bytes_moved=q.numel() * q.element_size() * 3,
        graph=False,
        graph_safe=graph_safe,
        flops=flops,
    )


@pytest.mark.parametrize(
    "arm,case",
    [
        pytest.param(a, c, id=f"{a}-{c.id}")
        for a in _contenders(PREFILL) + [SDPA, FLASHINFER_PLANNED_PREFILL]
        for c in PREFILL_SHAPES
    ],
)
def test_prefill(benchmark, gpu_session, arm, case):
    _prefill_case(benchmark, gpu_session, PREFILL, arm, case, case.head_dim)


@pytest.mark.parametrize(
    "arm,case",
    [
        pytest.param(a, c, id=f"{a}-{c.id}")
        for a in _contenders(MLA_PREFILL) + [FLASHINFER_PLANNED_MLA_PREFILL]
        for c in MLA_PREFILL_SHAPES
    ],
)
def test_mla_prefill(benchmark, gpu_session, arm, case):
    _prefill_case(benchmark, gpu_session, MLA_PREFILL, arm, case, 128)


# ---------------------------------------------------------------------------
# attention.prefill_paged: a 512-token chunk after a 4096-token history, 4 sequences
# ---------------------------------------------------------------------------

PREFILL_PAGED = "attention.prefill_paged"
PREFILL_PAGED_SHAPES = [AttentionShape(4, 4608, 32, 8, 128, new_tokens=512)]


def _prefill_paged_inputs(case):
    """Args of attention.prefill_paged: a chunk of new_tokens per sequence after length - new_tokens cached."""
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
    return (q, buffer, table, cu, seq_lens, case.new_tokens, case.page_size, case.head_dim**-0.5, True, False)


@pytest.mark.parametrize(
    "arm,case",
    [
        pytest.param(a, c, id=f"{a}-{c.id}")
        for a in _contenders(PREFILL_PAGED) + [FLASHINFER_PLANNED_PREFILL_PAGED]
        for c in PREFILL_PAGED_SHAPES
    ],
)
def test_prefill_paged(benchmark, gpu_session, arm, case):
    args = _prefill_paged_inputs(case)
    q, buffer, table, cu, seq_lens, scale = args[0], args[1], args[2], args[3], args[4], args[7]
    if arm == FLASHINFER_PLANNED_PREFILL_PAGED:
        run = _flashinfer_adapters().plan_prefill_paged(
            q, buffer, table, cu, seq_lens, case.page_size, scale, causal=True
        )
        fn, info = _peer(
            PREFILL_PAGED,
            arm,
            case.id,
            case.dtype,
            args,
            lambda: run(q, buffer),
            "engine: plan() once per step outside the timing, run() timed",
        )
        graph_safe = False
    else:
        fn, graph_safe, info = _run_arm(PREFILL_PAGED, arm, case.id, case.dtype, args)
    history = case.length - case.new_tokens
    pairs = case.new_tokens * history + case.new_tokens * (case.new_tokens + 1) / 2
    flops = 4 * case.batch * case.num_q_heads * pairs * case.head_dim
    benchmark.extra_info.update(
        op=PREFILL_PAGED, row=arm, case=case.id, **info, flops_formula="4*B*H*D*(chunk*history + chunk*(chunk+1)/2)"
    )
    _record(
        benchmark,
        gpu_session,
        fn,
        peer=arm.startswith("peer/"),
        bytes_moved=buffer.numel() * buffer.element_size(),
        graph=False,
        graph_safe=graph_safe,
        flops=flops,
    )


# ---------------------------------------------------------------------------
# attention.mla_decode: DeepSeek-V3 absorbed MLA, latent 512 + rope 64, page 64
# ---------------------------------------------------------------------------

MLA_DECODE = "attention.mla_decode"
MLA_DECODE_SHAPES = [
    AttentionShape(64, 4096, 128, 1, 576, 64),
    AttentionShape(64, 4096, 16, 1, 576, 64),
    AttentionShape(1, 32768, 16, 1, 576, 64),
    AttentionShape(1, 32768, 128, 1, 576, 64),
    AttentionShape(8, 32768, 16, 1, 576, 64),
    AttentionShape(8, 32768, 128, 1, 576, 64),
    AttentionShape(128, 2048, 128, 1, 576, 64),
    AttentionShape(64, 4096, 64, 1, 576, 64),
    AttentionShape(64, 4096, 16, 1, 576, 64, kv_fp8=True),  # the fp8 e4m3 latent cache
    AttentionShape(64, 4096, 16, 1, 576, 64, q_tokens=4),  # several query tokens (speculative verification)
]
MLA_DECODE_PEERS = [FLASH_MLA_METADATA, FLASHINFER_PLANNED_MLA_DECODE]


def _flash_mla_peer(args, case_id, dtype):
    """FlashMLA as an engine drives it: the split schedule once per step, reused by every call (and by the
    captured calls of a graph replay: they read the schedule's tensors, filled before the capture)."""
    import torch

    q, cache, table, seq_lens, page_size, sm_scale = args
    adapter, hoist_error = _flash_mla_adapter(), None
    try:  # the scheduler hoisted out of the decode call, as the fork offers it
        run = adapter.plan_mla_decode(q, cache, table, seq_lens, page_size, sm_scale)
        run(q, cache)
        torch.cuda.synchronize()
    except RuntimeError as error:  # its metadata refused by the decode call: FlashMLA's first-call schedule
        hoist_error = f"{type(error).__name__}: {str(error)[:300]}"
        run = adapter.plan_mla_decode(q, cache, table, seq_lens, page_size, sm_scale, hoist=False)
    schedule = run.schedule
    planned = (schedule.tile_scheduler_metadata.data_ptr(), schedule.num_splits.data_ptr())
    fn, info = _peer(
        MLA_DECODE,
        FLASH_MLA_METADATA,
        case_id,
        dtype,
        args,
        lambda: run(q, cache),
        f"engine: split schedule once per step outside the timing ({run.metadata}), reused by "
        "every call and by the captured calls of the graph replay",
    )
    if hoist_error:
        info["metadata_hoist_error"] = hoist_error
    # the call must have read the schedule computed once, not made its own (which would be timed)
    reused = (schedule.tile_scheduler_metadata.data_ptr(), schedule.num_splits.data_ptr()) == planned
    assert reused, "FlashMLA replaced the precomputed schedule: the timed call would compute its own"
    info["metadata_shape"] = list(schedule.tile_scheduler_metadata.shape)
    return fn, info


def _mla_peer_skip(case):
    """pytest.skip for the MLA peers at a case their adapters do not drive: an fp8 latent cache or several
    query tokens (plan_mla_decode and FlashMLA's adapter take a bf16 cache and one query per sequence)."""
    if case.kv_fp8:
        pytest.skip("MLA peers: a bf16 latent cache only (their adapters do not drive the fp8 latent cache)")
    if case.q_tokens != 1:
        pytest.skip("MLA peers: one query token per sequence only (their adapters do not drive several)")


def _mla_decode_inputs(case):
    """Args of attention.mla_decode: q [B * q_tokens, Hq, 576] against each sequence's latent rows (512 + 64
    rope); the 6 base args, then (window_left -1, soft cap 0, num_q_tokens, latent_scale) for an fp8 latent cache
    (values / scale in e4m3, as kvcache.update_mla_buffer_fp8 writes; scale fp32 [1]) or several query tokens."""
    import torch

    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    dtype = TORCH_DTYPES[case.dtype]
    generator = torch.Generator(device="cuda").manual_seed(case.batch * 3 + case.num_q_heads)
    table, pages = _page_table(case.batch, case.length, case.page_size, "cuda")
    cache = _randn((pages * case.page_size, 576), dtype, generator)
    scale = None
    if case.kv_fp8:
        scale = (cache.float().abs().amax() / 448.0).reshape(1)
        cache = (cache.float() / scale).to(torch.float8_e4m3fn)
    q = _randn((case.batch * case.q_tokens, case.num_q_heads, 576), dtype, generator)
    seq_lens = torch.full((case.batch,), case.length, dtype=torch.int32, device="cuda")
    args = (q, cache, table, seq_lens, case.page_size, MLA_SM_SCALE)
    if case.kv_fp8 or case.q_tokens != 1:
        args += (-1, 0.0, case.q_tokens, scale)
    return args


@pytest.mark.parametrize(
    "arm,case",
    [
        pytest.param(a, c, id=f"{a}-{c.id}")
        for a in _contenders(MLA_DECODE) + MLA_DECODE_PEERS
        for c in MLA_DECODE_SHAPES
    ],
)
def test_mla_decode(benchmark, gpu_session, arm, case):
    if arm in MLA_DECODE_PEERS:
        _mla_peer_skip(case)
    args = _mla_decode_inputs(case)
    q, cache = args[0], args[1]
    if arm == FLASH_MLA_METADATA:
        fn, info = _flash_mla_peer(args, case.id, case.dtype)
        graph_safe = True
    elif arm == FLASHINFER_PLANNED_MLA_DECODE:
        run = _flashinfer_adapters().plan_mla_decode(*args, cuda_graph=True)
        fn, info = _peer(
            MLA_DECODE,
            arm,
            case.id,
            case.dtype,
            args,
            lambda: run(q, cache),
            "engine: plan() once per step in the wrapper's CUDA-graph mode (fixed page-list "
            "buffers) outside the timing, run() timed and captured",
        )
        graph_safe = True
    else:
        fn, graph_safe, info = _run_arm(MLA_DECODE, arm, case.id, case.dtype, args)
    latent_bytes = case.batch * case.length * 576 * cache.element_size()
    flops = 2 * case.batch * case.q_tokens * case.num_q_heads * case.length * (576 + 512)
    benchmark.extra_info.update(
        op=MLA_DECODE,
        row=arm,
        case=case.id,
        **info,
        sm_scale=MLA_SM_SCALE,
        bytes_formula="the latent cache rows of every sequence read once",
        flops_formula="2*B*n*Hq*L*(576 + 512), n = q_tokens: every position per query token",
    )
    # every shape also in graph replay: the event timing of a call shorter than the host's enqueue includes the
    # part of that enqueue the L2 flush before it does not hide; engines replay decode steps from CUDA graphs
    _record(
        benchmark,
        gpu_session,
        fn,
        peer=arm in MLA_DECODE_PEERS,
        bytes_moved=latent_bytes,
        graph=True,
        graph_safe=graph_safe,
        flops=flops,
    )


# attention.merge_states: two parts of a decode batch's results (a cached prefix and fresh tokens), merged
MERGE_CASES = ((64, 32, 128), (4096, 32, 128), (64, 128, 512))


@pytest.mark.parametrize(
    "arm,case",
    [(arm, case) for arm in _contenders("attention.merge_states") for case in MERGE_CASES],
    ids=lambda value: value if isinstance(value, str) else f"N{value[0]}-h{value[1]}-d{value[2]}-bf16",
)
def test_merge_states(benchmark, gpu_session, arm, case):
    import torch

    op, dtype = "attention.merge_states", "bf16"
    tokens, heads, dim = case
    generator = torch.Generator(device="cuda").manual_seed(tokens + heads)
    args = []
    for _ in range(2):
        args.append(torch.randn((tokens, heads, dim), device="cuda", generator=generator).to(torch.bfloat16))
        args.append(torch.randn((tokens, heads), device="cuda", generator=generator) * 4)
    shape = {"num_tokens": tokens, "num_heads": heads, "head_dim": dim}
    checked, row = load_row(op, arm, dtype=dtype, shape=shape, layout=())
    reference_name, reference = reference_row(op)
    case_id = f"N{tokens}-h{heads}-d{dim}"
    check = check_against_reference(
        op, dtype, checked(*args), reference(*args), arm=arm, reference=reference_name, case=case_id
    )
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case_id,
        dtype=dtype,
        correctness=describe_check(check, reference_name),
        bytes_formula="both parts' v and s read + v and s written",
    )
    bytes_moved = 3 * tokens * heads * (dim * 2 + 4)
    gpu_timing.record_case(
        benchmark,
        gpu_session,
        lambda: checked.impl(*args),
        bytes_moved=bytes_moved,
        graph_safe=row.graph_safe,
        graph=True,
    )
