"""Row builders shared by every family (torch-free data).

A family's ``__init__`` lists its rows as calls of these builders. Each builder
fills in the fields that follow from the kind of row (backend, availability
probe, golden record's baseline), so a family states only what is particular
to the row: its target, where it runs, what it serves, its evidence, its rank
and why. A row whose shape fits no builder is written as a `KernelSpec`.

Golden records: `parity=(max_abs_diff, evidence_id)` is the largest |diff|
against the op's torch row over the row's parity cases, in the run the
evidence id names (ids from the one evidence index); the baseline is the
op's reference row, ``torch/<op name>``. ``parity=None`` leaves the row unverified,
out of default dispatch until evidence backs it.
"""

from __future__ import annotations

from ..dispatcher.spec import GoldenRecord, KernelSpec
from .common_rows import CUDA_EXTENSION_DEVICES, TRITON, TRITON_DEVICES

#: Layout tags the rows of several families use. A family lists each tag its contracts name in its
#: own LAYOUT_TAGS; one used by several families is declared by each with this one description
#: (build_tables() merges the families' tags and rejects one tag with two descriptions).
SHARED_LAYOUT_TAGS = {
    "x:rows": "the main input x of shape [..., n] views as [rows, n] without a copy: one row stride, unit "
    "stride along n"
}

#: The JIT build's description: the AOT row's kernel, compiled on first use.
_JIT_DESCRIPTION = "the same CUDA source built on first use (RAPID_LLM_JIT=1) into the JIT cache"


def _golden(op: str, parity) -> GoldenRecord:
    if parity is None:
        return GoldenRecord.unverified()
    max_abs_diff, evidence = parity
    return GoldenRecord(
        verified=True, max_abs_diff=max_abs_diff, baseline="torch/" + op.partition(".")[2], evidence=evidence
    )


def reference_row(op: str, target: str, dtypes, *, graph_safe: bool = True, description: str) -> KernelSpec:
    """The op's torch row, named ``torch/<target's function>``.

    No conditions (no capability, library, shape or layout): the reference is
    eligible on every device and must serve every dtype of the contract
    (build_tables() checks), the floor that never fails. Its golden record is
    GoldenRecord.reference(): it is the baseline every other row is measured
    against. graph_safe=False where it reads device values on the host (e.g.
    selecting the valid slots of a scatter).
    """
    return KernelSpec(
        name="torch/" + target.partition(":")[2],
        op=op,
        backend="torch",
        target=target,
        dtypes=dtypes,
        golden=GoldenRecord.reference(),
        graph_safe=graph_safe,
        description=description,
    )


def native_row(
    name: str,
    op: str,
    target: str,
    *,
    dtypes,
    libraries=(TRITON,),
    capability=TRITON_DEVICES,
    shape=(),
    layout=(),
    parity,
    priority,
    graph_safe: bool = True,
    description: str,
    step: str | None = None,
) -> KernelSpec:
    """One of our own kernels (backend "native"), Triton by default.

    libraries and capability default to a Triton kernel's: Triton >= 3.0 on
    CUDA sm80+ or the CPU interpreter (common_rows.py); a kernel that needs
    more (fp8 casts, tl.dot in bf16, TMA, Gluon) names its own. The golden
    record comes from `parity` (module docstring).
    """
    return KernelSpec(
        name=name,
        op=op,
        backend="native",
        target=target,
        dtypes=dtypes,
        libraries=libraries,
        capability=capability,
        shape=shape,
        layout=layout,
        golden=_golden(op, parity),
        priority=priority,
        graph_safe=graph_safe,
        description=description,
        step=step,
    )


def library_row(
    name: str,
    op: str,
    target: str,
    *,
    library,
    capability,
    dtypes,
    shape=(),
    layout=(),
    parity,
    priority,
    graph_safe: bool,
    description: str,
    step: str | None = None,
    step_graph_safe: bool = False,
) -> KernelSpec:
    """A row served by an external library's adapter (rapid_llm/kernels/backends/<backend>/).

    The backend is the name's prefix; `available` is that backend package's
    probe, ``rapid_llm.kernels.backends.<backend>:available`` (import and
    version check, so a broken install is a rejection reason, not a crash);
    `library` is the backend's LibraryRequirement (its supported version
    range). graph_safe has no default: whether a library call syncs or plans
    on the host is what a reader of its row needs to know. The golden record
    comes from `parity` (module docstring).
    """
    backend = name.partition("/")[0]
    return KernelSpec(
        name=name,
        op=op,
        backend=backend,
        target=target,
        available=f"rapid_llm.kernels.backends.{backend}:available",
        libraries=(library,),
        capability=capability,
        dtypes=dtypes,
        shape=shape,
        layout=layout,
        golden=_golden(op, parity),
        priority=priority,
        graph_safe=graph_safe,
        step_graph_safe=step_graph_safe,
        description=description,
        step=step,
    )


def extension_rows(
    op: str,
    function_stem: str,
    *,
    dtypes,
    capability=CUDA_EXTENSION_DEVICES,
    shape=(),
    layout=(),
    parity,
    priority,
    description: str,
) -> tuple[KernelSpec, KernelSpec]:
    """The CUDA extension's pair of rows for one kernel: (aot/<impl>, jit/<impl>).

    One CUDA source (csrc/) built two ways: ahead of time into rapid_llm._C
    (RAPID_LLM_BUILD_EXT=1) and on first use into the JIT cache
    (RAPID_LLM_JIT=1). `function_stem` is "module:<impl>"; the targets are
    its ``<impl>_aot`` and ``<impl>_jit`` wrappers and each row's `available`
    is its build's probe (rapid_llm.kernels.aot / .jit). Both rows share the
    conditions, the golden record (from `parity`, module docstring; or
    {"aot": parity, "jit": parity} where each build has its own run) and the
    priority: the same kernel, measured level; on a tie the name ranks aot/
    first (no compile on first use). `description` is the AOT row's; the JIT
    row's says it is the same source built on first use. Capability defaults
    to the extension's build targets, CUDA sm80+ (common_rows.py).
    """
    impl = function_stem.partition(":")[2]
    return tuple(
        KernelSpec(
            name=f"{backend}/{impl}",
            op=op,
            backend=backend,
            target=f"{function_stem}_{backend}",
            available=f"rapid_llm.kernels.{backend}:available",
            dtypes=dtypes,
            capability=capability,
            shape=shape,
            layout=layout,
            golden=_golden(op, parity[backend] if isinstance(parity, dict) else parity),
            priority=priority,
            description=text,
        )
        for backend, text in (("aot", description), ("jit", _JIT_DESCRIPTION))
    )
