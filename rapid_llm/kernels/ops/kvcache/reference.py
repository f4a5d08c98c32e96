"""PyTorch references for the KV-cache writes, in place:

    update_kv_buffer:      buffer[loc[i]] = kv[i]
    update_kv_buffer_fp8:  buffer[loc[i]] = e4m3(clamp(kv[i] * (1 / scale), -448, 448))  (fp32 math)

kv: [T, 2*Hk, D]; loc: int32/int64 [T]; buffer: [rows, 2*Hk, D] (kv's dtype,
or float8_e4m3fn for the fp8 variant, whose K heads use k_scale and V heads
v_scale). Row ids are checked on the host (one sync): ids outside [0, rows) raise.
"""

from __future__ import annotations

import torch

from ..checks import OpInputError
from ..quantization.checks import FP8_E4M3_MAX
from .checks import (
    UPDATE_KV_BUFFER,
    UPDATE_KV_BUFFER_FP8,
    check_update_kv_buffer_args,
    check_update_kv_buffer_fp8_args,
)


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    num_tokens, _, _ = check_update_kv_buffer_args(kv, loc, buffer)
    if num_tokens:
        low, high = int(loc.min()), int(loc.max())
        if low < 0 or high >= buffer.shape[0]:
            raise OpInputError(UPDATE_KV_BUFFER, "loc", f"row ids in [0, {buffer.shape[0]})",
                               f"ids from {low} to {high}")
        buffer.index_copy_(0, loc.long(), kv)
    return buffer


def update_kv_buffer_fp8(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, k_scale: torch.Tensor,
                         v_scale: torch.Tensor) -> torch.Tensor:
    """buffer[loc[i]] = e4m3(clamp(kv[i] * (1 / scale), +-448)), scale = k_scale for the K heads, v_scale for V."""
    num_tokens, heads, _ = check_update_kv_buffer_fp8_args(kv, loc, buffer, k_scale, v_scale)
    if num_tokens:
        low, high = int(loc.min()), int(loc.max())
        if low < 0 or high >= buffer.shape[0]:
            raise OpInputError(UPDATE_KV_BUFFER_FP8, "loc", f"row ids in [0, {buffer.shape[0]})",
                               f"ids from {low} to {high}")
        half = heads // 2
        scales = torch.cat((k_scale.reshape(1).expand(half), v_scale.reshape(1).expand(half)))[None, :, None]
        quantized = (kv.float() * scales.reciprocal()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        # index_copy_ has no fp8 kernels on every device: scatter the bytes.
        buffer.view(torch.uint8).index_copy_(0, loc.long(), quantized.view(torch.uint8))
    return buffer
