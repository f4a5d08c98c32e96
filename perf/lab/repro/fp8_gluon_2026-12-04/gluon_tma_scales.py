"""Lab variant of native/fp8_block_mm_gluon (not a row): the producer only issues TMA copies.

The row's producer loads each step's a_scale rows with its threads, multiplies by b_scale and stores them into
the ring (four loads, four shared stores and a warpgroup barrier a step). Here a_scale must be in the
TMA-aligned column-major layout per_token_group_fp8 writes (a_scale = storage[:, :M].T, storage [K/128, M_pad],
M_pad % 4 == 0): one [1, 64] TMA box per 64-row part lands the row scales with the a and b boxes on the slot's
`ready` barrier (one arrive: the copies' expect). The consumers multiply by b_scale[n // 128, step], a scalar
loaded a step ahead. With copies only, one producer warp suffices (a 4-warp partition syncs its warps after
every copy: 9 barriers a step at 256-row tiles); knob PRODUCER_WARPS (default 1). Everything else is the
row's (imported: the row's module as of commit c4ba6b8; check that commit out to rerun). Knob PIPELINE
(default True: the first row's step-ahead product at 128-row tiles; False: each step's product waited for,
then scaled, which the reworked row ships). Measure beside the row:
`python perf/lab/repro/fp8_gluon_2026-12-04/bench_tma_scales.py` on the H200.
"""

from __future__ import annotations

import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from rapid_llm.kernels.ops.device_facts import multiprocessor_count
from rapid_llm.kernels.ops.fast_launch import cdiv
from rapid_llm.kernels.ops.gemm.fp8 import SCALE_BLOCK
from rapid_llm.kernels.ops.gemm.fp8.gluon import (
    CONSUMER_REGS,
    MAX_REGISTERS,
    PRODUCER_REGS,
    ROWS,
    _operand_layout,
    _store,
    _tile_origin,
)

#: a [1, 64] fp32 box: 256 unswizzled bytes (read back as a plain [64] vector)
SCALE_BOX = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))


def launch(a, a_scale, b, b_scale, out, knobs: dict) -> None:
    """a_scale: the column-major view of a [K/128, M_pad] fp32 storage (stride (1, M_pad), M_pad % 4 == 0)."""
    m, k = a.shape
    n = b.shape[0]
    block_m = knobs["BLOCK_M"]
    assert a_scale.stride(0) == 1 and a_scale.stride(1) % 4 == 0, "a_scale must be TMA-aligned column-major"
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [ROWS.value, SCALE_BLOCK], _operand_layout(ROWS.value))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [SCALE_BLOCK, SCALE_BLOCK], _operand_layout(SCALE_BLOCK))
    s_desc = TensorDescriptor(a_scale, [k // SCALE_BLOCK, m], [a_scale.stride(1), 1], [1, ROWS.value], SCALE_BOX)
    tiles = cdiv(m, block_m) * cdiv(n, SCALE_BLOCK)
    programs = max(1, min(tiles, multiprocessor_count(a.device)))
    _kernel[(programs,)](
        a_desc, b_desc, s_desc, b_scale, out, m, n, k, *b_scale.stride(), *out.stride(), 2,
        NUM_PROGRAMS=programs, GROUP_M=knobs["GROUP_M"], STAGES=knobs["num_stages"], BLOCK_M=block_m,
        PRODUCER_WARPS=knobs.get("PRODUCER_WARPS", 1),
        PIPELINE=knobs.get("PIPELINE", True), num_warps=4, maxnreg=MAX_REGISTERS,
    )  # fmt: skip


@gluon.jit
def _producer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr):
    ring, _, _, sizes = args
    a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    M, N, K, halves, NUM_PROGRAMS = sizes
    BLOCK_M: gl.constexpr = 2 * SUB * ROWS
    bytes_per_step: gl.constexpr = 2 * SUB * (a_desc.block_type.nbytes + s_desc.block_type.nbytes) + b_desc.block_type.nbytes
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M, BLOCK_M)
        for step in range(K // 128):
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, bytes_per_step)
            for part in gl.static_range(2 * SUB):
                at = slot * 2 * SUB + part
                tma.async_copy_global_to_shared(a_desc, [first_row + part * ROWS, step * 128], bar, a_ring.index(at))
                tma.async_copy_global_to_shared(s_desc, [step, first_row + part * ROWS], bar, scale_ring.index(at))
            tma.async_copy_global_to_shared(b_desc, [first_column, step * 128], bar, b_ring.index(slot))
            count += 1


@gluon.jit
def _row_scales(scale_ring, at, layout: gl.constexpr):
    """The [1, 64] box of slot part `at` as a [64] vector in `layout`."""
    return scale_ring.index(at)._reinterpret(gl.float32, [ROWS], PLAIN).load(layout)


@gluon.jit
def _consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr, ROLE: gl.constexpr,
              PIPELINE: gl.constexpr):
    ring, weights, out, sizes = args
    a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    b_scale_ptr, stride_bsn, stride_bsk = weights
    out_ptr, stride_om, stride_on = out
    M, N, K, halves, NUM_PROGRAMS = sizes
    BLOCK_M: gl.constexpr = 2 * SUB * ROWS
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    per_row: gl.constexpr = gl.SliceLayout(1, mma)
    zero = gl.zeros([ROWS, 128], gl.float32, layout=mma)
    k_steps = K // 128
    first = ROLE * SUB * ROWS
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M, BLOCK_M)
        column_scales = b_scale_ptr + (first_column // 128) * stride_bsn
        column_scale = gl.load(column_scales)
        if (SUB == 1) & (not PIPELINE):
            # DeepGEMM's order: each step's product waited for, then scaled and added; the other warpgroup's
            # product runs meanwhile (no register copy of an in-flight product, which makes ptxas serialize
            # every wgmma of the kernel)
            acc = zero
            for step in range(k_steps):
                following = gl.load(column_scales + gl.minimum(step + 1, k_steps - 1) * stride_bsk)
                at = count + step
                slot = at % STAGES
                mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
                product = warpgroup_mma(a_ring.index(slot * 2 + ROLE), b_ring.index(slot).permute((1, 0)), zero,
                                        use_acc=False, is_async=True)  # fmt: skip
                scale = gl.expand_dims(_row_scales(scale_ring, slot * 2 + ROLE, per_row) * column_scale, 1)
                product = warpgroup_mma_wait(num_outstanding=0, deps=(product,))
                mbarrier.arrive(empty.index(slot), count=1)
                acc += product * scale
                column_scale = following
            _store(out_ptr, acc, first_row + first, first_column, M, N, stride_om, stride_on)
        elif SUB == 1:
            slot = count % STAGES
            mbarrier.wait(ready.index(slot), (count // STAGES) & 1)
            previous = warpgroup_mma(a_ring.index(slot * 2 + ROLE), b_ring.index(slot).permute((1, 0)), zero,
                                     use_acc=False, is_async=True)  # fmt: skip
            previous_scale = _row_scales(scale_ring, slot * 2 + ROLE, per_row) * column_scale
            acc = zero
            for step in range(1, k_steps):
                column_scale = gl.load(column_scales + step * stride_bsk)
                at = count + step
                slot = at % STAGES
                mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
                current = warpgroup_mma(a_ring.index(slot * 2 + ROLE), b_ring.index(slot).permute((1, 0)), zero,
                                        use_acc=False, is_async=True)  # fmt: skip
                scale = _row_scales(scale_ring, slot * 2 + ROLE, per_row) * column_scale
                previous = warpgroup_mma_wait(num_outstanding=1, deps=(previous,))
                mbarrier.arrive(empty.index((at - 1) % STAGES), count=1)
                acc += previous * gl.expand_dims(previous_scale, 1)
                previous = current
                previous_scale = scale
            previous = warpgroup_mma_wait(num_outstanding=0, deps=(previous,))
            mbarrier.arrive(empty.index((count + k_steps - 1) % STAGES), count=1)
            acc += previous * gl.expand_dims(previous_scale, 1)
            _store(out_ptr, acc, first_row + first, first_column, M, N, stride_om, stride_on)
        else:
            top_acc = zero
            bottom_acc = zero
            for step in range(k_steps):
                # the next step's weight scale, a step ahead (clamped at the end)
                following = gl.load(column_scales + gl.minimum(step + 1, k_steps - 1) * stride_bsk)
                at = count + step
                slot = at % STAGES
                b_tile = b_ring.index(slot).permute((1, 0))
                mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
                for half in range(halves):
                    part = slot * 4 + 2 * ROLE + half
                    product = warpgroup_mma(a_ring.index(part), b_tile, zero, use_acc=False, is_async=True)
                    scale = gl.expand_dims(_row_scales(scale_ring, part, per_row) * column_scale, 1)
                    product = warpgroup_mma_wait(num_outstanding=0, deps=(product,))
                    if half == 0:
                        top_acc += product * scale
                    else:
                        bottom_acc += product * scale
                mbarrier.arrive(empty.index(slot), count=1)
                column_scale = following
            _store(out_ptr, top_acc, first_row + first, first_column, M, N, stride_om, stride_on)
            _store(out_ptr, bottom_acc, first_row + first + ROWS, first_column, M, N, stride_om, stride_on)
        count += k_steps


@gluon.jit
def _first(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr, PIPELINE: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, SUB, 0, PIPELINE)


@gluon.jit
def _second(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr, PIPELINE: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, SUB, 1, PIPELINE)


@gluon.jit(do_not_specialize=["M"])
def _kernel(a_desc, b_desc, s_desc, b_scale_ptr, out_ptr, M, N, K, stride_bsn, stride_bsk, stride_om, stride_on,
            halves, NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
            BLOCK_M: gl.constexpr, PRODUCER_WARPS: gl.constexpr, PIPELINE: gl.constexpr):  # fmt: skip
    SUB: gl.constexpr = BLOCK_M // (2 * ROWS)
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * 2 * SUB, ROWS, 128], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, 128, 128], b_desc.layout)
    scale_ring = gl.allocate_shared_memory(gl.float32, [STAGES * 2 * SUB, 1, ROWS], s_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    ring = (a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty)
    args = (ring, (b_scale_ptr, stride_bsn, stride_bsk), (out_ptr, stride_om, stride_on), (M, N, K, halves, NUM_PROGRAMS))
    gl.warp_specialize(
        [(_first, (args, GROUP_M, STAGES, SUB, PIPELINE)), (_second, (args, GROUP_M, STAGES, SUB, PIPELINE)),
         (_producer, (args, GROUP_M, STAGES, SUB))],
        [4, PRODUCER_WARPS],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
