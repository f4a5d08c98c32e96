"""PyTorch references for the KV-cache writes, in place (arguments checked by kvcache/checks.py first):

    update_kv_buffer:       buffer[loc[i]] = kv[i]
    update_kv_buffer_fp8:   buffer[loc[i]] = e4m3(clamp(kv[i] * (1 / scale), -448, 448))  (fp32 math)
    update_mla_buffer:      buffer[loc[i]] = latent[i] | rope[i]  (the latent, then the rope part)
    update_mla_buffer_fp8:  buffer[loc[i]] = e4m3(clamp((latent[i] | rope[i]) * (1 / scale), -448, 448))

kv: [T, 2*Hk, D]; loc: int32/int64 [T]; buffer: [rows, 2*Hk, D] (kv's dtype,
or float8_e4m3fn for the fp8 variant, whose K heads use k_scale and V heads
v_scale). MLA: latent [T, R], rope [T, P], buffer [rows, R + P], any strides.
Tokens whose slot is outside [0, rows) (padding, or unchecked out-of-range
ids) are not written: selecting the others reads loc on the host.
"""

from __future__ import annotations

import torch

from ..fp8 import E4M3_MAX


def _valid_tokens(loc: torch.Tensor, rows: int) -> torch.Tensor:
    """Indices of the tokens whose slot is in [0, rows) (a host sync on CUDA: nonzero)."""
    return torch.nonzero((loc >= 0) & (loc < rows)).reshape(-1)


def _e4m3(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """e4m3(clamp(values * (1 / scale), +-448)) in fp32 (scale broadcasts against values)."""
    return (values.float() * scale.reciprocal()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _copy_rows(buffer: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> None:
    """buffer[rows] = values; e4m3 rows as bytes (index_copy_ has no fp8 kernels on every device)."""
    if buffer.dtype == torch.float8_e4m3fn:
        buffer, values = buffer.view(torch.uint8), values.view(torch.uint8)
    buffer.index_copy_(0, rows, values)


def update_kv_buffer(kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    if kv.shape[0]:
        tokens = _valid_tokens(loc, buffer.shape[0])
        _copy_rows(buffer, loc.long().index_select(0, tokens), kv.index_select(0, tokens))
    return buffer


def update_kv_buffer_fp8(
    kv: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor
) -> torch.Tensor:
    """buffer[loc[i]] = e4m3(clamp(kv[i] * (1 / scale), +-448)), scale = k_scale for the K heads, v_scale for V."""
    if kv.shape[0]:
        tokens = _valid_tokens(loc, buffer.shape[0])
        half = kv.shape[1] // 2
        scales = torch.cat((k_scale.reshape(1).expand(half), v_scale.reshape(1).expand(half)))[None, :, None]
        _copy_rows(buffer, loc.long().index_select(0, tokens), _e4m3(kv.index_select(0, tokens), scales))
    return buffer


def _mla_rows(latent: torch.Tensor, rope: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[tokens, R + P]: each selected token's latent, then its rope part."""
    return torch.cat((latent.index_select(0, tokens), rope.index_select(0, tokens)), dim=1)


def update_mla_buffer(
    latent: torch.Tensor, rope: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor
) -> torch.Tensor:
    """buffer[loc[i], :R] = latent[i], buffer[loc[i], R:] = rope[i]."""
    if latent.shape[0]:
        tokens = _valid_tokens(loc, buffer.shape[0])
        _copy_rows(buffer, loc.long().index_select(0, tokens), _mla_rows(latent, rope, tokens))
    return buffer


def update_mla_buffer_fp8(
    latent: torch.Tensor, rope: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """buffer[loc[i]] = e4m3(clamp((latent[i] | rope[i]) * (1 / scale), +-448)), fp32 math."""
    if latent.shape[0]:
        tokens = _valid_tokens(loc, buffer.shape[0])
        quantized = _e4m3(_mla_rows(latent, rope, tokens), scale.reshape(()))
        _copy_rows(buffer, loc.long().index_select(0, tokens), quantized)
    return buffer
