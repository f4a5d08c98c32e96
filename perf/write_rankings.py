"""Write the measured rankings (package data) from committed GPU benchmark reports: never typed in.

    python -m perf.write_rankings EVIDENCE_ID [EVIDENCE_ID ...] [--out rapid_llm/kernels/rankings]

Each EVIDENCE_ID names a benchmark report in perf/results/index.json (the JSON perf/gpu_report.py writes:
one record per timed arm with its op, row, dtype, the call's contract dims and its median microseconds
`us`, CUDA events with the L2 flushed: what the row costs a caller per call as dispatch serves it).
Records of table rows only (peers and references are not rows that dispatch ranks) are grouped by
(op, dtype, bucket of the dims under the op's contract rules); within a bucket, the rows timed at every
one of its benchmark shapes are ranked by their mean time, fastest first (a bucket with fewer than two
such rows ranks nothing). Writes one file per device class (rankings/<class>.json, e.g. cuda_sm90.json)
with the device name and the evidence ids; dispatch reads it through build_tables().
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
    for record in report["cases"]:
        row, op, dims = record.get("row"), record.get("op"), record.get("dims")
        if not row or row not in table.rows_by_name or record.get("us") is None:
            continue  # a peer, a reference or an arm that failed
        if dims is None:
            raise ValueError(f"{evidence}: record {record.get('test')} has no 'dims' (re-run the benchmark)")
        key = (op, record["dtype"], table.contracts[op].bucket_key(dims))
        groups.setdefault(key, {}).setdefault(record["case"], {})[row] = float(record["us"])
    entries = []
    for (op, dtype, bucket), cases in sorted(groups.items()):
        everywhere = set.intersection(*(set(times) for times in cases.values()))
        if len(everywhere) < 2:
            continue
        means = {row: sum(times[row] for times in cases.values()) / len(cases) for row in everywhere}
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
    return device_class, report["device"], entries


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
            {"schema": SCHEMA, "device_class": device_class, "device": device, "evidence": evidence, "entries": []},
        )
        document["entries"] += entries
    os.makedirs(args.out, exist_ok=True)
    for device_class, document in documents.items():
        path = os.path.join(args.out, device_class.replace(":", "_") + ".json")
        header = {key: value for key, value in document.items() if key != "entries"}
        lines = [json.dumps(entry) for entry in document["entries"]]  # one measured bucket a line: a diff per bucket
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(header)[:-1] + ', "entries": [\n ' + ",\n ".join(lines) + "\n]}\n")
        print(f"{path}: {len(document['entries'])} measured buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
