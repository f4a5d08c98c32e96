"""Native Triton fp8 (e4m3) quantization: per_token_fp8 and per_token_group_fp8, one kernel for both.

    per_token_fp8(x [T, H])                  -> (q [T, H] e4m3, scale [T, 1] fp32)
    per_token_group_fp8(x, group_size, cm)   -> (q [T, H] e4m3, scale [T, H/g] fp32, row- or column-major)


A "group" is group_size consecutive columns of one token (per_token_fp8: one
group of H columns per token). For every group, in fp32:

    scale = max(absmax, 1e-10) / 448;   q = clamp(x * (1 / scale), -448, 448) -> float8_e4m3fn

The division and the reciprocal are IEEE round-to-nearest (tl.math.div_rn, as
torch's), once per group; each element costs one multiply (an IEEE divide per
element halved the bandwidth on the H200). The fp32 -> e4m3 cast is
round-to-nearest-even, so the result is bitwise equal to the torch reference. The cast is native on sm89+ only, hence the rows'
capability; Triton's CPU interpreter rounds it differently.

Layout: x [T, H] with any token stride and unit column stride (``x:rows``);
q [T, H] contiguous; scale addressed by (token stride, group stride), which
covers [T, 1], row-major [T, G] and the column-major TMA-aligned [T, G] with
strides (1, ceil(T/4)*4). A program owns BLOCK_GROUPS consecutive groups in
token-major order (launch_config); groups up to MAX_SINGLE_PASS elements stay
in registers, wider ones (per-token rows past 16384) read x twice (absmax,
then quantize).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device_facts import multiprocessor_count
from ..fast_launch import LaunchPolicy, cached, cdiv
from ..fp8 import E4M3_MAX, SCALE_FLOOR, group_scale_storage

MAX_SINGLE_PASS = 16384
CHUNK = 4096


def launch_config(group_size: int, total_groups: int, multiprocessors: int) -> dict:
    """Tile and warps from the group width and the grid size (no search).

    These kernels want about 1024 elements per warp, twice rms_norm's 512 (an
    e4m3 store is one byte per element, so fewer, fuller warps keep the same
    bytes in flight) (evidence h200.core.sweep.fp8_multiply, h200.core.sweep.fp8_kv):
      - groups <= 2048 wide: tiles of 2048 elements (16 groups of 128),
        2 warps: near the best config swept;
      - whole rows (per-token): one row per program, BLOCK/1024 warps (<= 8):
        the best config swept;
      - a grid under two programs per SM (decode batches) halves the groups
        per program, keeping the warps: faster at decode sizes.
    """
    if group_size > MAX_SINGLE_PASS:
        # 16 warps: ahead of 4 and 8 on very wide rows (evidence h200.core.sweep.fp8_kv), as for
        # rms_norm's two-pass rows.
        return {"BLOCK_GROUPS": 1, "BLOCK": CHUNK, "SINGLE_PASS": False, "num_warps": 16}
    block = triton.next_power_of_2(group_size)
    block_groups = max(1, 2048 // block)
    num_warps = max(1, min(8, block_groups * block // 1024))
    if block_groups > 1 and triton.cdiv(total_groups, block_groups) < 2 * multiprocessors:
        block_groups //= 2
    return {"BLOCK_GROUPS": block_groups, "BLOCK": block, "SINGLE_PASS": True, "num_warps": num_warps}


def per_token_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked kernel entry (the op's check ran: x has layout x:rows); needs sm89+."""
    scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
    return quantize_groups(x, x.shape[1], scale, "native/per_token_fp8"), scale


def per_token_group_fp8(
    x: torch.Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unchecked kernel entry (the op's check ran: x has layout x:rows, group_size divides H); needs sm89+."""
    tokens, hidden = x.shape
    scale = group_scale_storage(tokens, hidden // group_size, column_major_scales, x.device)
    return quantize_groups(x, group_size, scale, "native/per_token_group_fp8"), scale


def quantize_groups(x_rows: torch.Tensor, group_size: int, scale: torch.Tensor, row: str) -> torch.Tensor:
    """q [T, H] e4m3 from x_rows [T, H] (unit column stride); writes scale [T, H/group_size] in place. `row`: the
    row being served (its launch knobs may be overridden by ops.launch_override)."""
    tokens, hidden = x_rows.shape
    q = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device=x_rows.device)
    groups_per_token = hidden // group_size
    total_groups = tokens * groups_per_token
    if total_groups == 0:
        return q
    policy = _POLICIES.get(row) or _POLICIES.setdefault(row, LaunchPolicy(row, launch_config))
    config = policy.get((group_size, total_groups, multiprocessor_count(x_rows.device)))
    grid = (cdiv(total_groups, config["BLOCK_GROUPS"]),)
    _quantize_groups_kernel[grid](
        x_rows,
        q,
        scale,
        x_rows.stride(0),
        scale.stride(0),
        scale.stride(1),
        hidden,
        group_size,
        groups_per_token,
        total_groups,
        SCALE_FLOOR,
        E4M3_MAX,
        **config,
    )
    return q


@triton.jit
def quantize_group_tile(x, scale_floor, fp8_max):
    """(q fp32 clamped, scale [groups]) of a [groups, width] fp32 tile, one scale per row of the tile:
    scale = max(absmax, floor) / fp8_max and q = clamp(x * (1 / scale)), IEEE division and reciprocal
    once per group (also the fused epilogues' quantizer, fused_fp8.py)."""
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), scale_floor), fp8_max)
    inverse = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
    q = tl.clamp(x * inverse[:, None], -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
    return q, scale


@cached
@triton.jit
def _quantize_groups_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    x_token_stride,
    scale_token_stride,
    scale_group_stride,
    hidden,
    group_size,
    groups_per_token,
    total_groups,
    scale_floor,
    fp8_max,
    BLOCK_GROUPS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
):
    # int64 throughout: T * H passes 2**31 elements for long prefill chunks.
    flat = tl.program_id(0).to(tl.int64) * BLOCK_GROUPS + tl.arange(0, BLOCK_GROUPS)
    group_mask = flat < total_groups
    token = flat // groups_per_token
    group = flat % groups_per_token
    x_groups = x_ptr + (token * x_token_stride + group * group_size)[:, None]
    q_groups = q_ptr + (token * hidden + group * group_size)[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    if SINGLE_PASS:
        mask = group_mask[:, None] & (columns < group_size)
        x = tl.load(x_groups + columns, mask=mask, other=0.0).to(tl.float32)
        q, scale = quantize_group_tile(x, scale_floor, fp8_max)
        tl.store(q_groups + columns, q.to(q_ptr.dtype.element_ty), mask=mask)
    else:
        running = tl.zeros((BLOCK_GROUPS, BLOCK), dtype=tl.float32)
        for start in range(0, group_size, BLOCK):
            mask = group_mask[:, None] & (start + columns < group_size)
            x = tl.load(x_groups + start + columns, mask=mask, other=0.0).to(tl.float32)
            running = tl.maximum(running, tl.abs(x))
        scale = tl.math.div_rn(tl.maximum(tl.max(running, axis=1), scale_floor), fp8_max)
        inverse = tl.math.div_rn(tl.full([BLOCK_GROUPS], 1.0, tl.float32), scale)
        for start in range(0, group_size, BLOCK):
            mask = group_mask[:, None] & (start + columns < group_size)
            x = tl.load(x_groups + start + columns, mask=mask, other=0.0).to(tl.float32)
            q = tl.clamp(x * inverse[:, None], -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
            tl.store(q_groups + start + columns, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + token * scale_token_stride + group * scale_group_stride, scale, mask=group_mask)


#: row -> its cached launch policy (per_token_fp8 and per_token_group_fp8 rows share the kernel).
_POLICIES: dict = {}
