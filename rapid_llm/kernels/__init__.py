"""rapid_llm.kernels: op functions and the dispatch API, exported lazily.

    y = rapid_llm.kernels.rms_norm(x, weight, eps)   # same table, same plans as Planner(env).plan(...)

Importing this package imports nothing heavy. The dispatch API names come
from the torch-free `dispatcher` package. Every other public name is an op
function, declared by its family: `ops/<family>/api.py` lists it in its
`__all__` (one function per op contract, named like the op: `norm.rms_norm`
-> `rms_norm`), for each family of `dispatcher.table.FAMILIES`. Nothing here
lists ops. Names resolve on first attribute access (PEP 562); a name that
two families (or a family and the dispatch API) both declare is an
ImportError naming both, raised at that first access.

Each op call runs the op's argument check once (its contract's `check`: bad
input raises OpInputError naming the op, the argument and what was
expected), looks the plan up by what the check found (device, dtype, layout
tags, named dims; resolved once per bucket), and calls the selected kernel.
Contracts (shapes, layouts, semantics): `rapid_llm.kernels.ops.<family>`,
or `default_table().contracts[op].doc`.
"""

import importlib
from types import MappingProxyType

from . import dispatcher as _dispatcher

_DISPATCH_API = (
    "UNMEASURED",
    "CapabilityRequirement",
    "Device",
    "Environment",
    "GoldenRecord",
    "KernelSpec",
    "Libraries",
    "LibraryRequirement",
    "NoEligibleKernel",
    "OpContract",
    "OpInputError",
    "OpTable",
    "PlannedOp",
    "Planner",
    "Selection",
    "ShapeConstraint",
    "TableError",
    "build_tables",
    "clear_memo",
    "default_planner",
    "default_table",
    "dispatch",
    "dispatch_for",
    "probe_environment",
)

#: {op function name: the family api module declaring it}, derived on first use (read-only).
_OP_MODULES = None


def _op_modules():
    """{name: api module} over every family's api.__all__ (imports the api modules, torch-free: only when
    an op name is asked for). A name declared twice raises ImportError naming both declarers."""
    global _OP_MODULES
    if _OP_MODULES is None:
        from .dispatcher.table import FAMILIES

        owners = dict.fromkeys(_DISPATCH_API, f"{__name__}.dispatcher (the dispatch API)")
        for family in FAMILIES:
            module = f"{__name__}.ops.{family}.api"
            for name in importlib.import_module(module).__all__:
                if name in owners:
                    raise ImportError(
                        f"rapid_llm.kernels.{name} is declared twice: by {owners[name]} and by "
                        f"{module} (each public name has one declaring family)"
                    )
                owners[name] = module
        _OP_MODULES = MappingProxyType({name: module for name, module in owners.items() if name not in _DISPATCH_API})
    return _OP_MODULES


def __getattr__(name):
    if name == "__all__":
        return sorted([*_DISPATCH_API, *_op_modules()])
    if name in _DISPATCH_API:
        value = getattr(_dispatcher, name)
    elif not name.startswith("_") and name in _op_modules():
        value = getattr(importlib.import_module(_op_modules()[name]), name)
    else:
        raise AttributeError(f"module 'rapid_llm.kernels' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted([*_DISPATCH_API, *_op_modules()])
