"""What the native attention kernels promise beyond the parity cases.

- Split-K: decode and MLA decode cut each sequence into `splits` chunks of its own length and merge
  the partial outputs by their log-sum-exp. On the CPU the heuristic always picks one split, so
  the merge path is forced here (1, 2, 3 and 7 splits, more splits than tiles included) against
  the float64 oracle. Catches a merge that weighs splits wrongly, drops the last chunk, or
  mishandles an empty split (lse = -inf).
- Unchecked bad index values (on CUDA without RAPID_LLM_CHECK_BOUNDS) give an unspecified result,
  never an out-of-bounds read: every row that runs here is called with page ids and lengths past
  the page table and the buffer. Catches a kernel that gathers through an unclamped id.
- The TMA prefill kernel (sm90's path for attention.prefill / mla_prefill) equals the pointer
  kernel on every ragged prefill case the interpreter runs: its descriptors' boxes read rows of the
  neighbouring sequence, and this catches one of them leaking into a result (on the CPU it is called
  directly; tma_ready() is False there). On the GPU the parity cases run it through the row.
- fp8-KV decode with a bf16 q takes its products in fp16 after scaling q by a power of two chosen on
  the device: queries of magnitude 1e-6 .. 1e5 (fp16 overflows at 65504) stay within the bf16
  tolerance of the float64 oracle. Catches a missing or wrong scale (inf / NaN or a scaled result).
- MLA decode's pointer kernel with UNMASKED_BODY (whole tiles without load masks, its CUDA default)
  and the TMA kernel (sm90's path for page sizes that are multiples of its tile) each equal the
  masked pointer kernel with every latent row no valid position reads set to NaN. Catches a whole
  tile that reaches past its split's end (a NaN in the result) or a box read from the wrong page.
- The Gluon MLA decode kernel (GPU only: sm90's path for Hq < 64; the interpreter does not run Gluon) equals
  the masked pointer kernel with every unread latent row NaN, in both ring shapes, at 1/3/7 splits and on
  32k contexts. Catches a ring slot refilled before its products finished, a wrong barrier phase (a hang),
  or a tail tile read past the split's end.
- mla_decode_gluon_pingpong.py (sm90's path for Hq >= 64: two warp-specialised warpgroups on alternate tiles)
  against the same kernel, GPU only, at 1/2/3 splits (odd and even tile counts, partial last tiles). Catches a
  handshake read before it is written, a part refilled while the other warpgroup still reads it, or a padding
  or partial tile's rows past the end reaching a product.
- mla_decode_gluon_wide.py (opt-in for Hq >= 64: 64 heads per program) against the same kernel, GPU only,
  in each of its schedules (serial, EARLY_NEXT, LEAN, both). Catches a slot refilled while a product still reads
  it, a wrong wgmma group count in a partial wait, or a row maximum taken over one warpgroup's half.
- prefill_gluon.py (sm90's path for head dim 128: warp-specialized, persistent) against the pointer kernel on
  every ragged prefill case it serves, in six configurations, and with a NaN next sequence: GPU only.
- CUDA-graph capture (GPU only): every attention row that says graph_safe=True is captured and
  replayed on new inputs equal to an eager call. Catches a row claiming graph safety while it
  syncs or plans on the host.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, ORACLES, TOLERANCES, TORCH_DTYPES
from conformance.rows_here import TABLE, loadable_rows, planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.attention import DECODE, MLA_DECODE, PREFILL_PAGED
from rapid_llm.kernels.ops.checks import value_checks

DEVICE = torch_device()
_NATIVE_SPLITS = [("native/decode", DECODE, "ragged_page16"), ("native/decode", DECODE, "page_size_1"),
                  ("native/decode_fp8", DECODE, "fp8_kv_ragged_page16"),
                  ("native/mla_decode", MLA_DECODE, "ragged_page64"), ("native/mla_decode", MLA_DECODE, "page_size_16")]


def _case(op, case_id, dtype="fp32", seed=3):
    case = next(c for c in CASES[op] if c.id == case_id)
    return case.make(TORCH_DTYPES[dtype], DEVICE, torch.Generator().manual_seed(seed))


def _plan(op, row, dtype, dims, layout):
    """The PlannedOp forcing `row` for a call with these dims and layout, or pytest.skip with the reason."""
    try:
        return planner_forcing(op, row).plan(op, dtype=dtype, shape=dims, layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


@pytest.mark.parametrize("row,op,case_id", _NATIVE_SPLITS, ids=[f"{r}-{c}" for r, _, c in _NATIVE_SPLITS])
@pytest.mark.parametrize("splits", [1, 2, 3, 7])
def test_split_k_merge_matches_the_oracle(row, op, case_id, splits):
    args, dims, layout = _case(op, case_id)
    _plan(op, row, "fp32", dims, layout)  # skips where the row cannot run
    from rapid_llm.kernels.ops.attention import decode, mla_decode

    kernel = mla_decode.mla_decode if op == MLA_DECODE else decode.decode
    got = kernel(*args, splits=splits)
    want = ORACLES[op](*args)
    atol, rtol = TOLERANCES[(op, "fp32")][0]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


def _bad_index_calls():
    for op, case_id in ((DECODE, "ragged_page16"), (MLA_DECODE, "ragged_page64"), (PREFILL_PAGED, "chunk_after_history")):
        for name, _ in loadable_rows(op, "fp32"):
            yield pytest.param(op, case_id, name, id=f"{name}-{case_id}")


@pytest.mark.parametrize("op,case_id,row", list(_bad_index_calls()))
def test_unchecked_bad_page_ids_and_lengths_give_a_result_not_a_crash(op, case_id, row):
    args, dims, layout = _case(op, case_id)
    args = list(args)
    table_index, lens_index = 2, (4 if op == PREFILL_PAGED else 3)
    page_size = args[5 if op == PREFILL_PAGED else 4]
    reach = args[table_index].shape[1] * page_size
    args[table_index] = torch.full_like(args[table_index], 1 << 20)   # page ids far past the buffer
    args[lens_index] = torch.full_like(args[lens_index], reach + 7)    # lengths past the page table's reach
    planned = _plan(op, row, "fp32", dims, layout)
    with value_checks(False):
        out = planned(*args)
    out = out[0] if isinstance(out, tuple) else out
    if out.is_cuda:
        torch.cuda.synchronize()  # an illegal address would surface here
    assert out.shape[0] == args[0].shape[0]


def _graph_safe_rows():
    for op in (DECODE, MLA_DECODE, PREFILL_PAGED, "attention.prefill", "attention.mla_prefill"):
        for row in TABLE.rows(op):
            if row.graph_safe and not row.is_reference:
                yield pytest.param(op, row.name, id=row.name)


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA-graph capture needs a CUDA device")
@pytest.mark.parametrize("op,row", list(_graph_safe_rows()))
def test_graph_safe_rows_replay_equal_to_eager(op, row):
    # the first small bf16 case the row accepts (native/decode_fp8 takes only the fp8-buffer cases)
    planned = None
    for case in (c for c in CASES[op] if not c.gpu_only and "bf16" in c.dtypes):
        args, dims, layout = case.make(torch.bfloat16, "cuda", torch.Generator().manual_seed(5))
        try:
            planned = planner_forcing(op, row).plan(op, dtype="bf16", shape=dims, layout=layout)
            break
        except NoEligibleKernel as error:
            reason = skip_reason(row, error)
    if planned is None:
        pytest.skip(reason)
    planned.impl(*args)  # first call: compiles
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        planned.impl(*args)  # warm-up on the capture stream (compiles, allocates)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = planned.impl(*args)
    fresh, _, _ = case.make(torch.bfloat16, "cuda", torch.Generator().manual_seed(6))
    for target, source in zip(args, fresh):
        if isinstance(target, torch.Tensor) and target.is_floating_point():
            target.copy_(source)
    graph.replay()
    expected = planned.impl(*args)
    first = captured[0] if isinstance(captured, tuple) else captured
    want = expected[0] if isinstance(expected, tuple) else expected
    torch.testing.assert_close(first, want, atol=0, rtol=0)


_TMA_CASES = [(op, case.id) for op in ("attention.prefill", "attention.mla_prefill") for case in CASES[op]
              if not case.gpu_only]


@pytest.mark.parametrize("op,case_id", _TMA_CASES, ids=[f"{op}-{c}" for op, c in _TMA_CASES])
def test_tma_prefill_kernel_equals_the_pointer_kernel(op, case_id):
    args, dims, layout = _case(op, case_id, dtype="fp16")
    _plan(op, "native/prefill" if op == "attention.prefill" else "native/mla_prefill", "fp16", dims, layout)
    from rapid_llm.kernels.ops.attention import prefill, prefill_tma  # after the skip: Triton may be hidden
    q, k, v = args[:3]
    if q.dtype != torch.float16 or q.shape[0] == 0 or q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        pytest.skip("tma_ready() refuses these inputs (fp16 with unit head-dim strides only; empty q has no "
                    "descriptor): the pointer kernel serves them")
    want = prefill.prefill(*args, tma=False)
    got = prefill_tma.prefill(*args, config={"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1})
    for mine, theirs in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(mine.float(), theirs.float(), atol=2e-3, rtol=2e-3)


_GLUON_PREFILL_CASES = [case.id for case in CASES["attention.prefill"]]


def _skip_unless_sm90_gluon():
    if DEVICE != "cuda" or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("prefill_gluon.py needs CUDA sm90 (wgmma, TMA, warp specialization); Triton's interpreter does "
                    "not run Gluon, so the CPU checks prefill.py's kernels only")


def _gluon_prefill_or_skip(q, k, v, sm_scale):
    """prefill_tma, or pytest.skip where prefill_gluon.py's kernel does not serve the call."""
    _skip_unless_sm90_gluon()
    from rapid_llm.kernels.ops.attention import prefill_tma  # after the skip: Triton may be hidden
    if not (prefill_tma.tma_ready(q, k, v) and prefill_tma.gluon_fits(q, v, sm_scale)):
        pytest.skip("prefill_gluon.py serves TMA-readable fp16/bf16 q/k/v of head dim 128 with sm_scale > 0 only")
    return prefill_tma


#: The default (two consumer warpgroups, 128-key tiles, 2 slots, 2 Q slots), three consumers (64-key tiles, 4
#: slots), two consumers with 64-key tiles in 4 slots, with PINGPONG's turns, with 128-key tiles in 3 slots and
#: one Q slot, and 3 programs for every item of the call with two and three consumers (each program walks many
#: items: the Q slots, whose buffers also carry the output rows out, and the ring carry over from item to item).
_GLUON_PREFILL_CONFIGS = [{"GLUON": True}, {"GLUON": True, "CONSUMERS": 3},
                          {"GLUON": True, "BLOCK_N": 64, "STAGES": 4}, {"GLUON": True, "PINGPONG": True},
                          {"GLUON": True, "BLOCK_N": 128, "STAGES": 3, "Q_SLOTS": 1}, {"GLUON": True, "PROGRAMS": 3},
                          {"GLUON": True, "CONSUMERS": 3, "PROGRAMS": 3}]
_GLUON_PREFILL_IDS = ["default", "3_consumers", "64_key_tiles_s4", "pingpong", "128_key_tiles_s3_q1", "3_programs",
                      "3_consumers_3_programs"]


@pytest.mark.parametrize("case_id", _GLUON_PREFILL_CASES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("config", _GLUON_PREFILL_CONFIGS, ids=_GLUON_PREFILL_IDS)
def test_gluon_prefill_kernel_equals_the_pointer_kernel(case_id, dtype, config):
    """prefill_gluon.py (sm90: a producer warpgroup, two or three consumer warpgroups of 64 query rows,
    persistent; forced by config GLUON) against the pointer kernel on every ragged prefill case it serves (causal
    and not, GQA, lengths 1 to 4097, the log-sum-exp). Catches a warpgroup whose rows all lie before the
    sequence's start not releasing its tiles (a hang) or writing rows, a tile a warpgroup sees no key of released
    before it landed, a ring slot refilled before every consumer released it, a wrong barrier phase (a hang: the
    suite's time limit), a causal mask off by a tile, or rows of the partial last tile
    lost, the next tile's logits read from a slot not yet landed, keys refilled before both warpgroups' logits
    read them, the peeled last tile skipped, (3 programs) a Q slot or ring phase that does not carry over from
    one item to the next, a partial first block's rows copied over the previous sequence's, or a Q slot refilled
    before the output copy read it."""
    _skip_unless_sm90_gluon()
    args, dims, layout = _case("attention.prefill", case_id, dtype=dtype)
    prefill_tma = _gluon_prefill_or_skip(args[0], args[1], args[2], args[5])
    from rapid_llm.kernels.ops.attention import prefill

    want = prefill.prefill(*args, tma=False)
    got = prefill_tma.prefill(*args, config=dict(config))
    atol, rtol = TOLERANCES[("attention.prefill", dtype)][0]
    for mine, theirs in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.isfinite(mine).all(), "an unwritten or NaN output element"
        torch.testing.assert_close(mine.float(), theirs.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("config", _GLUON_PREFILL_CONFIGS, ids=_GLUON_PREFILL_IDS)
def test_gluon_prefill_reads_no_row_of_the_next_sequence(causal, config):
    """Two packed sequences (100 and 37 tokens): the second one's keys and values are NaN. Catches the first
    sequence's partial last tile (keys 0..127) copied by TMA, which reads the second sequence's rows into its
    products (0 * NaN in P . V): that tile must come through masked pointer loads."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn((137, heads, 128), generator=g).half() for heads in (8, 2, 2))
    q, k, v = (x.to(DEVICE) for x in (q, k, v))
    k[100:], v[100:] = float("nan"), float("nan")
    cu = torch.tensor([0, 100, 137], dtype=torch.int32, device=DEVICE)
    prefill_tma = _gluon_prefill_or_skip(q, k, v, 128 ** -0.5)
    from rapid_llm.kernels.ops.attention import prefill

    got = prefill_tma.prefill(q, k, v, cu, 100, 128 ** -0.5, causal, config=dict(config))
    want = prefill.prefill(q, k, v, cu, 100, 128 ** -0.5, causal, tma=False)
    assert torch.isfinite(got[:100]).all(), "the second sequence's NaN rows reached the first sequence's output"
    atol, rtol = TOLERANCES[("attention.prefill", "fp16")][0]
    torch.testing.assert_close(got[:100].float(), want[:100].float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("config", [{"GLUON": True, "CONSUMERS": 3, "BLOCK_N": 128},
                                    {"GLUON": True, "CONSUMERS": 3, "PINGPONG": True}, {"GLUON": True, "CONSUMERS": 4}],
                         ids=["3_consumers_128_key_tiles", "3_consumers_pingpong", "4_consumers"])
def test_gluon_prefill_refuses_a_config_it_cannot_run(config):
    """Catches a prefill_gluon config outside its register and turn budgets (three consumers with 128-key tiles:
    160 registers a thread for the logits, P and the accumulator alone; turns between three consumers; four)
    compiling anyway, spilling or hanging, instead of a ValueError that names the kernel."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn((64, heads, 128), generator=g).half().to(DEVICE) for heads in (8, 2, 2))
    cu = torch.tensor([0, 64], dtype=torch.int32, device=DEVICE)
    prefill_tma = _gluon_prefill_or_skip(q, k, v, 128 ** -0.5)
    with pytest.raises(ValueError, match="prefill_gluon"):
        prefill_tma.prefill(q, k, v, cu, 64, 128 ** -0.5, True, config=dict(config))


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e3, 1e5])
def test_fp8_decode_scales_a_bf16_query_into_fp16(magnitude):
    args, dims, layout = _case(DECODE, "fp8_kv_ragged_page16")
    _plan(DECODE, "native/decode_fp8", "bf16", dims, layout)
    from rapid_llm.kernels.ops.attention import decode  # after the skip: Triton may be hidden

    q = (args[0].double() * magnitude).bfloat16()
    args = (q, *args[1:])
    got = decode.decode(*args, splits=2)
    want = ORACLES[DECODE](*args)
    assert torch.isfinite(got).all(), "an fp16 overflow of the scaled query reached the output"
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


def _poisoned_mla_case(case_id, magnitude):
    """(args, q, poisoned cache) of an MLA decode case in fp16: q scaled by `magnitude` (64: logits whose
    running maximum keeps growing from tile to tile, so the sums are rescaled), every latent row that no
    valid position reads set to NaN (a read past a split's end or from a wrong page shows as NaN)."""
    args, dims, layout = _case(MLA_DECODE, case_id, dtype="fp16")
    _plan(MLA_DECODE, "native/mla_decode", "fp16", dims, layout)
    q, cache, table, seq_lens, page_size = args[:5]
    used = torch.zeros(cache.shape[0], dtype=torch.bool, device=cache.device)
    for b in range(q.shape[0]):
        positions = torch.arange(int(seq_lens[b]), device=cache.device)
        used[table[b, positions // page_size].long() * page_size + positions % page_size] = True
    poisoned = cache.clone()
    poisoned[~used] = float("nan")
    return args, q * magnitude, poisoned


@pytest.mark.parametrize("num_q_heads", [16, 128], ids=["gluon_few_heads", "gluon_wide"])
def test_mla_gluon_configs_fall_back_to_the_pointer_kernel(num_q_heads):
    """A launch_config made for the sm90 Gluon kernels, given with tma=False (as where a cache's strides refuse
    TMA boxes): the pointer kernel serves it and equals the masked pointer kernel. Catches a Gluon-only key
    (GLUON_PINGPONG, GLUON, ROPE_RING) reaching the Triton kernel's launch as an unknown argument (a KeyError
    where Triton compiles, i.e. on a GPU: its CPU interpreter ignores unknown keywords), and the pointer
    kernel at the Gluon configs' tiles (64 heads x 64 positions at Hq=128)."""
    args, q, poisoned = _poisoned_mla_case("ragged_page64", 1.0)
    from rapid_llm.kernels.ops.attention import mla_decode  # after the skip: Triton may be hidden

    config = mla_decode.launch_config(num_q_heads, q.dtype, torch.device("cuda"), split_positions=4096, gluon=True)
    assert config.get("GLUON_PINGPONG" if num_q_heads >= 64 else "GLUON"), "launch_config no longer takes Gluon here"
    pointer = {"BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    want = mla_decode.mla_decode(q, poisoned, *args[2:], splits=2, config=pointer, tma=False)
    got = mla_decode.mla_decode(q, poisoned, *args[2:], splits=2, config=config, tma=False)
    assert torch.isfinite(got).all(), "a row past a sequence reached the result"
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]  # both round to bf16 once; the products' order may differ
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("case_id", ["ragged_page64", "page_size_16"])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
def test_mla_unmasked_body_equals_the_masked_kernel(case_id, splits, magnitude):
    args, q, poisoned = _poisoned_mla_case(case_id, magnitude)
    from rapid_llm.kernels.ops.attention import mla_decode  # after the skip: Triton may be hidden

    config = mla_decode.launch_config(q.shape[1], q.dtype, q.device)
    config.pop("resident")
    masked = {**config, "UNMASKED_BODY": False}
    want = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config=masked, tma=False)
    got = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config={**config, "UNMASKED_BODY": True},
                                tma=False)
    assert torch.isfinite(want).all() and torch.isfinite(got).all(), "a row past a sequence reached the result"
    # the same sums in another instruction order (the H200 differed by 2.4e-7 in one element of 24576)
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]  # both round to bf16 once; the products' order may differ
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("case_id", ["ragged_page64", "page_size_16"])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
def test_tma_mla_decode_kernel_equals_the_pointer_kernel(case_id, splits, magnitude):
    args, q, poisoned = _poisoned_mla_case(case_id, magnitude)
    from rapid_llm.kernels.ops.attention import mla_decode  # after the skip: Triton may be hidden

    config = {"BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    want = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config=config, tma=False)
    got = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config=config, tma=True)
    assert torch.isfinite(want).all() and torch.isfinite(got).all(), "a row past a sequence reached the result"
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]  # both round to bf16 once; the products' order may differ
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


def _gluon_matches_pointer_kernel(case_id, splits, magnitude, config):
    """A Gluon MLA decode config against the masked pointer kernel on a NaN-poisoned case (sm90 only)."""
    args, q, poisoned = _poisoned_mla_case(case_id, magnitude)
    if not q.is_cuda or torch.cuda.get_device_capability(q.device)[0] != 9:
        pytest.skip("the Gluon kernels need CUDA sm90 (wgmma and TMA); Triton's interpreter does not run Gluon, "
                    "so the CPU checks mla_decode.py's kernels only")
    from rapid_llm.kernels.ops.attention import mla_decode  # after the skip: Triton may be hidden

    pointer = {"BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    want = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config=pointer, tma=False)
    got = mla_decode.mla_decode(q, poisoned, *args[2:], splits=splits, config=config, tma=True)
    assert torch.isfinite(want).all() and torch.isfinite(got).all(), "a row past a sequence reached the result"
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]  # both round to bf16 once; the products' order may differ
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("case_id", ["ragged_page64", "large_logits", "strided_q_and_index", "padded_cache_rows",
                                     "long_context_32k"])
@pytest.mark.parametrize("splits", [1, 3, 7])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
@pytest.mark.parametrize("ring", [{"num_stages": 3}, {"num_stages": 2, "ROPE_RING": True}], ids=["rope1", "rope_ring"])
def test_gluon_mla_decode_kernel_equals_the_pointer_kernel(case_id, splits, magnitude, ring):
    """mla_decode_gluon.py (sm90: TMA ring, warpgroup products, positions as the product rows) against the masked
    pointer kernel with every unread latent row NaN. Catches a ring slot refilled before its products finished
    (a wrong or NaN result), a wrong barrier phase (a hang: the suite's time limit), the tail tile read past the
    split's end, or a softmax along the wrong axis."""
    _gluon_matches_pointer_kernel(case_id, splits, magnitude,
                                  {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "GLUON": True, **ring})


@pytest.mark.parametrize("case_id", ["heads_128", "ragged_page64", "large_logits", "padded_cache_rows",
                                     "long_context_32k"])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
@pytest.mark.parametrize("schedule", [{}, {"EARLY_NEXT": True}, {"EARLY_NEXT": True, "LEAN": True}, {"LEAN": True}],
                         ids=["serial", "early_next", "early_next_lean", "lean"])
def test_gluon_wide_mla_decode_kernel_equals_the_pointer_kernel(case_id, splits, magnitude, schedule):
    """mla_decode_gluon_wide.py (sm90, 64 heads per program, the two warpgroups splitting each product; opt-in:
    GLUON_WIDE) against the masked pointer kernel with every unread latent row NaN. Catches a warpgroup that
    reduces only its own half of a row's logits (a wrong softmax), P written over rope columns a product still
    reads, or a slot refilled too early; with EARLY_NEXT also a slot refilled while the next tile's logits (or the
    value products) still read it, or a wrong wgmma group count in the partial wait; with LEAN a row maximum
    taken over one warpgroup's half only, or row sums lost in the final reduction."""
    _gluon_matches_pointer_kernel(case_id, splits, magnitude, {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8,
                                                               "num_stages": 2, "GLUON_WIDE": True, **schedule})


@pytest.mark.parametrize("case_id", ["heads_128", "ragged_page64", "large_logits", "padded_cache_rows",
                                     "long_context_32k"])
@pytest.mark.parametrize("splits", [1, 2, 3])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
def test_gluon_pingpong_mla_decode_kernel_equals_the_pointer_kernel(case_id, splits, magnitude):
    """mla_decode_gluon_pingpong.py (sm90, two warp-specialised warpgroups on alternate tiles; opt-in:
    GLUON_PINGPONG) against the masked pointer kernel with every unread latent row NaN. Catches a handshake
    read before it is written (a softmax against a stale maximum: wrong rows), P of one tile scaled to the
    wrong maximum, a part refilled while the other warpgroup's product still reads it, an odd tile count's
    padding tile or a partial tile's rows past the end reaching a product (NaN), and the two halves of O or
    of the row sums combined wrongly."""
    _gluon_matches_pointer_kernel(case_id, splits, magnitude, {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 4,
                                                               "num_stages": 2, "GLUON_PINGPONG": True})


def test_one_wave_split_count_fills_one_wave_without_starting_a_second(monkeypatch):
    """splits.one_wave_splits (the CUDA extension's fp8 decode) on a 132-SM GPU at 2 blocks per SM (264 slots):
    the grid fits one wave and one more split would start a second, unless the batch alone fills the slots
    (one split) or the page table's reach or MAX_SPLITS caps it. Catches the Triton row's rule applied to this
    kernel (B=8 GQA 32/8: 9 splits, 576 blocks, a third wave that is 18% full) and a cap that is ignored."""
    from rapid_llm.kernels.ops.attention import splits as module  # no Triton import: every cell runs it

    monkeypatch.setattr(module, "multiprocessor_count", lambda device: 132)
    cuda = torch.device("cuda")
    assert module.one_wave_splits(8, 8, 8192, torch.device("cpu"), 2) == 1
    for batch, programs, capacity in [(8, 8, 8192), (1, 8, 32768), (64, 8, 4096), (16, 8, 4096), (33, 8, 4096),
                                      (1, 8, 1024), (1, 1, 1 << 20), (3, 16, 1000), (0, 8, 4096)]:
        splits = module.one_wave_splits(batch, programs, capacity, cuda, 2)
        blocks = batch * programs
        reach = max(1, capacity // module.MIN_SPLIT_POSITIONS)
        assert 1 <= splits <= min(reach, module.MAX_SPLITS), (batch, programs, capacity, splits)
        if blocks == 0 or blocks >= 264:
            assert splits == 1, (batch, programs, capacity, splits)
        else:
            assert blocks * splits <= 264, (batch, programs, capacity, splits)
            assert blocks * (splits + 1) > 264 or splits == min(reach, module.MAX_SPLITS), (batch, programs, splits)
    assert module.one_wave_splits(8, 8, 8192, cuda, 2) == 4  # the benchmark's B=8 L=8192
    assert module.one_wave_splits(1, 8, 32768, cuda, 2) == 33  # and B=1 L=32768


def test_splits_filled_at_reach_leave_no_split_empty():
    """splits.splits_filled_at_reach at the extension kernel's granule (decode_cuda.CHUNK): each split gets
    ceil(L / S) positions rounded up to 32, so the count it keeps must leave no split empty for a sequence as
    long as the page table's reach, and never exceed the count asked for. Catches the 33rd, empty split of a
    32k context (32 splits of 1024)."""
    from rapid_llm.kernels.ops.attention.decode_cuda import CHUNK
    from rapid_llm.kernels.ops.attention.splits import splits_filled_at_reach

    assert splits_filled_at_reach(33, 32768, CHUNK) == 32
    for splits in (1, 2, 3, 4, 7, 16, 33, 64, 256):
        for capacity in (1, 31, 32, 1000, 4096, 8192, 32768, 131072):
            kept = splits_filled_at_reach(splits, capacity, CHUNK)
            length = -(-(-(-capacity // kept)) // CHUNK) * CHUNK
            assert 1 <= kept <= splits, (splits, capacity, kept)
            assert (kept - 1) * length < capacity, (splits, capacity, kept)  # the last split starts in range
            assert kept * length >= capacity, (splits, capacity, kept)  # and every position has a split


@pytest.mark.parametrize("block_n", [32, 64])
def test_mla_split_count_leaves_no_split_empty_for_a_full_length_sequence(block_n, monkeypatch):
    """mla_num_splits on a 132-SM GPU, for the batch / head-block / reach / residency shapes of the benchmarks and
    odd ones, against the kernels' split rule (decode.split_bounds: chunks of cdiv(length, splits) rounded up to
    BLOCK_N tiles). Catches a split count with splits that start past a full-length sequence's end (B=1
    L=32768 asked for 132 and got 4 empty splits, each writing a -inf partial that the merge then reads)."""
    pytest.importorskip("triton", reason="mla_decode.py imports triton (hidden or absent in this cell)")
    from rapid_llm.kernels.ops.attention import mla_decode  # host-side helpers only: no kernel runs

    monkeypatch.setattr(mla_decode, "multiprocessor_count", lambda device: 132)
    cuda = torch.device("cuda")
    for batch, head_blocks, capacity, resident in [(1, 1, 32768, 1), (1, 2, 32768, 1), (64, 1, 4096, 1),
                                                   (8, 1, 32768, 1), (64, 2, 4096, 1), (1, 1, 32768, 2),
                                                   (3, 1, 1000, 1), (5, 1, 4160, 2), (1, 1, 64, 1), (2, 1, 0, 1)]:
        splits = mla_decode.mla_num_splits(batch, head_blocks, capacity, resident, cuda)
        assert 1 <= splits <= mla_decode.MAX_SPLITS
        chunk = -(-(-(-capacity // splits)) // block_n) * block_n
        assert capacity == 0 or (splits - 1) * chunk < capacity, (batch, head_blocks, capacity, resident, splits)
