"""PyTorch references for fp8 (e4m3) activation quantization.

per_token_fp8(x) -> (q [T, H] e4m3, scale [T, 1] fp32)
per_token_group_fp8(x, group_size=128, column_major_scales=False) -> (q [T, H] e4m3, scale [T, H/g] fp32)
scale = max(absmax, 1e-10) / 448; q = clamp(x / scale, -448, 448) cast to e4m3 (fp32 math).
"""

from __future__ import annotations

import torch

from .checks import (
    FP8_E4M3_MAX,
    PER_TOKEN_FP8,
    SCALE_FLOOR,
    check_per_token_fp8_args,
    check_per_token_group_fp8_args,
)


def _quantize(groups32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """groups32: [..., n] fp32 -> (q [..., n] e4m3, scale [..., 1] fp32), one scale per last-dim group."""
    scale = groups32.abs().amax(dim=-1, keepdim=True).clamp_min(SCALE_FLOOR) / FP8_E4M3_MAX
    q = (groups32 / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_per_token_fp8_args(PER_TOKEN_FP8, x)
    return _quantize(x.float())


def per_token_group_fp8(x: torch.Tensor, group_size: int = 128,
                        column_major_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = check_per_token_group_fp8_args(x, group_size, column_major_scales)
    groups = hidden // group_size
    q, scale = _quantize(x.float().view(tokens, groups, group_size))
    scale = scale.view(tokens, groups)
    if column_major_scales:
        aligned = (tokens + 3) // 4 * 4
        storage = torch.empty((groups, aligned), dtype=torch.float32, device=x.device)
        column_major = storage[:, :tokens].t()
        column_major.copy_(scale)
        scale = column_major
    return q.view(tokens, hidden), scale
