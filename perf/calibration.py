"""Machine-speed calibration for the CPU benchmarks, and paired measurement against it.

Why pairing: on the 2-core CI VM, other jobs share the cores, so a core's
speed flips between states about 2x apart within seconds (SMT sibling busy
or not), and whole time slices go to other processes. Measured while
building the gate: the calibration workload read 28-33 µs in one run and
57 µs in the next, and pytest-benchmark medians of one benchmark moved 2x
between runs, not in step with the calibration benchmark measured seconds
earlier. Dividing by a calibration taken at another moment does not cancel
the machine.

`paired_ratio` alternates short batches (~0.2 ms) of the benchmark's timed
function with batches of the calibration workload for a fixed budget, and
reports min(work batch) / min(calibration batch). Interleaving means both
sides sample the same machine states; taking each side's minimum discards
the batches that a preemption or a slow spell inflated (noise only ever
adds time). Over 8 repetitions on the busy VM (load average ~3 on 2 cores)
this ratio moved by 1.09-1.27x where the median of per-pair ratios moved
1.2-2.6x and raw medians 2x; that is what ci/perf_gate compares.

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
        elapsed = time_batch(function, args, calls, setup) * calls
        if elapsed >= target_s / 4 or calls >= 1 << 20:
            return max(1, round(calls * target_s / max(elapsed, 1e-9)))
        calls *= 4


def paired_ratio(function, args=(), *, setup=None, budget_s=0.4, min_pairs=15, batch_s=2e-4,
                 calibration=calibration_workload, work_clock=None) -> dict:
    """min per-call time of `function` / min per-call time of the calibration, interleaved batches.

    Runs for about `budget_s` seconds and at least `min_pairs` batches of
    each (a slow function, e.g. a subprocess, is one call per batch and sets
    the pace). `setup` runs before each call of `function`, off the clock.
    `work_clock` replaces perf_counter for the work batches only (e.g.
    children_cpu_seconds for a subprocess; one call per batch then).
    """
    calls = 1 if work_clock is not None else calls_for(function, args, batch_s, setup)
    calibration_calls = calls_for(calibration, (), batch_s)
    # A slow work batch (a subprocess: ~150 ms) gets a proportionate share of
    # calibration: several ~0.2 ms mini-batches per pair, so the calibration's
    # minimum is as well sampled as the work's (about 15% of the time).
    mini_batches = 1
    work_times, calibration_times = [], []

    def calibrate():
        calibration_times.append(min(time_batch(calibration, (), calibration_calls) for _ in range(mini_batches)))

    deadline = _clock() + budget_s
    while len(work_times) < min_pairs or _clock() < deadline:
        calibrate()
        started = _clock()
        work_times.append(time_batch(function, args, calls, setup, clock=work_clock or _clock))
        if len(work_times) == 1:
            mini_batches = max(1, min(100, round(0.15 * (_clock() - started) / batch_s)))
    calibrate()
    pair_ratios = [work / ((calibration_times[i] + calibration_times[i + 1]) / 2)
                   for i, work in enumerate(work_times)]
    return {
        "normalised": min(work_times) / min(calibration_times),
        "pair_ratio_median": statistics.median(pair_ratios),
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
