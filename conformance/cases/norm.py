"""Parity cases of the norm family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, randn as _randn
from rapid_llm.kernels.ops.checks import rows_view_ok

# ---------------------------------------------------------------------------
# norm.rms_norm
# ---------------------------------------------------------------------------


def _strided_weight(hidden, dtype, device, generator, step):
    """weight [hidden] as every `step`-th element of a longer tensor (stride `step`)."""
    return _randn((hidden * step,), dtype, device, generator)[::step]


def _rms_case(shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0, weight_step=1):
    def make(dtype, device, generator):
        hidden = shape[-1]
        if row_pad:
            # rows of a wider buffer: row stride hidden + row_pad (layout x:rows still holds)
            wide = _randn((*shape[:-1], hidden + row_pad), dtype, device, generator, scale)
            x = wide[..., :hidden]
        else:
            x = _randn(shape, dtype, device, generator, scale)
        weight = _strided_weight(hidden, torch.float32 if weight_fp32 else dtype, device, generator, weight_step)
        num_tokens = x.numel() // hidden
        layout = frozenset({"x:rows"}) if rows_view_ok(x) else frozenset()
        return (x, weight, eps), {"num_tokens": num_tokens, "hidden": hidden}, layout
    return make


def _rms_large_offsets(dtype, device, generator):
    """More than 2**31 elements: row offsets need int64 arithmetic in the kernel."""
    hidden = 4096
    rows = (1 << 31) // hidden + 7
    x = torch.empty((rows, hidden), dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    weight = _randn((hidden,), dtype, device, generator)
    return (x, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, frozenset({"x:rows"})


def _rms_transposed(dtype, device, generator):
    """Hidden not contiguous: no row may claim layout x:rows (only the reference serves it)."""
    x = _randn((64, 6), dtype, device, generator).t()
    weight = _randn((64,), dtype, device, generator)
    return (x, weight, 1e-6), {"num_tokens": 6, "hidden": 64}, frozenset()


def rms_norm_oracle(x, weight, eps):
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * weight.double()
    return y.to(x.dtype)


RMS_NORM_CASES = (
    Case("one_token", _rms_case((1, 4096))),
    Case("hidden_5", _rms_case((3, 5))),
    Case("hidden_1000", _rms_case((7, 1000))),
    Case("hidden_5120_3d", _rms_case((2, 3, 5120))),
    Case("packed_rows_tail", _rms_case((37, 128))),
    Case("wide_rows_two_pass", _rms_case((3, 20000))),
    Case("empty_batch", _rms_case((0, 256))),
    Case("large_magnitudes", _rms_case((5, 2048), scale=1e3)),
    Case("tiny_values_eps_dominates", _rms_case((5, 512), scale=1e-4, eps=1e-5)),
    Case("weight_fp32", _rms_case((9, 768), weight_fp32=True)),
    Case("strided_rows", _rms_case((11, 1024), row_pad=64)),
    # weight with a non-unit stride: a kernel reading it as contiguous scales by the wrong weights.
    Case("strided_weight", _rms_case((5, 384), weight_step=2)),
    Case("strided_weight_two_pass", _rms_case((2, 20000), weight_step=3)),
    Case("hidden_not_contiguous", _rms_transposed),
    Case("int64_offsets_2pow31", _rms_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# norm.fused_add_rms_norm (in place: every case returns (x, residual) written)
# ---------------------------------------------------------------------------


def _fused_case(shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0, weight_step=1):
    def make(dtype, device, generator):
        hidden = shape[-1]

        def tensor():
            if row_pad:
                wide = _randn((*shape[:-1], hidden + row_pad), dtype, device, generator, scale)
                return wide[..., :hidden]
            return _randn(shape, dtype, device, generator, scale)

        x, residual = tensor(), tensor()
        weight = _strided_weight(hidden, torch.float32 if weight_fp32 else dtype, device, generator, weight_step)
        layout = frozenset(tag for tag, t in (("x:rows", x), ("residual:rows", residual)) if rows_view_ok(t))
        return (x, residual, weight, eps), {"num_tokens": x.numel() // hidden, "hidden": hidden}, layout
    return make


def _fused_large_offsets(dtype, device, generator):
    """More than 2**31 elements in each of x and residual: int64 row offsets."""
    hidden = 4096
    rows = (1 << 31) // hidden + 7
    seeded = torch.Generator(device=device).manual_seed(int(generator.initial_seed()))
    x = torch.empty((rows, hidden), dtype=dtype, device=device).normal_(generator=seeded)
    residual = torch.empty((rows, hidden), dtype=dtype, device=device).normal_(generator=seeded)
    weight = _randn((hidden,), dtype, device, generator)
    return (x, residual, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, frozenset({"x:rows", "residual:rows"})


def fused_add_rms_norm_oracle(x, residual, weight, eps):
    stored = (residual.double() + x.double()).to(residual.dtype)
    return rms_norm_oracle(stored, weight, eps), stored


FUSED_ADD_RMS_NORM_CASES = (
    Case("one_token", _fused_case((1, 4096))),
    Case("hidden_5", _fused_case((3, 5))),
    Case("hidden_1000", _fused_case((7, 1000))),
    Case("hidden_5120_3d", _fused_case((2, 3, 5120))),
    Case("packed_rows_tail", _fused_case((37, 128))),
    Case("wide_rows_two_pass", _fused_case((3, 20000))),
    Case("empty_batch", _fused_case((0, 256))),
    Case("large_magnitudes", _fused_case((5, 2048), scale=1e3)),
    Case("weight_fp32", _fused_case((9, 768), weight_fp32=True)),
    Case("strided_rows", _fused_case((11, 1024), row_pad=64)),
    Case("strided_weight", _fused_case((5, 384), weight_step=2)),
    Case("strided_weight_two_pass", _fused_case((2, 20000), weight_step=3, weight_fp32=True)),
    Case("int64_offsets_2pow31", _fused_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


CASES = {"norm.rms_norm": RMS_NORM_CASES, "norm.fused_add_rms_norm": FUSED_ADD_RMS_NORM_CASES}
ORACLES = {"norm.rms_norm": rms_norm_oracle, "norm.fused_add_rms_norm": fused_add_rms_norm_oracle}
TOLERANCES = {
    ("norm.rms_norm", "fp32"): (1e-5, 1e-5),
    ("norm.rms_norm", "fp16"): (1e-3, 2e-3),
    ("norm.rms_norm", "bf16"): (1e-2, 8e-3),
    # The stored residual is one rounding of an fp32 add (the same in every row); the normalised
    # output then differs as rms_norm's does.
    ("norm.fused_add_rms_norm", "fp32"): (1e-5, 1e-5),
    ("norm.fused_add_rms_norm", "fp16"): (1e-3, 2e-3),
    ("norm.fused_add_rms_norm", "bf16"): (1e-2, 8e-3),
}
