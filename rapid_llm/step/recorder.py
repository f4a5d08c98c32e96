"""Every op call of a step through a plan, timed, with the row that served it.

`Recorder.op(op, where, *args)` plans the call from its arguments (`Planner.plan_for`: the op's
own check derives dtype, layout tags and dims; the plan of that bucket is resolved once and
cached) and runs the planned kernel (`PlannedOp.impl`: the check already ran). The paged attention
ops go through a step plan instead (step/plans.py): built at the op's first call of a forward step
(`begin_step()` starts one), its per-step preparation reused by every later layer of the step. The check and the
plan lookup are timed apart from the kernel, as "rapid_llm check + plan lookup". Work no op serves
(GEMMs, MoE routing, lm_head, copies between layouts) runs in plain torch under `Recorder.torch`,
timed the same way. Timing is wall clock around each call, after a device synchronize on CUDA (a
kernel's time, not its launch's); the synchronizes make the step slower than an engine's.

A use is keyed by (op or work, where, row): one op at one place of the model, served by one row
(a use whose token buckets select different rows in prefill and decode is two uses).

Step plans live across steps: a later step whose per-step tensors are the same objects (the cache's page
table and lengths, new contents) refreshes the held plan (StepPlan.update, once per step) instead of building
another. With `frozen=True` (a CUDA-graph capture) the recorder only uses the step plans it was given: no
refresh and no new plan inside the captured region; the caller refreshes them before each replay.
"""

from __future__ import annotations

import contextlib
import time

import attrs

from .plans import LAYER_PARAMETERS, StepPlan

#: The name under which the per-call check and plan lookup of every op are timed.
DISPATCH = "rapid_llm check + plan lookup"


@attrs.define
class Use:
    """One op (kind "op") or one piece of plain torch work (kind "torch") at one place of the model."""

    kind: str
    name: str
    where: str
    row: str | None = None
    selection: object = None  # the Selection that chose row (kind "op")
    calls: dict = attrs.field(factory=dict)  # phase -> calls
    seconds: dict = attrs.field(factory=dict)  # phase -> seconds

    def add(self, phase: str, seconds: float) -> None:
        self.calls[phase] = self.calls.get(phase, 0) + 1
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds


class Recorder:
    def __init__(self, planner, synchronize=None, *, steps=None, frozen: bool = False):
        self.planner = planner
        self._synchronize = synchronize or (lambda: None)
        self.uses: dict[tuple, Use] = {}
        self.phase = "prefill"
        self.steps: dict[str, StepPlan] = dict(steps or {})  # op -> the step plan this step uses
        self._current: set[str] = set()  # ops whose step plan is prepared for this step
        self.frozen = frozen

    def begin_step(self) -> None:
        """A new forward step: a held step plan describes the last step's contents until refreshed."""
        if not self.frozen:
            self._current = set()

    def update_steps(self) -> None:
        """Refresh every held step plan for its tensors' new contents (before a CUDA-graph replay)."""
        for step in self.steps.values():
            step.update()

    def _step_plan(self, op: str, args) -> StepPlan:
        step = self.steps.get(op)
        if self.frozen:
            if step is None:
                raise RuntimeError(f"{op}: no step plan was made before the capture")
            return step
        if step is None or not step.matches(*args):
            step = self.steps[op] = StepPlan(self.planner, op, *args)
        elif op not in self._current:
            step.update()
        self._current.add(op)
        return step

    def _use(self, kind: str, name: str, where: str, row=None, selection=None) -> Use:
        key = (kind, name, where, row)
        use = self.uses.get(key)
        if use is None:
            use = self.uses[key] = Use(kind, name, where, row, selection)
        return use

    def op(self, op: str, where: str, *args):
        """op(*args) through its plan; returns what the op returns."""
        self._synchronize()
        start = time.perf_counter()
        if op in LAYER_PARAMETERS:
            step = self._step_plan(op, args)
            step.confirm(*args)
            planned, run = step.planned, step.impl
        else:
            planned = self.planner.plan_for(op, *args)
            run = planned.impl
        planned_at = time.perf_counter()
        result = run(*args)
        self._synchronize()
        end = time.perf_counter()
        self._use("op", op, where, planned.row.name, planned.selection).add(self.phase, end - planned_at)
        self._use("torch", DISPATCH, "every op call").add(self.phase, planned_at - start)
        return result

    def torch(self, what: str, where: str, function, *args, **kwargs):
        """function(*args, **kwargs): work no op of the table serves, timed as (what, where)."""
        with self.timed(what, where):
            return function(*args, **kwargs)

    @contextlib.contextmanager
    def timed(self, what: str, where: str):
        """Time a block of plain torch work as (what, where)."""
        self._synchronize()
        start = time.perf_counter()
        yield
        self._synchronize()
        self._use("torch", what, where).add(self.phase, time.perf_counter() - start)

    def phase_seconds(self, phase: str) -> float:
        return sum(use.seconds.get(phase, 0.0) for use in self.uses.values())
