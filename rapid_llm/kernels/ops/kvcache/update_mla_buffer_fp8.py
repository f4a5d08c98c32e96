"""Native Triton MLA latent-cache write into an fp8 (e4m3) buffer with one per-tensor scale, in place.

    buffer[loc[i], :R] = e4m3(clamp(latent[i] * (1 / scale), -448, 448)),  buffer[loc[i], R:] the same of rope[i]

latent [T, R] and rope [T, P] (fp32/fp16/bf16, layout tag ``latent_rope:rows``),
buffer [rows, R + P] float8_e4m3fn (``buffer:rows``); scale: a one-element
fp32 device tensor (read by the kernel: no host sync, graph-capturable).
fp32 math: an IEEE reciprocal (tl.math.div_rn) per program, one multiply per
element, a round-to-nearest-even cast: bitwise equal to the torch reference
on the GPU. The e4m3 cast is native on sm89+ only (the row's capability).
The kernel, grid and offsets are update_mla_buffer.py's (one program per
token, int64 offsets, loc read through its stride, ids outside [0, rows)
skipped), with its QUANTIZE switch on.
"""

from __future__ import annotations

import torch

from .update_mla_buffer import launch_mla_write


def update_mla_buffer_fp8(
    latent: torch.Tensor, rope: torch.Tensor, loc: torch.Tensor, buffer: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """Unchecked kernel entry (the op's check ran: layouts latent_rope:rows and buffer:rows)."""
    launch_mla_write(latent, rope, loc, buffer, scale)
    return buffer
