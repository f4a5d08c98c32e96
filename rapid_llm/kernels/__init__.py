"""rapid_llm.kernels: op functions and the dispatch API, exported lazily.

Importing this package imports nothing heavy. The dispatch API names come
from the torch-free `dispatcher` package; every other public name is an op
function of `functional.py` (one per op contract, named like the op:
`norm.rms_norm` -> `rms_norm`), resolved on first attribute access (PEP 562).
"""

import importlib

from . import dispatcher as _dispatcher

_FUNCTIONAL = "rapid_llm.kernels.functional"
_DISPATCH_API = (
    "UNMEASURED", "CapabilityRequirement", "Device", "Environment", "GoldenRecord", "KernelSpec", "Libraries",
    "LibraryRequirement", "NoEligibleKernel", "OpContract", "OpInputError", "OpTable", "PlannedOp", "Planner",
    "Selection", "ShapeConstraint", "TableError", "build_tables", "clear_memo", "default_planner", "default_table",
    "dispatch", "dispatch_for", "probe_environment",
)


def _op_names() -> list[str]:
    """The public op functions: functional.__all__ (imports torch: only when asked for)."""
    return list(importlib.import_module(_FUNCTIONAL).__all__)


def __getattr__(name):
    if name == "__all__":
        return sorted([*_DISPATCH_API, *_op_names()])
    if name in _DISPATCH_API:
        value = getattr(_dispatcher, name)
    elif not name.startswith("_") and name in _op_names():
        value = getattr(importlib.import_module(_FUNCTIONAL), name)
    else:
        raise AttributeError(f"module 'rapid_llm.kernels' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted([*_DISPATCH_API, *_op_names()])
