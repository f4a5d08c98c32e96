#!/usr/bin/env python3
"""Run the GPU benchmark suites and write the evidence file.

    python perf/gpu_report.py --out perf/results/h200            # on the H200
    python perf/gpu_report.py --out /tmp/r -- -k "tokens=64"     # extra pytest args after --
    python perf/gpu_report.py --out /tmp/r --name h200_ext --suites perf/test_elementwise_bench.py

Runs the GPU suites (SUITES: every perf/test_*_bench.py except the CPU dispatcher suite; or those
given with --suites) under
pytest-benchmark (--benchmark-json, --junitxml), then writes into --out:

  bench_h200.json            one summary per case: row, shape, dtype, event-timed µs, GB/s,
                             % of the measured copy bandwidth, graph-replay µs, FLOPs and TFLOP/s,
                             how the arm was driven; for every row of an op with engine-driven
                             peers (perf/peers.py ENGINE_PEERS), its ratio against the fastest of
                             them at the same case per timer ("engine_peer"); plus device,
                             torch/triton/library versions, the exact command, the date, skips
                             and failures (each with its op's row and case)
  bench_h200.md              the same as a markdown table (for the README's performance table)
  pytest_benchmark_h200.json pytest-benchmark's raw output
  junit_h200.xml             pass/skip/fail per case, with skip reasons

and prints a short table last. Exit status: pytest's (non-zero if a case
failed its correctness check or errored; the files are still written). A case
that fails (a peer whose library errors, a check that does not hold) is listed
under "failed" with its message and the run goes on. SIGINT (a time limit's
`timeout -s INT`) reaches pytest, which stops and writes what ran; this
process waits for it and still writes the summary ("interrupted": true).
The name "h200" is the default of --name; pass another on other GPUs.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:  # run as a script (python perf/gpu_report.py): perf.peers from the checkout
    sys.path.insert(0, REPO_ROOT)
#: The CPU suites among perf/test_*_bench.py (gated in CI by ci/perf_gate, not GPU evidence).
CPU_SUITES = ("perf/test_dispatcher_bench.py",)


def gpu_suites() -> tuple[str, ...]:
    """Every perf/test_*_bench.py but the CPU suites, sorted: a new family's bench file is picked up as it lands."""
    found = sorted(glob.glob(os.path.join(REPO_ROOT, "perf", "test_*_bench.py")))
    return tuple(
        suite
        for suite in (os.path.relpath(path, REPO_ROOT).replace(os.sep, "/") for path in found)
        if suite not in CPU_SUITES
    )


SUITES = gpu_suites()
SCHEMA = "rapid_llm.perf.gpu_report/1"
#: Distributions whose versions the report records (the peers' libraries), when installed.
LIBRARIES = (
    "flashinfer-python",
    "apache-tvm-ffi",
    "sgl-flash-mla",
    "fa3-fwd",
    "tokenspeed-deepgemm",
    "pytest-benchmark",
)
RATIO_DEFINITION = (
    "engine_peer.<event|graph>: the fastest of the op's engine-driven peers (engine_peers) timed at the same "
    "case with the same timer (event: CUDA events, L2 flushed; graph: CUDA-graph replay); ratio = that peer's "
    "time / this row's time (> 1: the row is faster). engine_peer_ratios: the same ratio against each of them."
)


def _library_versions() -> dict:
    from importlib import metadata

    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _engine_peers() -> dict:
    from perf.peers import ENGINE_PEERS

    return {op: list(peers) for op, peers in ENGINE_PEERS.items()}


def _versions() -> dict:
    info = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            props = torch.cuda.get_device_properties(index)
            info.update(
                device=torch.cuda.get_device_name(index),
                sm=major * 10 + minor,
                multiprocessors=props.multi_processor_count,
                memory_GiB=round(props.total_memory / 2**30, 1),
            )
    except ImportError:
        info["torch"] = None
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    try:
        info["driver"] = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        info["driver"] = None
    info["commit"], info["worktree_dirty"] = _git_state()
    info["libraries"] = _library_versions()
    return info


def _git_state():
    """(commit sha or None, whether tracked or untracked files differ from it; None if unknown)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--verify", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
        )
        sha = head.stdout.strip()
        if head.returncode != 0 or len(sha) != 40:
            return None, None  # not a git checkout (a copied tree): say so rather than guess
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        return sha, (bool(status.stdout.strip()) if status.returncode == 0 else None)
    except (OSError, subprocess.SubprocessError):
        return None, None


def _arm_and_case(test_name: str) -> tuple[str | None, str | None]:
    """(row, case) of a parametrised suite test "test_x[<row>-<case>]" (row names carry no '-'), else Nones."""
    if "[" not in test_name or not test_name.endswith("]"):
        return None, None
    param = test_name[test_name.index("[") + 1 : -1]
    row, _, case = param.partition("-")
    return (row, case or None) if "/" in row else (None, None)


def _junit_outcomes(path: str) -> tuple[list, list, int]:
    """(skipped [{test, row, case, reason}], failed [{test, row, case, kind, message}], total) from pytest's
    junit XML."""
    if not os.path.exists(path):
        return [], [], 0
    skipped, failed, total = [], [], 0
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        total += 1
        name = case.get("name")
        row, case_id = _arm_and_case(name or "")
        for child in case:
            if child.tag == "skipped":
                skipped.append({"test": name, "row": row, "case": case_id, "reason": child.get("message", "")})
            elif child.tag in ("failure", "error"):
                failed.append(
                    {
                        "test": name,
                        "row": row,
                        "case": case_id,
                        "kind": child.tag,
                        "message": (child.get("message") or "")[:2000],
                    }
                )
    return skipped, failed, total


def _timer_value(case: dict, timer: str):
    return case.get("us") if timer == "event" else case.get("graph_us")


def add_engine_peer_ratios(cases: list[dict], engine_peers: dict) -> None:
    """Fill engine_peer and engine_peer_ratios of every case whose op has engine-driven peers (the peers' own
    cases excepted): per timer, the fastest peer timed at the same (op, case) and peer time / this time."""
    by_case: dict[tuple, dict] = {}
    for case in cases:
        by_case.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    for case in cases:
        peers = engine_peers.get(case["op"])
        if not peers or case["row"] in peers:
            continue
        present = by_case[(case["op"], case["case"])]
        best, ratios = {}, {}
        for timer in ("event", "graph"):
            mine = _timer_value(case, timer)
            timed = [(peer, _timer_value(present[peer], timer)) for peer in peers if peer in present]
            timed = [(peer, value) for peer, value in timed if value]
            for peer, value in timed:
                ratios.setdefault(peer, {})[timer] = value / mine if mine else None
            if timed:
                peer, value = min(timed, key=lambda item: item[1])
                best[timer] = {"row": peer, "us": value, "ratio": value / mine if mine else None}
            else:
                best[timer] = None
        case["engine_peer"] = best
        case["engine_peer_ratios"] = ratios


def _case(bench: dict) -> dict:
    info = bench.get("extra_info") or {}
    stats = bench["stats"]
    return {
        "test": bench["name"],
        "op": info.get("op"),
        "row": info.get("row"),
        "case": info.get("case"),
        "shape": info.get("shape"),
        "tokens": info.get("tokens"),
        "heads": info.get("heads"),
        "hidden": info.get("hidden"),
        "dtype": info.get("dtype"),
        "dims": info.get("dims"),
        "phase": info.get("phase"),
        "model": info.get("model"),
        "bytes": info.get("bytes"),
        "us": info.get("event_median_us"),
        "us_p20": info.get("event_p20_us"),
        "us_p80": info.get("event_p80_us"),
        "GBps": info.get("GBps"),
        "pct_of_copy_bw": info.get("pct_of_copy_bw"),
        "same_size_copy_us": info.get("same_size_copy_us"),
        "pct_of_same_size_copy": info.get("pct_of_same_size_copy"),
        "graph_us": info.get("graph_us"),
        "graph_GBps": info.get("graph_GBps"),
        "flops": info.get("flops"),
        "TFLOPs": info.get("TFLOPs"),
        "graph_TFLOPs": info.get("graph_TFLOPs"),
        "wall_us": stats["median"] * 1e6,
        "correctness": info.get("correctness"),
        "max_abs_diff": info.get("max_abs_diff"),
        "max_ulp": info.get("max_ulp"),
        "driven": info.get("driven"),
        "graph_error": info.get("graph_error"),
        "engine_peer": None,  # add_engine_peer_ratios fills these for the ops with engine-driven peers
        "engine_peer_ratios": None,
    }


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def _table_lines(cases: list[dict], *, markdown: bool) -> list[str]:
    """One line per (op, shape, dtype); for each row: event µs, GB/s, % of copy BW, graph µs."""
    arms_by_op: dict[str, list[str]] = {}
    grouped: dict[tuple, dict] = {}
    for case in cases:
        arms = arms_by_op.setdefault(case["op"], [])
        if case["row"] not in arms:
            arms.append(case["row"])
        grouped.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = []
    for op, arms in arms_by_op.items():
        header = ["case"] + [f"{arm} µs / GB/s / %BW / graph µs" for arm in arms]
        if markdown:
            lines += ["", f"### {op}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        else:
            lines += ["", op, "  ".join(f"{h:<24}" if i == 0 else f"{h:>34}" for i, h in enumerate(header))]
        for (case_op, case_id), by_arm in grouped.items():
            if case_op != op:
                continue
            cells = [case_id]
            for arm in arms:
                c = by_arm.get(arm)
                cells.append(
                    "-"
                    if c is None
                    else f"{_fmt(c['us'])} / {_fmt(c['GBps'], 0)} / {_fmt(c['pct_of_copy_bw'], 0)}% / "
                    f"{_fmt(c['graph_us'])}"
                )
            if markdown:
                lines.append("| " + " | ".join(cells) + " |")
            else:
                lines.append("  ".join(f"{c:<24}" if i == 0 else f"{c:>34}" for i, c in enumerate(cells)))
    return lines


def _ratio_lines(cases: list[dict], *, markdown: bool) -> list[str]:
    """One line per (op, case, row) that has an engine-peer ratio: the peer and the ratio per timer."""

    def cell(best):
        return (
            "-"
            if not best or best.get("ratio") is None
            else f"{best['ratio']:.2f}x vs {best['row']} ({best['us']:.1f} µs)"
        )

    rows = [case for case in cases if case.get("engine_peer")]
    if not rows:
        return []
    title = "Against the engine-driven peer (peer time / row time; > 1: the row is faster)"
    if markdown:
        lines = ["", f"### {title}", "", "| op | case | row | events | graph replay |", "|---|---|---|---|---|"]
    else:
        lines = ["", title]
    for case in rows:
        cells = [
            case["op"],
            case["case"],
            case["row"],
            cell(case["engine_peer"].get("event")),
            cell(case["engine_peer"].get("graph")),
        ]
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return lines


def _run_pytest(command: list[str]) -> tuple[int, bool]:
    """(pytest's exit status, whether a SIGINT arrived): SIGINT is left to pytest (same process group), which
    stops after the running case and writes its files; this process waits instead of dying with it."""
    interrupted = []
    # pytest turns SIGINT into a clean stop only if it does not inherit SIGINT ignored (as commands started in
    # the background of a non-interactive shell do): the default disposition before its exec
    process = subprocess.Popen(command, cwd=REPO_ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        while True:
            try:
                return process.wait(), bool(interrupted)
            except KeyboardInterrupt:  # only if a handler other than ours raised it
                interrupted.append(True)
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for the result files (e.g. perf/results/h200)")
    parser.add_argument("--name", default="h200", help="suffix of the file names (default h200)")
    parser.add_argument(
        "--commit",
        help="the commit the tree was copied from, where it is not a git checkout "
        "(e.g. a GPU machine that receives a copy of the working tree)",
    )
    parser.add_argument(
        "--suites",
        nargs="+",
        metavar="FILE",
        default=list(SUITES),
        help="benchmark files to run, relative to the repository root (default: every GPU suite)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    raw_json = os.path.join(out, f"pytest_benchmark_{args.name}.json")
    junit = os.path.join(out, f"junit_{args.name}.xml")
    command = [
        sys.executable,
        "-m",
        "pytest",
        *args.suites,
        f"--benchmark-json={raw_json}",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfEs",
        "--benchmark-columns=median,rounds",
        "--benchmark-sort=fullname",
        *args.pytest_args,
    ]
    started = datetime.datetime.now(datetime.timezone.utc)
    print("$ " + shlex.join(command), flush=True)
    status, interrupted = _run_pytest(command)
    finished = datetime.datetime.now(datetime.timezone.utc)

    raw, raw_error = {}, None
    if os.path.exists(raw_json):
        try:
            with open(raw_json) as handle:
                raw = json.load(handle)
        except ValueError as error:  # empty (no case was timed) or cut short: the junit outcomes still count
            raw_error = f"{os.path.basename(raw_json)}: {error}"
    cases = [_case(bench) for bench in raw.get("benchmarks", [])]
    engine_peers = _engine_peers()
    add_engine_peer_ratios(cases, engine_peers)
    skipped, failed, total = _junit_outcomes(junit)
    versions = _versions()
    if versions["commit"] is None and args.commit:
        versions["commit"], versions["commit_source"] = args.commit, "--commit (not a git checkout)"
    copy_GBps = next(
        (
            b["extra_info"].get("copy_GBps")
            for b in raw.get("benchmarks", [])
            if (b.get("extra_info") or {}).get("copy_GBps")
        ),
        None,
    )
    report = {
        "schema": SCHEMA,
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((finished - started).total_seconds(), 1),
        "command": shlex.join(command),
        "cwd": REPO_ROOT,
        "pytest_exit_status": status,
        "interrupted": interrupted,
        "raw_json_error": raw_error,
        **versions,
        "copy_bandwidth_GBps": copy_GBps,
        "timing": (
            "us: CUDA-event median over 50 calls, L2 flushed (512 MiB write) before each, warm-up "
            "excluded; graph_us: per-call time replaying a CUDA graph of 20 calls (L2 warm), decode-sized "
            "cases; wall_us: pytest-benchmark median of one eager call + synchronize (launch included); "
            "GB/s from bytes read + written once; % of the copy bandwidth measured in the same session"
        ),
        "engine_peers": engine_peers,
        "ratio": RATIO_DEFINITION,
        "counts": {"tests": total, "timed": len(cases), "skipped": len(skipped), "failed": len(failed)},
        "cases": cases,
        "skipped": skipped,
        "failed": failed,
    }
    summary_path = os.path.join(out, f"bench_{args.name}.json")
    with open(summary_path, "w") as handle:
        json.dump(report, handle, indent=1)
        handle.write("\n")
    markdown = [
        f"# GPU benchmarks: {versions.get('device')} (sm{versions.get('sm')})",
        "",
        f"torch {versions.get('torch')}, triton {versions.get('triton')}, {report['date']}; "
        f"device-to-device copy {_fmt(copy_GBps, 0)} GB/s (read + write). Generated by "
        f"perf/gpu_report.py from {os.path.basename(summary_path)}.",
        "",
        "Cells: event-timed µs (L2 flushed) / GB/s / % of copy bandwidth / CUDA-graph µs per call.",
    ]
    markdown += _table_lines(cases, markdown=True)
    markdown += _ratio_lines(cases, markdown=True)
    with open(os.path.join(out, f"bench_{args.name}.md"), "w") as handle:
        handle.write("\n".join(markdown) + "\n")

    print(f"\nwrote {summary_path} ({len(cases)} timed, {len(skipped)} skipped, {len(failed)} failed)")
    for failure in failed:
        print(f"FAILED {failure['test']}: {failure['message'].splitlines()[0] if failure['message'] else ''}")
    print(
        f"{versions.get('device')}  torch {versions.get('torch')}  triton {versions.get('triton')}  "
        f"copy {_fmt(copy_GBps, 0)} GB/s  ({report['date']})"
    )
    print("\n".join(_table_lines(cases, markdown=False) + _ratio_lines(cases, markdown=False)))
    return status


if __name__ == "__main__":
    sys.exit(main())
