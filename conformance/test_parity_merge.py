"""conformance.parity_log.merge_reports: the shards of one parity run become one report (CPU, no GPU needed).

Catches a merge that keeps a shard's smaller max |diff| for a row, hides a failed shard's exit status, drops a
shard's measurements, or mixes reports from different machines.
"""

from __future__ import annotations

import json

import pytest

from conformance.parity_log import main, merge_reports


def _report(exit_status: int, measurements: list[tuple[str, float]], device: str = "cuda:sm90") -> dict:
    return {
        "date": "2026-12-05T10:00:00+00:00",
        "device": device,
        "device_name": "NVIDIA H200",
        "torch": "2.11.0+cu130",
        "libs": {"triton": "3.6.0"},
        "note": None,
        "command": f"shard exiting {exit_status}",
        "exit_status": exit_status,
        "max_abs_diff_by_row": {},
        "measurements": [
            {"row": row, "case": f"c{i}", "dtype": "bf16", "device": device, "baseline": "torch/x", "max_abs_diff": d}
            for i, (row, d) in enumerate(measurements)
        ],
    }


def test_merge_keeps_every_measurement_and_the_worst_per_row():
    merged = merge_reports([_report(0, [("a", 0.5), ("b", 0.0)]), _report(0, [("a", 0.25), ("a", 1.0)])])
    assert len(merged["measurements"]) == 4
    assert merged["max_abs_diff_by_row"] == {"a": 1.0, "b": 0.0}
    assert merged["exit_status"] == 0
    assert [shard["exit_status"] for shard in merged["merged_from"]] == [0, 0]


def test_merge_carries_a_failed_shard():
    assert merge_reports([_report(0, [("a", 0.5)]), _report(1, [("a", 0.1)])])["exit_status"] == 1


def test_merge_refuses_reports_of_different_machines():
    with pytest.raises(ValueError, match=r"differs from report 0 in \['device'\]"):
        merge_reports([_report(0, [("a", 0.5)]), _report(0, [("a", 0.1)], device="cpu")])


def test_merge_command_line(tmp_path):
    paths = []
    for index, report in enumerate([_report(0, [("a", 0.5)]), _report(0, [("a", 0.75)])]):
        paths.append(tmp_path / f"shard{index}.json")
        paths[-1].write_text(json.dumps(report))
    out = tmp_path / "merged.json"
    assert main(["merge", str(out), *map(str, paths)]) == 0
    assert json.loads(out.read_text())["max_abs_diff_by_row"] == {"a": 0.75}
    assert main(["merge", str(out)]) == 2
