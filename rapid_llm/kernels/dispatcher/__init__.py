"""The torch-free dispatcher tier: contracts, rows, environment, tables, dispatch, explanations, plans.

Everything here imports with torch and triton absent (DESIGN §1, §3). Names
are resolved lazily (PEP 562), so building the table imports only spec.py,
contract.py, table.py and the family rows, not dispatch or the explanation
machinery. dispatch() lives in select.py (a module named like the function
would be shadowed by it on this package).
"""

import importlib

_EXPORTS = {
    "LoadedKernel": "select",
    "NoEligibleKernel": "select",
    "Selection": "select",
    "clear_memo": "plan",
    "dispatch": "select",
    "dispatch_for": "select",
    "resolve_target": "select",
    "EXACT": "contract",
    "FLOAT_DTYPE_LABELS": "contract",
    "OpContract": "contract",
    "OpInputError": "contract",
    "TOKEN_BUCKETS": "contract",
    "ExactBucket": "contract",
    "TokenBuckets": "contract",
    "Device": "environment",
    "Environment": "environment",
    "Libraries": "environment",
    "probe_environment": "environment",
    "Check": "explain",
    "Explanation": "explain",
    "RowVerdict": "explain",
    "PlannedOp": "plan",
    "Planner": "plan",
    "default_planner": "plan",
    "UNMEASURED": "spec",
    "CapabilityRequirement": "spec",
    "GoldenRecord": "spec",
    "KernelSpec": "spec",
    "LibraryRequirement": "spec",
    "ShapeConstraint": "spec",
    "FAMILIES": "table",
    "OpTable": "table",
    "TableError": "table",
    "build_tables": "table",
    "default_table": "table",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rapid_llm.kernels.dispatcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
