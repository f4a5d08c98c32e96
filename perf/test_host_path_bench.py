"""CPU benchmarks of the public ops' host path (DESIGN §6; run in CI behind ci/perf_gate).

An eager engine pays each op's Python host path per call: the check, the plan lookup, the launch policy,
the launch. perf/host_path.py makes that path run on the CPU with stub launches (Triton's JIT functions,
the cached launch path a GPU takes, a compiled-kernel stand-in whose run() does nothing), so a regression
of the host path (a dict rebuilt per call, a check done twice, a launch falling back to Triton's binder)
fails the gate without a GPU. Per op, two arms: the public op (rapid_llm.kernels.<op>) and the plan's
unchecked kernel entry (PlannedOp.impl, what a step plan's layers call).

Each records a requirement in extra_info["requirement"]: at most the cost of the same arm before the
cached launches (BEFORE_S: Triton's binder with a fake driver and a stub compile, this project's CPU VM;
see the commit that added ops/fast_launch.py). Timing lives only in the benchmarks; the asserts check that
the thing timed is the thing meant (the native row selected, the cached launch path taken).
"""

from __future__ import annotations

import pytest

from perf.conftest import record_requirement
from perf.host_path import CASES, FP16_ON_CPU, case_args, stub_host_path

torch = pytest.importorskip("torch", reason="the host-path benchmarks call the ops on torch tensors")
pytest.importorskip("triton", reason="the host-path benchmarks launch the native Triton rows (stubbed)")

from rapid_llm.kernels.ops import fast_launch  # noqa: E402  (after the importorskips)

#: (public op, PlannedOp.impl) µs per call before the cached launches, measured on this project's CPU VM
#: with Triton's own JITFunction.run (fake driver, stub compile), value checks off: the requirement.
BEFORE_S = {
    "rms_norm": (19.4e-6, 14.4e-6),
    "fused_add_rms_norm": (23.0e-6, 13.4e-6),
    "silu_and_mul": (17.1e-6, 14.7e-6),
    "rotary": (29.3e-6, 16.5e-6),
    "update_kv_buffer": (22.8e-6, 14.7e-6),
    "decode": (40.2e-6, 26.5e-6),
    "mla_decode": (36.4e-6, 24.7e-6),
}


@pytest.fixture(scope="module")
def host_path():
    if fast_launch._interpreting():
        pytest.skip("TRITON_INTERPRET is set: the host path needs Triton's JIT functions (the gate runs without it)")
    with stub_host_path() as planner:
        yield planner


def _case(planner, name):
    """(public function, PlannedOp, args) of case `name`, its native row checked."""
    import rapid_llm.kernels as kernels

    op, function, row = CASES[name]
    args = case_args(name, torch, "cpu", torch.float16 if name in FP16_ON_CPU else None)
    planned = planner.plan_for(op, *args)
    assert planned.row.name == row, planned.explain()
    return getattr(kernels, function), planned, args


def _launches() -> int:
    """Launches the stub compiled kernels have run so far (the cached path; the first launch compiles)."""
    return sum(
        entry[0].__self__.launches
        for kernel in fast_launch._KERNELS
        for launcher in kernel._launchers.values()
        for entry in launcher._entries.values()
    )


@pytest.mark.parametrize("arm", ["public", "impl"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_host_path(benchmark, measure, host_path, name, arm):
    public, planned, args = _case(host_path, name)
    work = public if arm == "public" else planned.impl
    before = _launches()
    work(*args)
    work(*args)
    assert _launches() > before, f"{name}: the call did not take the cached launch path"
    before_s = BEFORE_S[name][0 if arm == "public" else 1]
    benchmark.extra_info.update(
        op=CASES[name][0],
        row=planned.row.name,
        arm="rapid_llm.kernels." + CASES[name][1] if arm == "public" else "PlannedOp.impl",
        before_cached_launch_s=before_s,
    )
    record_requirement(
        benchmark,
        f"{name} {arm} host path (stub launch) <= its cost before the cached launches ({before_s * 1e6:.1f} µs)",
        "median",
        before_s,
    )
    measure(work, *args)
