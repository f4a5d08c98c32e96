"""The torch-free dispatcher tier: rows, environment, tables, dispatch, explanations, plans.

Everything here imports with torch and triton absent (DESIGN §1, §3). Names
are resolved lazily (PEP 562), so building the table imports only spec.py,
table.py and the family rows, not dispatch or the explanation machinery.
"""

import importlib
import sys
import types

_EXPORTS = {
    "LoadedKernel": "dispatch", "NoEligibleKernel": "dispatch", "Selection": "dispatch",
    "dispatch_for": "dispatch", "resolve_target": "dispatch",
    "Device": "environment", "Environment": "environment", "Libraries": "environment",
    "probe_environment": "environment",
    "Check": "explain", "Explanation": "explain", "RowVerdict": "explain",
    "PlannedOp": "plan", "Planner": "plan", "default_planner": "plan",
    "UNMEASURED": "spec", "CapabilityRequirement": "spec", "GoldenRecord": "spec", "KernelSpec": "spec",
    "LibraryRequirement": "spec", "ShapeConstraint": "spec",
    "FAMILIES": "table", "OpTable": "table", "TableError": "table", "build_tables": "table",
    "default_table": "table",
}

__all__ = sorted([*_EXPORTS, "dispatch"])


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rapid_llm.kernels.dispatcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__


class _DispatcherPackage(types.ModuleType):
    """`dispatch` names both a submodule (dispatch.py) and the function; the function wins.

    Importing a submodule makes Python set it as an attribute of its package,
    which would hide the lazily exported function once anything imported
    dispatch.py. This property keeps `dispatcher.dispatch` the function; the
    module stays reachable as sys.modules["rapid_llm.kernels.dispatcher.dispatch"].
    """

    @property
    def dispatch(self):
        return importlib.import_module(f"{__name__}.dispatch").dispatch

    @dispatch.setter
    def dispatch(self, value):
        pass  # the import system recording the submodule; sys.modules already holds it


sys.modules[__name__].__class__ = _DispatcherPackage
