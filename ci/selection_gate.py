"""The selection-diff gate: what dispatch selects, cell by cell, against a committed snapshot.

    ci/selection_gate              compute the selections and compare with ci/selection_snapshot.json;
                                   exit 1 naming every changed cell (old row -> new row, and why)
    ci/selection_gate --update     rewrite the snapshot (commit it in the same commit as the change)
    ci/selection_gate --self-test  the gate (the unchanged table must pass), then a planted change (one
                                   row's priority raised in a copy of the table) must fail naming the cells
                                   it moved: what .ci/run calls

A cell is (op, dtype, device class, library set, shape bucket). Its value is
the row `rapid-llm matrix --json` reports as selected there (the CLI's
`matrix_entries`, the function behind that command), or "none" when no row
is eligible. Dispatch is pure, so no GPU is needed: the devices and
libraries are described, as `rapid-llm matrix --device ... --no-local-libs
--lib ...` describes them.

  device classes  cuda:sm80, cuda:sm89, cuda:sm90, cuda:sm100, cpu, cpu+triton-interpreter
  library sets    bare (none), each known library alone, all of them (at the versions in LIBRARY_VERSIONS)
  shape buckets   every num_tokens bucket up to 32768 (judged at its upper bound, as a plan is), times the
                  op's other dims from every model preset that uses the op (rapid_llm/models.py); an op
                  no preset uses is judged with num_tokens (or num_elements) buckets alone; plus every
                  bucket the table's measured rankings cover ("measured:" cells), so a changed ranking
                  shows as a changed selection

Engines upgrading the library read the snapshot's diff to see which of their
kernels changed. In the file, a (op, dtype, device, libraries) group whose
buckets all select one row is stored as {"*": row}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

SNAPSHOT = os.path.join(REPO_ROOT, "ci", "selection_snapshot.json")
DEVICES = ("cuda:sm80", "cuda:sm89", "cuda:sm90", "cuda:sm100", "cpu", "cpu+triton-interpreter")
#: The version a "present" library is described at: the versions the H200 image carries.
LIBRARY_VERSIONS = {
    "triton": "3.6.0",
    "flashinfer": "0.6.0",
    "flash_attn": "0.0.3",
    "flash_mla": "1.0.0",
    "deep_gemm": "2.5.0",
    "deep_ep": "1.2.1",
}
MAX_TOKENS = 32768
SCHEMA = 1
#: The self-test's planted change: this row's priority raised above the row it ranks below today.
PLANT_ROW, PLANT_PRIORITY = "jit/scale", 2
SHOWN_CHANGES = 40


def library_sets() -> dict[str, dict[str, str]]:
    """label -> {library: version}: bare, each library alone, all."""
    from rapid_llm.kernels.dispatcher.libraries import known_libraries

    # cuda_extension has no distribution and no version: its rows' probes decide, not library sets
    names = [name for name, info in known_libraries().items() if info.distributions]
    sets = {"bare": {}}
    for name in names:
        sets[name] = {name: LIBRARY_VERSIONS[name]}
    sets["all"] = {name: LIBRARY_VERSIONS[name] for name in names}
    return sets


def shape_buckets(table, op: str) -> list[tuple[str, dict]]:
    """(label, representative shape) per shape bucket of `op`."""
    from rapid_llm.kernels.dispatcher.contract import TOKEN_BUCKETS
    from rapid_llm.models import PRESETS

    contract = table.contracts[op]
    token_dim = next((name for name in ("num_tokens", "num_elements") if name in contract.dim_names), None)
    other_dims = [name for name in contract.dim_names if name != token_dim]
    combos = []
    for preset in PRESETS.values():
        for use in preset.op_uses():
            if use.op != op:
                continue
            dims = dict(use.dims)
            combo = tuple((name, dims[name]) for name in other_dims if name in dims)
            if combo and combo not in combos:
                combos.append(combo)
    combos = combos or [()]
    buckets = TOKEN_BUCKETS.buckets_up_to(MAX_TOKENS) if token_dim else [None]
    cells = []
    for combo in combos:
        for bucket in buckets:
            shape = dict(combo)
            parts = [f"{name}={value}" for name, value in combo]
            if bucket is not None:
                low, high = bucket
                shape[token_dim] = high
                parts.insert(0, f"{token_dim}={low}-{high}" if low != high else f"{token_dim}={low}")
            cells.append((",".join(parts) or "-", shape))
    for ranking in table.rankings:
        if ranking.op == op:
            label = ",".join(
                f"{name}={low}-{high}" if low != high else f"{name}={low}" for name, low, high in ranking.bucket
            )
            if not any(existing == "measured:" + label for existing, _ in cells):
                cells.append(("measured:" + label, {name: high for name, _, high in ranking.bucket}))
    return cells


def compute(table, ops=None) -> dict:
    """{op: {dtype: {device: {libraries: {shape label: row or "none"}}}}} for `table` (or only `ops`)."""
    from rapid_llm.cli import matrix_entries
    from rapid_llm.kernels.dispatcher import Device, Environment, Libraries

    cells: dict = {}
    lib_sets = library_sets()
    for device_text in DEVICES:
        device = Device.parse(device_text)
        for label, versions in lib_sets.items():
            env = Environment(device=device, libs=Libraries(versions))
            for op in ops or table.ops:
                for shape_label, shape in shape_buckets(table, op):
                    selected = {dtype: "none" for dtype in table.contracts[op].dtypes}
                    for entry in matrix_entries(env, table, [op], shape):
                        if entry["status"] == "selected":
                            selected[entry["dtype"]] = entry["row"]
                    for dtype, row in selected.items():
                        cells.setdefault(op, {}).setdefault(dtype, {}).setdefault(device_text, {}).setdefault(
                            label, {}
                        )[shape_label] = row
    return cells


def collapse(cells: dict) -> dict:
    """Groups whose buckets all select one row become {"*": row}."""
    out: dict = {}
    for op, by_dtype in cells.items():
        for dtype, by_device in by_dtype.items():
            for device, by_libs in by_device.items():
                for libs, by_shape in by_libs.items():
                    rows = set(by_shape.values())
                    out.setdefault(op, {}).setdefault(dtype, {}).setdefault(device, {})[libs] = (
                        {"*": rows.pop()} if len(rows) == 1 else dict(by_shape)
                    )
    return out


def document(cells: dict) -> dict:
    return {
        "schema": SCHEMA,
        "devices": list(DEVICES),
        "library_sets": library_sets(),
        "max_tokens": MAX_TOKENS,
        "command": "ci/selection_gate --update",
        "cells": collapse(cells),
    }


def differences(old_doc: dict, cells: dict, *, partial: bool = False) -> list[tuple]:
    """[(op, dtype, device, libs, shape label, old row, new row)] for every cell whose selection changed
    (`partial`: `cells` holds only some ops; ops it lacks are not reported as gone)."""
    old = old_doc.get("cells", {})
    changed = []
    for op, by_dtype in sorted(cells.items()):
        for dtype, by_device in sorted(by_dtype.items()):
            for device, by_libs in by_device.items():
                for libs, by_shape in by_libs.items():
                    group = old.get(op, {}).get(dtype, {}).get(device, {}).get(libs)
                    for shape_label, new_row in by_shape.items():
                        if group is None:
                            old_row = "(not in the snapshot)"
                        else:
                            old_row = group.get(shape_label, group.get("*", "(not in the snapshot)"))
                        if old_row != new_row:
                            changed.append((op, dtype, device, libs, shape_label, old_row, new_row))
    for op in sorted(set(old) - set(cells)) if not partial else ():
        changed.append((op, "*", "*", "*", "*", "(in the snapshot)", "(op gone from the table)"))
    return changed


def why(table, change) -> str:
    """The explanation's verdicts of the old and the new row for a changed cell, one line."""
    from rapid_llm.cli import _select
    from rapid_llm.kernels.dispatcher import Device, Environment, Libraries

    op, dtype, device, libs, shape_label, old_row, new_row = change
    if op not in table.contracts or dtype == "*":
        return ""
    env = Environment(device=Device.parse(device), libs=Libraries(library_sets()[libs]))
    shape = dict(shape_buckets(table, op))[shape_label]
    explanation, _ = _select(op, env, table, dtype=dtype, shape=shape, layout=table.contracts[op].layouts)
    parts = []
    for verdict in explanation.verdicts:
        if verdict.row in (old_row, new_row):
            detail = "; ".join(check.render() for check in verdict.failures) or verdict.note
            parts.append(f"{verdict.row}: {verdict.status} {detail}".rstrip())
    return " | ".join(parts)


def report(table, changes, shown: int = SHOWN_CHANGES) -> str:
    lines = [f"{len(changes)} selection(s) changed against {os.path.relpath(SNAPSHOT, REPO_ROOT)}:"]
    for change in changes[:shown]:
        op, dtype, device, libs, shape_label, old_row, new_row = change
        lines.append(f"  {op} {dtype} {device} libs={libs} {shape_label}: {old_row} -> {new_row}")
        reason = why(table, change)
        if reason:
            lines.append(f"      why: {reason}")
    if len(changes) > shown:
        lines.append(f"  ... and {len(changes) - shown} more")
    lines.append("If the change is intended, run `ci/selection_gate --update` and commit the snapshot with it.")
    return "\n".join(lines)


def read_snapshot() -> dict:
    try:
        with open(SNAPSHOT) as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise SystemExit(f"selection gate: no snapshot at {SNAPSHOT}; create it with `ci/selection_gate --update`")


def planted_table(table):
    """A copy of `table` with PLANT_ROW's priority raised to PLANT_PRIORITY (the self-test's change)."""
    import attrs

    from rapid_llm.kernels.dispatcher import OpTable

    rows = [
        attrs.evolve(row, priority=PLANT_PRIORITY) if row.name == PLANT_ROW else row
        for rows in table.rows_by_op.values()
        for row in rows
    ]
    return OpTable.from_rows(rows, dict(table.contracts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ci/selection_gate", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--update", action="store_true", help="rewrite the snapshot from this tree")
    mode.add_argument("--self-test", action="store_true", help="prove the gate catches a planted change")
    args = parser.parse_args(argv)

    from rapid_llm.kernels.dispatcher import build_tables

    table = build_tables()
    cells = compute(table)
    if args.update:
        with open(SNAPSHOT, "w") as handle:
            json.dump(document(cells), handle, indent=1, sort_keys=True)
            handle.write("\n")
        total = sum(len(s) for d in cells.values() for v in d.values() for l in v.values() for s in l.values())
        print(f"wrote {os.path.relpath(SNAPSHOT, REPO_ROOT)}: {total} cells")
        return 0
    snapshot = read_snapshot()
    changes = differences(snapshot, cells)
    if changes:
        print("selection gate: FAIL")
        print(report(table, changes))
        return 1
    total = sum(len(s) for d in cells.values() for v in d.values() for l in v.values() for s in l.values())
    print(f"selection gate: PASS ({total} cells match {os.path.relpath(SNAPSHOT, REPO_ROOT)})")
    if not args.self_test:
        return 0
    # Self-test: the gate passed on the unchanged tree; the planted change must fail naming the cells it moved.
    problems = []
    planted = planted_table(table)
    # Only the planted row's op can move: recompute that op alone (the rest was just checked).
    planted_changes = differences(snapshot, compute(planted, ops=[planted.rows_by_name[PLANT_ROW].op]), partial=True)
    named = [c for c in planted_changes if PLANT_ROW in (c[5], c[6])]
    if not planted_changes or len(named) != len(planted_changes):
        problems.append(
            f"raising {PLANT_ROW}'s priority to {PLANT_PRIORITY} was not caught "
            f"({len(planted_changes)} changed cells, {len(named)} naming it)"
        )
    else:
        print(f"self-test: {PLANT_ROW} priority -> {PLANT_PRIORITY} in a copy of the table; the gate reports:")
        print(report(planted, planted_changes, shown=3))
    if problems:
        for problem in problems:
            print(f"SELF-TEST FAILED: {problem}")
        return 1
    print(
        f"SELF-TEST PASSED: the unchanged table passed; the planted change moved {len(planted_changes)} cells, "
        f"each reported with {PLANT_ROW}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
