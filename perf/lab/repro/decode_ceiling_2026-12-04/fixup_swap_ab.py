"""Lab: native/fp8_block_mm_swap_ab's kernel with the K slices added inside the one launch (no merge kernel).

Each program stores its fp32 slice into the [SPLIT_K, M, N] workspace, then (after a CTA barrier) increments its
output tile's arrival counter (atomic, acq_rel, gpu scope). The program that arrives last adds the slices in
order 0 .. SPLIT_K - 1 (the same sum whichever program is last: deterministic), rounds once into out and resets
the counter to 0 for the next call. The shipped row adds the slices in a second kernel (mm/splitk.py's merge);
this variant saves that launch and its graph node. Counters: int32 [tiles], zero before the call: either a new
zero buffer per call (a memset in the graph) or one cached buffer that the last programs leave at zero (safe
for calls in one stream; two streams sharing it would race).
"""

import torch
import triton
import triton.language as tl

from rapid_llm.kernels.ops.gemm.fp8 import SCALE_BLOCK, block_scales
from rapid_llm.kernels.ops.gemm.mm.splitk import slices

_CACHED = {}


@triton.jit(do_not_specialize=["M", "stride_ask"])
def fixup_kernel(
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    work_ptr,
    counters_ptr,
    M,
    N,
    stride_am,
    stride_bn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_om,
    stride_on,
    k_steps,
    steps_per_split,
    splits,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    first_column = tl.program_id(0) * BLOCK_N
    columns = first_column + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    safe_rows = tl.where(rows < M, rows, M - 1).to(tl.int64)
    safe_columns = tl.where(columns < N, columns, N - 1).to(tl.int64)
    first_step = split * steps_per_split
    steps = tl.minimum(steps_per_split, k_steps - first_step)
    ks = first_step * BLOCK_K + tl.arange(0, BLOCK_K)
    b_tile = b_ptr + safe_columns[:, None] * stride_bn + ks[None, :]
    a_tile = a_ptr + safe_rows[:, None] * stride_am + ks[None, :]
    a_scales = a_scale_ptr + safe_rows * stride_asm
    b_scales = b_scale_ptr + (first_column // BLOCK_K) * stride_bsn
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for offset in range(steps):
        step = first_step + offset
        product = tl.dot(tl.load(b_tile), tl.trans(tl.load(a_tile)))
        scale = tl.load(a_scales + step * stride_ask) * tl.load(b_scales + step * stride_bsk)
        acc += product * scale[None, :]
        b_tile += BLOCK_K
        a_tile += BLOCK_K
    inside = (columns[:, None] < N) & (rows[None, :] < M)
    out_tile = out_ptr + rows.to(tl.int64)[None, :] * stride_om + columns.to(tl.int64)[:, None] * stride_on
    if splits == 1:
        tl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=inside)
    else:
        slice_offsets = rows.to(tl.int64)[None, :] * N + columns[:, None]
        tl.store(work_ptr + split.to(tl.int64) * M * N + slice_offsets, acc, mask=inside)
        tl.debug_barrier()  # every thread's slice stored before the arrival is released
        tile = tl.program_id(0) * tl.num_programs(2) + tl.program_id(2)
        arrived = tl.atomic_add(counters_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == splits - 1:  # the last slice of this tile: add all, in order
            total = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            for s in range(splits):
                total += tl.load(work_ptr + s * M * N + slice_offsets, mask=inside, other=0.0, cache_modifier=".cg")
            tl.store(out_tile, total.to(out_ptr.dtype.element_ty), mask=inside)
            tl.atomic_xchg(counters_ptr + tile, 0, sem="relaxed", scope="gpu")


def launch(a, a_scale, b, b_scale, out, knobs: dict, cached_counters: bool = False):
    """One call (knobs as the row's: BLOCK_M, BLOCK_N, BLOCK_K = 128, SPLIT_K, num_warps, num_stages)."""
    scales = block_scales(a_scale, b_scale)
    m, k = a.shape
    n = b.shape[0]
    knobs = dict(knobs)
    split, per = slices(k // SCALE_BLOCK, knobs.pop("SPLIT_K"))
    grid = (triton.cdiv(n, knobs["BLOCK_N"]), split, triton.cdiv(m, knobs["BLOCK_M"]))
    tiles = grid[0] * grid[2]
    work = torch.empty((split, m, n), dtype=torch.float32, device=a.device) if split > 1 else out
    if cached_counters:
        key = (a.device, tiles)
        if key not in _CACHED:
            _CACHED[key] = torch.zeros(tiles, dtype=torch.int32, device=a.device)
        counters = _CACHED[key]
    else:
        counters = torch.zeros(tiles, dtype=torch.int32, device=a.device)
    fixup_kernel[grid](
        a, b, scales.a, scales.b, out, work, counters, m, n, a.stride(0), b.stride(0), *scales.a_strides,
        *scales.b_strides, *out.stride(), k // SCALE_BLOCK, per, split, **knobs,
    )  # fmt: skip
    return out
