"""Unit tests of the GPU perf gate's comparison (ci/gpu_perf_gate.py) on synthetic runs: no GPU, no timing.

Each test names the failure it catches in the decision rule: drift not corrected (a uniformly slower
machine failing everything), one kernel's regression hidden by the median, thresholds per phase
mixed up, reference rows or peers gated, a deleted case passing silently.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ci", "gpu_perf_gate.py")
_SPEC = importlib.util.spec_from_file_location("gpu_perf_gate", _PATH)
gate = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gate)

ROWS = ["native/rms_norm", "native/rotary", "native/scale", "aot/scale", "native/silu_and_mul"]


def _run(times: dict) -> dict:
    """A pytest-benchmark document: times {(row, phase, case): device µs}."""
    benchmarks = []
    for (row, phase, case), micros in times.items():
        info = {"row": row, "phase": phase, "event_median_us": micros * (3 if phase == "decode" else 1)}
        if phase == "decode":
            info["graph_us"] = micros
        benchmarks.append({"fullname": f"perf/test_x.py::test_x[{row}-{case}]", "extra_info": info})
    return {"benchmarks": benchmarks}


def _times(scale=1.0, row_factor=None, rows=ROWS):
    row_factor = row_factor or {}
    times = {}
    for row in rows:
        for case, base in (("tokens=4096", 100.0), ("tokens=32768", 800.0)):
            times[(row, "prefill", case)] = base * scale * row_factor.get((row, "prefill"), 1.0)
        for case, base in (("tokens=1", 1.5), ("tokens=64", 2.0)):
            times[(row, "decode", case)] = base * scale * row_factor.get((row, "decode"), 1.0)
    return times


def test_a_uniformly_slower_machine_passes():
    """Catches a gate without drift correction: a run 8% slower everywhere is the machine, not the code."""
    verdict = gate.compare(_run(_times()), _run(_times(scale=1.08)))
    assert verdict["passed"], verdict["failed"]
    assert verdict["drift"]["prefill"] == pytest.approx(1.08)


def test_one_kernel_1_2x_slower_on_a_drifting_machine_is_caught_and_named():
    """Catches the drift correction absorbing a real regression: the median ratio is the machine's."""
    new = _times(scale=1.05, row_factor={("native/rotary", "prefill"): 1.2})
    verdict = gate.compare(_run(_times()), _run(new))
    assert not verdict["passed"]
    assert [(r["row"], r["phase"]) for r in verdict["failed"]] == [("native/rotary", "prefill")]
    assert verdict["failed"][0]["geomean"] == pytest.approx(1.2)


def test_decode_has_the_wider_threshold():
    """Catches decode noise (1-2 µs calls, where 0.1 µs is 5-10%) failing the gate: 1.15x in decode passes,
    1.15x in prefill fails."""
    decode = gate.compare(_run(_times()), _run(_times(row_factor={("native/scale", "decode"): 1.15})))
    prefill = gate.compare(_run(_times()), _run(_times(row_factor={("native/scale", "prefill"): 1.15})))
    assert decode["passed"] and not prefill["passed"]


def test_a_single_case_far_past_its_threshold_fails_the_row():
    """Catches a geometric mean hiding one shape that regressed badly."""
    new = _times()
    new[("native/silu_and_mul", "prefill", "tokens=32768")] *= 1.4
    verdict = gate.compare(_run(_times()), _run(new))
    assert [r["row"] for r in verdict["failed"]] == ["native/silu_and_mul"]


def test_reference_rows_and_peers_are_not_gated():
    """Catches the host-bound torch reference rows (2.3x swings between unchanged runs) or peers failing the
    gate: only native/, aot/ and jit/ rows are ours to gate."""
    rows = ROWS + ["torch/rms_norm", "peer/flashinfer"]
    new = _times(rows=rows, row_factor={("torch/rms_norm", "prefill"): 2.0, ("peer/flashinfer", "prefill"): 2.0})
    verdict = gate.compare(_run(_times(rows=rows)), _run(new))
    assert verdict["passed"]
    assert not {r["row"] for r in verdict["rows"]} & {"torch/rms_norm", "peer/flashinfer"}


def test_a_case_missing_from_the_run_fails():
    """Catches a deleted or newly skipped benchmark passing silently."""
    new = _times()
    del new[("aot/scale", "prefill", "tokens=4096")]
    verdict = gate.compare(_run(_times()), _run(new))
    assert not verdict["passed"] and len(verdict["missing"]) == 1


def test_merge_baseline_adds_and_replaces_only_gated_cases(tmp_path):
    """Catches --merge-baseline duplicating a case already in the baseline (a stale and a fresh figure for one
    fullname), dropping the baseline's other cases, or letting a reference row or a peer into the gate."""
    import json

    baseline = _run({("native/rotary", "prefill", "tokens=4096"): 100.0, ("native/scale", "decode", "tokens=1"): 1.5})
    baseline_file = tmp_path / "0001_h200.json"
    baseline_file.write_text(json.dumps(baseline))
    run = _run(
        {
            ("native/rotary", "prefill", "tokens=4096"): 90.0,  # replaces the baseline's figure
            ("native/mm_gemv", "decode", "tokens=1"): 20.0,  # a new gated row joins
            ("torch/mm", "decode", "tokens=1"): 50.0,  # a reference row: never gated
            ("cublas/linear", "decode", "tokens=1"): 22.0,  # a library row: never gated
        }
    )
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(run))
    gate.merge_baseline(str(baseline_file), [str(run_file)])
    merged = {bench["fullname"]: bench["extra_info"] for bench in json.loads(baseline_file.read_text())["benchmarks"]}
    assert sorted(merged) == sorted(
        f"perf/test_x.py::test_x[{row}]"
        for row in ("native/rotary-tokens=4096", "native/scale-tokens=1", "native/mm_gemv-tokens=1")
    )
    assert merged["perf/test_x.py::test_x[native/rotary-tokens=4096]"]["event_median_us"] == 90.0
