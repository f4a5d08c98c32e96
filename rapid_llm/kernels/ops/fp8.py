"""fp8 (e4m3) facts shared by every op that writes float8_e4m3fn.

E4M3_MAX: the largest finite e4m3fn value; quantizers clamp to +-E4M3_MAX.
SCALE_FLOOR: the smallest absmax a dynamic scale is computed from (keeps
all-zero groups finite). group_scale_storage(): the fp32 [tokens, groups]
scale tensor, row-major or DeepGEMM's column-major TMA-aligned layout.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
SCALE_FLOOR = 1e-10


def group_scale_storage(tokens: int, groups: int, column_major: bool, device) -> torch.Tensor:
    """An fp32 [tokens, groups] scale tensor: row-major, or column-major over storage
    [groups, ceil(tokens/4)*4] (strides (1, ceil(tokens/4)*4): the TMA-aligned layout)."""
    if not column_major:
        return torch.empty((tokens, groups), dtype=torch.float32, device=device)
    aligned = (tokens + 3) // 4 * 4
    storage = torch.empty((groups, aligned), dtype=torch.float32, device=device)
    return storage[:, :tokens].t()
