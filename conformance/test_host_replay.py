"""Host replay (rapid_llm/kernels/ops/host_replay.py, csrc/host/replay.cc).

CPU: the recording's pieces (what an entry may do and still be replayed, how pointers and results are
named) and that nothing is replayed without a CUDA device. GPU (with rapid_llm._host built): replayed
calls of every host-path case return exactly what the Python entry returns on fresh inputs (other data
pointers), in place writes included; a new argument structure records its own program; overlapping
views, misaligned pointers, CUDA-graph capture, suspension and rows that cannot be replayed.
"""

from __future__ import annotations

import pytest
import torch

from rapid_llm.kernels.dispatcher import Planner, default_planner, probe_environment

probe_environment()  # before triton loads: RAPID_LLM_TRITON_INTERPRET=1 must reach Triton first
pytest.importorskip("triton", reason="host replay records Triton launches; Triton is absent in this cell")

from perf.host_path import CASES, GPU_CASES, case_args, public_arguments  # noqa: E402

from rapid_llm.kernels.ops import fast_launch, host_replay  # noqa: E402
from rapid_llm.kernels.ops.launch_override import launch_override  # noqa: E402

REPLAY, REPLAY_REASON = host_replay.available()
GPU = torch.cuda.is_available() and not fast_launch._interpreting()
needs_replay = pytest.mark.skipif(
    not (GPU and REPLAY), reason=f"needs a CUDA device and rapid_llm._host: {REPLAY_REASON}"
)

#: Host-path cases whose native row is replayed (all of them: plain arguments and TMA descriptors).
REPLAYED = (*CASES, *GPU_CASES)


# ---------------------------------------------------------------------------
# CPU: the recording's rules


def _record(entry, *args):
    recording = host_replay._Recording()
    recording.launches, recording.hook_calls = [], 0
    with host_replay._Allocations(recording):
        result = entry(*args)
    return recording, result


def test_allocations_and_views_are_recorded_and_other_aten_ops_make_a_call_unreplayable():
    """Catches a recording that misses an allocation (a replay would return unallocated memory) or accepts
    an entry that computes with torch (a replay would skip that work)."""
    x = torch.randn(4, 8)
    recording, out = _record(lambda t: torch.empty(t.shape, dtype=t.dtype).view(2, 16), x)
    assert recording.problem is None and len(recording.allocs) == 1
    assert recording.allocs[0].data_ptr() == out.data_ptr()
    recording, _ = _record(lambda t: t.add_(1), x)
    assert "aten.add_" in recording.problem
    recording, _ = _record(lambda t: t.sum().item(), x)
    assert recording.problem is not None


def test_pointers_are_named_by_argument_or_allocation_and_foreign_memory_is_not():
    """Catches a pointer named from the wrong tensor (a replay would read the wrong memory) or a pointer to
    memory the call neither received nor allocated being taken as a constant."""
    a, b = torch.zeros(16), torch.zeros(8)
    alloc, foreign = torch.zeros(4), torch.zeros(4)
    spans = host_replay._spans((a, 3, b))
    assert host_replay._pointer(a.data_ptr() + 8, (a, 3, b), spans, [alloc]) == (host_replay.ARG_POINTER, 0, 8)
    assert host_replay._pointer(b.data_ptr(), (a, 3, b), spans, [alloc]) == (host_replay.ARG_POINTER, 2, 0)
    assert host_replay._pointer(alloc.data_ptr() + 4, (a,), spans[:1], [alloc]) == (host_replay.ALLOC_POINTER, 0, 4)
    assert host_replay._pointer(foreign.data_ptr(), (a, 3, b), spans, [alloc]) is None


def test_results_are_named_by_identity_allocation_or_view():
    """Catches an in-place op's returned argument replaced by a new tensor, or a view of an allocation
    returned with another geometry."""
    x = torch.zeros(2, 4)
    alloc = torch.empty(8)
    assert host_replay._result((x, None), (x,), [alloc])[0] == (
        host_replay.RESULT_TUPLE,
        [(host_replay.RESULT_ARG, 0), (host_replay.RESULT_NONE,)],
    )
    assert host_replay._result(alloc, (x,), [alloc])[0] == (host_replay.RESULT_ALLOC, 0)
    view = alloc[2:6].view(2, 2)
    assert host_replay._result(view, (x,), [alloc])[0] == (host_replay.RESULT_VIEW, 0, (2, 2), (2, 1), 2)
    spec, reason = host_replay._result(torch.zeros(1), (x,), [alloc])
    assert spec is None and "neither an argument nor an allocation" in reason


def test_a_cpu_plan_is_never_replayed():
    """Catches replay reaching CPU tensors (the recording needs CUDA launches to repeat)."""
    planner = Planner()
    x, weight = torch.randn(2, 64), torch.randn(64)
    planned = planner.plan_for("norm.rms_norm", x, weight, 1e-6)
    if planned.device.kind == "cpu":
        assert planned.impl is planned.kernel
    planner.call("norm.rms_norm", (x, weight, 1e-6))
    assert all(replayer is None for replayer in planner.replayers.values()) or planned.device.kind == "cuda"


# ---------------------------------------------------------------------------
# GPU: replayed calls equal the Python entry


def _fresh(name):
    return case_args(name, torch, "cuda")


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


@needs_replay
@pytest.mark.parametrize("name", sorted([*CASES, *GPU_CASES]))
def test_replayed_calls_equal_the_python_entry_bit_for_bit(name):
    op, function, _ = {**CASES, **GPU_CASES}[name]
    import rapid_llm.kernels as kernels

    public = getattr(kernels, function)
    planner = default_planner()
    planned = planner.plan_for(op, *_fresh(name))
    if not planned.row.name.startswith("native/"):
        pytest.skip(f"{op} selects {planned.row.name} here: {planned.explain().splitlines()[0]}")
    for _ in range(2):  # plan, record
        public(*_fresh(name)), planned.impl(*_fresh(name))
    args = _fresh(name)
    verdicts = {
        "public": planner.replayers[op].lookup(public_arguments(public, args)),
        "impl": planned.impl.lookup(args),
    }
    if name not in REPLAYED:
        assert verdicts["impl"] not in (None, "replay"), f"{name} is expected to run Python: {verdicts}"
        return
    assert verdicts == {"public": "replay", "impl": "replay"}, verdicts
    for call in (public, planned.impl):
        hits = (planner.replayers[op].stats()["hits"], planned.impl.stats()["hits"])
        inputs, expected_inputs = _clone(args), _clone(args)
        got, expected = call(*inputs), planned.kernel(*expected_inputs)
        torch.cuda.synchronize()
        assert (planner.replayers[op].stats()["hits"], planned.impl.stats()["hits"]) != hits, "no replay happened"
        assert _equal(got, expected), f"{name}: the replayed result differs from the Python entry's"
        assert _equal(inputs, expected_inputs), f"{name}: the replayed in-place writes differ"


@needs_replay
def test_a_new_structure_records_its_own_program_and_misaligned_views_stay_right():
    """Catches a program replayed for a structure it was not recorded for (another row count, a row stride,
    a data pointer off 16 bytes: the check and the kernel's specialisation differ)."""
    import rapid_llm.kernels as kernels

    weight = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    backing = torch.randn(8 * 4096 + 8, device="cuda", dtype=torch.bfloat16)
    shapes = [
        torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16),
        torch.randn(7, 4096, device="cuda", dtype=torch.bfloat16),
        torch.randn(7, 8192, device="cuda", dtype=torch.bfloat16)[:, :4096],
        backing[3 : 3 + 2 * 4096].view(2, 4096),  # 6 bytes off alignment
    ]
    for x in shapes * 3:
        got = kernels.rms_norm(x, weight, 1e-6)
        expected = default_planner().plan_for("norm.rms_norm", x, weight, 1e-6).kernel(x, weight, 1e-6)
        assert torch.equal(got, expected)
    replayer = default_planner().replayers["norm.rms_norm"]
    assert replayer.stats()["programs"] + replayer.stats()["skipped"] >= len(shapes)


@needs_replay
def test_overlapping_views_replay_with_their_distance():
    """Catches q and k views of one qkv buffer replayed with the pointers of another layout (the distance
    between overlapping arguments is part of the key)."""
    import rapid_llm.kernels as kernels

    positions = torch.tensor([5, 9], device="cuda")
    cache = torch.randn(64, 128, device="cuda", dtype=torch.float32)
    for _ in range(3):
        qkv = torch.randn(2, (32 + 8 + 8) * 128, device="cuda", dtype=torch.bfloat16)
        reference = qkv.clone()
        q, k = qkv[:, : 32 * 128], qkv[:, 32 * 128 : 40 * 128]
        kernels.rotary(positions, q, k, 128, cache, True)
        rq, rk = reference[:, : 32 * 128], reference[:, 32 * 128 : 40 * 128]
        default_planner().plan_for("embedding.rotary", positions, rq, rk, 128, cache, True).kernel(
            positions, rq, rk, 128, cache, True
        )
        assert torch.equal(qkv, reference)


@needs_replay
def test_a_replayed_call_captures_into_a_cuda_graph():
    """Catches replay launching on another stream than the current one (capture would miss it)."""
    args = _fresh("rms_norm")
    planned = default_planner().plan_for("norm.rms_norm", *args)
    for _ in range(3):
        planned.impl(*args)
    assert planned.impl.lookup(args) == "replay"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        planned.impl(*args)
        with torch.cuda.graph(graph, stream=stream):
            captured = planned.impl(*args)
    args[0].copy_(torch.randn_like(args[0]))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, planned.kernel(*args))


@needs_replay
def test_a_launch_override_suspends_replay():
    """Catches a replayed call ignoring a sweep's launch override (it would repeat the recorded launch)."""
    args = _fresh("rms_norm")
    planned = default_planner().plan_for("norm.rms_norm", *args)
    for _ in range(3):
        planned.impl(*args)
    hits = planned.impl.stats()["hits"]
    with launch_override("native/rms_norm", num_warps=1):
        out = planned.impl(*args)
    assert planned.impl.stats()["hits"] == hits
    assert torch.equal(out, planned.kernel(*args))
    planned.impl(*args)
    assert planned.impl.stats()["hits"] == hits + 1


@needs_replay
def test_an_entry_that_computes_with_torch_is_skipped_with_the_reason():
    """Catches a program recorded from an entry whose torch work a replay would not repeat."""
    replayer = host_replay.replayer(lambda x: x * 2)
    x = torch.randn(4, device="cuda")
    for _ in range(2):
        assert torch.equal(replayer(x), x * 2)
    assert "aten.mul" in replayer.lookup((x,))
