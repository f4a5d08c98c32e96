"""PyTorch references for fp8 (e4m3) activation quantization.

per_token_fp8(x) -> (q [T, H] e4m3, scale [T, 1] fp32)
per_token_group_fp8(x, group_size=128, column_major_scales=False) -> (q [T, H] e4m3, scale [T, H/g] fp32)
scale = max(absmax, 1e-10) / 448; q = clamp(x * (1 / scale), -448, 448) cast to e4m3 (fp32 math,
IEEE division and reciprocal, one multiply per element: ops/interfaces.py says why).
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
    absmax = groups32.abs().amax(dim=-1, keepdim=True).clamp_min(SCALE_FLOOR)
    # A tensor divisor on the same device (a fill, graph-capturable): CUDA torch turns division by
    # a Python scalar into a multiply by its reciprocal, one ulp away from the IEEE quotient the
    # contract specifies.
    scale = absmax / torch.full_like(absmax, FP8_E4M3_MAX)
    q = (groups32 * scale.reciprocal()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


def per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_per_token_fp8_args(PER_TOKEN_FP8, x)
    return _quantize(x.float())


def group_scale_storage(tokens: int, groups: int, column_major: bool, device) -> torch.Tensor:
    """An fp32 [tokens, groups] scale tensor: row-major, or column-major over storage
    [groups, ceil(tokens/4)*4] (strides (1, ceil(tokens/4)*4): the TMA-aligned layout)."""
    if not column_major:
        return torch.empty((tokens, groups), dtype=torch.float32, device=device)
    aligned = (tokens + 3) // 4 * 4
    storage = torch.empty((groups, aligned), dtype=torch.float32, device=device)
    return storage[:, :tokens].t()


def per_token_group_fp8(x: torch.Tensor, group_size: int = 128,
                        column_major_scales: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = check_per_token_group_fp8_args(x, group_size, column_major_scales)
    groups = hidden // group_size
    q, scale = _quantize(x.float().view(tokens, groups, group_size))
    out_scale = group_scale_storage(tokens, groups, column_major_scales, x.device)
    out_scale.copy_(scale.view(tokens, groups))
    return q.view(tokens, hidden), out_scale
