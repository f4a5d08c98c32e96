"""Which rows of the real table can run on this machine, as PlannedOps: shared by the per-row tests.

A row's target is an unchecked kernel; calling it through a `PlannedOp` runs
the op's check first (as an engine's plan does), so bad-input and semantics
tests exercise exactly what a user can call.
"""

from __future__ import annotations

import attrs

from rapid_llm.kernels.dispatcher import NoEligibleKernel, Planner, build_tables, probe_environment

TABLE = build_tables()


def planner_forcing(op: str, row: str, env=None) -> Planner:
    """A planner over TABLE whose environment forces `row` for `op` (everything else as probed)."""
    env = env or probe_environment()
    return Planner(attrs.evolve(env, force={**dict(env.force), op: row}), TABLE)


def planned_row(op: str, row: str, dtype: str = "fp32", layout=None, env=None):
    """The PlannedOp running `row` for `op`, or (None, reason) when the row cannot run here. Default layout:
    every tag of the op, promises included (the tests' inputs are finite)."""
    contract = TABLE.contracts[op]
    try:
        planned = planner_forcing(op, row, env).plan(
            op, dtype=dtype, shape={}, layout=contract.tags if layout is None else layout
        )
    except NoEligibleKernel as error:
        return None, skip_reason(row, error)
    return planned, None


def loadable_rows(op: str, dtype: str = "fp32") -> list[tuple[str, object]]:
    """(row name, PlannedOp) for each row of `op` that runs here for `dtype` with every layout tag provided."""
    rows = []
    for row in TABLE.rows(op):
        planned, _ = planned_row(op, row.name, dtype)
        if planned is not None:
            rows.append((row.name, planned))
    return rows


def skip_reason(row: str, error: NoEligibleKernel) -> str:
    """One line: the row and its failed conditions (pytest -ra folds equal reasons into one line)."""
    verdict = error.explanation.verdict(row)
    failures = "; ".join(check.render() for check in verdict.failures) or str(error).splitlines()[0]
    return f"{row} not eligible here: {failures}"


def torch_device() -> str:
    return "cuda" if probe_environment().device.kind == "cuda" else "cpu"
