"""Step plans: the per-step preparation of the paged attention ops, shared by every layer of one forward step.

    step = StepPlan(planner, "attention.decode", q, kv_buffer, page_table, seq_lens, page_size, sm_scale)
    for layer in layers:                                   # every layer of this forward step
        out = step(q_l, kv_buffer_l, page_table, seq_lens, page_size, sm_scale)

Engines build the metadata of a step once (FlashInfer's plan(), FlashMLA's split schedule, split counts)
and reuse it in every layer. A StepPlan plans the op from example arguments (Planner.plan_for: the op's own
check derives dtype, layout tags and dims), then runs the selected row's per-step preparation once
(KernelSpec.step, e.g. FlashInfer's plan or our launch policy) and keeps the callable it returns; a row
without one runs its target in every call. Arguments:

  - per step (every parameter but LAYER_PARAMETERS[op]: the page table, sequence lengths, page size, scale, ...): the ones the
    step was built with, the same objects in every call (an identity test, no device read: a call with
    another page table raises OpInputError, since the prepared metadata describes the step's own);
  - per layer (q, the cache; decode's k_scale and v_scale): any tensors of the planned bucket, checked as a
    PlannedOp call checks them (`step.impl(...)` skips the check, for arguments the engine already checked).

The plain per-call op (`decode(...)`) builds no step: one semantics, two ways to call. A StepPlan is an
explicit object the engine holds (no global state); build it outside a captured region.

Next steps and CUDA graphs: the engine may keep a StepPlan for later steps whose per-step tensors are the same
objects with new contents (the page table and lengths of a fixed-capacity batch) and call `update()` once per
step before the layers run: the row's preparation is refreshed in place (FlashInfer plans again into its
fixed buffers, FlashMLA recomputes its schedule into the same tensors; our kernels read the lengths on the
device and need nothing). That is how a decode step captured once replays for any batch contents up to its
capacity: `StepPlan(..., graph_safe_only=True)` selects among the rows capturable on their own or through
their step plan (KernelSpec.step_graph_safe), capture the layers' calls once, then per step:
update the tensors' contents, `step.update()`, replay.
"""

from __future__ import annotations

from ..kernels.dispatcher.contract import OpInputError
from ..kernels.dispatcher.select import THROUGH_STEP_PLAN, resolve_target
from ..kernels.ops.attention import DECODE, MLA_DECODE, PREFILL_PAGED

#: {op: the contract parameters that change from layer to layer}; every other parameter describes the step.
LAYER_PARAMETERS = {
    DECODE: ("q", "kv_buffer", "k_scale", "v_scale"),
    MLA_DECODE: ("q", "latent_cache"),
    PREFILL_PAGED: ("q", "kv_buffer"),
}


class StepPlan:
    """One op's plan for one forward step: the planned row and its per-step preparation (module docstring)."""

    __slots__ = ("op", "planned", "impl", "prepared", "_step_arguments")

    def __init__(self, planner, op: str, *args, promises=frozenset(), graph_safe_only: bool | None = None):
        if op not in LAYER_PARAMETERS:
            raise ValueError(f"{op}: no step plan (step plans serve {sorted(LAYER_PARAMETERS)})")
        self.op = op
        if graph_safe_only is None:
            graph_safe_only = planner.graph_safe_only
        graph_safe = THROUGH_STEP_PLAN if graph_safe_only else False
        self.planned = planner.plan_for(op, *args, promises=promises, graph_safe_only=graph_safe)
        row = self.planned.row
        self.prepared = row.step is not None
        if self.prepared:
            prepare, reason = resolve_target(row.step, None)
            if prepare is None:
                raise RuntimeError(f"{row.name}: its per-step preparation does not load: {reason}")
            self.impl = prepare(*args)
        else:
            self.impl = self.planned.impl
        parameters = planner.table.contracts[op].parameters
        # {position: (name, the step's value)} of the per-step arguments this call gave
        self._step_arguments = {
            i: (name, args[i])
            for i, name in enumerate(parameters)
            if name not in LAYER_PARAMETERS[op] and i < len(args)
        }

    @property
    def row(self):
        return self.planned.row

    def explain(self, verbose: bool = False) -> str:
        return self.planned.explain(verbose)

    def __repr__(self) -> str:
        how = "prepared once per step" if self.prepared else "its target per call"
        return f"StepPlan({self.op} -> {self.row.name}, {how})"

    def update(self) -> None:
        """The step's own tensors (page table, lengths, query offsets) have new contents: refresh the row's
        per-step preparation in place (host work, outside a captured region; nothing for a row that reads them
        on the device). Calls captured before replay the refreshed metadata."""
        refresh = getattr(self.impl, "update", None)
        if refresh is not None:
            refresh()

    def matches(self, *args) -> bool:
        """Whether args carry this step's own per-step arguments (the test of confirm(), without raising)."""
        return self._mismatch(args) is None

    def _mismatch(self, args):
        """(name, given) of the first per-step argument that is not this step's own, else None."""
        for position, (name, expected) in self._step_arguments.items():
            given = args[position] if position < len(args) else None
            # tensors by identity (no device read); the scalars (page size, scale, flags) by value
            if not (given is expected or (type(expected) in (int, float, bool) and given == expected)):
                return name, given
        return None

    def __call__(self, *args):
        """One layer's call: confirm(*args), then the prepared kernel."""
        self.confirm(*args)
        return self.impl(*args)

    def confirm(self, *args) -> None:
        """Raise OpInputError unless args are a call of this step: its own per-step arguments (identity for
        tensors, value for scalars) and per-layer ones its row accepts (the op's check)."""
        mismatch = self._mismatch(args)
        if mismatch is not None:
            name, given = mismatch
            raise OpInputError(
                self.op,
                name,
                f"the {name} this step was planned with (a step's metadata describes its own; plan a new step)",
                f"another {type(given).__name__}",
            )
        anchor, layout, dims = self.planned._check(*args)
        self.planned.confirm(anchor, layout, dims)
