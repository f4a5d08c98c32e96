"""Parity measurements of this session, written out by conftest.py when RAPID_LLM_PARITY_REPORT is set; and
the merge of several such reports (shards of one parity run) into one.

A module of its own so that conftest.py (loaded by pytest as `conftest`) and
test_parity.py share one list through one import name.

Merging: `python -m conformance.parity_log merge OUT.json A.json B.json ...` writes one report whose
measurements are the shards' (concatenated), max_abs_diff_by_row the worst per row, exit_status the worst
shard's, and `merged_from` each shard's command and exit status. Shards of one run share a device, torch and
libraries; reports that do not are refused (a merge never mixes machines).
"""

from __future__ import annotations

import json
import sys

PARITY_MEASUREMENTS: list[dict] = []

#: fields every shard of one run must share
SHARED_FIELDS = ("device", "device_name", "torch", "libs", "note")


def merge_reports(reports: list[dict]) -> dict:
    """One parity report from the reports of a run's shards (see the module docstring)."""
    if not reports:
        raise ValueError("merge_reports: no reports to merge")
    first = reports[0]
    for index, report in enumerate(reports[1:], start=1):
        differing = [field for field in SHARED_FIELDS if report.get(field) != first.get(field)]
        if differing:
            raise ValueError(f"merge_reports: report {index} differs from report 0 in {differing}: not one run")
    measurements = [measurement for report in reports for measurement in report["measurements"]]
    worst: dict[str, float] = {}
    for measurement in measurements:
        worst[measurement["row"]] = max(worst.get(measurement["row"], 0.0), measurement["max_abs_diff"])
    merged = {field: first.get(field) for field in SHARED_FIELDS}
    merged.update(
        date=max(report["date"] for report in reports),
        command=" ; ".join(report["command"] for report in reports),
        merged_from=[{"command": report["command"], "exit_status": report["exit_status"]} for report in reports],
        exit_status=max(report["exit_status"] for report in reports),
        max_abs_diff_by_row=worst,
        measurements=measurements,
    )
    return merged


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "merge":
        print("usage: python -m conformance.parity_log merge OUT.json REPORT.json [REPORT.json ...]", file=sys.stderr)
        return 2
    out, paths = argv[1], argv[2:]
    reports = []
    for path in paths:
        with open(path) as handle:
            reports.append(json.load(handle))
    merged = merge_reports(reports)
    with open(out, "w") as handle:
        json.dump(merged, handle, indent=1)
    print(f"{out}: {len(paths)} reports, exit {merged['exit_status']}, rows {merged['max_abs_diff_by_row']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
