"""The torch-free dispatcher tier: rows, environment, tables, dispatch, explanations, plans.

Everything here imports with torch and triton absent (DESIGN §1, §3).
"""

from .dispatch import LoadedKernel, NoEligibleKernel, Selection, dispatch, dispatch_for, resolve_target
from .environment import Device, Environment, Libraries, probe_environment
from .explain import Check, Explanation, RowVerdict
from .plan import PlannedOp, Planner, default_planner
from .spec import (
    UNMEASURED,
    CapabilityRequirement,
    GoldenRecord,
    KernelSpec,
    LibraryRequirement,
    ShapeConstraint,
)
from .table import FAMILIES, OpTable, TableError, build_tables, default_table

__all__ = [
    "UNMEASURED", "CapabilityRequirement", "Check", "Device", "Environment", "Explanation", "FAMILIES",
    "GoldenRecord", "KernelSpec", "Libraries", "LibraryRequirement", "LoadedKernel", "NoEligibleKernel",
    "OpTable", "PlannedOp", "Planner", "RowVerdict", "Selection", "ShapeConstraint", "TableError",
    "build_tables", "default_planner", "default_table", "dispatch", "dispatch_for", "probe_environment",
    "resolve_target",
]
