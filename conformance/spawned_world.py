"""A world of spawned processes for a test, one per rank, every wait bounded: what the comm family's tests
(conformance/test_comm_distributed.py) and its GPU benchmarks (perf/test_comm_bench.py) share.

    port = free_port()                  # the rendezvous port on the loopback
    reports = run_world(worker, args_of_rank, world, out_dir, join_timeout_s, what)

Each worker gets ("spawn" start method: torch and the library imported fresh) its rank followed by
args_of_rank(rank), and ends by write_report(out_dir, rank, report) (also when it raised: report["crash"]).
run_world joins every worker against one deadline, kills one still alive there, and fails the test naming
every rank that hung, exited without reporting or raised; else it returns the reports by rank.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_report(out_dir, rank: int, report: dict) -> None:
    """rank<r>.json in out_dir, written whole (a partial file renamed): the parent never reads half a report."""
    path = Path(out_dir) / f"rank{rank}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report))
    partial.replace(path)


def run_world(worker, args_of_rank, world: int, out_dir: Path, join_timeout_s: float, what: str) -> list[dict]:
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=worker, args=(rank, *args_of_rank(rank)), name=f"{what}-rank{rank}", daemon=True)
        for rank in range(world)
    ]
    started = time.monotonic()
    try:
        for process in workers:
            process.start()
        deadline = started + join_timeout_s
        for process in workers:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        hung = [(rank, process.pid) for rank, process in enumerate(workers) if process.is_alive()]
        for process in workers:
            if process.is_alive():
                process.kill()
                process.join(30)
    if hung:
        names = ", ".join(f"rank {rank} (pid {pid})" for rank, pid in hung)
        pytest.fail(f"{what}: {names} still running after {join_timeout_s} s (a hang): killed")
    reports, problems = [], []
    for rank, process in enumerate(workers):
        path = Path(out_dir) / f"rank{rank}.json"
        if not path.exists():
            problems.append(f"rank {rank} exited with code {process.exitcode} without reporting")
            continue
        report = json.loads(path.read_text())
        if report.get("crash"):
            problems.append(f"rank {rank} raised:\n{report['crash']}")
        reports.append(report)
    if problems:
        pytest.fail(f"{what}:\n" + "\n".join(problems))
    return reports
