"""GPU benchmarks of the comm family across GPUs (NCCL): comm.all_reduce and comm.all_reduce_add_rms_norm,
every row of the table, beside torch.distributed.all_reduce (NCCL, in place) as the peer; comm.ep_dispatch
then comm.ep_combine (one expert-parallel round trip) for every dispatch row; and the NVLink copy bandwidth
between two GPUs, the ceiling of every exchange.

    test_all_reduce[torch/all_reduce-comm.all_reduce-tokens=1-hidden=7168-bf16]
    test_all_reduce[peer/nccl.all_reduce-comm.all_reduce-tokens=8192-hidden=4096-bf16]       (a 64 MiB message)
    test_all_reduce_add_rms_norm[torch/all_reduce_add_rms_norm-comm.all_reduce_add_rms_norm-tokens=64-hidden=4096-bf16]
    test_ep_round_trip[torch/ep_dispatch-comm.ep_dispatch-tokens=4096-hidden=7168-bf16]     (top-8 of 256 experts)
    test_nvlink_copy_bandwidth                                                               (256 MiB, GPU 0 -> 1)

Each test spawns one process per GPU (WORLD of them: 2, or RAPID_LLM_COMM_BENCH_WORLD), joined in an NCCL
process group over tcp://127.0.0.1 (the workers inherit the NCCL environment). Every rank draws its own seeded
input and checks the arm's result against the float64 sum of every rank's input (the sum in bf16 may differ
by world - 1 roundings of bf16; the fused op's residual add and norm as conformance's tolerances), then
times the same calls on every rank, the ranks lined up (a tiny all_reduce and a synchronize) before each
timer: CUDA events around each call with L2 flushed before it (perf/gpu_timing.event_timer), and for
decode-sized messages CUDA-graph replay (graph_timer; a capture that fails is recorded as graph_error).
Rank 0 writes its numbers, with every rank's medians, to a JSON file that the test puts into
benchmark.extra_info.

Rows are timed through their unchecked kernel (PlannedOp.impl, as the other suites). all_reduce's rows are
timed in place (inplace=True), like the peer: like for like. The fused op's peer is the collective alone
(the floor a fused all-reduce + add + norm is compared with). Repeated calls keep summing into the same
buffers; the values grow (to inf in bf16 after a few hundred in-place sums), which NCCL's time does not
depend on.

EP round trip: each rank routes its tokens to a random top-8 of 256 experts (distinct per token, DeepEP's test
setup), dispatches, and combines the received rows as they came (y = the received x): every token comes back
as x times the number of ranks it went to, which the correctness call checks bitwise (x * n in fp32, rounded
once, is exact for n <= 2 in bf16; within one rounding otherwise). Timed: dispatch + combine, the combine
row that reads the dispatch row's handle (its own library's: EP_COMBINE_OF, else the reference), with
dispatch and combine also timed alone; received_rows = the rows the rank received. Not graph-timed (the rows are graph-unsafe: R is a
host read).

extra_info: bytes = the message (x's bytes); GBps = bytes / event time (nccl-tests' algbw), busbw_GBps =
GBps * 2 (world - 1) / world; per_rank_event_median_us / per_rank_graph_us give every rank's medians
(a rank that waited on another shows the skew). pytest-benchmark's own statistics time a no-op: the pytest
process is no rank of the world; the device times in extra_info are the numbers (wall_note says so).

On a machine with fewer than two CUDA devices the module is skipped with "needs two CUDA devices (comm
collectives)".
"""

from __future__ import annotations

import math
import os
import traceback
from datetime import timedelta
from pathlib import Path

import pytest

from conformance.spawned_world import free_port, run_world, write_report
from perf import gpu_timing
from perf.gpu_cases import HIDDEN_PRESETS, BenchShape, load_row, table_arms, torch_dtype

NEEDS_TWO = "needs two CUDA devices (comm collectives)"


def _cuda_device_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = pytest.mark.skipif(_cuda_device_count() < 2, reason=NEEDS_TWO)

ALL_REDUCE = "comm.all_reduce"
FUSED = "comm.all_reduce_add_rms_norm"
EP_DISPATCH = "comm.ep_dispatch"
#: DeepSeek-V3's routing: top-8 of 256 experts.
EP_TOP_K, EP_EXPERTS = 8, 256
#: The combine row timed with each dispatch row (the reference's for the others).
EP_COMBINE_OF = {"deep_ep/ep_dispatch": "deep_ep/ep_combine", "native/ep_dispatch": "native/ep_combine"}
PEER = "peer/nccl.all_reduce"
EPS = 1e-6
WORLD = int(os.environ.get("RAPID_LLM_COMM_BENCH_WORLD", "2"))
#: Where the ranks run (a CPU dry run of this file's logic may point these at "cpu" and "gloo").
_DEVICE = "cuda"
_BACKEND = "nccl"
#: Bounds: the process group's timeout (each collective) and the whole world's run (spawn to the last join).
PG_TIMEOUT_S = 300
JOIN_TIMEOUT_S = 600
_MODELS = dict(HIDDEN_PRESETS)
CASES = [
    BenchShape(1, 7168, "bf16", model=_MODELS.get(7168, "")),
    BenchShape(64, 4096, "bf16", model=_MODELS.get(4096, "")),
    BenchShape(8192, 4096, "bf16", model="a 64 MiB message"),
]
#: (rtol, atol) against the float64 oracle: the transport sums in bf16 (world - 1 roundings), the fused op's
#: add and norm as conformance/cases/norm.py's bf16 tolerance.
SUM_TOLERANCE = {"bf16": 2.0**-7, "fp16": 2.0**-10, "fp32": 1e-5}
NORM_TOLERANCE = {"bf16": (1e-2, 8e-3), "fp16": (1e-3, 2e-3), "fp32": (1e-5, 1e-5)}


EP_CASES = [
    BenchShape(4096, 7168, "bf16", model="DeepSeek-V3 prefill chunk"),
    BenchShape(128, 7168, "bf16", model="DeepSeek-V3 decode"),
]


def _params(op):
    arms = table_arms(op) + ([PEER] if op != EP_DISPATCH else [])
    cases = EP_CASES if op == EP_DISPATCH else CASES
    return [pytest.param(arm, case, id=f"{arm}-{op}-{case.id}") for arm in arms for case in cases]


# ---------------------------------------------------------------------------
# The world (parent side)
# ---------------------------------------------------------------------------


def _run_world(tmp_path: Path, op: str, arm: str, case: BenchShape) -> dict:
    """Spawn WORLD ranks (one per GPU), run _measure on each; rank 0's report. Fails naming a rank that hung
    (killed at the deadline), exited without reporting, or raised; skips when the ranks skipped."""
    if _cuda_device_count() < WORLD:
        pytest.skip(f"needs {WORLD} CUDA devices (RAPID_LLM_COMM_BENCH_WORLD={WORLD})")
    port = free_port()
    case_fields = {"tokens": case.tokens, "hidden": case.hidden, "dtype": case.dtype}

    def args_of_rank(rank):
        return (WORLD, port, op, arm, case_fields, str(tmp_path))

    reports = run_world(_worker, args_of_rank, WORLD, tmp_path, JOIN_TIMEOUT_S, f"{arm} on {case.id}")
    skips = [r["skip"] for r in reports if r.get("skip")]
    if skips:
        pytest.skip(skips[0])
    return reports[0]


def _record(benchmark, report: dict) -> None:
    benchmark.extra_info.update(report["info"])
    failures = report.get("check_failures")
    # pytest-benchmark needs a call; the pytest process is no rank, so it times a no-op (wall_note).
    benchmark.pedantic(lambda: None, rounds=1, iterations=1, warmup_rounds=0)
    assert not failures, "the arm's result is wrong (checked before timing):\n" + "\n".join(failures)


# ---------------------------------------------------------------------------
# One rank (worker side)
# ---------------------------------------------------------------------------


def _worker(rank, world, port, op, arm, case_fields, out_dir):
    import torch
    import torch.distributed as dist

    report = {"rank": rank}
    try:
        if _DEVICE == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            _BACKEND,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=PG_TIMEOUT_S),
        )
        try:
            report.update(_measure(rank, world, op, arm, BenchShape(**case_fields)))
        finally:
            dist.destroy_process_group()
    except BaseException as error:  # reported to the parent: a skip by its reason, anything else in full
        if type(error).__name__ == "Skipped":
            report["skip"] = str(error)
        else:
            report["crash"] = traceback.format_exc()
    write_report(out_dir, rank, report)


def _line_up():
    """Every rank here, its GPU idle: a tiny all_reduce, then a synchronize."""
    import torch
    import torch.distributed as dist

    token = torch.zeros(1, device=_DEVICE)
    dist.all_reduce(token)
    torch.cuda.synchronize()


def _inputs(case: BenchShape, rank: int, world: int):
    """x (this rank's, from its own seed), the float64 sum of every rank's x, a residual and a weight (the
    same on every rank)."""
    import torch

    dtype = torch_dtype(case.dtype)

    def draw(seed, size=case.shape, scale=1.0, shift=0.0):
        generator = torch.Generator(device=_DEVICE).manual_seed(seed)
        return (shift + scale * torch.randn(size, device=_DEVICE, dtype=torch.float32, generator=generator)).to(dtype)

    x = draw(1000 + rank)
    total = sum(draw(1000 + other).double() for other in range(world))
    residual = draw(7)
    weight = draw(8, size=(case.hidden,), scale=0.25, shift=1.0)
    return x, total, residual, weight


def _close(what, actual, expected, rtol, atol) -> list[str]:
    actual, expected = actual.double(), expected.double()
    excess = (actual - expected).abs() - (atol + rtol * expected.abs())
    if bool((excess <= 0).all()):
        return []
    return [f"{what}: max |diff| {float((actual - expected).abs().max()):.3g} (rtol {rtol}, atol {atol})"]


def _nccl_version() -> str | None:
    try:
        import torch.cuda.nccl

        version = torch.cuda.nccl.version()
    except (AttributeError, ImportError, RuntimeError):
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _ep_inputs(case: BenchShape, rank: int):
    """This rank's x [T, H], topk_ids (a random distinct top-8 of 256 per token) and topk_weights."""
    import torch

    generator = torch.Generator(device=_DEVICE).manual_seed(2000 + rank)
    x = torch.randn(case.shape, device=_DEVICE, generator=generator).to(torch_dtype(case.dtype))
    scores = torch.rand((case.tokens, EP_EXPERTS), device=_DEVICE, generator=generator)
    ids = scores.topk(EP_TOP_K, dim=1).indices
    weights = torch.rand((case.tokens, EP_TOP_K), device=_DEVICE, generator=generator)
    return x, ids, weights


def _measure_ep(rank, world, arm, case: BenchShape) -> dict:
    """One EP round trip's correctness, then dispatch + combine timed (and each alone)."""
    import torch

    from rapid_llm.kernels.ops.comm import EP_COMBINE
    from rapid_llm.kernels.ops.comm.checks import check_ep_combine, check_ep_dispatch

    x, ids, weights = _ep_inputs(case, rank)
    _, tags, dims = check_ep_dispatch(x, ids, weights, EP_EXPERTS)
    dispatch, _ = load_row(EP_DISPATCH, arm, dtype=case.dtype, shape=dict(dims), layout=tags)
    result = dispatch(x, ids, weights, EP_EXPERTS, None, None)
    _, combine_tags, combine_dims = check_ep_combine(result.x, result.handle)
    # the dispatch row's own combine (a library's handle), the reference's otherwise
    combine_row = EP_COMBINE_OF.get(arm, "torch/ep_combine")
    combine, _ = load_row(EP_COMBINE, combine_row, dtype=case.dtype, shape=dict(combine_dims), layout=combine_tags)
    out = combine(result.x, result.handle, None)
    ranks_per_token = result.handle.token_in_rank.sum(dim=1, keepdim=True).float()
    failures = _close("combine(dispatch(x)) = x * ranks", out, (x.float() * ranks_per_token).to(x.dtype), 0, 0)
    received = result.x.shape[0]
    dispatch_impl, combine_impl = dispatch.impl, combine.impl
    held = {}

    def round_trip():
        sent = dispatch_impl(x, ids, weights, EP_EXPERTS, None, None)
        combine_impl(sent.x, sent.handle, None)

    def dispatch_only():
        held["sent"] = dispatch_impl(x, ids, weights, EP_EXPERTS, None, None)

    def combine_only():
        combine_impl(result.x, result.handle, None)

    flush = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device=_DEVICE)
    timings = {}
    for name, fn in (("round_trip", round_trip), ("dispatch", dispatch_only), ("combine", combine_only)):
        _line_up()
        timings[name] = gpu_timing.event_timer(fn, flush=flush)
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    bytes_moved = x.numel() * x.element_size()
    info = {
        "op": EP_DISPATCH,
        "row": arm,
        "combine_row": combine.row.name,
        "case": case.id,
        **case.describe(),
        "top_k": EP_TOP_K,
        "num_experts": EP_EXPERTS,
        "world_size": world,
        "received_rows": received,
        "device": torch.cuda.get_device_name(index),
        "sm": major * 10 + minor,
        "torch": torch.__version__,
        "nccl": _nccl_version(),
        "correctness": "ok" if not failures else "; ".join(failures),
        "bytes": bytes_moved,
        "bytes_formula": "this rank's tokens x hidden x element size (each crosses at most world - 1 links)",
        "event_median_us": timings["round_trip"].median_us,
        "event_min_us": timings["round_trip"].min_us,
        "event_p20_us": timings["round_trip"].p20_us,
        "event_p80_us": timings["round_trip"].p80_us,
        "event_iterations": timings["round_trip"].samples,
        "dispatch_median_us": timings["dispatch"].median_us,
        "combine_median_us": timings["combine"].median_us,
        "tokens_per_s": case.tokens / (timings["round_trip"].median_us * 1e-6),
        "l2_flush_bytes": gpu_timing.FLUSH_BYTES,
        "wall_note": "pytest-benchmark's own timing is a no-op: the pytest process is no rank; the device "
        "times are event_median_us (dispatch + combine), measured on rank 0",
    }
    return {"info": info, "check_failures": failures}


def _measure(rank, world, op, arm, case: BenchShape) -> dict:
    import torch
    import torch.distributed as dist

    from rapid_llm.kernels.ops.comm.checks import check_all_reduce, check_all_reduce_add_rms_norm

    if op == EP_DISPATCH:
        return _measure_ep(rank, world, arm, case)
    x, total, residual, weight = _inputs(case, rank, world)
    dims = {"num_tokens": case.rows, "hidden": case.hidden, "world_size": world}
    sum_tol = SUM_TOLERANCE[case.dtype] * (world if case.dtype != "fp32" else 1)
    failures = []
    graph_safe = True

    # The correctness call (on copies), then the timed callable.
    if arm == PEER:
        got = x.clone()
        dist.all_reduce(got)
        failures += _close("sum", got, total, sum_tol, sum_tol)

        def fn():
            dist.all_reduce(x)

    elif op == ALL_REDUCE:
        layout = check_all_reduce(x, None, True)[1]
        checked, row = load_row(op, arm, dtype=case.dtype, shape=dims, layout=layout)
        got = checked(x.clone(), None, False)
        failures += _close("out of place: sum", got, total, sum_tol, sum_tol)
        copy = x.clone()
        returned = checked(copy, None, True)
        failures += _close("in place: sum", copy, total, sum_tol, sum_tol)
        if returned is not copy:
            failures.append("in place: the call did not return x itself")
        impl, graph_safe = checked.impl, row.graph_safe

        def fn():
            impl(x, None, True)

    else:
        layout = check_all_reduce_add_rms_norm(x, residual, weight, EPS)[1]
        checked, row = load_row(op, arm, dtype=case.dtype, shape=dims, layout=layout)
        got_x, got_residual = checked(x.clone(), residual.clone(), weight, EPS, None)
        expected_residual = (residual.double() + total).to(x.dtype)
        unit = SUM_TOLERANCE[case.dtype] if case.dtype != "fp32" else 0.0
        failures += _close("residual", got_residual, expected_residual, sum_tol + unit, sum_tol + unit)
        stored = got_residual.double()
        expected_x = stored * torch.rsqrt(stored.square().mean(-1, keepdim=True) + EPS) * weight.double()
        failures += _close("x = rms_norm(stored residual)", got_x, expected_x, *NORM_TOLERANCE[case.dtype])
        impl, graph_safe = checked.impl, row.graph_safe

        def fn():
            impl(x, residual, weight, EPS, None)

    del total
    torch.cuda.empty_cache()

    flush = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device=_DEVICE)
    _line_up()
    event = gpu_timing.event_timer(fn, flush=flush)
    del flush
    graph, graph_error = None, None
    bytes_moved = x.numel() * x.element_size()
    if graph_safe and bytes_moved <= gpu_timing.SMALL_CASE_BYTES:
        _line_up()
        try:
            graph = gpu_timing.graph_timer(fn)
        except Exception as error:  # recorded; the event timing stands
            graph_error = f"{type(error).__name__}: {str(error)[:500]}"
            torch.cuda.synchronize()

    # Every rank's medians (rank 0's are the case's numbers; a spread shows skew between ranks).
    mine = torch.tensor([event.median_us, graph.median_us if graph else math.nan], device=_DEVICE, dtype=torch.float64)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    _line_up()
    dist.all_gather(gathered, mine)
    per_rank = torch.stack(gathered).cpu().tolist()

    gbps = bytes_moved / (event.median_us * 1e-6) / 1e9
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    nccl = _nccl_version()
    info = {
        "op": op,
        "row": arm,
        "case": case.id,
        **case.describe(),
        "world_size": world,
        "form": "in place" if op == ALL_REDUCE else "in place (x, residual)",
        "eps": EPS if op == FUSED else None,
        "device": torch.cuda.get_device_name(index),
        "sm": major * 10 + minor,
        "torch": torch.__version__,
        "nccl": nccl,
        "correctness": "ok" if not failures else "; ".join(failures),
        "bytes": bytes_moved,
        "bytes_formula": "the message: x's bytes (nccl-tests' algbw convention)",
        "event_median_us": event.median_us,
        "event_min_us": event.min_us,
        "event_p20_us": event.p20_us,
        "event_p80_us": event.p80_us,
        "event_iterations": event.samples,
        "l2_flush_bytes": gpu_timing.FLUSH_BYTES,
        "GBps": gbps,
        "busbw_GBps": gbps * 2 * (world - 1) / world,
        "graph_us": graph.median_us if graph else None,
        "graph_GBps": bytes_moved / (graph.median_us * 1e-6) / 1e9 if graph else None,
        "graph_note": f"{gpu_timing.GRAPH_CALLS} calls per graph, L2 warm" if graph else None,
        "per_rank_event_median_us": [row[0] for row in per_rank],
        "per_rank_graph_us": [None if math.isnan(row[1]) else row[1] for row in per_rank],
        "wall_note": "pytest-benchmark's own timing is a no-op: the pytest process is no rank; the device "
        "times are event_median_us and graph_us, measured on rank 0",
    }
    if graph_error:
        info["graph_error"] = graph_error
    return {"info": info, "check_failures": failures}


# ---------------------------------------------------------------------------
# The benchmarks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("arm,case", _params(ALL_REDUCE))
def test_all_reduce(benchmark, tmp_path, arm, case):
    _record(benchmark, _run_world(tmp_path, ALL_REDUCE, arm, case))


@pytest.mark.parametrize("arm,case", _params(FUSED))
def test_all_reduce_add_rms_norm(benchmark, tmp_path, arm, case):
    _record(benchmark, _run_world(tmp_path, FUSED, arm, case))


@pytest.mark.parametrize("arm,case", _params(EP_DISPATCH))
def test_ep_round_trip(benchmark, tmp_path, arm, case):
    _record(benchmark, _run_world(tmp_path, EP_DISPATCH, arm, case))


def test_nvlink_copy_bandwidth(benchmark):
    """The ceiling of every exchange: a 256 MiB copy from GPU 0 to GPU 1 (peer access, CUDA events on GPU 0),
    and back; GBps = bytes / median time."""
    import torch

    size = 256 * 2**20
    source = torch.empty(size, dtype=torch.uint8, device="cuda:0")
    target = torch.empty(size, dtype=torch.uint8, device="cuda:1")
    info = {"bytes": size, "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for direction, (dst, src) in (("0->1", (target, source)), ("1->0", (source, target))):
        with torch.cuda.device(src.device):
            timing = gpu_timing.event_timer(lambda dst=dst, src=src: dst.copy_(src, non_blocking=True))
        info[f"{direction}_median_us"] = timing.median_us
        info[f"{direction}_GBps"] = size / (timing.median_us * 1e-6) / 1e9
    info["peer_access"] = torch.cuda.can_device_access_peer(0, 1)
    benchmark.extra_info.update(info)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1, warmup_rounds=0)
