"""Unit tests of ci/perf_gate's comparison and baseline storage (synthetic documents, no timing).

Each test names the failure it catches: a gate that passes a real 2x
regression, fails a uniformly slower machine, lets a benchmark vanish, or
cannot find the baseline that another machine saved.
"""

from __future__ import annotations

import copy
import importlib.util
import os

import pytest

GATE_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ci", "perf_gate.py")


@pytest.fixture(scope="module")
def gate():
    spec = importlib.util.spec_from_file_location("perf_gate", GATE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CAL = "perf/test_dispatcher_bench.py::test_calibration"
MEMO = "perf/test_dispatcher_bench.py::test_memoised_dispatch"
COLD = "perf/test_dispatcher_bench.py::test_cold_dispatch"
IMPORT = "perf/test_dispatcher_bench.py::test_import_and_build_subprocess"

# Seconds, shaped like what the suite measures on the CI VM.
MEDIANS = {CAL: 30e-6, MEMO: 1.5e-6, COLD: 36e-6, IMPORT: 0.15}


def document(medians=MEDIANS, *, paired=True, scale=1.0, slower=None, extra=None):
    """A pytest-benchmark --benchmark-json document.

    scale: every median (calibration included) times this: a slower machine.
    slower: {name: factor} applied to that benchmark only: a regression.
    paired: also record extra_info["paired"] as the suite does.
    """
    slower = slower or {}
    benchmarks = []
    for name, median in medians.items():
        factor = slower.get(name, 1.0)
        value = median * scale * factor
        extra_info = {}
        if name == CAL:
            extra_info["calibration"] = True
        elif paired:
            # min(work)/min(calibration) as measured in the same run: the
            # machine's scale cancels, a regression of the code does not.
            extra_info["paired"] = {"normalised": median * factor / medians[CAL]}
        extra_info.update((extra or {}).get(name, {}))
        benchmarks.append(
            {
                "name": name.split("::")[-1],
                "fullname": name,
                "stats": {"median": value, "min": value * 0.9, "max": value * 2, "rounds": 100},
                "extra_info": extra_info,
            }
        )
    return {"version": "5.3.1", "benchmarks": benchmarks}


def statuses(result):
    return {row["name"]: row["status"] for row in result["rows"]}


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "median-over-calibration"])
def test_identical_runs_pass(gate, paired):
    result = gate.compare(document(paired=paired), document(paired=paired))
    assert result["passed"], gate.render(result)
    assert set(statuses(result).values()) <= {"ok", "calibration"}


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "median-over-calibration"])
def test_one_benchmark_twice_as_slow_fails_naming_it(gate, paired):
    result = gate.compare(document(paired=paired), document(paired=paired, slower={MEMO: 2.0}))
    assert not result["passed"]
    assert gate.regressed_names(result) == [MEMO]
    row = next(r for r in result["rows"] if r["name"] == MEMO)
    assert row["slowdown"] == pytest.approx(2.0)
    text = gate.render(result)
    assert "REGRESSION: test_memoised_dispatch is 2.00x slower" in text
    assert text.rstrip().endswith("FAIL")


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "median-over-calibration"])
def test_whole_machine_twice_as_slow_passes(gate, paired):
    result = gate.compare(document(paired=paired), document(paired=paired, scale=2.0))
    assert result["passed"], gate.render(result)
    assert result["speed"] == pytest.approx(2.0)
    for row in result["rows"]:
        assert row["raw_ratio"] == pytest.approx(2.0)
        if row["slowdown"] is not None:
            assert row["slowdown"] == pytest.approx(1.0)


def test_whole_machine_faster_hides_no_regression(gate):
    # A CI box 3x faster than the baseline's must still flag a 2x regression.
    result = gate.compare(document(), document(scale=1 / 3, slower={COLD: 2.0}))
    assert gate.regressed_names(result) == [COLD]


def test_missing_benchmark_fails_clearly(gate):
    fewer = {name: value for name, value in MEDIANS.items() if name != COLD}
    result = gate.compare(document(), document(fewer))
    assert not result["passed"]
    assert statuses(result)[COLD] == "MISSING"
    assert "MISSING: test_cold_dispatch is in the baseline but did not run" in gate.render(result)


def test_new_benchmark_is_reported_not_failed(gate):
    fewer = {name: value for name, value in MEDIANS.items() if name != COLD}
    result = gate.compare(document(fewer), document())
    assert result["passed"]
    assert statuses(result)[COLD] == "new"


def test_slowdown_just_under_threshold_passes_and_just_over_fails(gate):
    under = gate.compare(document(), document(slower={MEMO: 1.55}), threshold=1.6)
    over = gate.compare(document(), document(slower={MEMO: 1.65}), threshold=1.6)
    assert under["passed"] and not over["passed"]


def test_paired_ratio_wins_over_a_noisy_median(gate):
    # The pytest-benchmark median caught a slow spell (2.5x) but the paired
    # ratio, measured against the calibration at the same moments, did not
    # move: no regression. This is the VM behaviour perf/calibration.py describes.
    noisy = document()
    for bench in noisy["benchmarks"]:
        if bench["fullname"] == MEMO:
            bench["stats"]["median"] *= 2.5
    result = gate.compare(document(), noisy)
    assert result["passed"], gate.render(result)
    row = next(r for r in result["rows"] if r["name"] == MEMO)
    assert row["basis"] == "paired" and row["raw_ratio"] == pytest.approx(2.5)


def test_falls_back_to_median_when_one_side_lacks_pairs(gate):
    result = gate.compare(document(paired=False), document(slower={MEMO: 2.0}))
    row = next(r for r in result["rows"] if r["name"] == MEMO)
    assert row["basis"] == "median" and row["status"] == "REGRESSED"


def test_missing_calibration_is_an_error_not_a_pass(gate):
    broken = document()
    broken["benchmarks"] = [b for b in broken["benchmarks"] if b["fullname"] != CAL]
    with pytest.raises(gate.GateError, match="calibration"):
        gate.compare(document(), broken)


def test_baseline_is_a_pytest_benchmark_document_deciding_on_the_medians_of_its_runs(gate):
    # The stored baseline stays pytest-benchmark's own format (pytest-benchmark compare reads it);
    # the gate decides on the per-benchmark medians over the runs kept in extra_info["perf_gate"].
    runs = [document(scale=scale) for scale in (1.0, 1.2, 0.9)]
    baseline, saved = gate.make_baseline(runs, ["python", "-m", "pytest"])
    assert isinstance(baseline["benchmarks"], list) and all("stats" in b for b in baseline["benchmarks"])
    assert baseline[gate.GATE_KEY]["schema"] == gate.BASELINE_SCHEMA
    assert baseline[gate.GATE_KEY]["calibration"] == CAL and baseline[gate.GATE_KEY]["saved_run"] == saved + 1
    assert gate.compare(baseline, document(scale=1.7))["passed"]
    result = gate.compare(baseline, document(slower={IMPORT: 2.0}))
    assert gate.regressed_names(result) == [IMPORT]


def test_baseline_decides_on_the_median_run_not_the_saved_one(gate):
    # One run caught memoised dispatch in a slow spell (paired ratio 1.5x): the median of the three
    # readings is the baseline, so a later unchanged run passes and a real 2x still fails.
    noisy = document(slower={MEMO: 1.5})
    baseline, _ = gate.make_baseline([document(), noisy, document()], ["python"])
    aggregate = next(b for b in baseline["benchmarks"] if b["fullname"] == MEMO)["extra_info"][gate.GATE_KEY]
    assert aggregate["paired_normalised"] == pytest.approx(MEDIANS[MEMO] / MEDIANS[CAL])
    assert aggregate["per_run_paired_normalised"][1] == pytest.approx(1.5 * MEDIANS[MEMO] / MEDIANS[CAL])
    assert gate.compare(baseline, document())["passed"]
    assert gate.regressed_names(gate.compare(baseline, document(slower={MEMO: 2.0}))) == [MEMO]


def test_saved_stats_are_the_run_closest_to_the_medians(gate):
    runs = [document(slower={MEMO: 1.5, COLD: 1.3}), document(slower={MEMO: 1.05}), document(slower={COLD: 0.8})]
    baseline, saved = gate.make_baseline(runs, ["python"])
    assert saved == 1
    memo = next(b for b in baseline["benchmarks"] if b["fullname"] == MEMO)
    assert memo["stats"]["median"] == pytest.approx(MEDIANS[MEMO] * 1.05)


def test_baseline_refuses_runs_with_different_benchmarks(gate):
    fewer = {name: value for name, value in MEDIANS.items() if name != COLD}
    with pytest.raises(gate.GateError, match="disagree"):
        gate.make_baseline([document(), document(fewer)], ["python"])


def test_stored_baseline_is_found_whatever_the_machine_id(gate, tmp_path):
    # CI's fresh machine may have another pytest-benchmark machine id than the one that saved it.
    baseline, _ = gate.make_baseline([document()], ["python"])
    path, removed = gate.store_baseline(baseline, str(tmp_path), "Linux-CPython-3.11-64bit")
    assert path == str(tmp_path / "Linux-CPython-3.11-64bit" / "0001_dispatcher.json") and removed == []
    assert gate.locate_baseline(str(tmp_path)) == path
    assert gate.compare(gate.read_json(path, what="baseline"), document())["passed"]


def test_newest_saved_baseline_wins_deterministically(gate, tmp_path):
    for machine, number in (
        ("Linux-CPython-3.12-64bit", "0001"),
        ("Linux-CPython-3.11-64bit", "0002"),
        ("Darwin-CPython-3.11-64bit", "0002"),
    ):
        (tmp_path / machine).mkdir(exist_ok=True)
        (tmp_path / machine / f"{number}_dispatcher.json").write_text("{}")
    (tmp_path / "Linux-CPython-3.11-64bit" / "0009_other.json").write_text("{}")  # another save name
    assert gate.locate_baseline(str(tmp_path)) == str(tmp_path / "Linux-CPython-3.11-64bit" / "0002_dispatcher.json")


def test_refreshing_rewrites_in_place_and_removes_older_baselines(gate, tmp_path):
    # Same path, same layout: the git diff of a refresh shows old and new figures line by line.
    old, _ = gate.make_baseline([document()], ["python"])
    first, _ = gate.store_baseline(old, str(tmp_path), "Linux-CPython-3.11-64bit")
    stray = tmp_path / "Linux-CPython-3.12-64bit" / "0003_dispatcher.json"
    stray.parent.mkdir()
    stray.write_text("{}")
    new, _ = gate.make_baseline([document(scale=1.3)], ["python"])
    second, removed = gate.store_baseline(new, str(tmp_path), "Linux-CPython-3.11-64bit")
    assert second == first and removed == [str(stray)] and not stray.parent.exists()
    assert gate.baseline_files(str(tmp_path)) == [second]
    text = (tmp_path / "Linux-CPython-3.11-64bit" / "0001_dispatcher.json").read_text()
    assert text.startswith("{\n    ") and gate.read_json(second, what="baseline") == new


def test_no_baseline_is_a_clear_error(gate, tmp_path):
    with pytest.raises(gate.GateError, match="--update-baseline"):
        gate.locate_baseline(str(tmp_path))


def _remeasure(gate, comparison, factor):
    return gate.merge_confirmation(comparison, gate.compare(document(), document(slower={MEMO: factor})))


def _memo_row(comparison):
    return next(r for r in comparison["rows"] if r["name"] == MEMO)


def test_confirmation_two_readings_over_the_threshold_fail(gate):
    first = gate.compare(document(), document(slower={MEMO: 2.0}))
    confirmed = _remeasure(gate, first, 2.1)
    assert gate.undecided_suspects(confirmed) == []  # no third run needed
    settled = gate.settle(confirmed)
    assert not settled["passed"]
    row = _memo_row(settled)
    assert row["slowdown"] == pytest.approx(2.05) and row["measurements"] == 2


def test_confirmation_clears_a_one_off_noisy_reading(gate):
    first = gate.compare(document(), document(slower={MEMO: 2.0}))
    split = _remeasure(gate, first, 1.1)
    assert gate.undecided_suspects(split) == [MEMO]  # one each way: measure a third time
    cleared = gate.settle(_remeasure(gate, split, 1.05))
    assert cleared["passed"] and _memo_row(cleared)["status"] == "ok"


def test_one_low_reading_cannot_hide_a_real_regression(gate):
    # The best of three would pass this; a majority does not.
    first = gate.compare(document(), document(slower={MEMO: 2.0}))
    result = gate.settle(_remeasure(gate, _remeasure(gate, first, 0.9), 2.0))
    assert not result["passed"] and gate.regressed_names(result) == [MEMO]


def test_undecided_suspect_is_settled_by_its_median(gate):
    first = gate.compare(document(), document(slower={MEMO: 2.0}))
    assert gate.settle(_remeasure(gate, first, 1.0))["passed"]  # median 1.5 <= 1.6
    assert not gate.settle(_remeasure(gate, first, 1.3))["passed"]  # median 1.65 > 1.6


def test_requirements_are_reported_but_do_not_fail_the_gate(gate):
    extra = {
        MEMO: {"requirement": {"text": "memoised dispatch <= 1 µs", "metric": "median", "max": 1e-6}},
        IMPORT: {
            "requirement": {
                "text": "<= 100 ms, torch absent",
                "metric": "median",
                "max": 0.1,
                "absent_modules": ["torch", "triton"],
            },
            "torch_imported": True,
        },
    }
    result = gate.compare(document(extra=extra), document(extra=extra))
    assert result["passed"]
    requirement = {row["name"]: row["requirement"] for row in result["rows"]}
    assert requirement[MEMO] == "BROKEN: 1.5 µs > 1 µs"
    assert "imported torch" in requirement[IMPORT] and "150 ms > 100 ms" in requirement[IMPORT]
    assert "requirements not met on this machine" in gate.render(result)


def test_planted_baseline_is_never_stored(gate, monkeypatch, tmp_path):
    # --update-baseline must refuse while a plant is active: a planted baseline
    # would hide the next real 2x regression.
    monkeypatch.setenv(gate.PLANT_ENV, "test_memoised_dispatch")
    status = gate.main(["--update-baseline", "--storage", str(tmp_path)])
    assert status == 2 and list(tmp_path.iterdir()) == []


def test_threshold_must_exceed_one(gate):
    with pytest.raises(gate.GateError):
        gate.compare(document(), document(), threshold=1.0)


def test_inputs_are_not_mutated(gate):
    base, new = document(), document(slower={MEMO: 2.0})
    base_copy, new_copy = copy.deepcopy(base), copy.deepcopy(new)
    gate.compare(base, new)
    assert base == base_copy and new == new_copy
