"""The one map between dtype labels ('bf16') and torch dtypes, derived from dispatcher/spec.py.

The labels and their torch names live in spec.DTYPE_TORCH_NAMES (torch-free,
what rows and dispatch speak); this module turns them into torch objects for
the code that has torch: checks, kernels, conformance and perf.
"""

from __future__ import annotations

import torch

from ..dispatcher.contract import FLOAT_DTYPE_LABELS
from ..dispatcher.spec import DTYPE_TORCH_NAMES

#: label -> torch dtype, for every label this torch build knows.
TORCH_DTYPES = {label: getattr(torch, name) for label, name in DTYPE_TORCH_NAMES.items() if hasattr(torch, name)}
#: The floating-point input dtypes of the float ops (fp32, fp16, bf16), as torch dtypes.
FLOAT_TORCH_DTYPES = frozenset(TORCH_DTYPES[label] for label in FLOAT_DTYPE_LABELS)
