"""Parity cases of the norm family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, randn as _randn
from rapid_llm.kernels.ops.norm.checks import check_fused_add_rms_norm, check_rms_norm

# ---------------------------------------------------------------------------
# norm.rms_norm
# ---------------------------------------------------------------------------


def _strided_weight(hidden, dtype, device, generator, step, offset=0):
    """weight [hidden] as every `step`-th element of a longer tensor (stride `step`), starting `offset`
    elements into it (offset 1: a unit-stride weight whose start is not vector-aligned)."""
    return _randn((hidden * step + offset,), dtype, device, generator)[offset::step][:hidden]


def _rows(shape, dtype, device, generator, scale, row_pad, column_offset=0):
    """x of `shape`: contiguous, or (row_pad / column_offset) columns [column_offset, column_offset + hidden) of
    rows of a wider buffer, so rows have a stride of their own and may start off the vector alignment."""
    hidden = shape[-1]
    if not row_pad and not column_offset:
        return _randn(shape, dtype, device, generator, scale)
    wide = _randn((*shape[:-1], hidden + row_pad + column_offset), dtype, device, generator, scale)
    return wide[..., column_offset : column_offset + hidden]


def _rms_case(
    shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0, column_offset=0, weight_step=1, weight_offset=0
):
    def make(dtype, device, generator):
        hidden = shape[-1]
        x = _rows(shape, dtype, device, generator, scale, row_pad, column_offset)
        weight = _strided_weight(
            hidden, torch.float32 if weight_fp32 else dtype, device, generator, weight_step, weight_offset
        )
        num_tokens = x.numel() // hidden
        # The layout tags are the op's check's (x:rows, and FlashInfer's x:rows_vector / weight:vector).
        layout = check_rms_norm(x, weight, eps)[1]
        return (x, weight, eps), {"num_tokens": num_tokens, "hidden": hidden}, layout

    return make


def _rms_large_offsets(dtype, device, generator):
    """More than 2**31 elements: row offsets need int64 arithmetic in the kernel."""
    hidden = 4096
    rows = (1 << 31) // hidden + 7
    x = torch.empty((rows, hidden), dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    weight = _randn((hidden,), dtype, device, generator)
    return (x, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, check_rms_norm(x, weight, 1e-6)[1]


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
    # FlashInfer's boundaries (x:rows_vector, weight:vector): rows of a stride that is not a multiple of the
    # 16-byte vector, rows starting 1 element off it, a unit-stride weight starting 1 element off it. Its row
    # must be skipped on these (a misaligned vector load faults), as on weight_fp32 and strided_weight.
    Case("row_stride_off_vector", _rms_case((6, 1024), row_pad=3)),
    Case("rows_start_off_vector", _rms_case((6, 1024), row_pad=7, column_offset=1)),
    Case("weight_start_off_vector", _rms_case((4, 512), weight_offset=1)),
    Case("int64_offsets_2pow31", _rms_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# norm.fused_add_rms_norm (in place: every case returns (x, residual) written)
# ---------------------------------------------------------------------------


def _fused_case(shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0, residual_row_pad=None, weight_step=1):
    def make(dtype, device, generator):
        hidden = shape[-1]
        x = _rows(shape, dtype, device, generator, scale, row_pad)
        residual = _rows(
            shape, dtype, device, generator, scale, row_pad if residual_row_pad is None else residual_row_pad
        )
        weight = _strided_weight(hidden, torch.float32 if weight_fp32 else dtype, device, generator, weight_step)
        layout = check_fused_add_rms_norm(x, residual, weight, eps)[1]
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
    layout = check_fused_add_rms_norm(x, residual, weight, 1e-6)[1]
    return (x, residual, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, layout


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
    # FlashInfer's boundaries: a residual whose row stride is off the 16-byte vector (residual:rows_vector),
    # and a row wider than the shared memory FlashInfer's kernel keeps it in on sm86/89 (hidden <= 25312).
    Case("residual_row_stride_off_vector", _fused_case((6, 1024), residual_row_pad=3)),
    Case("hidden_past_flashinfer_shared_memory", _fused_case((2, 25600))),
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
