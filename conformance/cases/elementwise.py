"""Parity cases of the elementwise family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, randn as _randn
from rapid_llm.kernels.ops.checks import rows_view_ok

# ---------------------------------------------------------------------------
# elementwise.scale
# ---------------------------------------------------------------------------


def _scale_case(shape, factor, *, scale=1.0, transpose=False):
    def make(dtype, device, generator):
        x = _randn(shape, dtype, device, generator, scale)
        if transpose:
            x = x.t()
        layout = frozenset({"x:contiguous"}) if x.is_contiguous() else frozenset()
        return (x, factor), {"num_elements": x.numel()}, layout

    return make


def _scale_large_offsets(dtype, device, generator):
    numel = (1 << 31) + 4099
    x = torch.empty(numel, dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    return (x, 0.75), {"num_elements": numel}, frozenset({"x:contiguous"})


def scale_oracle(x, factor):
    """torch's rule: factor rounded to fp32, exact product (fits in fp64) rounded to fp32, then to x's dtype."""
    factor32 = torch.tensor(factor, dtype=torch.float32).double()
    return (x.double() * factor32).float().to(x.dtype)


SCALE_CASES = (
    Case("one_element", _scale_case((1,), 0.5)),
    Case("tail_1023", _scale_case((1023,), -3.0)),
    Case("three_d_odd", _scale_case((3, 5, 7), 1e-3)),
    Case("empty", _scale_case((0,), 2.0)),
    Case("many_blocks_with_tail", _scale_case((16387,), 0.37)),
    Case("zero_factor", _scale_case((257,), 0.0)),
    Case("large_magnitudes_overflow", _scale_case((513,), 4.0, scale=2e4)),
    Case("non_contiguous", _scale_case((33, 65), 1.5, transpose=True)),
    Case("int64_offsets_2pow31", _scale_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


CASES = {"elementwise.scale": SCALE_CASES}
ORACLES = {"elementwise.scale": scale_oracle}
TOLERANCES = {
    ("elementwise.scale", "fp32"): (0.0, 0.0),
    ("elementwise.scale", "fp16"): (0.0, 0.0),
    ("elementwise.scale", "bf16"): (0.0, 0.0),
}
