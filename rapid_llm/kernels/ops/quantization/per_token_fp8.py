"""Native Triton per-token fp8 quantization (kernel: fp8_kernel.py).

per_token_fp8(x [T, H]) -> (q [T, H] float8_e4m3fn, scale [T, 1] fp32); needs sm89+.
"""

from __future__ import annotations

import torch

from ..checks import expect_triton_device, rows_view
from .checks import PER_TOKEN_FP8, check_per_token_fp8_args
from .fp8_kernel import quantize_groups


def per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = check_per_token_fp8_args(PER_TOKEN_FP8, x)
    expect_triton_device(PER_TOKEN_FP8, "x", x)
    rows = rows_view(PER_TOKEN_FP8, "x", x, tokens, hidden)
    scale = torch.empty((tokens, 1), dtype=torch.float32, device=x.device)
    return quantize_groups(rows, hidden, scale), scale
