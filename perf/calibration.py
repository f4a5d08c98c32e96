"""Machine-speed calibration for the CPU benchmarks, and paired measurement against it.

Why pairing: on the 2-core CI VM, other jobs share the cores, so the speed
of this process changes within seconds (an SMT sibling busy or not, time
slices taken by other processes). Measured while building the gate: the
calibration workload read 28-33 µs in one run and 57 µs in the next, and
pytest-benchmark medians of one benchmark moved 2x between runs, not in step
with the calibration benchmark measured seconds earlier. Dividing by a
calibration taken at another moment does not cancel the machine.

`paired_ratio` alternates short batches (~0.2 ms) of the benchmark's timed
function with batches of the calibration workload, so both sides sample the
same machine states, and reports min(work batch) / min(calibration batch):
each side's minimum discards the batches that a preemption or a slow spell
inflated (noise only ever adds time), and the ratio is the code's cost at
the machine's full speed. Two failure modes were seen and are handled:

  - a whole window in a slow state (calibration never below ~45 µs where
    the fast state gives ~29 µs): code paths slow down by different factors
    when an SMT sibling is busy, so such a window skews the ratio (by
    0.6-0.9x, seen in 1 run of 6). The window is extended until its
    calibration comes within 10% of the fastest calibration this process
    has seen (`fast_state_seen` records whether it did);
  - a probe stretched by a preemption sizing every batch at a call or two,
    so the clock's own overhead dominated (`calls_for` takes the fastest of
    three probes).

The median of per-pair ratios (recorded as `pair_ratio_median`) was tried
as the statistic first and moved up to 1.8x under contention. Over repeated
runs on the VM, with other sessions' test runs and, for a stress test, up to
four CPU-bound busy loops beside it (load average up to 6 on 2 cores), the
normalised cost of unchanged code moved 1.0-1.4x where raw medians moved up
to 3.7x. It is what ci/perf_gate compares.

Torch-free and standard library only.
"""

from __future__ import annotations

import resource
import statistics
import time

# A fixed interpreter-bound workload (~30 µs when the VM is in its fast
# state). Dispatch is interpreter-bound too (dict lookups, small calls,
# tuple building, attribute access), so the two scale together across
# machines. Changing the workload invalidates every baseline: run
# `ci/perf_gate --update-baseline` in the same change.
CALIBRATION_SIZE = 64


class _Slot:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _calibration_step(slot, key, table):
    table[key] = table.get(key, 0) + slot.value
    return len(key)


def calibration_workload(size=CALIBRATION_SIZE):
    table = {}
    total = 0
    for index in range(size):
        total += _calibration_step(_Slot(index), (index & 15, "k"), table)
    for key, value in sorted(table.items()):
        total += value // (key[0] + 1)
    return total


_clock = time.perf_counter


def children_cpu_seconds() -> float:
    """User + system CPU time of every child process waited for so far.

    A clock for subprocess benchmarks: unlike wall time it does not count the
    time a child spends waiting for a core that other jobs hold, which on a
    loaded 2-core VM was most of the noise (the same child took 120-470 ms
    of wall time).
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_batch(function, args, calls, setup=None, clock=_clock) -> float:
    """Seconds per call of `calls` calls; `setup` (if any) runs before each call, outside the clock."""
    if setup is None:
        started = clock()
        for _ in range(calls):
            function(*args)
        return (clock() - started) / calls
    total = 0.0
    for _ in range(calls):
        setup()
        started = clock()
        function(*args)
        total += clock() - started
    return total / calls


def calls_for(function, args, target_s, setup=None) -> int:
    """How many calls make a batch of about `target_s` seconds (at least one)."""
    calls = 1
    while True:
        # The fastest of three probes: a single probe that a preemption
        # stretched would size every batch at a call or two, and then the
        # clock's own ~100 ns per batch dominates a sub-µs function (seen
        # once: a 4.3x "regression" of test_planned_call on a busy VM).
        elapsed = min(time_batch(function, args, calls, setup) for _ in range(3)) * calls
        if elapsed >= target_s / 4 or calls >= 1 << 20:
            return max(1, round(calls * target_s / max(elapsed, 1e-9)))
        calls *= 4


#: The fastest calibration batch seen in this process (seconds per call):
#: the machine's full speed, as far as this process has observed it.
_fastest_calibration = [float("inf")]

#: A measuring window whose calibration never came within this factor of the
#: fastest seen ran entirely in a slow state; it is extended (up to
#: MAX_BUDGET_FACTOR x its budget) until it catches a fast moment.
FAST_STATE_TOLERANCE = 1.10
MAX_BUDGET_FACTOR = 4


def note_calibration(seconds_per_call: float) -> None:
    """Record a calibration time measured elsewhere (the calibration benchmark's minimum)."""
    if seconds_per_call > 0:
        _fastest_calibration[0] = min(_fastest_calibration[0], seconds_per_call)


def paired_ratio(
    function,
    args=(),
    *,
    setup=None,
    budget_s=0.4,
    min_pairs=15,
    batch_s=2e-4,
    calibration=calibration_workload,
    work_clock=None,
) -> dict:
    """Cost of one call of `function` in calibration units, from interleaved batches (module docstring).

    Runs for about `budget_s` seconds and at least `min_pairs` batches of
    each (a slow function, e.g. a subprocess, is one call per batch and sets
    the pace), longer while the window has not seen the machine's fast state.
    `setup` runs before each call of `function`, off the clock.
    `work_clock` replaces perf_counter for the work batches only (e.g.
    children_cpu_seconds for a subprocess; one call per batch then).
    """
    calls = 1 if work_clock is not None else calls_for(function, args, batch_s, setup)
    calibration_calls = calls_for(calibration, (), batch_s)
    # Each pair's calibration is the faster of at least two ~0.2 ms
    # mini-batches: the first one after a work batch that churns memory
    # (explain, with its per-call gc) runs with cold caches. A slow work batch
    # (a subprocess: ~150 ms) gets a proportionate share: more mini-batches,
    # so the calibration's minimum is as well sampled as the work's.
    mini_batches = 2
    work_times, calibration_times = [], []

    def calibrate():
        calibration_times.append(min(time_batch(calibration, (), calibration_calls) for _ in range(mini_batches)))

    def fast_state_seen():
        return min(calibration_times) <= FAST_STATE_TOLERANCE * _fastest_calibration[0]

    started = _clock()
    deadline, last_chance = started + budget_s, started + MAX_BUDGET_FACTOR * max(budget_s, 0.25)
    while len(work_times) < min_pairs or _clock() < deadline or (not fast_state_seen() and _clock() < last_chance):
        calibrate()
        batch_started = _clock()
        work_times.append(time_batch(function, args, calls, setup, clock=work_clock or _clock))
        if len(work_times) == 1:
            mini_batches = max(2, min(100, round(0.15 * (_clock() - batch_started) / batch_s)))
    calibrate()
    fast_state = fast_state_seen()
    note_calibration(min(calibration_times))
    pair_ratios = [work / ((calibration_times[i] + calibration_times[i + 1]) / 2) for i, work in enumerate(work_times)]
    return {
        "normalised": min(work_times) / min(calibration_times),
        "pair_ratio_median": statistics.median(pair_ratios),
        "fast_state_seen": fast_state,
        "window_s": _clock() - started,
        "pairs": len(work_times),
        "calls_per_batch": calls,
        "calibration_calls_per_batch": calibration_calls,
        "calibration_batches_per_pair": mini_batches,
        "work_min_s": min(work_times),
        "work_median_s": statistics.median(work_times),
        "calibration_min_s": min(calibration_times),
        "calibration_median_s": statistics.median(calibration_times),
        "work_clock": getattr(work_clock, "__name__", "perf_counter") if work_clock else "perf_counter",
    }
