"""The fp8 GEMMs' native kernels (gemm.fp8_block_mm and gemm.fp8_mm), one module per kernel (each its own
row per op): tiled.py (persistent output tiles, every m), splitk.py (decode m: the weight stream split
over K, then a reduction).

Both kernels take the scales as two pointers with strides, in one of two modes (the constexpr
BLOCK_SCALES):
  - block scales (gemm.fp8_block_mm): a_scale[m, k // 128] and b_scale[n // 128, k // 128], applied to
    the fp32 product of each 128-wide K step (BLOCK_K == 128: one scale of a row and one of a column per
    step) before it is added to the accumulator;
  - channel scales (gemm.fp8_mm): a_scale[m] (row stride 0: one per-tensor scale) and b_scale[n] (stride
    0 likewise), applied once to the accumulated tile. The K steps accumulate in the dot with promotion to
    fp32 every 128 of K (max_num_imprecise_acc), so the fp8 tensor cores never accumulate more than 128
    of K at reduced precision (the promotion DeepGEMM does).

Scales and prepare() are the host part: the pointers and strides of both modes, so the kernels read any scale layout
(row-major, the column-major TMA-aligned layout of quantization.per_token_group_fp8, strided views)
without a copy."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..tiles import refusal, resolve_tiles

#: The K extent of one block scale (gemm.SCALE_BLOCK, restated: the kernels' constexpr).
SCALE_BLOCK = 128


class Scales(NamedTuple):
    """a_scale and b_scale as the kernels read them: tensors and (row stride, K-step stride) each."""

    a: torch.Tensor
    a_strides: tuple[int, int]
    b: torch.Tensor
    b_strides: tuple[int, int]
    blocks: bool


def block_scales(a_scale: torch.Tensor, b_scale: torch.Tensor) -> Scales:
    """gemm.fp8_block_mm's a_scale [M, K/128] and b_scale [ceil(N/128), K/128], any strides."""
    return Scales(a_scale, tuple(a_scale.stride()), b_scale, tuple(b_scale.stride()), True)


def channel_scales(a_scale: torch.Tensor, b_scale: torch.Tensor) -> Scales:
    """gemm.fp8_mm's a_scale [M, 1] or per-tensor ([1], [1, 1]) and b_scale [N, 1] or per-tensor: stride 0
    broadcasts a per-tensor scale over every row or column."""
    a_stride = a_scale.stride(0) if a_scale.numel() > 1 else 0
    b_stride = b_scale.stride(0) if b_scale.numel() > 1 else 0
    return Scales(a_scale, (a_stride, 0), b_scale, (b_stride, 0), False)


def prepare(row: str, a, b, scales: Scales, out):
    """A kernel entry's host part: (out, bf16 [M, N] allocated when None; the row's tiles, or None when M == 0:
    nothing to launch). BLOCK_K is a multiple of 128 (the promotion step; block scales: the scale group
    itself, tiles.ONE_SCALE_PER_STEP)."""
    if out is None:
        out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    m, k = a.shape
    if m == 0:
        return out, None
    return out, resolve_tiles(row, m, b.shape[0], k, "fp8_e4m3", a.device, block_k_multiple=SCALE_BLOCK).knobs


def new_out(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """gemm.fp8_mm's output: a new contiguous [M, N] of out_dtype."""
    return torch.empty((a.shape[0], b.shape[0]), dtype=dtype, device=a.device)


def block_entry(row: str, launch, a, a_scale, b, b_scale, out):
    """gemm.fp8_block_mm's kernel entry for `row` (its check ran): the scales as the kernels read them, out
    (bf16, allocated when None), the row's tiles and one launch(a, b, scales, None, out, knobs) (none when
    M == 0)."""
    scales = block_scales(a_scale, b_scale)
    out, knobs = prepare(row, a, b, scales, out)
    if knobs is not None:
        launch(a, b, scales, None, out, knobs)
    return out


def channel_entry(row: str, launch, a, a_scale, b, b_scale, out_dtype, bias):
    """gemm.fp8_mm's kernel entry for `row` (its check ran): as block_entry, into a new [M, N] of out_dtype,
    with the bias."""
    scales = channel_scales(a_scale, b_scale)
    out, knobs = prepare(row, a, b, scales, new_out(a, b, out_dtype))
    if knobs is not None:
        launch(a, b, scales, bias, out, knobs)
    return out


def check_knobs(row: str, knobs: dict) -> None:
    """A ValueError naming `row` when explicit knobs (perf/tune_gemm.py's candidates, a launch override) break
    the tile policy's scale rules for it (tiles.refusal: BLOCK_K a multiple of the scale group, or the group
    itself for one scale per step; BLOCK_N dividing the weight block for one weight scale per tile)."""
    reason = refusal(knobs, "fp8_e4m3", 0, SCALE_BLOCK, row)
    if reason is not None:
        raise ValueError(f"{row}: {reason}, got {knobs}")
