"""What the native attention kernels promise beyond the parity cases. Each native kernel is its own row, so
these tests walk the table's native rows of an op (a row not eligible here is skipped with its explain()
reason; the Gluon and TMA rows run on the H200) and override launch knobs through the one sweep hook
(ops.launch_override), never through the kernels' signatures.

- Split-K: decode and MLA decode cut each sequence into `splits` chunks of its own length and merge
  the partial outputs by their log-sum-exp. On the CPU the heuristic always picks one split, so
  the merge path is forced here (1, 2, 3 and 7 splits, more splits than tiles included) against
  the float64 oracle. Catches a merge that weighs splits wrongly, drops the last chunk, or
  mishandles an empty split (lse = -inf).
- Unchecked bad index values (on CUDA without RAPID_LLM_CHECK_BOUNDS) give an unspecified result,
  never an out-of-bounds read: every row that runs here is called with page ids and lengths past
  the page table and the buffer. Catches a kernel that gathers through an unclamped id.
- The TMA prefill kernel's logic, run by Triton's interpreter on the CPU (its row needs sm90, so the test
  calls its target directly at small tiles), equals the oracle on every ragged prefill case. Catches a
  box that reads a row of the neighbouring sequence into a result.
- Every native ragged prefill row with a NaN next sequence: the first sequence's output stays finite.
- The Gluon prefill kernel in each of its knob sets (consumers, tiles, slots, turns, a grid smaller than the
  work) against the oracle, and a knob set it cannot run refused with an error naming the row (GPU only).
- fp8-KV decode with a bf16 q takes its products in fp16 after scaling q by a power of two chosen on
  the device: queries of magnitude 1e-6 .. 1e5 (fp16 overflows at 65504) stay within the bf16
  tolerance of the float64 oracle. Catches a missing or wrong scale (inf / NaN or a scaled result).
- Every native MLA decode row, with every latent row no valid position reads set to NaN, at several split
  counts and with growing logits, equals the oracle on the clean cache; the pointer kernel with and without
  UNMASKED_BODY likewise. Catches a whole tile that reaches past its split's end, a box read from the wrong
  page, a ring slot refilled before its products finished, a handshake read before it is written.
- CUDA-graph capture (GPU only): every attention row that says graph_safe=True is captured and
  replayed on new inputs equal to an eager call. Catches a row claiming graph safety while it
  syncs or plans on the host.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, ORACLES, TOLERANCES, TORCH_DTYPES
from conformance.rows_here import TABLE, loadable_rows, planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel, resolve_target
from rapid_llm.kernels.ops.attention import DECODE, MLA_DECODE, PREFILL, PREFILL_PAGED
from rapid_llm.kernels.ops.checks import value_checks
from rapid_llm.kernels.ops.launch_override import launch_override

DEVICE = torch_device()


def _native_rows(op, *, prefix=""):
    return [row.name for row in TABLE.rows(op) if row.backend == "native" and row.name.startswith(prefix)]


_SPLIT_ROWS = [
    ("native/decode", DECODE, "ragged_page16"),
    ("native/decode", DECODE, "page_size_1"),
    ("native/decode_fp8", DECODE, "fp8_kv_ragged_page16"),
    # a window, a cap and sinks over several splits (the sink joins split 0 only; splits cover the window)
    ("native/decode", DECODE, "window_3_below_a_page"),
    ("native/decode", DECODE, "window_20_soft_cap_30_head_dim_256"),
    ("native/decode", DECODE, "sinks_that_dominate"),
    ("native/decode_fp8", DECODE, "fp8_kv_sinks_window_20"),
    ("native/decode", DECODE, "with_lse"),
    ("native/decode", DECODE, "q_tokens_4_sinks"),
    ("native/decode", DECODE, "q_tokens_3_window_5_soft_cap"),
    ("native/decode_fp8", DECODE, "fp8_kv_q_tokens_4"),
    ("native/decode_fp8", DECODE, "fp8_kv_with_lse_sinks_window"),
    ("native/mla_decode", MLA_DECODE, "window_70_soft_cap_15"),
    *((row, MLA_DECODE, "ragged_page64") for row in _native_rows(MLA_DECODE)),
    ("native/mla_decode", MLA_DECODE, "page_size_16"),
]


def _case(op, case_id, dtype="fp32", seed=3):
    case = next(c for c in CASES[op] if c.id == case_id)
    return case.make(TORCH_DTYPES[dtype], DEVICE, torch.Generator().manual_seed(seed))


def _plan(op, row, dtype, dims, layout):
    """The PlannedOp forcing `row` for a call with these dims and layout, or pytest.skip with the reason."""
    try:
        return planner_forcing(op, row).plan(op, dtype=dtype, shape=dims, layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


def _dtype_for(row):
    """fp32 where the row serves it (the tightest oracle tolerance), else fp16."""
    return "fp32" if "fp32" in TABLE.rows_by_name[row].dtypes else "fp16"


@pytest.mark.parametrize("row,op,case_id", _SPLIT_ROWS, ids=[f"{r}-{c}" for r, _, c in _SPLIT_ROWS])
@pytest.mark.parametrize("splits", [1, 2, 3, 7])
def test_split_k_merge_matches_the_oracle(row, op, case_id, splits):
    dtype = _dtype_for(row)
    args, dims, layout = _case(op, case_id, dtype=dtype)
    planned = _plan(op, row, dtype, dims, layout)
    with launch_override(row, splits=splits):
        got = planned(*args)
    want = ORACLES[op](*args)
    pairs = (
        zip(got, want, TOLERANCES[(op, dtype)]) if isinstance(got, tuple) else [(got, want, TOLERANCES[(op, dtype)][0])]
    )
    for mine, theirs, (atol, rtol) in pairs:  # out, then lse (return_lse: the merge's log-sum-exp)
        torch.testing.assert_close(mine.double(), theirs.double(), atol=atol, rtol=rtol)


def _bad_index_calls():
    for op, case_id in (
        (DECODE, "ragged_page16"),
        (MLA_DECODE, "ragged_page64"),
        (PREFILL_PAGED, "chunk_after_history"),
    ):
        for name, _ in loadable_rows(op, "fp32"):
            yield pytest.param(op, case_id, name, id=f"{name}-{case_id}")


@pytest.mark.parametrize("op,case_id,row", list(_bad_index_calls()))
def test_unchecked_bad_page_ids_and_lengths_give_a_result_not_a_crash(op, case_id, row):
    args, dims, layout = _case(op, case_id)
    args = list(args)
    table_index, lens_index = 2, (4 if op == PREFILL_PAGED else 3)
    page_size = args[5 if op == PREFILL_PAGED else 4]
    reach = args[table_index].shape[1] * page_size
    args[table_index] = torch.full_like(args[table_index], 1 << 20)  # page ids far past the buffer
    args[lens_index] = torch.full_like(args[lens_index], reach + 7)  # lengths past the page table's reach
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


_TMA_CASES = [(op, case.id) for op in (PREFILL, "attention.mla_prefill") for case in CASES[op] if not case.gpu_only]


@pytest.mark.parametrize("op,case_id", _TMA_CASES, ids=[f"{op}-{c}" for op, c in _TMA_CASES])
def test_tma_prefill_kernel_logic_matches_the_oracle_in_the_interpreter(op, case_id):
    """The TMA kernel's target called directly under Triton's interpreter (its row needs sm90): q/k/v of fp16
    that TMA could read, small tiles so that queries and keys span several boxes and sequences."""
    if DEVICE != "cpu":
        pytest.skip("on CUDA the parity matrix runs the TMA rows through dispatch")
    row = "native/prefill_tma" if op == PREFILL else "native/mla_prefill_tma"
    args, dims, layout = _case(op, case_id, dtype="fp16")
    _plan(op, "native/prefill" if op == PREFILL else "native/mla_prefill", "fp16", dims, layout)  # interpreter on?
    missing = set(TABLE.rows_by_name[row].layout) - layout
    if missing or args[0].shape[0] == 0:
        pytest.skip(
            f"the case lacks the row's layout tags {sorted(missing)} (TMA arrays, no window or cap) or is empty"
        )
    kernel, reason = resolve_target(TABLE.rows_by_name[row].target, None)
    assert kernel is not None, reason
    with launch_override(row, BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1):
        got = kernel(*args)
    want = ORACLES[op](*args)
    atol, rtol = TOLERANCES[(op, "fp16")][0]
    for mine, theirs in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(mine.double(), theirs.double(), atol=atol, rtol=rtol)


def _two_sequences_second_nan():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn((137, heads, 128), generator=g).half().to(DEVICE) for heads in (8, 2, 2))
    k[100:], v[100:] = float("nan"), float("nan")
    cu = torch.tensor([0, 100, 137], dtype=torch.int32, device=DEVICE)
    return q, k, v, cu


@pytest.mark.parametrize("row", _native_rows(PREFILL))
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_rows_read_no_row_of_the_next_sequence(row, causal):
    """Two packed sequences (100 and 37 tokens): the second one's keys and values are NaN. Catches the first
    sequence's partial last tile copied whole (a TMA box reads the second sequence's rows into its products:
    0 * NaN in P . V)."""
    q, k, v, cu = _two_sequences_second_nan()
    checked = resolve_target(TABLE.contracts[PREFILL].check, None)[0](q, k, v, cu, 100, 128**-0.5, causal)
    planned = _plan(PREFILL, row, "fp16", dict(checked[2]), checked[1])
    got = planned(q, k, v, cu, 100, 128**-0.5, causal)
    assert torch.isfinite(got[:100]).all(), "the second sequence's NaN rows reached the first sequence's output"
    want = ORACLES[PREFILL](q[:100], k[:100], v[:100], cu[:2], 100, 128**-0.5, causal)
    atol, rtol = TOLERANCES[(PREFILL, "fp16")][0]
    torch.testing.assert_close(got[:100].double(), want.double(), atol=atol, rtol=rtol)


#: native/prefill_gluon's knob sets: the default (two consumers, 128-key tiles, 2 slots, 2 Q slots), three
#: consumers (64-key tiles, 4 slots), two consumers with 64-key tiles in 4 slots, PINGPONG's turns, 128-key tiles
#: in 3 slots with one Q slot, and 3 programs for all of a call's items with two and three consumers (each program
#: walks many items: the Q slots, which also carry the output rows out, and the ring carry over between items).
_GLUON_PREFILL_KNOBS = {
    "default": {},
    "3_consumers": {"CONSUMERS": 3, "BLOCK_N": 64, "STAGES": 4},
    "64_key_tiles_s4": {"BLOCK_N": 64, "STAGES": 4},
    "pingpong": {"PINGPONG": True},
    "128_key_tiles_s3_q1": {"BLOCK_N": 128, "STAGES": 3, "Q_SLOTS": 1},
    "3_programs": {"PROGRAMS": 3},
    "3_consumers_3_programs": {"CONSUMERS": 3, "BLOCK_N": 64, "STAGES": 4, "PROGRAMS": 3},
}


@pytest.mark.parametrize("case_id", [case.id for case in CASES[PREFILL]])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("knobs", list(_GLUON_PREFILL_KNOBS.values()), ids=list(_GLUON_PREFILL_KNOBS))
def test_gluon_prefill_knob_sets_match_the_oracle(case_id, dtype, knobs):
    """native/prefill_gluon (sm90: a producer warpgroup, two or three consumer warpgroups of 64 query rows,
    persistent) on every ragged prefill case it serves, in each knob set. Catches a warpgroup whose rows all lie
    before the sequence's start not releasing its tiles (a hang) or writing rows, a ring slot refilled before
    every consumer released it, a wrong barrier phase, a causal mask off by a tile, rows of the partial last tile
    lost, a Q slot or ring phase that does not carry over between items, a partial first block's rows copied over
    the previous sequence's, or a Q slot refilled before the output copy read it."""
    args, dims, layout = _case(PREFILL, case_id, dtype=dtype)
    planned = _plan(PREFILL, "native/prefill_gluon", dtype, dims, layout)
    with launch_override("native/prefill_gluon", **knobs):
        got = planned(*args)
    want = ORACLES[PREFILL](*args)
    atol, rtol = TOLERANCES[(PREFILL, dtype)][0]
    for mine, theirs in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.isfinite(mine).all(), "an unwritten or NaN output element"
        torch.testing.assert_close(mine.double(), theirs.double(), atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    "knobs",
    [{"CONSUMERS": 3, "BLOCK_N": 128}, {"CONSUMERS": 3, "PINGPONG": True, "BLOCK_N": 64}, {"CONSUMERS": 4}],
    ids=["3_consumers_128_key_tiles", "3_consumers_pingpong", "4_consumers"],
)
def test_gluon_prefill_refuses_knobs_it_cannot_run(knobs):
    """Catches a knob set outside the kernel's register and turn budgets (three consumers with 128-key tiles;
    turns between three consumers; four) compiling anyway, spilling or hanging, instead of a ValueError that
    names the row."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn((64, heads, 128), generator=g).half().to(DEVICE) for heads in (8, 2, 2))
    cu = torch.tensor([0, 64], dtype=torch.int32, device=DEVICE)
    checked = resolve_target(TABLE.contracts[PREFILL].check, None)[0](q, k, v, cu, 64, 128**-0.5, True)
    planned = _plan(PREFILL, "native/prefill_gluon", "fp16", dict(checked[2]), checked[1])
    with launch_override("native/prefill_gluon", **knobs), pytest.raises(ValueError, match="native/prefill_gluon"):
        planned(q, k, v, cu, 64, 128**-0.5, True)


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e3, 1e5])
def test_fp8_decode_scales_a_bf16_query_into_fp16(magnitude):
    args, dims, layout = _case(DECODE, "fp8_kv_ragged_page16")
    planned = _plan(DECODE, "native/decode_fp8", "bf16", dims, layout)
    q = (args[0].double() * magnitude).bfloat16()
    args = (q, *args[1:])
    with launch_override("native/decode_fp8", splits=2):
        got = planned(*args)
    want = ORACLES[DECODE](*args)
    assert torch.isfinite(got).all(), "an fp16 overflow of the scaled query reached the output"
    atol, rtol = TOLERANCES[(DECODE, "bf16")][0]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


def _poisoned_mla_case(case_id, magnitude, row):
    """(planned row, args with q scaled by `magnitude`, the poisoned cache) of an fp16 MLA decode case. 64: logits
    whose running maximum keeps growing from tile to tile, so the sums are rescaled; every latent row that no
    valid position reads is NaN (a read past a split's end or from a wrong page shows as NaN)."""
    args, dims, layout = _case(MLA_DECODE, case_id, dtype="fp16")
    planned = _plan(MLA_DECODE, row, "fp16", dims, layout)
    q, cache, table, seq_lens, page_size = args[:5]
    used = torch.zeros(cache.shape[0], dtype=torch.bool, device=cache.device)
    for b in range(q.shape[0]):
        positions = torch.arange(int(seq_lens[b]), device=cache.device)
        used[table[b, positions // page_size].long() * page_size + positions % page_size] = True
    poisoned = cache.clone()
    poisoned[~used] = float("nan")
    return planned, (q * magnitude, *args[1:]), poisoned


def _assert_matches_the_clean_oracle(got, args):
    assert torch.isfinite(got).all(), "a latent row no valid position reads reached the result"
    want = ORACLES[MLA_DECODE](*args)
    atol, rtol = TOLERANCES[(MLA_DECODE, "fp16")][0]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)


_MLA_POISON_CASES = [
    "ragged_page64",
    "page_size_16",
    "heads_128",
    "large_logits",
    "strided_q_and_index",
    "padded_cache_rows",
    "long_context_32k",
]


@pytest.mark.parametrize("row", _native_rows(MLA_DECODE))
@pytest.mark.parametrize("case_id", _MLA_POISON_CASES)
@pytest.mark.parametrize("splits", [1, 2, 3, 7])
@pytest.mark.parametrize("magnitude", [1.0, 64.0])
def test_mla_decode_rows_read_only_the_rows_they_own(row, case_id, splits, magnitude):
    if not any(case.id == case_id for case in CASES[MLA_DECODE]):
        pytest.skip(f"no MLA decode case {case_id!r} in conformance/cases")
    planned, args, poisoned = _poisoned_mla_case(case_id, magnitude, row)
    if DEVICE == "cpu" and case_id in ("long_context_32k", "heads_128"):
        pytest.skip("too slow for Triton's interpreter (its cost is per operation); runs on the GPU")
    with launch_override(row, splits=splits):
        got = planned(args[0], poisoned, *args[2:])
    _assert_matches_the_clean_oracle(got, args)


@pytest.mark.parametrize("case_id", ["ragged_page64", "page_size_16"])
@pytest.mark.parametrize("unmasked_body", [False, True])
@pytest.mark.parametrize("splits", [1, 3])
def test_mla_pointer_kernel_whole_tiles_without_masks_stay_in_the_split(case_id, unmasked_body, splits):
    """native/mla_decode's UNMASKED_BODY (whole tiles of a split load without masks; its default) and the masked
    body, each on a poisoned cache. Catches a whole tile that reaches past its split's end."""
    planned, args, poisoned = _poisoned_mla_case(case_id, 64.0, "native/mla_decode")
    with launch_override("native/mla_decode", splits=splits, UNMASKED_BODY=unmasked_body):
        got = planned(args[0], poisoned, *args[2:])
    _assert_matches_the_clean_oracle(got, args)


def test_one_wave_split_count_fills_one_wave_without_starting_a_second(monkeypatch):
    """splits.one_wave_splits (the CUDA extension's fp8 decode) on a 132-SM GPU at 2 blocks per SM (264 slots):
    the grid fits one wave and one more split would start a second, unless the batch alone fills the slots
    (one split) or the page table's reach or MAX_SPLITS caps it. Catches the Triton row's rule applied to this
    kernel (B=8 GQA 32/8: 9 splits, 576 blocks, a third wave that is 18% full) and a cap that is ignored."""
    from rapid_llm.kernels.ops.attention import splits as module  # no Triton import: every cell runs it

    monkeypatch.setattr(module, "multiprocessor_count", lambda device: 132)
    cuda = torch.device("cuda")
    assert module.one_wave_splits(8, 8, 8192, torch.device("cpu"), 2) == 1
    for batch, programs, capacity in [
        (8, 8, 8192),
        (1, 8, 32768),
        (64, 8, 4096),
        (16, 8, 4096),
        (33, 8, 4096),
        (1, 8, 1024),
        (1, 1, 1 << 20),
        (3, 16, 1000),
        (0, 8, 4096),
    ]:
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
    """splits.splits_filled_at_reach at the extension kernel's granule (decode.cuda.CHUNK): each split gets
    ceil(L / S) positions rounded up to 32, so the count it keeps must leave no split empty for a sequence as
    long as the page table's reach, and never exceed the count asked for. Catches the 33rd, empty split of a
    32k context (32 splits of 1024)."""
    from rapid_llm.kernels.ops.attention.decode.cuda import CHUNK
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
    """splits.mla_num_splits on a 132-SM GPU, for the batch / head-block / reach / residency shapes of the benchmarks and
    odd ones, against the kernels' split rule (tiles.split_bounds: chunks of cdiv(length, splits) rounded up to
    BLOCK_N tiles). Catches a split count with splits that start past a full-length sequence's end (B=1
    L=32768 asked for 132 and got 4 empty splits, each writing a -inf partial that the merge then reads)."""
    from rapid_llm.kernels.ops.attention import splits as module  # no Triton import: every cell runs it

    monkeypatch.setattr(module, "multiprocessor_count", lambda device: 132)
    cuda = torch.device("cuda")
    for batch, head_blocks, capacity, resident in [
        (1, 1, 32768, 1),
        (1, 2, 32768, 1),
        (64, 1, 4096, 1),
        (8, 1, 32768, 1),
        (64, 2, 4096, 1),
        (1, 1, 32768, 2),
        (3, 1, 1000, 1),
        (5, 1, 4160, 2),
        (1, 1, 64, 1),
        (2, 1, 0, 1),
    ]:
        splits = module.mla_num_splits(batch, head_blocks, capacity, resident, cuda)
        assert 1 <= splits <= module.MAX_SPLITS
        chunk = -(-(-(-capacity // splits)) // block_n) * block_n
        assert capacity == 0 or (splits - 1) * chunk < capacity, (batch, head_blocks, capacity, resident, splits)
