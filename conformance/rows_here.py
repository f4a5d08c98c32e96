"""Which rows of the real table can run on this machine: shared by the per-row test modules."""

from __future__ import annotations

from rapid_llm.kernels.dispatcher import NoEligibleKernel, build_tables, dispatch, probe_environment, resolve_target

TABLE = build_tables()


def loadable_rows(op: str) -> list[tuple[str, object]]:
    """(row name, loaded target) for each row of `op` eligible here for fp32 with every layout tag provided."""
    env = probe_environment()
    rows = []
    for row in TABLE.rows(op):
        try:
            dispatch(op, device=env.device, dtype="fp32", layout=TABLE.contracts[op].layouts, libs=env.libs,
                     table=TABLE, force=row.name)
        except NoEligibleKernel:
            continue
        fn, _ = resolve_target(row.target, row.available)
        if fn is not None:
            rows.append((row.name, fn))
    return rows


def torch_device() -> str:
    return "cuda" if probe_environment().device.kind == "cuda" else "cpu"
