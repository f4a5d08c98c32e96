"""Parity cases per op, one module per op family (conformance/cases/<family>.py).

Every row of an op runs every case its conditions admit. Non-reference rows
are compared with the op's reference row; the reference row itself is
compared with a float64 oracle (so a broken reference cannot hide).

Each family module defines CASES {op: (Case, ...)}, ORACLES {op: oracle}
and TOLERANCES {(op, dtype): (atol, rtol) or one pair per output}, and may
define OUTPUT_MASKS {op: fn(*args) -> bool mask, or a tuple with one mask (or
None: all specified) per output}: the output elements the op's contract
specifies for those arguments (padding rows an op may leave unwritten are
not); parity compares only those; and may define ACCUMULATION_BOUNDS {op:
fn(*args) -> one float64 tensor (or a tuple, one per output) of extra
absolute tolerance per output element}: the accumulation term of an op whose
contract allows rows to accumulate in lower precision (fp8 tensor cores); and
may define COMPARED_OUTPUTS {op: fn(result) -> tuple of tensors}: the tensors
an op's result is compared on, where it returns more than tensors (comm's
EpDispatch: its handle's library part is a row's own, the rest alike); and
may define NOISE_TOLERANCES {(op, dtype): (relative_l2, element_rms)}: for
an op whose rows legitimately differ by noise spread over a row of the
output (fp8 re-quantization of an intermediate), each row out[t] (the first
dimension) must lie within relative_l2 * ||ref[t]||_2 of the reference's in
L2, and each element gets element_rms * rms(ref[t]) of extra absolute
tolerance (conformance/tolerances.py). The
registry below is derived from the table's family list: a new family's
module is picked up without editing this file, and a family without a case
module fails loudly.
"""

from __future__ import annotations

import importlib

from rapid_llm.kernels.dispatcher.table import FAMILIES
from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

from .case import Case

_MODULES = [importlib.import_module(f"{__name__}.{family}") for family in FAMILIES]

CASES = {op: cases for module in _MODULES for op, cases in module.CASES.items()}
ORACLES = {op: oracle for module in _MODULES for op, oracle in module.ORACLES.items()}
TOLERANCES = {key: value for module in _MODULES for key, value in module.TOLERANCES.items()}
ACCUMULATION_BOUNDS = {
    op: bound for module in _MODULES for op, bound in getattr(module, "ACCUMULATION_BOUNDS", {}).items()
}
COMPARED_OUTPUTS = {
    op: outputs for module in _MODULES for op, outputs in getattr(module, "COMPARED_OUTPUTS", {}).items()
}
NOISE_TOLERANCES = {key: value for module in _MODULES for key, value in getattr(module, "NOISE_TOLERANCES", {}).items()}
OUTPUT_MASKS = {op: mask for module in _MODULES for op, mask in getattr(module, "OUTPUT_MASKS", {}).items()}

__all__ = [
    "ACCUMULATION_BOUNDS",
    "CASES",
    "COMPARED_OUTPUTS",
    "Case",
    "NOISE_TOLERANCES",
    "ORACLES",
    "OUTPUT_MASKS",
    "TOLERANCES",
    "TORCH_DTYPES",
]
