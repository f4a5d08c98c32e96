"""GPU perf gate: the GPU suites against the stored H200 baseline (run on the device; CI has no GPU).

    ci/gpu_perf_gate OUT                    run the GPU suites once, compare with the baseline, reports in OUT;
                                            exit 1 on a regression (every regressed row named)
    ci/gpu_perf_gate OUT --self-test        two unchanged runs back to back must both pass, and a run with
                                            RAPID_LLM_GPU_PERF_PLANT=native/rotary (a deliberately worse launch
                                            config, ~1.2x slower) must fail naming native/rotary
    ci/gpu_perf_gate OUT --update-baseline  run once and save it as the baseline (a deliberate command: the
                                            baseline file is rewritten in place, so its git diff shows old and
                                            new figures)
    ci/gpu_perf_gate OUT --compare NEW.json compare an existing run (no GPU needed)
    ci/gpu_perf_gate OUT --merge-baseline RUN.json...
                                            add (or replace) the gated cases of suite runs made on the GPU
                                            (pytest-benchmark JSON, e.g. a perf/gpu_report.py run's) in the
                                            baseline file in place: a new row's cases join the gate without
                                            re-running every suite (no GPU needed; the diff shows them)

Storage: pytest-benchmark's own format and storage. The baseline is saved with
`--benchmark-save=h200 --benchmark-storage=file://perf/baselines/h200`, i.e.
perf/baselines/h200/<machine id>/0001_h200.json, whose machine_info carries the
GPU, driver, torch/triton versions (perf/conftest.py) and commit_info the commit
(RAPID_LLM_COMMIT when the device's git metadata lags the tree). Every run's
human-readable output is pytest-benchmark's own compare report
(`pytest-benchmark compare BASELINE RUN`), followed by the gate's verdict table.

The statistic (why not pytest-benchmark's --benchmark-compare-fail): pytest-benchmark
times the host's wall clock around a call plus a synchronize, whose medians ranged 0.34-2.55x
case by case between unchanged runs on the H200 (the compare report in every gate_*.txt shows it); the gate
decides on device time instead, the number the README's table shows: graph-replay
time per call for decode sizes, CUDA-event median with L2 flushed for prefill sizes
(extra_info). A shared machine drifts by several percent between runs, uniformly:
each case's new/baseline ratio is divided by the run's drift, the median ratio over
all cases of the same phase (decode or prefill) — a regression of one kernel cannot
move that median, as the CPU gate's calibration workload cannot. Then, per (row, phase):

    regression  <=>  geometric mean of its drift-corrected ratios > THRESHOLDS[phase]["geomean"]
                     or any one case > THRESHOLDS[phase]["case"]
    prefill: 1.10 / 1.25        decode: 1.20 / 1.40

Why these numbers: six H200 runs of one tree on 2026-11-30 compared with the baseline
(the two self-tests' unchanged and planted runs, native/rotary left out of the planted
ones): our rows' prefill geometric means stayed within 1.018 and single prefill cases
within 1.09; decode times (1-2 µs per call, where 0.1 µs is 5-10%) reached 1.111
(native/scale) and single decode cases 1.20. The planted slowdown measured 1.17
(geometric mean) on native/rotary's prefill cases. Only our kernels are gated (native/,
aot/, jit/): the torch/ reference rows are host-bound (several launches, syncs) and moved
up to 2.27x on single cases in runs where their code had not changed; they, and the peers
(torch eager, FlashInfer), are timed by the suites but not gated. A baseline case
missing from the run fails (a deleted or skipped case must not pass silently); a case
without baseline is listed as new.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORAGE = os.path.join(REPO_ROOT, "perf", "baselines", "h200")
BASELINE_NAME = "h200"
PLANT_ENV = "RAPID_LLM_GPU_PERF_PLANT"
SELF_TEST_PLANT = "native/rotary"
THRESHOLDS = {"prefill": {"geomean": 1.10, "case": 1.25}, "decode": {"geomean": 1.20, "case": 1.40}}
GATED_BACKENDS = ("native", "aot", "jit")
#: FlashInfer peers need carried wheels and minutes of JIT compilation, and are not ours to gate.
DESELECT = "not flashinfer"


def gpu_suites() -> list[str]:
    sys.path.insert(0, REPO_ROOT)
    from perf.gpu_report import gpu_suites as suites

    return [os.path.relpath(path, REPO_ROOT) if os.path.isabs(path) else path for path in suites()]


def baseline_path() -> str | None:
    """The stored baseline: the newest *_h200.json under perf/baselines/h200/<machine id>/."""
    found = sorted(glob.glob(os.path.join(STORAGE, "*", f"*_{BASELINE_NAME}.json")))
    return found[-1] if found else None


def run_suites(out_json: str, *, plant: str | None = None, save: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLANT_ENV}
    # the jit/ rows are gated too: their first-use build is opt-in (RAPID_LLM_JIT=1), so the gate opts in
    env["RAPID_LLM_JIT"] = "1"
    if plant:
        env[PLANT_ENV] = plant
    command = [
        sys.executable,
        "-m",
        "pytest",
        *gpu_suites(),
        "-k",
        DESELECT,
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        f"--benchmark-json={out_json}",
        f"--benchmark-storage=file://{STORAGE}",
    ]
    if save:
        command.append(f"--benchmark-save={BASELINE_NAME}")
    print(f"$ {PLANT_ENV}={plant or ''} {' '.join(command)}", flush=True)
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    with open(os.path.splitext(out_json)[0] + "_pytest.log", "w") as handle:  # every failure's traceback
        handle.write(output)
    lines = output.strip().splitlines()
    print("\n".join([line for line in lines if line.startswith(("FAILED", "ERROR"))] + lines[-3:]), flush=True)
    if not os.path.exists(out_json):
        raise SystemExit(f"gpu perf gate: the suites wrote no results (pytest exit {result.returncode})")
    with open(out_json) as handle:
        return json.load(handle)


def device_times(document: dict) -> dict:
    """fullname -> (row, phase, device µs) for the gated rows' cases."""
    cases = {}
    for bench in document.get("benchmarks", []):
        info = bench.get("extra_info", {})
        row, phase = info.get("row"), info.get("phase")
        if not row or row.partition("/")[0] not in GATED_BACKENDS or "event_median_us" not in info:
            continue
        time_us = info.get("graph_us") if phase == "decode" and info.get("graph_us") else info["event_median_us"]
        cases[bench["fullname"]] = (row, phase, time_us)
    return cases


def compare(baseline: dict, new: dict) -> dict:
    """The verdict: per (row, phase) geometric mean of drift-corrected ratios, failures, missing and new cases."""
    old_cases, new_cases = device_times(baseline), device_times(new)
    missing = sorted(set(old_cases) - set(new_cases))
    added = sorted(set(new_cases) - set(old_cases))
    common = [name for name in old_cases if name in new_cases]
    raw = {name: new_cases[name][2] / old_cases[name][2] for name in common}
    drift = {}
    for phase in {old_cases[name][1] for name in common}:
        drift[phase] = statistics.median(raw[name] for name in common if old_cases[name][1] == phase)
    groups: dict = {}
    for name in common:
        row, phase, _ = old_cases[name]
        groups.setdefault((row, phase), []).append((name, raw[name] / drift[phase]))
    rows = []
    for (row, phase), members in sorted(groups.items()):
        ratios = [ratio for _, ratio in members]
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        worst_name, worst = max(members, key=lambda item: item[1])
        limits = THRESHOLDS[phase]
        failed = mean > limits["geomean"] or worst > limits["case"]
        rows.append(
            {
                "row": row,
                "phase": phase,
                "cases": len(ratios),
                "geomean": mean,
                "worst": worst,
                "worst_case": worst_name.split("[", 1)[-1].rstrip("]"),
                "failed": failed,
            }
        )
    failed = [r for r in rows if r["failed"]]
    return {
        "passed": not failed and not missing,
        "drift": drift,
        "rows": rows,
        "failed": failed,
        "missing": missing,
        "new": added,
        "thresholds": THRESHOLDS,
    }


def render(verdict: dict, title: str) -> str:
    lines = [
        f"== {title}: {'PASS' if verdict['passed'] else 'FAIL'} ==",
        "run drift (median new/baseline device time, by phase): "
        + ", ".join(f"{phase} {value:.3f}" for phase, value in sorted(verdict["drift"].items())),
        f"{'row':<30}{'phase':<9}{'cases':>6}{'geomean':>10}{'worst':>8}  worst case",
    ]
    for row in verdict["rows"]:
        mark = "  <-- REGRESSION" if row["failed"] else ""
        lines.append(
            f"{row['row']:<30}{row['phase']:<9}{row['cases']:>6}{row['geomean']:>10.3f}{row['worst']:>8.3f}"
            f"  {row['worst_case']}{mark}"
        )
    for name in verdict["missing"]:
        lines.append(f"MISSING from this run (in the baseline): {name}")
    if verdict["new"]:
        lines.append(
            f"{len(verdict['new'])} case(s) without a baseline (not gated): "
            + ", ".join(n.split("[", 1)[-1].rstrip("]") for n in verdict["new"][:5])
        )
    lines.append(
        "thresholds (drift-corrected device time; ci/gpu_perf_gate.py says why): a (row, phase) fails when "
        + "; ".join(
            f"{phase}: geometric mean > {t['geomean']} or a case > {t['case']}" for phase, t in THRESHOLDS.items()
        )
    )
    if verdict["failed"]:
        lines.append(
            "regressed: " + ", ".join(f"{r['row']} ({r['phase']}, x{r['geomean']:.2f})" for r in verdict["failed"])
        )
    return "\n".join(lines)


def compare_report(baseline_file: str, run_file: str) -> str:
    """pytest-benchmark's own compare report (host wall time per call: what pytest-benchmark measures)."""
    command = [
        sys.executable,
        "-c",
        "import sys; from pytest_benchmark.cli import main; sys.exit(main())",
        "compare",
        baseline_file,
        run_file,
        "--columns=median,iqr,rounds",
        "--sort=name",
        "--name=short",
        "--group-by=func",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    return (
        f"$ pytest-benchmark compare {os.path.relpath(baseline_file, REPO_ROOT)} {run_file} "
        f"--columns=median,iqr,rounds --sort=name --name=short\n{result.stdout}{result.stderr}"
    )


def gate_one(baseline_file: str, run_doc: dict, run_file: str, out: str, tag: str) -> dict:
    with open(baseline_file) as handle:
        baseline = json.load(handle)
    verdict = compare(baseline, run_doc)
    text = render(verdict, f"gpu perf gate, {tag}")
    with open(os.path.join(out, f"gate_{tag}.txt"), "w") as handle:
        handle.write(compare_report(baseline_file, run_file) + "\n" + text + "\n")
    with open(os.path.join(out, f"gate_{tag}.json"), "w") as handle:
        json.dump(
            {
                "baseline": os.path.relpath(baseline_file, REPO_ROOT),
                "run": os.path.basename(run_file),
                "machine_info": run_doc.get("machine_info"),
                "commit_info": run_doc.get("commit_info"),
                **verdict,
            },
            handle,
            indent=1,
        )
    print(text, flush=True)
    return verdict


def merge_baseline(baseline_file: str, run_files: list[str]) -> None:
    """Put every gated case of run_files into the baseline (replacing a case of the same fullname)."""
    with open(baseline_file) as handle:
        baseline = json.load(handle)
    by_name = {bench["fullname"]: index for index, bench in enumerate(baseline["benchmarks"])}
    added = replaced = 0
    for run_file in run_files:
        with open(run_file) as handle:
            run = json.load(handle)
        gated = device_times(run)
        for bench in run["benchmarks"]:
            if bench["fullname"] not in gated:
                continue
            if bench["fullname"] in by_name:
                baseline["benchmarks"][by_name[bench["fullname"]]] = bench
                replaced += 1
            else:
                by_name[bench["fullname"]] = len(baseline["benchmarks"])
                baseline["benchmarks"].append(bench)
                added += 1
    with open(baseline_file, "w") as handle:
        json.dump(baseline, handle, indent=4)  # pytest-benchmark's own layout
    print(f"{os.path.relpath(baseline_file, REPO_ROOT)}: {added} gated cases added, {replaced} replaced")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ci/gpu_perf_gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="directory for the runs and reports")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--self-test", action="store_true")
    mode.add_argument("--update-baseline", action="store_true")
    mode.add_argument("--compare", metavar="NEW_JSON")
    mode.add_argument("--merge-baseline", metavar="RUN_JSON", nargs="+")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    if args.update_baseline:
        for old in glob.glob(os.path.join(STORAGE, "*", f"*_{BASELINE_NAME}.json")):
            os.remove(old)  # pytest-benchmark numbers saves: 0001 again, so the diff is old vs new in place
        run_suites(os.path.join(out, "baseline_run.json"), save=True)
        print(f"baseline saved: {os.path.relpath(baseline_path(), REPO_ROOT)}")
        return 0
    baseline_file = baseline_path()
    if baseline_file is None:
        raise SystemExit(f"gpu perf gate: no baseline under {STORAGE}; create one with --update-baseline")
    if args.merge_baseline:
        merge_baseline(baseline_file, args.merge_baseline)
        return 0
    if args.compare:
        with open(args.compare) as handle:
            verdict = gate_one(baseline_file, json.load(handle), args.compare, out, "compare")
        return 0 if verdict["passed"] else 1
    if not args.self_test:
        run_file = os.path.join(out, "run.json")
        verdict = gate_one(baseline_file, run_suites(run_file), run_file, out, "run")
        return 0 if verdict["passed"] else 1
    verdicts = {}
    for tag, plant in (("unchanged_1", None), ("unchanged_2", None), ("planted", SELF_TEST_PLANT)):
        run_file = os.path.join(out, f"{tag}.json")
        verdicts[tag] = gate_one(baseline_file, run_suites(run_file, plant=plant), run_file, out, tag)
    problems = [f"{tag} run FAILED the gate" for tag in ("unchanged_1", "unchanged_2") if not verdicts[tag]["passed"]]
    caught = [r for r in verdicts["planted"]["failed"] if r["row"] == SELF_TEST_PLANT]
    bystanders = [r["row"] for r in verdicts["planted"]["failed"] if r["row"] != SELF_TEST_PLANT]
    if not caught:
        problems.append(f"the planted slowdown of {SELF_TEST_PLANT} was NOT caught")
    if bystanders:
        print(f"note: the planted run also flagged {bystanders}")
    verdict_text = (
        ("SELF-TEST FAILED: " + "; ".join(problems))
        if problems
        else (
            f"SELF-TEST PASSED: two unchanged runs passed; the planted slowdown was caught: "
            + ", ".join(f"{r['row']} {r['phase']} x{r['geomean']:.2f}" for r in caught)
        )
    )
    print(verdict_text)
    with open(os.path.join(out, "self_test.txt"), "w") as handle:
        handle.write(verdict_text + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
