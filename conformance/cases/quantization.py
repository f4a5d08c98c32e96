"""Parity cases of the quantization family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case
from conformance.cases.case import randn as _randn
from conformance.cases.norm import rms_norm_oracle
from rapid_llm.kernels.ops.quantization import checks as _checks

# ---------------------------------------------------------------------------
# quantization.per_token_fp8 / per_token_group_fp8 (outputs: e4m3 values, fp32 scales)
# ---------------------------------------------------------------------------


def _quant_case(shape, *, scale=1.0, zero_rows=(), group_size=None, column_major=False, outlier=None, row_pad=0):
    def make(dtype, device, generator):
        if row_pad:
            # rows of a wider buffer: a token stride of its own (layout x:rows still holds)
            x = _randn((shape[0], shape[1] + row_pad), dtype, device, generator, scale)[:, : shape[1]]
        else:
            x = _randn(shape, dtype, device, generator, scale)
        for row in zero_rows:
            x[row] = 0
        if outlier is not None and shape[0]:
            x[:, ::97] = outlier  # one (or more) per group of >= 97 columns
        args = (x,) if group_size is None else (x, group_size, column_major)
        return args, {"num_tokens": shape[0], "hidden": shape[1]}, frozenset({"x:rows"})

    return make


def _fp8_oracle(x64, group):
    """float64 scales and quotients; the cast to e4m3 is the only rounding."""
    tokens, hidden = x64.shape
    groups = x64.view(tokens, hidden // group, group)
    scale = groups.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
    q = (groups / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(tokens, hidden)
    return q, scale.view(tokens, hidden // group).float()


def per_token_fp8_oracle(x):
    q, scale = _fp8_oracle(x.double(), x.shape[1])
    return q, scale


def per_token_group_fp8_oracle(x, group_size, column_major_scales):
    return _fp8_oracle(x.double(), group_size)


PER_TOKEN_FP8_CASES = (
    Case("one_token", _quant_case((1, 4096))),
    Case("odd_hidden", _quant_case((5, 1000))),
    Case("zero_rows_stay_finite", _quant_case((4, 256), zero_rows=(0, 2))),
    # 1e4 * randn stays inside fp16's range (65504): non-finite x is outside the contract.
    Case("large_magnitudes", _quant_case((3, 512), scale=1e4)),
    Case("empty", _quant_case((0, 128))),
    Case("hidden_5120_tail_tokens", _quant_case((17, 5120))),
    Case("wide_rows_two_pass", _quant_case((3, 20000))),
    # One huge value per row: the rest of the row lands in e4m3's subnormal range, or flushes to zero.
    Case("outliers_push_rest_subnormal", _quant_case((6, 1024), outlier=1e4)),
    Case("strided_token_rows", _quant_case((5, 512), row_pad=64)),
)
PER_TOKEN_GROUP_FP8_CASES = (
    Case("one_token_g128", _quant_case((1, 4096), group_size=128)),
    Case("groups_of_64", _quant_case((7, 512), group_size=64)),
    Case("zero_rows_stay_finite", _quant_case((4, 256), zero_rows=(1,), group_size=128)),
    Case("column_major_scales_unaligned_tokens", _quant_case((5, 384), group_size=128, column_major=True)),
    Case("large_magnitudes", _quant_case((3, 512), scale=1e4, group_size=128)),
    Case("deepseek_7168_column_major", _quant_case((33, 7168), group_size=128, column_major=True)),
    Case("groups_of_32_odd_tokens", _quant_case((9, 96), group_size=32)),
    Case("empty_column_major", _quant_case((0, 256), group_size=128, column_major=True)),
    Case("outliers_push_rest_subnormal", _quant_case((5, 1024), group_size=128, outlier=1e4)),
    Case("strided_token_rows_column_major", _quant_case((6, 512), group_size=128, column_major=True, row_pad=128)),
)

# ---------------------------------------------------------------------------
# The fused epilogues: rms_norm / fused_add_rms_norm / silu_and_mul, then fp8 (group or static scales).
# Inputs as the unfused ops' cases: strided token rows, strided weights, fp32 weights, zero rows, outliers,
# rows wide enough for the native rows' two passes. The oracles are the unfused float64 oracles, with the
# intermediate rounded to x's dtype (the contract's rounding).
# ---------------------------------------------------------------------------

RMS_NORM_GROUP_FP8 = "quantization.rms_norm_per_token_group_fp8"
FUSED_ADD_RMS_NORM_GROUP_FP8 = "quantization.fused_add_rms_norm_per_token_group_fp8"
RMS_NORM_STATIC_FP8 = "quantization.rms_norm_static_fp8"
FUSED_ADD_RMS_NORM_STATIC_FP8 = "quantization.fused_add_rms_norm_static_fp8"
SILU_AND_MUL_GROUP_FP8 = "quantization.silu_and_mul_per_token_group_fp8"
_EPS = 1e-6


def _token_rows(shape, dtype, device, generator, row_pad, scale=1.0):
    """[T, W] values, or the first W columns of rows row_pad wider (a token stride of their own)."""
    if not row_pad:
        return _randn(shape, dtype, device, generator, scale)
    return _randn((shape[0], shape[1] + row_pad), dtype, device, generator, scale)[:, : shape[1]]


def _fused_case(
    op,
    shape,
    *,
    group_size=None,
    column_major=False,
    row_pad=0,
    weight_step=1,
    weight_fp32=False,
    zero_rows=(),
    outlier=None,
    scale_offset=0,
    static_scale=0.05,
):
    """A case of one fused op: x [T, H] (silu: [T, 2*H]), weight [H] (weight_step apart), residual (its own
    row_pad), a static scale (a one-element view scale_offset elements into a tensor)."""

    def make(dtype, device, generator):
        tokens, hidden = shape
        width = 2 * hidden if op == SILU_AND_MUL_GROUP_FP8 else hidden
        x = _token_rows((tokens, width), dtype, device, generator, row_pad)
        for row in zero_rows:
            x[row] = 0
        if outlier is not None and tokens:
            x[:, ::97] = outlier
        if op == SILU_AND_MUL_GROUP_FP8:
            args = (x, group_size, column_major)
        else:
            weight_dtype = torch.float32 if weight_fp32 else dtype
            weight = _randn((hidden * weight_step,), weight_dtype, device, generator)[::weight_step]
            residual = _token_rows((tokens, hidden), dtype, device, generator, 2 * row_pad)
            for row in zero_rows:
                residual[row] = -x[row]  # residual + x is zero: the norm's input is an all-zero row
            scale = torch.full((scale_offset + 1,), static_scale, dtype=torch.float32, device=device)[scale_offset:]
            args = {
                RMS_NORM_GROUP_FP8: (x, weight, _EPS, group_size, column_major),
                FUSED_ADD_RMS_NORM_GROUP_FP8: (x, residual, weight, _EPS, group_size, column_major),
                RMS_NORM_STATIC_FP8: (x, weight, scale, _EPS),
                FUSED_ADD_RMS_NORM_STATIC_FP8: (x, residual, weight, scale, _EPS),
            }[op]
        check = getattr(_checks, f"check_{op.partition('.')[2]}")
        _, layout, dims = check(*args)
        return args, dict(dims), layout

    return make


def _stored_sum(x, residual):
    """residual + x as fused_add_rms_norm stores it (one rounding to residual's dtype)."""
    return (residual.double() + x.double()).to(residual.dtype)


def _static_oracle(y, scale):
    return (y.double() / scale.double().reshape(1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def rms_norm_per_token_group_fp8_oracle(x, weight, eps, group_size, column_major_scales):
    return _fp8_oracle(rms_norm_oracle(x, weight, eps).double(), group_size)


def fused_add_rms_norm_per_token_group_fp8_oracle(x, residual, weight, eps, group_size, column_major_scales):
    return _fp8_oracle(rms_norm_oracle(_stored_sum(x, residual), weight, eps).double(), group_size)


def rms_norm_static_fp8_oracle(x, weight, scale, eps):
    return _static_oracle(rms_norm_oracle(x, weight, eps), scale)


def fused_add_rms_norm_static_fp8_oracle(x, residual, weight, scale, eps):
    return _static_oracle(rms_norm_oracle(_stored_sum(x, residual), weight, eps), scale)


def silu_and_mul_per_token_group_fp8_oracle(x, group_size, column_major_scales):
    gate, up = x.double().chunk(2, dim=-1)
    return _fp8_oracle((gate * torch.sigmoid(gate) * up).to(x.dtype).double(), group_size)


def _large_offsets(op):
    """More than 2**31 elements of x (silu: of q): token offsets need int64 arithmetic in the kernels."""

    def make(dtype, device, generator):
        hidden = 4096
        tokens = (1 << 31) // hidden + 7
        width = 2 * hidden if op == SILU_AND_MUL_GROUP_FP8 else hidden
        x = torch.empty((tokens, width), dtype=dtype, device=device)
        x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
        if op == SILU_AND_MUL_GROUP_FP8:
            args = (x, 128, True)
        else:
            args = (x, _randn((hidden,), dtype, device, generator), _EPS, 128, True)
        _, layout, dims = getattr(_checks, f"check_{op.partition('.')[2]}")(*args)
        return args, dict(dims), layout

    return Case("int64_offsets_2pow31", make, gpu_only=True, dtypes=frozenset({"bf16"}))


def _group_cases(op):
    return (
        Case("one_token_g128", _fused_case(op, (1, 4096), group_size=128)),
        Case("deepseek_7168_column_major", _fused_case(op, (9, 7168), group_size=128, column_major=True)),
        Case("groups_of_64_fp32_weight", _fused_case(op, (7, 512), group_size=64, weight_fp32=True)),
        Case(
            "strided_rows_and_weight_column_major",
            _fused_case(op, (6, 512), group_size=128, column_major=True, row_pad=128, weight_step=3),
        ),
        Case("groups_of_32_odd_tokens", _fused_case(op, (9, 96), group_size=32)),
        Case("zero_rows_stay_finite", _fused_case(op, (4, 256), group_size=128, zero_rows=(1,))),
        Case("outliers_push_rest_subnormal", _fused_case(op, (5, 1024), group_size=128, outlier=1e3)),
        # 256 groups of 128: past the native norm rows' one-pass tile (16384 elements).
        Case("wide_rows_two_pass", _fused_case(op, (2, 32768), group_size=128, column_major=True)),
        Case("empty_column_major", _fused_case(op, (0, 256), group_size=128, column_major=True)),
    )


def _static_cases(op):
    return (
        Case("one_token", _fused_case(op, (1, 4096))),
        Case("hidden_5", _fused_case(op, (3, 5))),
        Case("hidden_7168_fp32_weight", _fused_case(op, (9, 7168), weight_fp32=True)),
        Case("strided_rows_weight_and_scale", _fused_case(op, (6, 1000), row_pad=24, weight_step=2, scale_offset=3)),
        # y / scale past 448: the clamp.
        Case("saturating_scale", _fused_case(op, (4, 512), static_scale=1e-3)),
        Case("zero_rows_stay_finite", _fused_case(op, (4, 256), zero_rows=(0, 3))),
        # Past the native rows' one-pass tile: 5 chunks of 4000 columns.
        Case("wide_rows_two_pass", _fused_case(op, (2, 20000))),
        Case("empty", _fused_case(op, (0, 256))),
    )


SILU_GROUP_CASES = (
    Case("one_token_g128", _fused_case(SILU_AND_MUL_GROUP_FP8, (1, 4096), group_size=128)),
    Case(
        "column_major_scales_unaligned_tokens",
        _fused_case(SILU_AND_MUL_GROUP_FP8, (5, 2048), group_size=128, column_major=True),
    ),
    Case("strided_token_rows_groups_of_64", _fused_case(SILU_AND_MUL_GROUP_FP8, (6, 512), group_size=64, row_pad=64)),
    Case("groups_of_32_odd_tokens", _fused_case(SILU_AND_MUL_GROUP_FP8, (9, 96), group_size=32)),
    Case("zero_rows_stay_finite", _fused_case(SILU_AND_MUL_GROUP_FP8, (4, 256), group_size=128, zero_rows=(2,))),
    Case("outliers_push_rest_subnormal", _fused_case(SILU_AND_MUL_GROUP_FP8, (5, 1024), group_size=128, outlier=1e2)),
    Case("empty_column_major", _fused_case(SILU_AND_MUL_GROUP_FP8, (0, 256), group_size=128, column_major=True)),
)

FUSED_CASES = {
    RMS_NORM_GROUP_FP8: (*_group_cases(RMS_NORM_GROUP_FP8), _large_offsets(RMS_NORM_GROUP_FP8)),
    FUSED_ADD_RMS_NORM_GROUP_FP8: _group_cases(FUSED_ADD_RMS_NORM_GROUP_FP8),
    RMS_NORM_STATIC_FP8: _static_cases(RMS_NORM_STATIC_FP8),
    FUSED_ADD_RMS_NORM_STATIC_FP8: _static_cases(FUSED_ADD_RMS_NORM_STATIC_FP8),
    SILU_AND_MUL_GROUP_FP8: (*SILU_GROUP_CASES, _large_offsets(SILU_AND_MUL_GROUP_FP8)),
}

CASES = {
    "quantization.per_token_fp8": PER_TOKEN_FP8_CASES,
    "quantization.per_token_group_fp8": PER_TOKEN_GROUP_FP8_CASES,
    **FUSED_CASES,
}
ORACLES = {
    "quantization.per_token_fp8": per_token_fp8_oracle,
    "quantization.per_token_group_fp8": per_token_group_fp8_oracle,
    RMS_NORM_GROUP_FP8: rms_norm_per_token_group_fp8_oracle,
    FUSED_ADD_RMS_NORM_GROUP_FP8: fused_add_rms_norm_per_token_group_fp8_oracle,
    RMS_NORM_STATIC_FP8: rms_norm_static_fp8_oracle,
    FUSED_ADD_RMS_NORM_STATIC_FP8: fused_add_rms_norm_static_fp8_oracle,
    SILU_AND_MUL_GROUP_FP8: silu_and_mul_per_token_group_fp8_oracle,
}
TOLERANCES = {
    # fp8 e4m3 has 3 mantissa bits: a different rounding of x / scale before the cast (fp32 in the
    # rows, float64 in the oracle) can move a value by one e4m3 step: 2**-3 relative for normal
    # values, 2**-9 absolute in the subnormal range (the step below 2**-6). The scales are one fp32
    # division (rows) or a float64 one rounded to fp32 (oracle): one fp32 ulp, 2**-23 relative.
    **{
        (op, dtype): ((2.0**-9, 0.125), (0.0, 2.0**-23))
        for op in ("quantization.per_token_fp8", "quantization.per_token_group_fp8")
        for dtype in ("fp32", "fp16", "bf16")
    },
    # The fused epilogues: q as above (one e4m3 step). Their intermediate y is rounded to x's dtype in
    # fp32 math (rows) or from float64 (oracle); a y next to a rounding boundary can land one step of x's
    # dtype apart, and a group's absmax with it: the scales get one ulp of x's dtype (2**-7 relative for
    # bf16, 2**-10 fp16; fp32: the rows' fp32 sum of squares and rsqrt, a few ulps), with margin.
    **{
        (op, dtype): ((2.0**-9, 0.125), (0.0, scale_rtol))
        for op in (RMS_NORM_GROUP_FP8, FUSED_ADD_RMS_NORM_GROUP_FP8, SILU_AND_MUL_GROUP_FP8)
        for dtype, scale_rtol in (("fp32", 2.0**-18), ("fp16", 2.0**-9), ("bf16", 2.0**-6))
    },
    **{
        (op, dtype): (2.0**-9, 0.125)
        for op in (RMS_NORM_STATIC_FP8, FUSED_ADD_RMS_NORM_STATIC_FP8)
        for dtype in ("fp32", "fp16", "bf16")
    },
}
