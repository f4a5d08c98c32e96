"""Plans: resolve once per shape bucket, then call the target directly.

    planner = Planner(env)                       # env: probe_environment()
    rms = planner.plan("norm.rms_norm", dtype="bf16", shape={"num_tokens": 64, "hidden": 4096},
                       layout={"x:rows"})
    y = rms(x, w, 1e-6)                          # checks the arguments once, then runs the kernel
    y = rms.impl(x, w, 1e-6)                     # the kernel alone, for arguments already checked
    rms = planner.plan_for("norm.rms_norm", x, w, 1e-6)   # the same plan, from example arguments

A plan is keyed by (op, device, dtype, layout, bucket of each named dim,
graph_safe_only); the op's contract declares the bucket rule of each dim.
Dispatch for a bucket sees the bucket's upper bound.

Validation happens once per call (DESIGN §8). Row targets are unchecked
kernels. Calling a `PlannedOp` runs the op's argument check (the contract's
`check`) and then confirms that the selected row's own conditions hold for
these arguments (device, dtype, layout tags, shape constraints): a plan made
for one bucket cannot silently run a row on input it does not accept. The
public ops (`Planner.call`) run the same check, look the plan up from what
it returned, and call `impl` directly: nothing is checked twice.

`graph_safe_only=True` (on the planner or per plan) re-dispatches to the best
row that is capturable in a CUDA graph instead of failing.

Host replay (ops/host_replay.py, with the optional rapid_llm._host built): on
a CUDA device a native row's `impl` is a Replayer in front of its kernel
entry (`PlannedOp.kernel`), and the public ops reach each op through a
Replayer in front of the whole call (check, plan lookup, kernel): after the
first call with a given argument structure, later ones replay its launches
without the Python. The check is skipped only for a structure it passed.
"""

from __future__ import annotations

from . import environment
from .contract import OpInputError
from .environment import Device, Environment, device_of, dtype_label, probe_environment
from .select import NoEligibleKernel, Selection, clear_dispatch_caches, dispatch, resolve_target
from .spec import BACKEND_CLASSES
from .table import OpTable, default_table


class PlannedOp:
    """A loaded kernel bound with the selection that chose it. Call it like the op.

    `impl` is the unchecked kernel; calling the PlannedOp checks first. `kernel` is the row's Python kernel
    entry; `impl` is the same entry, or a host Replayer in front of it (module docstring).
    """

    __slots__ = (
        "impl",
        "kernel",
        "selection",
        "bucket",
        "device",
        "_check",
        "_triton_interpret",
        "_dtypes",
        "_layout",
        "_shape",
        "_layout_tags",
    )

    def __init__(
        self,
        impl,
        selection: Selection,
        bucket: tuple,
        device: Device,
        check,
        triton_interpret: bool,
        layout_tags,
        promises=frozenset(),
    ):
        self.kernel = impl
        self.impl = impl
        if device.kind == "cuda":
            # imported here: host_replay imports triton, which must not load before the environment is probed
            from ..ops import host_replay

            if host_replay.replayable(selection.row.name, device.kind):
                self.impl = host_replay.replayer(impl) or impl
        self.selection = selection
        self.bucket = bucket
        self.device = device
        self._check = check
        self._triton_interpret = triton_interpret
        row = selection.row
        self._dtypes = row.dtypes
        # a promise (contract.py) was made when planning; no check can confirm it per call
        self._layout = row.layout - promises
        self._shape = row.shape
        self._layout_tags = layout_tags  # the table's {tag: description}, for the error naming a missing tag

    @property
    def row(self):
        return self.selection.row

    @property
    def op(self) -> str:
        return self.selection.op

    def explain(self, verbose: bool = False) -> str:
        return self.selection.explain(verbose)

    def __repr__(self) -> str:
        return f"PlannedOp({self.selection.op} -> {self.row.name}, bucket={self.bucket})"

    def __call__(self, *args, **kwargs):
        if self._check is not None:
            anchor, layout, dims = self._check(*args, **kwargs)
            self.confirm(anchor, layout, dims)
        return self.impl(*args, **kwargs)

    def confirm(self, anchor, layout, dims) -> None:
        """Raise OpInputError unless the selected row accepts a call with these checked facts."""
        op, row = self.selection.op, self.selection.row
        device = device_of(anchor.device, self._triton_interpret)
        if device is not self.device:
            raise OpInputError(
                op,
                "device",
                f"a tensor on {self.device} (this plan's device; plan again for {device})",
                f"a tensor on {anchor.device}",
            )
        label = dtype_label(anchor.dtype)
        if label not in self._dtypes:
            raise OpInputError(op, "dtype", f"one of {sorted(self._dtypes)} ({row.name}, selected by this plan)", label)
        if not self._layout <= layout:  # a subset test allocates nothing on the passing path
            tag = sorted(self._layout - layout)[0]
            raise OpInputError(
                op,
                tag.partition(":")[0],
                f"layout {tag} ({self._layout_tags.get(tag, tag)}), which {row.name} needs",
                "arguments without it (plan again for this layout: the reference serves any)",
            )
        if self._shape:
            values = dict(dims)
            for constraint in self._shape:
                if not constraint.accepts(values.get(constraint.dim)):
                    raise OpInputError(
                        op,
                        constraint.dim,
                        f"{constraint.describe()} ({row.name}'s condition)",
                        str(values.get(constraint.dim)),
                    )


class Planner:
    """Resolves and caches one PlannedOp per (op, device, dtype, layout, bucket)."""

    #: The public ops' fast path keeps at most this many exact-call keys (ever-new shapes cannot grow it).
    CALL_KEYS_LIMIT = 65536

    def __init__(self, env: Environment | None = None, table: OpTable | None = None, *, graph_safe_only: bool = False):
        self.env = env if env is not None else probe_environment()
        self.table = table if table is not None else default_table()
        self.graph_safe_only = graph_safe_only
        self._plans: dict = {}
        # The public ops' fast path: exact (op, torch device, torch dtype, layout, dims) -> the bucket's plan.
        self._plans_by_call: dict = {}
        # op -> host Replayer in front of call(op, ·) (call_op uses it; made on an op's first native-row call)
        self.replayers: dict = {}
        self._checks: dict = {}
        self._check_environment_names()

    def _check_environment_names(self) -> None:
        """Fail at construction (not at the first call) on deny/force names the table lacks."""
        unknown = sorted(set(self.env.deny) - self.table.deniable_names())
        if unknown:
            raise ValueError(
                f"RAPID_LLM_DENY names unknown rows or backends {unknown}; "
                f"backends: {sorted(BACKEND_CLASSES)}; rows: see `rapid-llm doctor`"
            )
        for op, row in self.env.force:
            if op not in self.table.rows_by_op:
                raise ValueError(f"RAPID_LLM_FORCE names unknown op {op!r}; ops: {sorted(self.table.ops)}")
            if row not in {r.name for r in self.table.rows(op)}:
                raise ValueError(
                    f"RAPID_LLM_FORCE: {row!r} is not a row of {op}; rows: {[r.name for r in self.table.rows(op)]}"
                )

    @property
    def cached_plans(self) -> int:
        return len(self._plans)

    def describe(self) -> list[dict]:
        """Every plan this planner holds, in the order it made them: what a model that ran through it got
        (eagerly, or compiled: the custom ops of torch_ops.py call the public ops, which plan with the default
        planner). One entry per plan: op, device, dtype, layout tags, bucket {dim: [low, high]},
        graph_safe_only, the row and the clause that ranked it (its explain() note)."""
        entries = []
        for (op, device, dtype, layout, bucket, graph_safe), planned in self._plans.items():
            row = planned.row.name
            entries.append(
                {
                    "op": op,
                    "device": str(device),
                    "dtype": dtype,
                    "layout": sorted(layout),
                    "bucket": {name: [low, high] for name, low, high in bucket},
                    "graph_safe_only": graph_safe,
                    "row": row,
                    "why": planned.selection.explanation.verdict(row).note,
                }
            )
        return entries

    def describe_text(self) -> str:
        """describe() as one line per plan: op, dtype, bucket ranges, the row and why."""
        lines = []
        for entry in self.describe():
            bucket = ", ".join(
                f"{name}={low}" if low == high else f"{name}={low}-{high}"
                for name, (low, high) in entry["bucket"].items()
            )
            lines.append(f"{entry['op']}  {entry['dtype']}  {bucket}  ->  {entry['row']}  ({entry['why']})")
        return "\n".join(lines)

    def clear(self) -> None:
        """Forget every plan (the next call re-dispatches)."""
        self._plans.clear()
        self._plans_by_call.clear()
        self.replayers.clear()

    def check_for(self, op: str):
        """The op's argument check (loaded once), or None when its contract names none."""
        try:
            return self._checks[op]
        except KeyError:
            pass
        contract = self._contract(op)
        check = None
        if contract.check is not None:
            check, reason = resolve_target(contract.check, None)
            if check is None:
                raise RuntimeError(f"{op}: the contract's argument check does not load: {reason}")
        self._checks[op] = check
        return check

    def _contract(self, op: str):
        contract = self.table.contracts.get(op)
        if contract is None:
            raise KeyError(f"unknown op {op!r}; this table serves {sorted(self.table.ops)}")
        return contract

    def plan(
        self,
        op: str,
        *,
        dtype: str,
        shape: dict,
        layout=frozenset(),
        device: Device | None = None,
        graph_safe_only: bool | None = None,
    ) -> PlannedOp:
        """The plan of `op` for one shape bucket, resolved once and cached.

        dtype: the dispatch dtype label ("fp32", "fp16", "bf16", ...). shape: the contract's named dims (a
        plan is cached per bucket of each). layout: the tags the call site guarantees its arguments have,
        plus any promise it makes (OpContract.promises); a row needing a tag the call site did not give is
        not eligible, so an empty layout plans rows that need none (often only the reference). plan_for()
        derives dtype, dims and layout from example arguments with the op's own check. device: this
        planner's device unless given. graph_safe_only: only rows capturable in a CUDA graph.
        Raises NoEligibleKernel (with the explanation) when no row serves, KeyError for an unknown op.
        """
        device = device if device is not None else self.env.device
        graph_safe = self.graph_safe_only if graph_safe_only is None else graph_safe_only
        contract = self._contract(op)
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

    def plan_for(self, op: str, *args, promises=frozenset(), graph_safe_only: bool | None = None) -> PlannedOp:
        """The plan for calls like op(*args): the op's check derives dtype, layout tags and dims from these
        example arguments (raising OpInputError on bad ones), then plan() resolves their bucket.

        promises: tags of the op's contract the call site promises for every call of this plan (e.g.
        {"qkv:finite"}); no check can derive them, so they are added here."""
        contract = self._contract(op)
        promises = frozenset(promises)
        if promises - contract.promises:
            raise ValueError(
                f"{op}: {sorted(promises - contract.promises)} are not promises of this op; "
                f"its promises: {sorted(contract.promises) or 'none'}"
            )
        check = self.check_for(op)
        if check is None:
            raise ValueError(f"{op}: the contract names no argument check, so plan() needs dtype, shape and layout")
        anchor, layout, dims = check(*args)
        return self.plan(
            op,
            dtype=dtype_label(anchor.dtype),
            shape=dict(dims),
            layout=layout | promises,
            device=device_of(anchor.device, self.env.triton_interpret),
            graph_safe_only=graph_safe_only,
        )

    def call(self, op: str, args: tuple):
        """Run `op` on `args` (the public ops' path): check once, plan by what the check found, run the kernel."""
        planned = self._planned_for_call(op, args)
        if op not in self.replayers and not self.env.check_bounds and planned.impl is not planned.kernel:
            from ..ops import host_replay

            self.replayers[op] = host_replay.replayer(self._call_unreplayed(op), self._recorder(op))
        return planned.impl(*args)

    def _call_unreplayed(self, op: str):
        return lambda *args: self.call(op, args)

    def _recorder(self, op: str):
        """record(replayer, args) of the public Replayer of op: the check, the plan, the row's kernel recorded
        (a key whose row is not replayable runs it and is marked skip)."""

        def record(replayer, args):
            planned = self._planned_for_call(op, args)
            from ..ops import host_replay

            if planned.impl is planned.kernel:
                replayer.skip(args, f"{planned.row.name} is not replayed")
                return planned.impl(*args)
            return host_replay.record(replayer, args, planned.kernel)

        return record

    def _planned_for_call(self, op: str, args: tuple) -> PlannedOp:
        anchor, layout, dims = (self._checks.get(op) or self.check_for(op))(*args)
        key = (op, anchor.device, anchor.dtype, layout, dims)
        planned = self._plans_by_call.get(key)
        if planned is None:
            planned = self.plan(
                op,
                dtype=dtype_label(anchor.dtype),
                shape=dict(dims),
                layout=layout,
                device=device_of(anchor.device, self.env.triton_interpret),
            )
            if len(self._plans_by_call) < self.CALL_KEYS_LIMIT:
                self._plans_by_call[key] = planned
        return planned

    def _resolve(self, op, contract, device, dtype, shape, layout, bucket, graph_safe) -> PlannedOp:
        representative = {name: high for name, _, high in bucket}
        try:
            selection = dispatch(
                op,
                device=device,
                dtype=dtype,
                shape=representative,
                layout=layout,
                libs=self.env.libs,
                table=self.table,
                force=self.env.forced_row(op),
                deny=self.env.deny,
                graph_safe=graph_safe,
            )
        except NoEligibleKernel as error:
            judged = [
                f"{name}={shape[name]} is in bucket {low}-{high}, judged as {high}"
                for name, low, high in bucket
                if low != high and shape.get(name) != high
            ]
            if not judged:
                raise
            headline = str(error).splitlines()[0]
            raise NoEligibleKernel(
                error.explanation,
                f"{headline} (a plan judges each bucketed dim at its bucket's upper bound: {'; '.join(judged)})",
            ) from None
        loaded = selection.load()
        return PlannedOp(
            loaded.fn,
            loaded.selection,
            bucket,
            device,
            self.check_for(op),
            self.env.triton_interpret,
            self.table.layout_tags,
            contract.promises,
        )


_DEFAULT_PLANNER: Planner | None = None


def default_planner() -> Planner:
    """The planner behind the public functional ops (probed environment, default table)."""
    global _DEFAULT_PLANNER
    if _DEFAULT_PLANNER is None:
        _DEFAULT_PLANNER = Planner()
    return _DEFAULT_PLANNER


def call_op(op: str, args: tuple):
    """Run `op` on `args` through the default planner: the body of every public op function (ops/<family>/api.py).
    Through the op's host Replayer when it has one (module docstring)."""
    planner = _DEFAULT_PLANNER or default_planner()
    replayer = planner.replayers.get(op)
    if replayer is not None:
        return replayer.call(args)
    return planner.call(op, args)


def reset_default_planner() -> None:
    """Forget the default planner and its plans (clear_memo() calls this)."""
    global _DEFAULT_PLANNER
    _DEFAULT_PLANNER = None


def clear_memo() -> None:
    """Forget every cache on the dispatch path: the next call is a cold dispatch.

    Clears the dispatch memo (both layers), the loaded targets, the
    tensor -> (device, dtype label) conversions and the default planner's
    plans (the planner is rebuilt from the probed environment on next use).
    The table and the probed environment are values, not caches: they stay.
    """
    clear_dispatch_caches()
    environment.clear_conversions()
    reset_default_planner()
