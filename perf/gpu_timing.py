"""Honest GPU timing for the perf suites (DESIGN §6).

    event_timer(fn, flush=buffer)   CUDA events around each call, L2 flushed before each one,
                                    median over >= 50 timed calls after warm-up
    graph_timer(fn)                 N calls captured in one CUDA graph, replayed; per-call time
                                    without launch gaps (decode-sized shapes)
    measure_copy_bandwidth()        device-to-device copy, bytes read + written: the ceiling that
                                    every memory-bound kernel is reported against
    record_case(...)                all of the above for one case, into benchmark.extra_info, with a
                                    copy of the same bytes timed the same way (the ceiling at that
                                    size: mid-size shapes cannot reach the 2 GiB copy's bandwidth)

RAPID_LLM_PERF_COMPILE_ONLY=1 makes record_case call the case once and time nothing: a warm-up process
runs the suites that way (their correctness call compiles every kernel and JIT module) before the timed
run, so the timed process compiles nothing (ci/gpu_attention_evidence's bench phase).

Why these choices:
  - Events, not host clocks: launches are asynchronous; events time the GPU.
  - The flush writes a buffer several times the 60 MB L2 of an H200 between
    timed calls, outside the events. Otherwise the second call of a kernel
    whose inputs fit in L2 reads them from L2 and reports bandwidth that
    the kernel never gets in a model (memory-bound kernels read their inputs
    once, from HBM). The flush also keeps the GPU busy while the host
    enqueues the timed call, so the start event is not followed by a launch
    gap for kernels whose host-side wrapper is slower than the flush.
  - Median, not mean or min: robust to the odd slow iteration (clock
    ramp, a neighbour on the host) without reporting a best case.
  - Graph replay removes the ~5-10 µs launch overhead that dominates
    decode-sized kernels; engines capture decode steps in CUDA graphs, so
    that is the number that matters for them. It runs with a warm L2 (the
    calls in a graph follow each other), which the result records.

torch is imported lazily: the CPU CI process imports this module's names
(to skip cleanly) without paying for torch or needing CUDA.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

NEEDS_CUDA = "needs a CUDA device"

#: >= 256 MiB as required; 512 MiB also gives ~130 µs of GPU work per flush
#: at ~4 TB/s, which hides the host-side launch of multi-kernel references.
FLUSH_BYTES = 512 << 20
EVENT_ITERATIONS = 50
EVENT_WARMUP = 5
GRAPH_CALLS = 20
GRAPH_REPLAYS = 30
COPY_BYTES = 1 << 30  # per side: 2 GiB moved per copy, far beyond L2
#: Shapes whose per-call data is at most this many bytes count as "small"
#: (decode-sized): they also get the graph-replay timer.
SMALL_CASE_BYTES = 4 << 20
COMPILE_ONLY_ENV = "RAPID_LLM_PERF_COMPILE_ONLY"


def compile_only() -> bool:
    """Whether this process only warms up (RAPID_LLM_PERF_COMPILE_ONLY set and not "0")."""
    return os.environ.get(COMPILE_ONLY_ENV, "").strip() not in ("", "0")


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _quantile(sorted_values, q):
    index = q * (len(sorted_values) - 1)
    low = int(index)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (index - low)


@dataclass(frozen=True)
class Timing:
    """Per-call device time statistics in microseconds."""

    median_us: float
    min_us: float
    p20_us: float
    p80_us: float
    samples: int

    @classmethod
    def from_ms(cls, times_ms) -> "Timing":
        values = sorted(t * 1e3 for t in times_ms)
        return cls(statistics.median(values), values[0], _quantile(values, 0.2), _quantile(values, 0.8), len(values))


def event_timer(fn, *, flush=None, iterations=EVENT_ITERATIONS, warmup=EVENT_WARMUP) -> Timing:
    """Median device time of fn() over `iterations` calls, each preceded by an L2 flush (if given)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()  # outside the events: evicts fn's inputs from L2
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return Timing.from_ms([start.elapsed_time(end) for start, end in zip(starts, ends)])


def graph_timer(fn, *, calls=GRAPH_CALLS, replays=GRAPH_REPLAYS) -> Timing:
    """Per-call device time of fn() replayed from a CUDA graph of `calls` calls (L2 warm)."""
    import torch

    # Capture needs the work (Triton compilation, allocator pools, cuBLAS
    # handles) initialised on a side stream first, as torch documents.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    per_call = [start.elapsed_time(end) / calls for start, end in zip(starts, ends)]
    del graph
    return Timing.from_ms(per_call)


def measure_copy_bandwidth(nbytes=COPY_BYTES) -> dict:
    """Device-to-device copy of `nbytes`; GB/s counts bytes read + written (2 x nbytes)."""
    import torch

    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    target = torch.empty_like(source)
    timing = event_timer(lambda: target.copy_(source), iterations=20, warmup=3)
    moved = 2 * nbytes
    result = {"bytes": moved, "median_us": timing.median_us, "GBps": moved / (timing.median_us * 1e-6) / 1e9}
    del source, target
    torch.cuda.empty_cache()
    return result


@dataclass
class GpuSession:
    """Facts measured once per pytest session (the `gpu_session` fixture in perf/conftest.py)."""

    device_name: str
    sm: int
    torch_version: str
    triton_version: str | None
    copy: dict
    flush: object  # a FLUSH_BYTES torch tensor, reused by every case
    same_size_copies: dict = None  # bytes moved -> median µs of a copy moving as many bytes

    def same_size_copy_us(self, bytes_moved: int) -> float:
        """Device time of a device-to-device copy moving `bytes_moved` bytes (half read, half written),
        L2 flushed: the ceiling at this size, where launch and tail effects cap any kernel."""
        import torch

        if self.same_size_copies is None:
            self.same_size_copies = {}
        if bytes_moved not in self.same_size_copies:
            source = torch.empty(max(1, bytes_moved // 2), dtype=torch.uint8, device="cuda")
            target = torch.empty_like(source)
            timing = event_timer(lambda: target.copy_(source), flush=self.flush, iterations=20, warmup=3)
            self.same_size_copies[bytes_moved] = timing.median_us
        return self.same_size_copies[bytes_moved]

    @classmethod
    def create(cls) -> "GpuSession":
        import torch

        try:
            import triton

            triton_version = triton.__version__
        except ImportError:
            triton_version = None
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        copy = measure_copy_bandwidth()
        flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
        return cls(
            torch.cuda.get_device_name(index), major * 10 + minor, torch.__version__, triton_version, copy, flush
        )

    @property
    def copy_GBps(self) -> float:
        return self.copy["GBps"]

    def describe(self) -> dict:
        return {
            "device": self.device_name,
            "sm": self.sm,
            "torch": self.torch_version,
            "triton": self.triton_version,
            "copy_GBps": round(self.copy_GBps, 1),
        }


def record_case(
    benchmark,
    session: GpuSession,
    fn,
    *,
    bytes_moved: int,
    rounds=30,
    graph: bool | None = None,
    graph_safe: bool = True,
    flops: float | None = None,
    graph_optional: bool = False,
):
    """Time fn three ways and fill benchmark.extra_info.

    - pytest-benchmark's own timing: wall time of fn() + synchronize, L2
      flushed (and synchronized) in the setup, outside the clock: what one
      eager call costs the host, launch included;
    - event_us: device time, L2 flushed, median of EVENT_ITERATIONS;
    - graph_us: device time per call from a CUDA graph replay (small cases,
      or when graph=True), never for a row that declares graph_safe=False
      (it syncs or prepares host data per call: capturing it is wrong).
    flops: the case's FLOPs; TFLOPs (events) and graph_TFLOPs are derived from it.
    graph_optional: a capture or replay that raises is recorded (graph_error) and the case keeps its event
    timing, rather than failing (for peers: a library whose call cannot be captured still gets its events).
    Under RAPID_LLM_PERF_COMPILE_ONLY, fn runs once and nothing is timed.
    """
    import torch

    def call_and_sync():
        fn()
        torch.cuda.synchronize()

    if compile_only():
        benchmark.extra_info.update(compile_only=True, bytes=bytes_moved, flops=flops)
        benchmark.pedantic(call_and_sync, rounds=1, warmup_rounds=0, iterations=1)
        return

    flush = session.flush
    event = event_timer(fn, flush=flush)
    if graph is None:
        graph = bytes_moved <= SMALL_CASE_BYTES
    graph = graph and graph_safe
    graph_timing, graph_error = None, None
    if graph:
        try:
            graph_timing = graph_timer(fn)
        except Exception as error:  # recorded for the report; re-raised unless optional
            if not graph_optional:
                raise
            graph_error = f"{type(error).__name__}: {str(error)[:500]}"
            torch.cuda.synchronize()
    info = benchmark.extra_info
    info.update(session.describe())
    info.update(
        bytes=bytes_moved,
        event_median_us=event.median_us,
        event_min_us=event.min_us,
        event_p20_us=event.p20_us,
        event_p80_us=event.p80_us,
        event_iterations=event.samples,
        l2_flush_bytes=FLUSH_BYTES,
        GBps=bytes_moved / (event.median_us * 1e-6) / 1e9,
        pct_of_copy_bw=100.0 * bytes_moved / (event.median_us * 1e-6) / 1e9 / session.copy_GBps,
        same_size_copy_us=session.same_size_copy_us(bytes_moved),
        pct_of_same_size_copy=100.0 * session.same_size_copy_us(bytes_moved) / event.median_us,
        graph_us=graph_timing.median_us if graph_timing else None,
        graph_GBps=(bytes_moved / (graph_timing.median_us * 1e-6) / 1e9) if graph_timing else None,
        graph_note=f"{GRAPH_CALLS} calls per graph, L2 warm" if graph_timing else None,
    )
    if graph_error:
        info["graph_error"] = graph_error
    if flops is not None:
        info.update(
            flops=flops,
            TFLOPs=flops / (event.median_us * 1e-6) / 1e12,
            graph_TFLOPs=flops / (graph_timing.median_us * 1e-6) / 1e12 if graph_timing else None,
        )

    def flushed():
        flush.zero_()
        torch.cuda.synchronize()

    benchmark.pedantic(call_and_sync, setup=flushed, rounds=rounds, warmup_rounds=2, iterations=1)
