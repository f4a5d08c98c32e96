"""Write the measured rankings (package data) from committed GPU benchmark reports: never typed in.

    python -m perf.write_rankings EVIDENCE_ID [EVIDENCE_ID ...] [--out rapid_llm/kernels/rankings]

Each EVIDENCE_ID names a benchmark report in perf/results/index.json (the JSON perf/gpu_report.py writes:
one record per timed arm with its op, row, dtype and the call's contract dims). A row's time is its
CUDA-graph replay per call `graph_us` where the report has one (decode sizes: engines replay decode steps
from graphs, and an eager call's event time there includes the host's enqueue), else its CUDA-event median
`us` with the L2 flushed: what the row costs a caller per call as dispatch serves it.
Records of table rows only (peers and references are not rows that dispatch ranks) are grouped by
(op, dtype, bucket of the dims under the op's contract rules); within a bucket, rows are ranked by their
mean time over the shapes that timed them, fastest first (_bucket_means: which shapes count together).
Writes one file per device class (rankings/<class>.json, e.g. cuda_sm90.json) with the device name and
the evidence ids; dispatch reads it through build_tables(). With several ids, a later report's bucket
replaces an earlier report's same (op, dtype, bucket) when it timed every row the earlier one ranked (a rerun
of some ops updates just their buckets; one that left a row out keeps the earlier bucket, said on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.evidence import resolve  # noqa: E402
from rapid_llm.kernels.dispatcher.rankings import SCHEMA  # noqa: E402

DEFAULT_OUT = os.path.join("rapid_llm", "kernels", "rankings")


def rankings_of(report: dict, evidence: str, table) -> tuple[str, str, list[dict]]:
    """(device class, device name, entries) of one benchmark report."""
    device_class = f"cuda:sm{report['sm']}"
    groups: dict = {}
    unbucketed: set = set()
    for record in report["cases"]:
        row, op, dims = record.get("row"), record.get("op"), record.get("dims")
        time_us = record.get("graph_us") or record.get("us")
        if not row or row not in table.rows_by_name or time_us is None:
            continue  # a peer, a reference or an arm that failed
        if dims is None:  # a suite that does not record its calls' contract dims: nothing to bucket by
            unbucketed.add(op)
            continue
        key = (op, record["dtype"], table.contracts[op].bucket_key(dims))
        groups.setdefault(key, {}).setdefault(record["case"], {})[row] = float(time_us)
    entries = []
    for (op, dtype, bucket), cases in sorted(groups.items()):
        means = _bucket_means(cases)
        if len(means) < 2:
            continue
        entries.append(
            {
                "op": op,
                "dtype": dtype,
                "bucket": [list(item) for item in bucket],
                "ranking": [[row, round(us, 2)] for row, us in sorted(means.items(), key=lambda x: x[1])],
                "shapes": len(cases),
                "evidence": evidence,
            }
        )
    if unbucketed:
        print(f"{evidence}: not ranked (its records carry no contract dims): {', '.join(sorted(unbucketed))}")
    return device_class, report["device"], entries


def _bucket_means(cases: dict) -> dict:
    """{row: mean time} of one bucket's cases ({case: {row: us}}).

    Cases that timed the same rows form a group; each group's rows are ranked by their mean over the group.
    Groups with disjoint rows are rows that never serve the same call (a bf16 and an fp8 KV cache share a
    bucket: the KV dtype is a layout tag, not a dim), so their rankings merge. Otherwise only the rows timed
    at every case of the bucket are ranked."""
    by_rows: dict = {}
    for times in cases.values():
        by_rows.setdefault(frozenset(times), []).append(times)
    row_sets = list(by_rows)
    if all(a.isdisjoint(b) for i, a in enumerate(row_sets) for b in row_sets[i + 1 :]):
        return {
            row: sum(times[row] for times in group) / len(group)
            for rows, group in by_rows.items()
            if len(rows) >= 2
            for row in rows
        }
    everywhere = set.intersection(*(set(times) for times in cases.values()))
    return {row: sum(times[row] for times in cases.values()) / len(cases) for row in everywhere}


def _rows(entry: dict) -> set:
    return {row for row, _ in entry["ranking"]}


def _replaces(earlier: dict | None, later: dict) -> bool:
    """Whether a later report's bucket replaces an earlier one's: only when it timed every row the earlier one
    ranked (rows compared within one run only; a rerun of some rows never drops the rows it did not time)."""
    return earlier is None or _rows(earlier) <= _rows(later)


def main(argv=None) -> int:
    from rapid_llm.kernels.dispatcher.table import build_tables

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evidence", nargs="+", help="benchmark report ids from perf/results/index.json")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    table = build_tables()
    documents: dict = {}
    for evidence in args.evidence:
        with open(resolve(evidence), encoding="utf-8") as handle:
            device_class, device, entries = rankings_of(json.load(handle), evidence, table)
        document = documents.setdefault(
            device_class,
            {"schema": SCHEMA, "device_class": device_class, "device": device, "evidence": [], "entries": {}},
        )
        document["evidence"].append(evidence)
        for entry in entries:
            key = (entry["op"], entry["dtype"], json.dumps(entry["bucket"]))
            if not _replaces(document["entries"].get(key), entry):
                print(
                    f"{evidence}: kept {key[0]} {key[2]} of {document['entries'][key]['evidence']} (rows it "
                    f"timed that {evidence} did not: {sorted(_rows(document['entries'][key]) - _rows(entry))})"
                )
                continue
            document["entries"].pop(key, None)  # a later report's bucket goes after the ones it keeps
            document["entries"][key] = entry
    os.makedirs(args.out, exist_ok=True)
    for device_class, document in documents.items():
        path = os.path.join(args.out, device_class.replace(":", "_") + ".json")
        header = {key: value for key, value in document.items() if key != "entries"}
        header["evidence"] = " ".join(header["evidence"])
        lines = [
            json.dumps(entry) for entry in document["entries"].values()
        ]  # one measured bucket a line: a diff per bucket
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(header)[:-1] + ', "entries": [\n ' + ",\n ".join(lines) + "\n]}\n")
        print(f"{path}: {len(document['entries'])} measured buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
