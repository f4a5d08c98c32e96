"""Shared fixtures of the perf suites.

Torch-free at import: the CPU dispatcher suite runs in CI without touching
torch, and the GPU fixtures import torch only when a GPU test asks for them.

Planted regressions (how ci/perf_gate proves it can catch a slowdown):
``RAPID_LLM_PERF_PLANT=<substring>`` makes every benchmark whose node id
contains the substring do its timed work twice, a real 2x slowdown of the
same code rather than a sleep or a fudged number. Benchmarks opt in through
the `plant` fixture; the calibration benchmark deliberately does not (a
planted calibration would make everything else look faster).
"""

from __future__ import annotations

import os
import sys

import pytest

PLANT_ENV = "RAPID_LLM_PERF_PLANT"


def planted_substring() -> str | None:
    value = os.environ.get(PLANT_ENV, "").strip()
    return value or None


class Plant:
    """Wraps a benchmark's timed function; doubles its work when the plant names this test."""

    def __init__(self, nodeid: str, benchmark):
        substring = planted_substring()
        self.active = substring is not None and substring in nodeid
        self._benchmark = benchmark
        if self.active:
            benchmark.extra_info["planted"] = f"{PLANT_ENV}={substring}: timed work runs twice"

    def __call__(self, work, *, between=None):
        """`work` itself, or a function running it twice (calling `between` in between).

        `between` is for benchmarks whose setup resets state (cold dispatch
        clears the memo): the second run must be as cold as the first, or
        the "2x" plant would only add a cache hit.
        """
        if not self.active:
            return work

        def twice(*args, **kwargs):
            work(*args, **kwargs)
            if between is not None:
                between()
            return work(*args, **kwargs)

        return twice


@pytest.fixture
def plant(request, benchmark) -> Plant:
    return Plant(request.node.nodeid, benchmark)


class Measure:
    """Time one function twice over: pytest-benchmark's stats, and a ratio paired with the calibration.

    pytest-benchmark's median is what people read (and what requirements are
    checked against); extra_info["paired"]["normalised"] is what ci/perf_gate
    compares, because it cancels the machine's speed at the moment of
    measuring (see perf/calibration.py). Both time the same (possibly
    planted) function.
    """

    def __init__(self, benchmark, plant: Plant):
        self.benchmark = benchmark
        self.plant = plant

    def __call__(
        self,
        work,
        *args,
        setup=None,
        between=None,
        rounds=None,
        warmup_rounds=0,
        paired_budget_s=0.5,
        paired_min_pairs=15,
        paired_work_clock=None,
    ):
        from perf.calibration import paired_ratio

        timed = self.plant(work, between=between)
        if setup is None and rounds is None:
            result = self.benchmark(timed, *args)
        else:
            # Pedantic: a per-round setup (outside the clock) or a slow function with fixed rounds.
            result = self.benchmark.pedantic(
                timed, args=args, setup=setup, rounds=rounds or 100, warmup_rounds=warmup_rounds, iterations=1
            )
        self.benchmark.extra_info["paired"] = paired_ratio(
            timed, args, setup=setup, budget_s=paired_budget_s, min_pairs=paired_min_pairs, work_clock=paired_work_clock
        )
        return result


@pytest.fixture
def measure(benchmark, plant) -> Measure:
    return Measure(benchmark, plant)


def record_requirement(benchmark, text: str, metric: str, limit: float, unit: str = "s", **extra) -> None:
    """Store the absolute requirement this benchmark is checked against (extra_info["requirement"]).

    metric "median" means the benchmark's own median (seconds); any other
    metric names a key of extra_info that the test fills in. ci/perf_gate
    prints the status; it gates on regression against the baseline only.
    """
    benchmark.extra_info["requirement"] = {"text": text, "metric": metric, "max": limit, "unit": unit, **extra}


@pytest.hookimpl(optionalhook=True)  # a pytest run without pytest-benchmark must still load this conftest
def pytest_benchmark_update_json(config, benchmarks, output_json):
    # The gate refuses to store a planted run as a baseline; it reads this.
    output_json["rapid_llm_perf"] = {
        "plant": planted_substring(),
        "planted": sorted(b.fullname for b in benchmarks if "planted" in b.extra_info),
        "python": sys.version.split()[0],
        "argv": list(sys.argv),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    """GPU runs record the device, driver, torch/triton versions in pytest-benchmark's machine_info (what
    perf/baselines/h200/ files carry). Only when torch is already imported and sees a GPU: the CPU
    dispatcher suite must not pay a torch import for this."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return
    import subprocess

    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()
    )
    triton = sys.modules.get("triton")
    machine_info["gpu"] = {
        "name": properties.name,
        "sm": properties.major * 10 + properties.minor,
        "multiprocessors": properties.multi_processor_count,
        "memory_GiB": round(properties.total_memory / 2**30, 1),
        "driver": driver[0] if driver else None,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "triton": getattr(triton, "__version__", None),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_commit_info(config, commit_info):
    """RAPID_LLM_COMMIT overrides the commit pytest-benchmark reads with git: the device machine runs a copy
    of the working tree whose git metadata can lag the commit it holds (seen 2026-11-30)."""
    commit = os.environ.get("RAPID_LLM_COMMIT")
    if commit:
        commit_info["id"] = commit
        commit_info["note"] = "from RAPID_LLM_COMMIT (the tree's commit, set by the caller)"


# ---------------------------------------------------------------------------
# GPU fixtures (torch imported lazily; only the GPU suites request these)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gpu_session():
    """Per-session GPU facts: device name, versions, the measured copy bandwidth, an L2 flush buffer."""
    from perf import gpu_timing

    if not gpu_timing.cuda_available():
        pytest.skip(gpu_timing.NEEDS_CUDA)
    return gpu_timing.GpuSession.create()
