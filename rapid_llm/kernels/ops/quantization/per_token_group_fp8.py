"""Native Triton per-token-group fp8 quantization (kernel: fp8_kernel.py).

per_token_group_fp8(x [T, H], group_size, column_major_scales) ->
(q [T, H] float8_e4m3fn, scale [T, H/group_size] fp32, row-major or column-major
with the token dim padded to a multiple of 4); needs sm89+.
"""

from __future__ import annotations

import torch

from ..checks import expect_triton_device, rows_view
from .checks import PER_TOKEN_GROUP_FP8, check_per_token_group_fp8_args
from .fp8_kernel import quantize_groups
from .reference import group_scale_storage


def per_token_group_fp8(x: torch.Tensor, group_size: int = 128,
                        column_major_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = check_per_token_group_fp8_args(x, group_size, column_major_scales)
    expect_triton_device(PER_TOKEN_GROUP_FP8, "x", x)
    rows = rows_view(PER_TOKEN_GROUP_FP8, "x", x, tokens, hidden)
    scale = group_scale_storage(tokens, hidden // group_size, column_major_scales, x.device)
    return quantize_groups(rows, group_size, scale), scale
