"""rapid_llm.kernels: op functions and the dispatch API, exported lazily.

Importing this package imports nothing heavy; each name in `_EXPORTS` is
resolved from its module on first attribute access (PEP 562).
"""

import importlib

_DISPATCHER = "rapid_llm.kernels.dispatcher"
_EXPORTS = {
    # the dispatch API (torch-free)
    **{name: _DISPATCHER for name in (
        "UNMEASURED", "CapabilityRequirement", "Device", "Environment", "GoldenRecord", "KernelSpec",
        "Libraries", "LibraryRequirement", "NoEligibleKernel", "OpTable", "PlannedOp", "Planner",
        "Selection", "ShapeConstraint", "TableError", "build_tables", "default_planner", "default_table",
        "dispatch", "dispatch_for", "probe_environment",
    )},
    # public functional ops (each goes through the default planner's cache)
    "scale": "rapid_llm.kernels.functional",
    "rms_norm": "rapid_llm.kernels.functional",
    "fused_add_rms_norm": "rapid_llm.kernels.functional",
    "silu_and_mul": "rapid_llm.kernels.functional",
    "gelu_tanh_and_mul": "rapid_llm.kernels.functional",
    "vocab_embedding": "rapid_llm.kernels.functional",
    "update_kv_buffer": "rapid_llm.kernels.functional",
    "update_kv_buffer_fp8": "rapid_llm.kernels.functional",
    "rotary": "rapid_llm.kernels.functional",
    "per_token_fp8": "rapid_llm.kernels.functional",
    "per_token_group_fp8": "rapid_llm.kernels.functional",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rapid_llm.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
