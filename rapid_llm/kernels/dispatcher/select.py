"""dispatch(): a pure, memoised function from a query to a selected row.

    dispatch(op, *, device, dtype, shape, layout, libs, table, force, deny, graph_safe)
        -> Selection(row, candidates, explanation)

Every condition of every row of `op` is evaluated (no short-circuit), rows
with a failed condition are dropped, the rest are ranked by (priority,
native > external > reference, name). Where the table's measured rankings
(dispatcher/rankings.py) cover the query's device class, op, dtype and shape
bucket, the rows that run timed trade places among the slots they hold,
fastest first; a row it did not time keeps its place. dispatch() reads no
environment variable, touches no device and imports nothing; all of its
arguments are hashable values, so results are memoised.

Importing a row's target is NOT dispatch: `Selection.load()` does it, and a
target that fails to import (or whose availability probe says no) becomes
that row's rejection reason while loading falls through to the next
candidate. The process never crashes on a broken optional library.
"""

from __future__ import annotations

import functools
import importlib

import attrs

from .environment import Device, Libraries, device_of, dtype_label, probe_environment
from .explain import Check, Explanation, Query, RowVerdict
from .spec import BACKEND_CLASSES, UNMEASURED, KernelSpec
from .table import OpTable, default_table

#: The graph_safe value of a query made for a step plan (rapid_llm/step/plans.py): a row capturable on its own,
#: or one capturable through its per-step preparation (KernelSpec.step_graph_safe), is eligible.
THROUGH_STEP_PLAN = "through_step_plan"


class NoEligibleKernel(LookupError):
    """No row can serve the query. The message names the op, the query and every row's every reason."""

    def __init__(self, explanation: Explanation, headline: str):
        self.explanation = explanation
        lines = [headline, explanation.query.header()]
        for verdict in explanation.verdicts:
            lines.append(f"  {verdict.row}: {verdict.status}")
            for check in verdict.failures:
                lines.append(f"    - {check.render()}")
        super().__init__("\n".join(lines))


def _priority_note(row: KernelSpec, ranking, unmeasured_bucket: str) -> str:
    """Why the row sits where it does: a measurement at this bucket, or its default priority (and whether
    this bucket was measured at all on the device class)."""
    if ranking is not None and ranking.position(row.name) is not None:
        return f"({ranking.describe(row.name)})"
    if row.is_reference:
        return "(reference)"
    default = "UNMEASURED" if row.priority is UNMEASURED else f"priority {row.priority}"
    if ranking is not None:
        return f"({default}; not among the rows measured at this bucket)"
    return f"({default}{unmeasured_bucket})"


def _measured_order(eligible, ranking):
    """Eligible rows in default rank order, except that the rows measured at this bucket trade places among
    the slots they hold, fastest first: a measurement orders the rows it timed and never moves a row it did
    not time (an unmeasured library keeps its default place)."""
    measured = sorted(
        (row for row in eligible if ranking.position(row.name) is not None), key=lambda row: ranking.position(row.name)
    )
    fastest_first = iter(measured)
    return [next(fastest_first) if ranking.position(row.name) is not None else row for row in eligible]


def _evaluate(
    row: KernelSpec,
    device: Device,
    dtype: str,
    shape: dict,
    layout: frozenset,
    libs: Libraries,
    deny: frozenset,
    graph_safe: bool | str,
    forced: bool,
) -> tuple[Check, ...]:
    checks = []
    denied_by = [name for name in (row.name, row.backend) if name in deny]
    checks.append(
        Check("deny", "not denied", f"denied by {denied_by[0]!r}" if denied_by else "not denied", not denied_by)
    )
    for library in row.libraries:
        ok, observed = library.check(libs.get(library.name))
        checks.append(Check(f"library {library.name}", library.describe(), observed, ok))
    if row.capability:
        ok = any(requirement.accepts(device, dtype) for requirement in row.capability)
        required = " or ".join(requirement.describe() for requirement in row.capability)
        # A capability narrowed to some dtypes is judged on the query's dtype too: show it beside the device.
        narrowed = any(requirement.dtypes is not None for requirement in row.capability)
        checks.append(Check("device", required, f"{device} with {dtype}" if narrowed else str(device), ok))
    checks.append(Check("dtype", "one of {" + ", ".join(sorted(row.dtypes)) + "}", dtype, dtype in row.dtypes))
    for constraint in row.shape:
        value = shape.get(constraint.dim)
        observed = "not given" if value is None else str(value)
        checks.append(Check(f"shape {constraint.dim}", constraint.describe(), observed, constraint.accepts(value)))
    provided = "{" + ", ".join(sorted(layout)) + "}"
    for tag in sorted(row.layout):
        checks.append(
            Check(f"layout {tag}", "the call site provides it", f"call site provides {provided}", tag in layout)
        )
    if graph_safe:
        step_plan = graph_safe == THROUGH_STEP_PLAN
        capturable = row.graph_safe or (step_plan and row.step_graph_safe)
        if row.graph_safe:
            observed = "capturable"
        elif capturable:
            observed = "capturable through its step plan"
        else:
            observed = "not capturable (syncs or prepares host data)"
        required = "capturable in a CUDA graph (plan asked graph_safe_only" + (
            ", through a step plan)" if step_plan else ")"
        )
        checks.append(Check("graph_safe", required, observed, capturable))
    golden = row.golden
    if golden.verified:
        observed = (
            "reference"
            if golden.baseline == "self"
            else f"verified, max_abs_diff={golden.max_abs_diff:g} ({golden.evidence})"
        )
        checks.append(Check("golden", "a verified parity record", observed, True))
    elif forced:
        checks.append(Check("golden", "a verified parity record", "unverified (bypassed: row is forced)", True))
    else:
        checks.append(Check("golden", "a verified parity record", "unverified (force= to use it anyway)", False))
    return tuple(checks)


def _check_names(table: OpTable, op: str, force: str | None, deny: frozenset) -> tuple[KernelSpec, ...]:
    rows = table.rows(op)
    if force is not None and force not in {row.name for row in rows}:
        raise ValueError(f"dispatch({op}): force={force!r} is not a row of {op}; rows: {[row.name for row in rows]}")
    unknown = sorted(deny - table.deniable_names())
    if unknown:
        raise ValueError(
            f"dispatch({op}): deny names unknown rows or backends {unknown}; backends: {sorted(BACKEND_CLASSES)}"
        )
    return rows


@functools.lru_cache(maxsize=8192)
def _dispatch(op, device, dtype, shape_items, layout, libs, table, force, deny, graph_safe) -> "Selection":
    rows = _check_names(table, op, force, deny)
    shape = dict(shape_items)
    evaluated = [
        (row, _evaluate(row, device, dtype, shape, layout, libs, deny, graph_safe, row.name == force)) for row in rows
    ]
    eligible = sorted((row for row, checks in evaluated if all(c.ok for c in checks)), key=KernelSpec.rank_key)
    contract = table.contracts.get(op)
    ranking = None if contract is None else table.rankings.lookup(str(device), op, dtype, contract.bucket_key(shape))
    if ranking is not None:
        eligible = _measured_order(eligible, ranking)
    unmeasured_bucket = f"; this bucket not measured on {device}" if table.rankings.measures(str(device)) else ""
    checks_of = {row.name: checks for row, checks in evaluated}
    query = Query(
        op=op,
        device=str(device),
        dtype=dtype,
        shape=tuple(shape_items),
        layout=tuple(sorted(layout)),
        libs=libs.versions,
        force=force,
        deny=tuple(sorted(deny)),
        graph_safe=graph_safe,
    )
    if force is not None:
        forced = table.rows_by_name[force]
        candidates = (forced,) if forced in eligible else ()
        others = [row for row in eligible if row is not forced]
    else:
        candidates = tuple(eligible)
        others = []
    notes = (ranking, unmeasured_bucket)
    explanation = _explanation(query, rows, candidates, others, checks_of, forced=force is not None, notes=notes)
    if not candidates:
        headline = f"{op}: forced row {force!r} is not eligible" if force is not None else f"{op}: no eligible kernel"
        raise NoEligibleKernel(explanation, headline)
    return Selection(
        op=op,
        row=candidates[0],
        candidates=candidates,
        explanation=explanation,
        rows=rows,
        forced=force is not None,
        notes=notes,
    )


def _explanation(
    query, rows, candidates, others, checks_of, *, forced: bool, notes=(None, ""), load_failures=None
) -> Explanation:
    """Selected first, then eligible rows in rank order, then rejected rows in table order."""
    load_failures = load_failures or {}
    verdicts = []
    for index, row in enumerate(candidates):
        if index == 0:
            note = "(forced)" if forced else _priority_note(row, *notes)
            verdicts.append(RowVerdict(row.name, "selected", note, checks_of[row.name]))
        else:
            verdicts.append(
                RowVerdict(row.name, "eligible", "ranked below " + _priority_note(row, *notes), checks_of[row.name])
            )
    for row in others:
        verdicts.append(RowVerdict(row.name, "eligible", "not forced", checks_of[row.name]))
    placed = {v.row for v in verdicts}
    for row in rows:
        if row.name not in placed:
            checks = checks_of[row.name]
            if row.name in load_failures:
                checks = checks + (
                    Check("load", "target imports and its availability probe passes", load_failures[row.name], False),
                )
            verdicts.append(RowVerdict(row.name, "rejected", "", checks))
    return Explanation(query=query, verdicts=tuple(verdicts))


# ---------------------------------------------------------------------------
# Loading targets (impure: imports modules; cached per target)
# ---------------------------------------------------------------------------


def _import_attribute(path: str):
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


@functools.lru_cache(maxsize=None)
def resolve_target(target: str, available: str | None):
    """(callable, None) or (None, reason). Exceptions become reasons, never crashes."""
    if available is not None:
        try:
            ok, reason = _import_attribute(available)()
        except Exception as error:  # a broken probe is a reason, not a crash
            return None, f"availability probe {available} raised {type(error).__name__}: {error}"
        if not ok:
            return None, f"availability probe {available}: {reason}"
    try:
        return _import_attribute(target), None
    except Exception as error:  # ImportError, AttributeError, a library raising at import...
        return None, f"importing {target} failed: {type(error).__name__}: {error}"


@attrs.frozen
class LoadedKernel:
    """A loaded target with the selection that explains it (load failures included)."""

    fn: object
    row: KernelSpec
    selection: "Selection"


@attrs.frozen(eq=False)
class Selection:
    """The result of dispatch(): the chosen row, the ranked candidates and the explanation tree."""

    op: str
    row: KernelSpec
    candidates: tuple[KernelSpec, ...]
    explanation: Explanation
    rows: tuple[KernelSpec, ...]
    forced: bool = False
    #: (the measured Ranking of the query's bucket or None, the note for an unmeasured bucket)
    notes: tuple = (None, "")

    def explain(self, verbose: bool = False) -> str:
        return self.explanation.render_text(verbose)

    def to_dict(self) -> dict:
        return self.explanation.to_dict()

    def load(self) -> LoadedKernel:
        """Import the best candidate whose target loads; failures become rejection reasons."""
        failures: dict[str, str] = {}
        for index, row in enumerate(self.candidates):
            fn, reason = resolve_target(row.target, row.available)
            if fn is not None:
                selection = self if not failures else self._after_load_failures(failures, index)
                return LoadedKernel(fn=fn, row=row, selection=selection)
            failures[row.name] = reason
        explanation = self._after_load_failures(failures, len(self.candidates)).explanation
        headline = (
            f"{self.op}: forced row {self.row.name!r} failed to load"
            if self.forced
            else f"{self.op}: every eligible row failed to load"
        )
        raise NoEligibleKernel(explanation, headline)

    def _after_load_failures(self, failures: dict, first_good: int) -> "Selection":
        old = self.explanation
        checks_of = {v.row: v.checks for v in old.verdicts}
        candidates = self.candidates[first_good:]
        by_name = {row.name: row for row in self.rows}
        others = [by_name[v.row] for v in old.verdicts if v.note == "not forced"]
        explanation = _explanation(
            old.query,
            self.rows,
            candidates,
            others,
            checks_of,
            forced=self.forced,
            notes=self.notes,
            load_failures=failures,
        )
        row = candidates[0] if candidates else self.row
        return attrs.evolve(self, row=row, candidates=candidates, explanation=explanation)


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------

_NO_LIBS = Libraries()
_NOTHING = frozenset()


def dispatch(
    op: str,
    *,
    device,
    dtype: str,
    shape=None,
    layout=_NOTHING,
    libs=_NO_LIBS,
    table: OpTable | None = None,
    force: str | None = None,
    deny=_NOTHING,
    graph_safe: bool | str = False,
) -> Selection:
    """Select the row that serves `op` for this query. Pure and memoised.

    device: Device or its text ('cuda:sm90', 'cpu'); dtype: label ('bf16');
    shape: {dim: int} named dims of the op's contract; layout: tags the call
    site provides; libs: Libraries or {name: version}; table: OpTable
    (default: the package's table); force: a row name to use regardless of
    rank (bypasses only the golden gate); deny: backend or row names never
    to select; graph_safe: only rows capturable in a CUDA graph (THROUGH_STEP_PLAN: also rows
    capturable once their step plan prepared the call, KernelSpec.step_graph_safe).
    """
    shape_items = () if shape is None else tuple(shape.items()) if type(shape) is dict else tuple(shape)
    # Fast path: the same call as before, with the same argument values (hashable as given).
    raw_key = (op, device, dtype, shape_items, layout, libs, table, force, deny, graph_safe)
    try:
        return _CALL_MEMO[raw_key]
    except (KeyError, TypeError):  # TypeError: an unhashable argument (a set or list layout): normalise
        pass
    if type(layout) is not frozenset:
        layout = frozenset(layout)
    if type(deny) is not frozenset:
        deny = frozenset(deny)
    if type(libs) is not Libraries:
        libs = Libraries(libs)
    if type(device) is not Device:
        device = Device.parse(device)
    if table is None:
        table = default_table()
    selection = _dispatch(op, device, dtype, shape_items, layout, libs, table, force, deny, graph_safe)
    try:
        if len(_CALL_MEMO) >= _CALL_MEMO_LIMIT:
            _CALL_MEMO.clear()
        _CALL_MEMO[raw_key] = selection
    except TypeError:
        pass
    return selection


# Memo of dispatch() calls keyed by the arguments exactly as given (before normalisation), in
# front of the lru_cache of normalised queries: a repeated call costs one dict lookup. Results
# are immutable values, so sharing them is safe; the bound keeps ever-new queries from growing it.
_CALL_MEMO: dict = {}
_CALL_MEMO_LIMIT = 16384


def clear_dispatch_caches() -> None:
    """Forget dispatch's memo (both layers) and the loaded targets (plan.clear_memo() clears the rest)."""
    _CALL_MEMO.clear()
    _dispatch.cache_clear()
    resolve_target.cache_clear()


def dispatch_for(op: str, *tensors, layout=_NOTHING, env=None, table=None, **shape) -> Selection:
    """dispatch() with device and dtype taken from the first tensor and the probed environment."""
    env = env or probe_environment()
    first = tensors[0]
    return dispatch(
        op,
        device=device_of(first.device, env.triton_interpret),
        dtype=dtype_label(first.dtype),
        shape=shape,
        layout=layout,
        libs=env.libs,
        table=table,
        force=env.forced_row(op),
        deny=env.deny,
    )
