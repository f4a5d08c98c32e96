"""PyTorch reference for the KV-cache write: buffer[loc[i]] = kv[i], in place.

kv: [T, 2*Hk, D]; loc: int32/int64 [T]; buffer: [rows, 2*Hk, D]. Row ids are
checked on the host (one sync): ids outside [0, rows) raise.
"""

from __future__ import annotations

import torch

from ..checks import OpInputError
from .checks import UPDATE_KV_BUFFER, check_update_kv_buffer_args


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    num_tokens, _, _ = check_update_kv_buffer_args(kv, loc, buffer)
    if num_tokens:
        low, high = int(loc.min()), int(loc.max())
        if low < 0 or high >= buffer.shape[0]:
            raise OpInputError(UPDATE_KV_BUFFER, "loc", f"row ids in [0, {buffer.shape[0]})",
                               f"ids from {low} to {high}")
        buffer.index_copy_(0, loc.long(), kv)
    return buffer
