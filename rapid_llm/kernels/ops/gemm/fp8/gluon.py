"""native/fp8_block_mm_gluon: gemm.fp8_block_mm in Gluon (sm90), out = (a * a_scale) @ (b * b_scale).T in bf16.

a: [M, K] float8_e4m3fn, b: [N, K] float8_e4m3fn, out [M, N] bf16 (a:tma, b:tma, out:tma: TMA boxes and
stores), K % 128 == 0; b_scale [N/128, K/128] fp32, any strides. a_scale [M, K/128] fp32 is read by TMA from
the column-major layout per_token_group_fp8 writes for TMA (a [K/128, M_pad] storage, M_pad % 4 == 0, viewed
as storage[:, :M].T); a_scale in any other layout is first copied into one (M * K/128 * 4 bytes each way).

Why Gluon: each 128-wide K step's product must be scaled by a_scale[m, step] * b_scale[n // 128, step] in fp32
before it is added (the DeepSeek-V3 block format). Triton runs every warp through one instruction stream that
waits for each product before scaling it, so the tensor cores idle while the CUDA cores scale
(native/fp8_block_mm). Here the warps have separate roles (gl.warp_specialize), as in DeepGEMM:

- a producer warp walks the program's 128 x 128 output tiles and their K steps, filling a ring of STAGES
  shared-memory slots by TMA: a step's two 64-row a boxes, its 128-row b box and the two 64-row boxes of
  a_scale's column `step` (rows past M and columns past N read TMA's zero fill). `ready` completes on their
  bytes; a slot is refilled once both consumers released it (`empty` counts two arrives).
- two consumer warpgroups, rows 0..63 and 64..127 of each tile. Each step's product is issued, waited for and
  its slot released, then scaled by a_scale[m, step] * b_scale[n // 128, step] and added to the fp32
  accumulator; while one warpgroup scales, the other's product runs. A product is never read while another
  is in flight (ptxas would then serialize every MMA of the kernel).
- each consumer rounds its accumulator once to bf16 into its shared buffer and stores it by TMA (rows past M
  and columns past N clipped), the store left in flight while the next tile runs.

Persistent: min(SMs, tiles) programs, program p takes tiles p, p + P, ... in grouped order (GROUP_M row tiles
share each column tile's weight reads in L2). Tiles: ops/gemm/tiles.py (the tuning store, else GROUP_M 8 and
5 slots: a slot is 32.5 KiB, the two output buffers 32 KiB).
"""

from __future__ import annotations

import functools

import torch
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
from ...fp8 import group_scale_storage
from . import SCALE_BLOCK, block_entry

ROW = "native/fp8_block_mm_gluon"
#: rows of one consumer warpgroup's share of a tile (a wgmma's M is 64 per warpgroup), and the tile's rows
ROWS = gl.constexpr(64)
BLOCK_M = 128
#: ring slots that fit beside the output buffers in the 227 KiB of shared memory a block may take
MAX_STAGES = 5
#: consumer and producer registers a thread (setmaxnreg), and the kernel's cap: 2 x 128 x 232 + 32 x 40 fit
#: the SM's 64 Ki registers
CONSUMER_REGS, PRODUCER_REGS = gl.constexpr(232), gl.constexpr(40)
MAX_REGISTERS = 168
#: a [1, 64] fp32 box of a_scale's column-major storage: 256 unswizzled bytes, read back as a [64] vector
SCALE_BOX = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0]))


@functools.cache
def _box_layout(rows: int, dtype):
    """The NVMMA shared layout of a [rows, 128] box (TMA and the MMA agree on it)."""
    return gl.NVMMASharedLayout.get_default_for([rows, SCALE_BLOCK], dtype)


def fp8_block_mm_gluon(a, a_scale, b, b_scale, out=None):
    """Unchecked kernel entry of native/fp8_block_mm_gluon (gemm.fp8_block_mm's check ran; the row's
    conditions hold)."""
    return block_entry(ROW, launch, a, a_scale, b, b_scale, out)


def tma_row_scales(a_scale: torch.Tensor) -> torch.Tensor:
    """a_scale [M, K/128] as the producer's TMA reads it: column-major with a column stride of whole 16-byte
    units on a 16-byte-aligned start (what per_token_group_fp8 writes for TMA) as it is, else a copy in
    that layout."""
    m, groups = a_scale.shape
    column_stride = a_scale.stride(1)
    if a_scale.stride(0) == 1 and column_stride % 4 == 0 and column_stride >= m and a_scale.data_ptr() % 16 == 0:
        return a_scale
    aligned = group_scale_storage(m, groups, column_major=True, device=a_scale.device)
    aligned.copy_(a_scale)
    return aligned


def launch(a, b, scales, bias, out, knobs: dict) -> None:
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (ops/gemm/tiles.py: BLOCK_M =
    BLOCK_N = BLOCK_K = 128, GROUP_M, num_stages: the ring's slots, 1 to MAX_STAGES; num_warps is the roles' and
    ignored); bias must be None (the block op has none: the argument keeps the fp8 kernels' launch signature
    for perf/tune_gemm.py)."""
    assert bias is None, "gemm.fp8_block_mm has no bias"
    tile = (knobs["BLOCK_M"], knobs["BLOCK_N"], knobs["BLOCK_K"])
    if tile != (BLOCK_M, SCALE_BLOCK, SCALE_BLOCK) or not 1 <= knobs["num_stages"] <= MAX_STAGES:
        raise ValueError(
            f"{ROW}: tiles are 128 x 128 x 128 (two 64-row consumer warpgroups) in 1 to {MAX_STAGES} ring slots, "
            f"got {knobs}"
        )
    m, k = a.shape
    n = b.shape[0]
    a_scale = tma_row_scales(scales.a)
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [ROWS.value, SCALE_BLOCK], _box_layout(64, gl.float8e4nv))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [SCALE_BLOCK, SCALE_BLOCK], _box_layout(128, gl.float8e4nv))
    s_desc = TensorDescriptor(a_scale, [k // SCALE_BLOCK, m], [a_scale.stride(1), 1], [1, ROWS.value], SCALE_BOX)
    out_desc = TensorDescriptor(
        out, [m, n], [out.stride(0), 1], [ROWS.value, SCALE_BLOCK], _box_layout(64, gl.bfloat16)
    )
    tiles = cdiv(m, BLOCK_M) * cdiv(n, SCALE_BLOCK)
    programs = max(1, min(tiles, multiprocessor_count(a.device)))
    _fp8_block_mm_gluon_kernel[(programs,)](
        a_desc,
        b_desc,
        s_desc,
        out_desc,
        scales.b,
        m,
        n,
        k,
        *scales.b_strides,
        NUM_PROGRAMS=programs,
        GROUP_M=knobs["GROUP_M"],
        STAGES=knobs["num_stages"],
        num_warps=4,
        maxnreg=MAX_REGISTERS,
    )


@gluon.jit
def _tile_origin(tile, M, N, GROUP_M: gl.constexpr):
    """(first row, first column) of output tile `tile` in grouped order: GROUP_M row tiles per column sweep."""
    tiles_m = gl.cdiv(M, 2 * ROWS)
    tiles_n = gl.cdiv(N, 128)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    return (first_m + (tile % per_group) % group_rows) * (2 * ROWS), ((tile % per_group) // group_rows) * 128


@gluon.jit
def _producer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Every K step of the program's tiles into ring slot c % STAGES (c counts steps across tiles) once both
    consumers released the slot (the `empty` phases start complete: each slot's first wait passes). One
    warp: it only issues copies."""
    ring, _, sizes = args
    a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    M, N, K, NUM_PROGRAMS = sizes
    step_bytes: gl.constexpr = 2 * (a_desc.block_type.nbytes + s_desc.block_type.nbytes) + b_desc.block_type.nbytes
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M)
        for step in range(K // 128):
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, step_bytes)
            for part in gl.static_range(2):
                at = slot * 2 + part
                tma.async_copy_global_to_shared(a_desc, [first_row + part * ROWS, step * 128], bar, a_ring.index(at))
                tma.async_copy_global_to_shared(s_desc, [step, first_row + part * ROWS], bar, scale_ring.index(at))
            tma.async_copy_global_to_shared(b_desc, [first_column, step * 128], bar, b_ring.index(slot))
            count += 1


@gluon.jit
def _consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, ROLE: gl.constexpr):
    """Warpgroup ROLE: rows ROLE * 64 .. + 64 of each of the program's tiles, every K step from the ring, then
    the tile's TMA store from its output buffer."""
    ring, epilogue, sizes = args
    _, _, _, a_ring, b_ring, scale_ring, ready, empty = ring
    out_desc, out_buffer, b_scale_ptr, stride_bsn, stride_bsk = epilogue
    M, N, K, NUM_PROGRAMS = sizes
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    per_row: gl.constexpr = gl.SliceLayout(1, mma)
    zero = gl.zeros([ROWS, 128], gl.float32, layout=mma)
    k_steps = K // 128
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, 128), NUM_PROGRAMS):
        first_row, first_column = _tile_origin(tile, M, N, GROUP_M)
        column_scales = b_scale_ptr + (first_column // 128) * stride_bsn
        column_scale = gl.load(column_scales)
        acc = zero
        for step in range(k_steps):
            # the next step's weight scale is loaded a step ahead (clamped at the last)
            following = gl.load(column_scales + gl.minimum(step + 1, k_steps - 1) * stride_bsk)
            at = count + step
            slot = at % STAGES
            mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
            part = slot * 2 + ROLE
            product = warpgroup_mma(
                a_ring.index(part), b_ring.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True
            )
            row_scale = scale_ring.index(part)._reinterpret(gl.float32, [ROWS], PLAIN).load(per_row)
            scale = gl.expand_dims(row_scale * column_scale, 1)
            product = warpgroup_mma_wait(num_outstanding=0, deps=(product,))
            mbarrier.arrive(empty.index(slot), count=1)
            acc += product * scale
            column_scale = following
        count += k_steps
        tma.store_wait(pendings=0)  # the last tile's store has read the buffer
        out_buffer.store(acc.to(gl.bfloat16))
        fence_async_shared()
        tma.async_copy_shared_to_global(out_desc, [first_row + ROLE * ROWS, first_column], out_buffer)
    tma.store_wait(pendings=0)


@gluon.jit
def _first_consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Rows 0..63 of each tile (the default partition)."""
    _consumer(args, GROUP_M, STAGES, 0)


@gluon.jit
def _second_consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """Rows 64..127 of each tile."""
    _consumer(args, GROUP_M, STAGES, 1)


@cached
@gluon.jit(do_not_specialize=["M"])
def _fp8_block_mm_gluon_kernel(
    a_desc,
    b_desc,
    s_desc,
    out_desc,
    b_scale_ptr,
    M,
    N,
    K,
    stride_bsn,
    stride_bsk,
    NUM_PROGRAMS: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    # slot s holds a boxes 2s and 2s + 1 (rows 0..63, 64..127), their scale boxes likewise, and b box s
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * 2, ROWS, 128], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, 128, 128], b_desc.layout)
    scale_ring = gl.allocate_shared_memory(gl.float32, [STAGES * 2, 1, ROWS], s_desc.layout)
    first_buffer = gl.allocate_shared_memory(out_desc.dtype, [ROWS, 128], out_desc.layout)
    second_buffer = gl.allocate_shared_memory(out_desc.dtype, [ROWS, 128], out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)  # the producer's expect; the copies' bytes complete it
        mbarrier.init(empty.index(i), count=2)  # one arrive per consumer warpgroup
    fence_async_shared()
    ring = (a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty)
    sizes = (M, N, K, NUM_PROGRAMS)
    first = (ring, (out_desc, first_buffer, b_scale_ptr, stride_bsn, stride_bsk), sizes)
    second = (ring, (out_desc, second_buffer, b_scale_ptr, stride_bsn, stride_bsk), sizes)
    gl.warp_specialize(
        [
            (_first_consumer, (first, GROUP_M, STAGES)),
            (_second_consumer, (second, GROUP_M, STAGES)),
            (_producer, (first, GROUP_M, STAGES)),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


__all__ = ["fp8_block_mm_gluon", "launch", "tma_row_scales"]
