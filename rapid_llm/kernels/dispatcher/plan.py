"""Plans: resolve once per shape bucket, then call the target directly.

    planner = Planner(env)                       # env: probe_environment()
    rms = planner.plan("norm.rms_norm", dtype="bf16", shape={"num_tokens": 64, "hidden": 4096},
                       layout={"x:rows"})
    y = rms(x, w, 1e-6)                          # costs what the target costs

A plan is keyed by (op, device, dtype, layout, bucket of each named dim,
graph_safe_only); the op's contract in ops/interfaces.py declares the bucket
rule of each dim. Dispatch for a bucket sees the bucket's upper bound. The
`PlannedOp` is a `functools.partial` of the loaded target, so calling it runs
in C with no per-call dispatch logic; it also carries its `Selection`.

`graph_safe_only=True` (on the planner or per plan) re-dispatches to the best
row that is capturable in a CUDA graph instead of failing.
"""

from __future__ import annotations

import functools

from .dispatch import Selection, dispatch
from .environment import Device, Environment, device_of, dtype_label, probe_environment
from .spec import BACKEND_CLASSES
from .table import OpTable, default_table


class PlannedOp(functools.partial):
    """A loaded kernel bound with the selection that chose it. Call it like the op."""

    @property
    def selection(self) -> Selection:
        return self.__dict__["selection"]

    @property
    def row(self):
        return self.selection.row

    @property
    def bucket(self) -> tuple:
        return self.__dict__["bucket"]

    def explain(self, verbose: bool = False) -> str:
        return self.selection.explain(verbose)

    def __repr__(self) -> str:
        return f"PlannedOp({self.selection.op} -> {self.row.name}, bucket={self.bucket})"


def _planned(fn, selection: Selection, bucket: tuple) -> PlannedOp:
    planned = PlannedOp(fn)
    planned.__dict__["selection"] = selection
    planned.__dict__["bucket"] = bucket
    return planned


class Planner:
    """Resolves and caches one PlannedOp per (op, device, dtype, layout, bucket)."""

    def __init__(self, env: Environment | None = None, table: OpTable | None = None, *,
                 graph_safe_only: bool = False):
        self.env = env if env is not None else probe_environment()
        self.table = table if table is not None else default_table()
        self.graph_safe_only = graph_safe_only
        self._plans: dict = {}
        # The public ops' fast path: exact (torch device, torch dtype, layout, dims) -> the bucket's plan.
        self._plans_by_tensor_key: dict = {}
        self._check_environment_names()

    def _check_environment_names(self) -> None:
        """Fail at construction (not at the first call) on deny/force names the table lacks."""
        unknown = sorted(set(self.env.deny) - self.table.deniable_names())
        if unknown:
            raise ValueError(f"RAPID_LLM_DENY names unknown rows or backends {unknown}; "
                             f"backends: {sorted(BACKEND_CLASSES)}")
        for op, row in self.env.force:
            if op not in self.table.rows_by_op:
                raise ValueError(f"RAPID_LLM_FORCE names unknown op {op!r}; ops: {sorted(self.table.ops)}")
            if row not in {r.name for r in self.table.rows(op)}:
                raise ValueError(f"RAPID_LLM_FORCE: {row!r} is not a row of {op}; "
                                 f"rows: {[r.name for r in self.table.rows(op)]}")

    @property
    def cached_plans(self) -> int:
        return len(self._plans)

    def plan(self, op: str, *, dtype: str, shape: dict, layout=frozenset(), device: Device | None = None,
             graph_safe_only: bool | None = None) -> PlannedOp:
        device = device if device is not None else self.env.device
        graph_safe = self.graph_safe_only if graph_safe_only is None else graph_safe_only
        contract = self.table.contracts[op] if op in self.table.contracts else None
        if contract is None:
            raise KeyError(f"unknown op {op!r}; this table serves {sorted(self.table.ops)}")
        bucket = contract.bucket_key(shape)
        if len(bucket) != len(shape):
            unknown = sorted(set(shape) - set(contract.dim_names))
            raise ValueError(f"{op}: unknown shape dims {unknown}; the contract names {contract.dim_names}")
        layout = layout if type(layout) is frozenset else frozenset(layout)
        key = (op, device, dtype, layout, bucket, graph_safe)
        planned = self._plans.get(key)
        if planned is None:
            planned = self._resolve(op, contract, device, dtype, shape, layout, bucket, graph_safe)
            self._plans[key] = planned
        return planned

    def for_tensor(self, op: str, x, layout, **shape) -> PlannedOp:
        """plan() with device and dtype read off tensor `x` (the public ops' path)."""
        key = (op, x.device, x.dtype, layout, tuple(shape.items()))
        planned = self._plans_by_tensor_key.get(key)
        if planned is None:
            planned = self.plan(op, dtype=dtype_label(x.dtype), shape=shape, layout=layout,
                                device=device_of(x.device, self.env.triton_interpret))
            # Repeated calls with the same exact shape skip bucketing; bounded so that
            # ever-changing shapes cannot grow it without limit.
            if len(self._plans_by_tensor_key) < 65536:
                self._plans_by_tensor_key[key] = planned
        return planned

    def _resolve(self, op, contract, device, dtype, shape, layout, bucket, graph_safe) -> PlannedOp:
        representative = {name: high for name, _, high in bucket}
        selection = dispatch(
            op, device=device, dtype=dtype, shape=representative, layout=layout, libs=self.env.libs,
            table=self.table, force=self.env.forced_row(op), deny=self.env.deny, graph_safe=graph_safe,
        )
        loaded = selection.load()
        return _planned(loaded.fn, loaded.selection, bucket)


_DEFAULT_PLANNER: Planner | None = None


def default_planner() -> Planner:
    """The planner behind the public functional ops (probed environment, default table)."""
    global _DEFAULT_PLANNER
    if _DEFAULT_PLANNER is None:
        _DEFAULT_PLANNER = Planner()
    return _DEFAULT_PLANNER
