"""Native Triton fused quantization epilogues: the norm or the gated activation, then fp8 (e4m3), in one pass.

    rms_norm_per_token_group_fp8(x, weight, eps, g, cm)              -> (q [T, H], scale [T, H/g])
    fused_add_rms_norm_per_token_group_fp8(x, residual, ..., g, cm)   -> (q, scale); residual += x in place
    rms_norm_static_fp8(x, weight, scale, eps)                       -> q [T, H]
    fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps)   -> q; residual += x in place
    silu_and_mul_per_token_group_fp8(x [T, 2d], g, cm)               -> (q [T, d], scale [T, d/g])

Every op equals its unfused pipeline: the intermediate y (normalised row, or
silu(gate) * up) is computed in fp32 exactly as native/rms_norm,
native/fused_add_rms_norm and native/silu_and_mul compute it, rounded to x's
dtype in registers (the value the unfused pipeline would store), then
quantized with fp8_quant's arithmetic: per group, scale = max(absmax,
1e-10) / 448 and q = clamp(y * (1 / scale)) with IEEE division and
reciprocal (tl.math.div_rn); static, q = clamp(y * (1 / scale)) with the
reciprocal of the one fp32 scale read on the device. Only x (and residual)
are read and q (residual, scales) written: the intermediate never reaches
memory. The fp32 -> e4m3 cast needs sm89+ (the rows' capability).

Norm kernel: a row held as a [BLOCK_GROUPS, BLOCK] tile of groups (column =
group * group_size + c). Rows whose tile fits MAX_TILE elements are read once
(SINGLE_PASS), ROWS of them per program one after the other under one read of
the weight; wider rows, one per program, loop over chunks of groups twice (sum
of squares, then normalise and quantize; the fused-add rows re-read the
residual they stored). The static ops see the row as groups of any divisor
of H (one group when it fits), since their scale is per tensor. Silu kernel: fp8_quant's tile of BLOCK_GROUPS groups per
program in token-major order, with its launch_config.

Layout: x [T, H] (silu: [T, 2d]) with any token stride and unit column
stride (``x:rows``); residual likewise (``residual:rows``); weight any
stride; q contiguous; scales through (token stride, group stride), which
covers row-major and the column-major TMA-aligned layout (fp8.group_scale_storage).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..device_facts import multiprocessor_count
from ..fast_launch import LaunchPolicy, cached, cdiv
from ..fp8 import E4M3_MAX, SCALE_FLOOR, group_scale_storage
from .fp8_quant import launch_config as group_tile_config, quantize_group_tile

#: The largest row tile (padded groups x padded group width) a norm program holds in registers, as
#: native/rms_norm's MAX_SINGLE_PASS_HIDDEN; wider rows take two passes over CHUNK-element tiles.
MAX_TILE = 16384
CHUNK = 4096


#: Prefill token counts from which a single-pass program of the residual-free ops normalises
#: ROWS_PER_PROGRAM rows, one after the other with the next row's loads in flight, under one read of the
#: weight (from L2: as many bytes as the row's x, per row, with one row per program).
MANY_TOKENS = 4096
ROWS_PER_PROGRAM = 8


def launch_config(
    groups: int, group_size: int, token_bucket: int = 1, add_residual: bool = False, static: bool = False
) -> dict:
    """The norm kernel's tile, rows per program and warps from the row's groups, the token count's
    power-of-two bucket (capped at MANY_TOKENS) and the op (no search).

    A [next_pow2(groups), next_pow2(group_size)] tile per row when it holds at most MAX_TILE elements
    (hidden 4096 and 7168 in groups of 128: 4096 and 8192 elements), else chunks of about CHUNK elements
    (one row per program). Warps as native/rms_norm: one per 512 elements of the tile, 1 to 16. Rows per
    program, as measured on the H200 (h200.quantization.sweep.fused_norm_rows): ROWS_PER_PROGRAM from
    MANY_TOKENS tokens for the static op and for the group op's 16-warp tiles, whose rows carry few bytes
    for their fixed work (static 7168: 86% of copy against 73% with one row); one row for the fused-add
    ops (the residual's bytes already hide it, and several rows cost them up to 24 points at hidden 7168)
    and for the group op's smaller tiles (one row: 81%, eight: 50-76%).
    """
    block = triton.next_power_of_2(group_size)
    all_groups = triton.next_power_of_2(groups)
    single = all_groups * block <= MAX_TILE
    block_groups = all_groups if single else max(1, CHUNK // block)
    warps = max(1, min(16, block_groups * block // 512))
    many = single and token_bucket >= MANY_TOKENS and not add_residual and (static or warps == 16)
    return {
        "BLOCK_GROUPS": block_groups,
        "BLOCK": block,
        "SINGLE_PASS": single,
        "ROWS": ROWS_PER_PROGRAM if many else 1,
        "num_warps": warps,
    }


def static_groups(hidden: int) -> tuple[int, int]:
    """(groups, width) the static ops split a row into: the whole row when its tile fits MAX_TILE, else
    the widest divisor of hidden up to CHUNK (any split serves: the scale is per tensor)."""
    if triton.next_power_of_2(hidden) <= MAX_TILE:
        return 1, hidden
    width = next(w for w in range(CHUNK, 0, -1) if hidden % w == 0)
    return hidden // width, width


# --- entries (unchecked: the op's check ran; layouts x:rows, residual:rows) ------------------------------------


def rms_norm_per_token_group_fp8(x, weight, eps=1e-6, group_size=128, column_major_scales=False):
    scale = group_scale_storage(x.shape[0], x.shape[1] // group_size, column_major_scales, x.device)
    return _norm_quant(x, None, weight, eps, group_size, scale, False, "native/rms_norm_per_token_group_fp8"), scale


def fused_add_rms_norm_per_token_group_fp8(x, residual, weight, eps=1e-6, group_size=128, column_major_scales=False):
    scale = group_scale_storage(x.shape[0], x.shape[1] // group_size, column_major_scales, x.device)
    row = "native/fused_add_rms_norm_per_token_group_fp8"
    return _norm_quant(x, residual, weight, eps, group_size, scale, False, row), scale


def rms_norm_static_fp8(x, weight, scale, eps=1e-6):
    _, width = static_groups(x.shape[1])
    return _norm_quant(x, None, weight, eps, width, scale, True, "native/rms_norm_static_fp8")


def fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps=1e-6):
    _, width = static_groups(x.shape[1])
    return _norm_quant(x, residual, weight, eps, width, scale, True, "native/fused_add_rms_norm_static_fp8")


def _norm_quant(x, residual, weight, eps, group_size, scale, static, row):
    """q [T, H] e4m3; writes the group scales (static False) or reads the one scale (static True), and
    residual += x when residual is given."""
    tokens, hidden = x.shape
    q = torch.empty((tokens, hidden), dtype=torch.float8_e4m3fn, device=x.device)
    if tokens == 0:
        return q
    groups = hidden // group_size
    policy = _POLICIES.get(row) or _POLICIES.setdefault(
        row, LaunchPolicy(row, functools.partial(launch_config, add_residual=residual is not None, static=static))
    )
    config = policy.get((groups, group_size, min(triton.next_power_of_2(tokens), MANY_TOKENS)))
    # The static ops write no scales: their strides are unused (0).
    scale_strides = (0, 0) if static else (scale.stride(0), scale.stride(1))
    add = residual is not None
    _norm_quant_kernel[(cdiv(tokens, config["ROWS"]),)](
        x,
        residual if add else x,
        weight,
        q,
        scale,
        x.stride(0),
        residual.stride(0) if add else 0,
        weight.stride(0),
        *scale_strides,
        tokens,
        hidden,
        group_size,
        groups,
        float(eps),
        SCALE_FLOOR,
        E4M3_MAX,
        ADD_RESIDUAL=add,
        STATIC=static,
        **config,
    )
    return q


@triton.jit
def _row_inputs(x_ptr, residual_ptr, x_row, residual_row, columns, mask, ADD_RESIDUAL: tl.constexpr):
    """A row's x and residual tiles as stored (x again for residual without ADD_RESIDUAL; zeros where masked)."""
    x = tl.load(x_ptr + x_row + columns, mask=mask, other=0.0)
    if ADD_RESIDUAL:
        return x, tl.load(residual_ptr + residual_row + columns, mask=mask, other=0.0)
    return x, x


@triton.jit
def _norm_input(x, residual, residual_ptr, residual_row, columns, mask, ADD_RESIDUAL: tl.constexpr):
    """The fp32 row values the norm is taken of, from _row_inputs' tiles: x, or residual + x as stored (written
    back to residual)."""
    values = x.to(tl.float32)
    if ADD_RESIDUAL:
        stored = (values + residual.to(tl.float32)).to(residual_ptr.dtype.element_ty)
        tl.store(residual_ptr + residual_row + columns, stored, mask=mask)
        values = stored.to(tl.float32)
    return values


@triton.jit
def _quantize_tile(
    y, q_ptr, scale_ptr, q_row, scale_row, group, groups, columns, mask, scale_group_stride, static_inverse,
    scale_floor, fp8_max, STATIC: tl.constexpr,
):  # fmt: skip
    """Stores q of the [groups, width] tile y (already rounded to x's dtype, in fp32), and its group scales."""
    if STATIC:
        q = tl.clamp(y * static_inverse, -fp8_max, fp8_max, propagate_nan=tl.PropagateNan.ALL)
    else:
        q, scale = quantize_group_tile(y, scale_floor, fp8_max)
        tl.store(scale_ptr + scale_row + group * scale_group_stride, scale, mask=group < groups)
    tl.store(q_ptr + q_row + columns, q.to(q_ptr.dtype.element_ty), mask=mask)


@cached
@triton.jit
def _norm_quant_kernel(
    x_ptr,
    residual_ptr,
    weight_ptr,
    q_ptr,
    scale_ptr,
    x_token_stride,
    residual_token_stride,
    weight_stride,
    scale_token_stride,
    scale_group_stride,
    tokens,
    hidden,
    group_size,
    groups,
    eps,
    scale_floor,
    fp8_max,
    ADD_RESIDUAL: tl.constexpr,
    STATIC: tl.constexpr,
    BLOCK_GROUPS: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    ROWS: tl.constexpr,
):
    tile_groups = tl.arange(0, BLOCK_GROUPS)[:, None]
    within = tl.arange(0, BLOCK)[None, :]
    if STATIC:
        one = tl.full((1,), 1.0, tl.float32)
        static_inverse = tl.math.div_rn(one, tl.load(scale_ptr + tl.arange(0, 1)).to(tl.float32))
    else:
        static_inverse = 1.0
    if SINGLE_PASS:
        mask = (tile_groups < groups) & (within < group_size)
        columns = tile_groups * group_size + within
        # read once for the program's rows
        weight = tl.load(weight_ptr + columns * weight_stride, mask=mask, other=0.0).to(tl.float32)
        first = tl.program_id(0).to(tl.int64) * ROWS  # int64 offsets: T * H passes 2**31 elements
        count = tl.minimum(ROWS, tokens - first)
        # one row ahead: the next row's x (and residual) are in flight while this one is normalised
        x_next, residual_next = _row_inputs(
            x_ptr, residual_ptr, first * x_token_stride, first * residual_token_stride, columns, mask, ADD_RESIDUAL
        )
        for r in range(0, count):
            token = first + r
            x_now, residual_now = x_next, residual_next
            ahead = mask & (tile_groups * 0 + r + 1 < count)  # a tile-shaped term: the interpreter takes no scalar
            x_next, residual_next = _row_inputs(
                x_ptr, residual_ptr, (token + 1) * x_token_stride, (token + 1) * residual_token_stride, columns,
                ahead, ADD_RESIDUAL,
            )  # fmt: skip
            values = _norm_input(
                x_now, residual_now, residual_ptr, token * residual_token_stride, columns, mask, ADD_RESIDUAL
            )
            inverse_rms = tl.rsqrt(tl.sum(tl.sum(values * values, axis=1), axis=0) / hidden + eps)
            y = (values * inverse_rms * weight).to(x_ptr.dtype.element_ty).to(tl.float32)
            _quantize_tile(
                y, q_ptr, scale_ptr, token * hidden, token * scale_token_stride, tl.arange(0, BLOCK_GROUPS), groups,
                columns, mask, scale_group_stride, static_inverse, scale_floor, fp8_max, STATIC,
            )  # fmt: skip
    else:  # one row per program (ROWS == 1)
        token = tl.program_id(0).to(tl.int64)
        x_row = token * x_token_stride
        residual_row = token * residual_token_stride
        q_row = token * hidden
        scale_row = token * scale_token_stride
        sum_squares = tl.zeros((BLOCK_GROUPS, BLOCK), dtype=tl.float32)
        for start in range(0, groups, BLOCK_GROUPS):
            mask = (start + tile_groups < groups) & (within < group_size)
            columns = (start + tile_groups) * group_size + within
            x, residual = _row_inputs(x_ptr, residual_ptr, x_row, residual_row, columns, mask, ADD_RESIDUAL)
            values = _norm_input(x, residual, residual_ptr, residual_row, columns, mask, ADD_RESIDUAL)
            sum_squares += values * values
        inverse_rms = tl.rsqrt(tl.sum(tl.sum(sum_squares, axis=1), axis=0) / hidden + eps)
        # The second pass reads back the residual this program stored in the first.
        tl.debug_barrier()
        for start in range(0, groups, BLOCK_GROUPS):
            mask = (start + tile_groups < groups) & (within < group_size)
            columns = (start + tile_groups) * group_size + within
            if ADD_RESIDUAL:
                values = tl.load(residual_ptr + residual_row + columns, mask=mask, other=0.0).to(tl.float32)
            else:
                values = tl.load(x_ptr + x_row + columns, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + columns * weight_stride, mask=mask, other=0.0).to(tl.float32)
            y = (values * inverse_rms * weight).to(x_ptr.dtype.element_ty).to(tl.float32)
            _quantize_tile(
                y, q_ptr, scale_ptr, q_row, scale_row, start + tl.arange(0, BLOCK_GROUPS), groups, columns, mask,
                scale_group_stride, static_inverse, scale_floor, fp8_max, STATIC,
            )  # fmt: skip


# --- silu_and_mul, then per-token-group fp8 ----------------------------------------------------------------------


def silu_and_mul_per_token_group_fp8(x, group_size=128, column_major_scales=False):
    tokens, width = x.shape
    intermediate = width // 2
    groups_per_token = intermediate // group_size
    scale = group_scale_storage(tokens, groups_per_token, column_major_scales, x.device)
    q = torch.empty((tokens, intermediate), dtype=torch.float8_e4m3fn, device=x.device)
    total_groups = tokens * groups_per_token
    if total_groups == 0:
        return q, scale
    config = _SILU_POLICY.get((group_size, total_groups, multiprocessor_count(x.device)))
    _silu_quant_kernel[(cdiv(total_groups, config["BLOCK_GROUPS"]),)](
        x,
        q,
        scale,
        x.stride(0),
        scale.stride(0),
        scale.stride(1),
        intermediate,
        group_size,
        groups_per_token,
        total_groups,
        SCALE_FLOOR,
        E4M3_MAX,
        BLOCK_GROUPS=config["BLOCK_GROUPS"],
        BLOCK=config["BLOCK"],
        num_warps=config["num_warps"],
    )
    return q, scale


@cached
@triton.jit
def _silu_quant_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    x_token_stride,
    scale_token_stride,
    scale_group_stride,
    intermediate,
    group_size,
    groups_per_token,
    total_groups,
    scale_floor,
    fp8_max,
    BLOCK_GROUPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    flat = tl.program_id(0).to(tl.int64) * BLOCK_GROUPS + tl.arange(0, BLOCK_GROUPS)
    group_mask = flat < total_groups
    token = flat // groups_per_token
    group = flat % groups_per_token
    gate_ptrs = x_ptr + (token * x_token_stride + group * group_size)[:, None]
    columns = tl.arange(0, BLOCK)[None, :]
    mask = group_mask[:, None] & (columns < group_size)
    gate = tl.load(gate_ptrs + columns, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + intermediate + columns, mask=mask, other=0.0).to(tl.float32)
    # native/silu_and_mul's arithmetic, rounded to x's dtype as it stores it.
    y = (gate / (1.0 + tl.exp(-gate)) * up).to(x_ptr.dtype.element_ty).to(tl.float32)
    q, scale = quantize_group_tile(y, scale_floor, fp8_max)
    q_groups = q_ptr + (token * intermediate + group * group_size)[:, None]
    tl.store(q_groups + columns, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(scale_ptr + token * scale_token_stride + group * scale_group_stride, scale, mask=group_mask)


#: row -> its cached launch policy (the four norm rows share the norm kernel).
_POLICIES: dict = {}


def _silu_config(group_size: int, total_groups: int, multiprocessors: int) -> dict:
    """fp8_quant's tile of groups (the silu row's groups are as wide; it reads two inputs per element)."""
    return group_tile_config(group_size, total_groups, multiprocessors)


_SILU_POLICY = LaunchPolicy("native/silu_and_mul_per_token_group_fp8", _silu_config)
