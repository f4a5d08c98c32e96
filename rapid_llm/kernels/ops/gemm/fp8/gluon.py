"""native/fp8_block_mm_gluon: gemm.fp8_block_mm in Gluon (sm90), out = (a * a_scale) @ (b * b_scale).T in bf16.

a: [M, K] float8_e4m3fn, b: [N, K] float8_e4m3fn (a:tma, b:tma: TMA boxes), K % 128 == 0; a_scale [M, K/128]
and b_scale [N/128, K/128] fp32 through their strides (either layout per_token_group_fp8 writes); out [M, N]
any strides.

Why Gluon: each 128-wide K step's product must be scaled by a_scale[m, step] * b_scale[n // 128, step] in fp32
before it is added (the DeepSeek-V3 block format). Triton runs every warp through one instruction stream that
waits for each product before scaling it, so the tensor cores idle while the CUDA cores scale
(native/fp8_block_mm). Here the warps have separate roles (gl.warp_specialize), as in DeepGEMM:

- a producer (one warpgroup, 40 registers a thread) walks the program's tiles and K steps, filling a ring of
  STAGES shared-memory slots. A slot holds a step's BLOCK_M / 64 a boxes of 64 rows and its 128-row b box,
  landed by TMA (rows past M and columns past N read TMA's zero fill), and the step's row scales
  a_scale[m, step] * b_scale[n // 128, step], loaded and stored by the producer's threads. `ready` completes
  on the copies' bytes and the scales' arrive; a slot is refilled once both consumers released it (`empty`
  counts two arrives).
- two consumer warpgroups, each half of the tile's rows. BLOCK_M = 128 (64 rows each): step s's product is
  issued asynchronously and left in flight while step s - 1's is scaled and added (accumulator and two
  products: 192 registers). BLOCK_M = 256 (128 rows each, 128 accumulator registers): each step's two 64-row
  products one after the other from one MMA site in a loop with a runtime bound (two sites would take two
  64-register blocks and spill). Either way, while one warpgroup scales, the other's products keep the tensor
  cores busy.

Persistent: min(SMs, tiles) programs, program p takes tiles p, p + P, ... in grouped order (GROUP_M row tiles
share each column tile's weight reads in L2). One rounding to bf16 at the store; rows past M and columns past
N are not stored. Tiles: ops/gemm/tiles.py (the tuning store, else 256 rows and 4 slots).
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

from ...device_facts import multiprocessor_count
from ...fast_launch import cached, cdiv
from . import SCALE_BLOCK, block_scales, prepare

ROW = "native/fp8_block_mm_gluon"
#: rows of one consumer warpgroup's share of a tile (a wgmma's M is 64 per warpgroup)
ROWS = gl.constexpr(64)
#: consumer and producer registers a thread (setmaxnreg), and the kernel's cap: 2 x 128 x 232 + 128 x 40 fit
#: the SM's 64 Ki registers
CONSUMER_REGS, PRODUCER_REGS = gl.constexpr(232), gl.constexpr(40)
MAX_REGISTERS = 168


@functools.cache
def _operand_layout(rows: int):
    """The NVMMA shared layout of an fp8 [rows, 128] operand box (TMA writes it, the MMA reads it)."""
    return gl.NVMMASharedLayout.get_default_for([rows, SCALE_BLOCK], gl.float8e4nv)


def fp8_block_mm_gluon(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm_gluon (gemm.fp8_block_mm's check ran; the row's
    conditions hold)."""
    scales = block_scales(a_scale, b_scale)
    out, knobs = prepare(ROW, a, b, scales, out)
    if knobs is not None:
        launch(a, b, scales, None, out, knobs)
    return out


def launch(a, b, scales, bias, out, knobs: dict) -> None:
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (ops/gemm/tiles.py: BLOCK_M 128 or 256,
    BLOCK_N = BLOCK_K = 128, GROUP_M, num_stages: the ring's slots; num_warps is the roles' and ignored); bias
    must be None (the block op has none: the argument keeps the fp8 kernels' launch signature for
    perf/tune_gemm.py)."""
    assert bias is None, "gemm.fp8_block_mm has no bias"
    block_m = knobs["BLOCK_M"]
    if block_m not in (128, 256) or (knobs["BLOCK_N"], knobs["BLOCK_K"]) != (SCALE_BLOCK, SCALE_BLOCK):
        raise ValueError(f"{ROW}: tiles are 128 or 256 rows x 128 x 128 (two consumer warpgroups), got {knobs}")
    m, k = a.shape
    n = b.shape[0]
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [ROWS.value, SCALE_BLOCK], _operand_layout(ROWS.value))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [SCALE_BLOCK, SCALE_BLOCK], _operand_layout(SCALE_BLOCK))
    tiles = cdiv(m, block_m) * cdiv(n, SCALE_BLOCK)
    programs = max(1, min(tiles, multiprocessor_count(a.device)))
    _fp8_block_mm_gluon_kernel[(programs,)](
        a_desc,
        b_desc,
        scales.a,
        scales.b,
        out,
        m,
        n,
        k,
        *scales.a_strides,
        *scales.b_strides,
        *out.stride(),
        2,  # halves: a runtime bound (a constant one would be unrolled into two MMA sites)
        NUM_PROGRAMS=programs,
        GROUP_M=knobs["GROUP_M"],
        STAGES=knobs["num_stages"],
        BLOCK_M=block_m,
        num_warps=4,
        maxnreg=MAX_REGISTERS,
    )


@gluon.jit
def _tile_origin(tile, M, N, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr):
    """(first row, first column) of output tile `tile` in grouped order: GROUP_M row tiles per column sweep."""
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, 128)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % per_group) % group_rows) * BLOCK_M, ((tile % per_group) // group_rows) * 128


@gluon.jit
def _producer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr):
    """Every K step of the program's tiles into ring slot c % STAGES (c counts steps across tiles) once both
    consumers released the slot (the `empty` phases start complete: each slot's first wait passes): the tile's
    2 * SUB 64-row a boxes and its 128-row b box by TMA, and the step's row scales a_scale[m, step] *
    b_scale[n // 128, step] by this partition's loads. `ready` completes on the copies' bytes and the scales'
    arrive; the weight block's scale is loaded before the wait for the slot, the row scales while the copies
    fly."""
    ring, scales, _, sizes = args
    a_desc, b_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    a_scale_ptr, b_scale_ptr, stride_asm, stride_ask, stride_bsn, stride_bsk = scales
    M, N, K, halves, NUM_PROGRAMS = sizes
    BLOCK_M: gl.constexpr = 2 * SUB * ROWS
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    k_steps = K // 128
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M, BLOCK_M)
        rows = first_row + gl.arange(0, ROWS, layout=lanes)
        column_scales = b_scale_ptr + (first_column // 128) * stride_bsn
        for step in range(k_steps):
            column_scale = gl.load(column_scales + step * stride_bsk)
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, 2 * SUB * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            for part in gl.static_range(2 * SUB):
                tma.async_copy_global_to_shared(
                    a_desc, [first_row + part * ROWS, step * 128], bar, a_ring.index(slot * 2 * SUB + part)
                )
            tma.async_copy_global_to_shared(b_desc, [first_column, step * 128], bar, b_ring.index(slot))
            for part in gl.static_range(2 * SUB):
                part_rows = rows + part * ROWS
                safe_rows = gl.where(part_rows < M, part_rows, M - 1).to(gl.int64)
                row_scale = gl.load(a_scale_ptr + safe_rows * stride_asm + step * stride_ask)
                scale_ring.index(slot * 2 * SUB + part).store(row_scale * column_scale)
            gl.thread_barrier()  # every warp's scales are in shared memory before the one arrive
            mbarrier.arrive(bar, count=1)
            count += 1


@gluon.jit
def _consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr, ROLE: gl.constexpr):
    """Warpgroup ROLE: rows ROLE * 64 * SUB .. + 64 * SUB of each of the program's tiles, every K step from the
    ring. SUB = 1: step s's product stays in flight while step s - 1's is scaled and added. SUB = 2 (256-row
    tiles, an accumulator of 128 registers): each step's two 64-row products one after the other, each scaled
    while the other warpgroup's product runs."""
    ring, _, out, sizes = args
    a_desc, b_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    out_ptr, stride_om, stride_on = out
    M, N, K, halves, NUM_PROGRAMS = sizes
    BLOCK_M: gl.constexpr = 2 * SUB * ROWS
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    per_row: gl.constexpr = gl.SliceLayout(1, mma)
    zero = gl.zeros([ROWS, 128], gl.float32, layout=mma)
    k_steps = K // 128
    first = ROLE * SUB * ROWS  # the warpgroup's first row in the tile
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M, BLOCK_M)
        if SUB == 1:
            slot = count % STAGES
            mbarrier.wait(ready.index(slot), (count // STAGES) & 1)
            previous = warpgroup_mma(
                a_ring.index(slot * 2 + ROLE), b_ring.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True
            )
            previous_scale = scale_ring.index(slot * 2 + ROLE).load(per_row)
            acc = zero
            for step in range(1, k_steps):
                at = count + step
                slot = at % STAGES
                mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
                current = warpgroup_mma(
                    a_ring.index(slot * 2 + ROLE),
                    b_ring.index(slot).permute((1, 0)),
                    zero,
                    use_acc=False,
                    is_async=True,
                )
                scale = scale_ring.index(slot * 2 + ROLE).load(per_row)
                # the previous step's product is done (this one stays in flight): release its slot, scale, add
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
                at = count + step
                slot = at % STAGES
                b_tile = b_ring.index(slot).permute((1, 0))
                mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
                # a runtime loop over the two halves: one MMA site, so its product takes one register block
                # (two sites get two, and with the 128 accumulator registers they spill)
                for half in range(halves):
                    part = slot * 4 + 2 * ROLE + half
                    product = warpgroup_mma(a_ring.index(part), b_tile, zero, use_acc=False, is_async=True)
                    scale = gl.expand_dims(scale_ring.index(part).load(per_row), 1)
                    product = warpgroup_mma_wait(num_outstanding=0, deps=(product,))
                    if half == 0:
                        top_acc += product * scale
                    else:
                        bottom_acc += product * scale
                mbarrier.arrive(empty.index(slot), count=1)
            _store(out_ptr, top_acc, first_row + first, first_column, M, N, stride_om, stride_on)
            _store(out_ptr, bottom_acc, first_row + first + ROWS, first_column, M, N, stride_om, stride_on)
        count += k_steps


@gluon.jit
def _store(out_ptr, acc, first_row, first_column, M, N, stride_om, stride_on):
    """acc [64, 128] fp32 rounded once to out's dtype at out[first_row.., first_column..]; rows past M and
    columns past N are not stored (the indices are made here, after the K loop that needs the registers)."""
    rows = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc.type.layout))
    columns = first_column + gl.arange(0, 128, layout=gl.SliceLayout(0, acc.type.layout))
    out_tile = (
        out_ptr + gl.expand_dims(rows.to(gl.int64), 1) * stride_om + gl.expand_dims(columns.to(gl.int64), 0) * stride_on
    )
    inside = gl.expand_dims(rows < M, 1) & gl.expand_dims(columns < N, 0)
    gl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=inside)


@gluon.jit
def _first_consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr):
    """The first half of each tile's rows (the default partition)."""
    _consumer(args, GROUP_M, STAGES, SUB, 0)


@gluon.jit
def _second_consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, SUB: gl.constexpr):
    """The second half of each tile's rows."""
    _consumer(args, GROUP_M, STAGES, SUB, 1)


@cached
@gluon.jit(do_not_specialize=["M", "stride_ask"])
def _fp8_block_mm_gluon_kernel(
    a_desc,
    b_desc,
    a_scale_ptr,
    b_scale_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    stride_om,
    stride_on,
    halves,
    NUM_PROGRAMS: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    BLOCK_M: gl.constexpr,
):
    SUB: gl.constexpr = BLOCK_M // (2 * ROWS)  # 64-row sub-tiles per consumer warpgroup: 1 or 2
    gl.static_assert((SUB == 1) | (SUB == 2), "BLOCK_M is 128 or 256")
    # a step's 2 * SUB 64-row a boxes in slots slot * 2 * SUB + part (a shared buffer's rows are a TMA box's)
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * 2 * SUB, ROWS, 128], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, 128, 128], b_desc.layout)
    # the steps' row scales, as the a boxes (a slot's rank: one less than the buffer's)
    plain: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
    scale_ring = gl.allocate_shared_memory(gl.float32, [STAGES * 2 * SUB, ROWS], plain)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=2)  # the copies' expect and the scales' arrive
        mbarrier.init(empty.index(i), count=2)  # one arrive per consumer warpgroup
    fence_async_shared()
    # per role: the ring (TMA boxes, slots, barriers), the scales (the producer's), out (the consumers'), sizes
    ring = (a_desc, b_desc, a_ring, b_ring, scale_ring, ready, empty)
    scales = (a_scale_ptr, b_scale_ptr, stride_asm, stride_ask, stride_bsn, stride_bsk)
    args = (ring, scales, (out_ptr, stride_om, stride_on), (M, N, K, halves, NUM_PROGRAMS))
    gl.warp_specialize(
        [
            (_first_consumer, (args, GROUP_M, STAGES, SUB)),
            (_second_consumer, (args, GROUP_M, STAGES, SUB)),
            (_producer, (args, GROUP_M, STAGES, SUB)),
        ],
        [4, 4],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


__all__ = ["fp8_block_mm_gluon", "launch"]
