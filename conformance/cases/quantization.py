"""Parity cases of the quantization family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, randn as _randn
from rapid_llm.kernels.ops.checks import rows_view_ok

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


CASES = {
    "quantization.per_token_fp8": PER_TOKEN_FP8_CASES,
    "quantization.per_token_group_fp8": PER_TOKEN_GROUP_FP8_CASES,
}
ORACLES = {
    "quantization.per_token_fp8": per_token_fp8_oracle,
    "quantization.per_token_group_fp8": per_token_group_fp8_oracle,
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
    }
}
