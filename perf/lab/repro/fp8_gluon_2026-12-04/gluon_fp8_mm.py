"""Lab kernel (not a row): gemm.fp8_mm (per-token a_scale [M, 1] x per-channel b_scale [N, 1], bf16 out) in Gluon.

The scales are per row and per column, so the products accumulate over all of K in the tensor cores (no
per-step promotion, unlike the block format): each consumer warpgroup keeps a [64, BLOCK_N] fp32 accumulator
in place, one step in flight, and scales once in the epilogue. Roles as in native/fp8_block_mm_gluon: a
one-warp TMA producer (a ring of STAGES slots of two 64-row a boxes and a BLOCK_N-row b box), two consumer
warpgroups (rows 0..63 and 64..127 of a 128 x BLOCK_N tile). Measure against torch._scaled_mm and
native/fp8_mm at 8192^3 with bench_fp8_mm.py.
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

from rapid_llm.kernels.ops.device_facts import multiprocessor_count
from rapid_llm.kernels.ops.fast_launch import cdiv
from rapid_llm.kernels.ops.gemm.fp8.gluon import CONSUMER_REGS, MAX_REGISTERS, PRODUCER_REGS, ROWS, _tile_origin


@functools.cache
def _layout(rows: int):
    return gl.NVMMASharedLayout.get_default_for([rows, 128], gl.float8e4nv)


def fp8_mm(a, a_scale, b, b_scale, knobs: dict) -> torch.Tensor:
    """a [M, K], b [N, K] e4m3 (K-contiguous, K % 128 == 0), a_scale [M, 1], b_scale [N, 1] fp32 -> bf16 [M, N]."""
    m, k = a.shape
    n = b.shape[0]
    block_n = knobs["BLOCK_N"]
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [ROWS.value, 128], _layout(ROWS.value))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [block_n, 128], _layout(block_n))
    tiles = cdiv(m, 2 * ROWS.value) * cdiv(n, block_n)
    programs = max(1, min(tiles, multiprocessor_count(a.device)))
    _kernel[(programs,)](
        a_desc, b_desc, a_scale, b_scale, out, m, n, k, a_scale.stride(0), b_scale.stride(0), out.stride(0),
        NUM_PROGRAMS=programs, GROUP_M=knobs["GROUP_M"], STAGES=knobs["num_stages"], BLOCK_N=block_n,
        PRODUCER_WARPS=knobs.get("PRODUCER_WARPS", 1), num_warps=4, maxnreg=MAX_REGISTERS,
    )  # fmt: skip
    return out


@gluon.jit
def _origin(tile, M, N, GROUP_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """_tile_origin for BLOCK_N-column tiles (the row's helper assumes 128)."""
    tiles_n = gl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = gl.minimum(gl.cdiv(M, 2 * ROWS) - first_m, GROUP_M)
    return (first_m + (tile % per_group) % group_rows) * (2 * ROWS), ((tile % per_group) // group_rows) * BLOCK_N


@gluon.jit
def _producer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    ring, _, sizes = args
    a_desc, b_desc, a_ring, b_ring, ready, empty = ring
    M, N, K, NUM_PROGRAMS = sizes
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, BLOCK_N), NUM_PROGRAMS):
        first_row, first_column = _origin(tile, M, N, GROUP_M, BLOCK_N)
        for step in range(K // 128):
            slot = count % STAGES
            mbarrier.wait(empty.index(slot), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(slot)
            mbarrier.expect(bar, 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [first_row, step * 128], bar, a_ring.index(2 * slot))
            tma.async_copy_global_to_shared(a_desc, [first_row + ROWS, step * 128], bar, a_ring.index(2 * slot + 1))
            tma.async_copy_global_to_shared(b_desc, [first_column, step * 128], bar, b_ring.index(slot))
            count += 1


@gluon.jit
def _consumer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, ROLE: gl.constexpr):
    ring, epilogue, sizes = args
    a_desc, b_desc, a_ring, b_ring, ready, empty = ring
    a_scale_ptr, b_scale_ptr, out_ptr, stride_as, stride_bs, stride_om = epilogue
    M, N, K, NUM_PROGRAMS = sizes
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 32])
    k_steps = K // 128
    count = 0
    for tile in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, BLOCK_N), NUM_PROGRAMS):
        first_row, first_column = _origin(tile, M, N, GROUP_M, BLOCK_N)
        acc = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=mma)
        for step in range(k_steps):
            at = count + step
            slot = at % STAGES
            mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(2 * slot + ROLE), b_ring.index(slot).permute((1, 0)), acc,
                                use_acc=step > 0, is_async=True)  # fmt: skip
            # the previous step's product is in acc now: its slot goes back to the producer
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index((at + STAGES - 1) % STAGES), count=1, pred=step > 0)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((count + k_steps - 1) % STAGES), count=1)
        count += k_steps
        rows = first_row + ROLE * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, mma))
        columns = first_column + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        row_scale = gl.load(a_scale_ptr + gl.where(rows < M, rows, M - 1) * stride_as)
        column_scale = gl.load(b_scale_ptr + gl.where(columns < N, columns, N - 1) * stride_bs)
        acc = acc * gl.expand_dims(row_scale, 1) * gl.expand_dims(column_scale, 0)
        offsets = gl.expand_dims(rows.to(gl.int64) * stride_om, 1) + gl.expand_dims(columns, 0)
        inside = gl.expand_dims(rows < M, 1) & gl.expand_dims(columns < N, 0)
        gl.store(out_ptr + offsets, acc.to(gl.bfloat16), mask=inside)


@gluon.jit
def _first(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, BLOCK_N, 0)


@gluon.jit
def _second(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, BLOCK_N, 1)


@gluon.jit(do_not_specialize=["M"])
def _kernel(a_desc, b_desc, a_scale_ptr, b_scale_ptr, out_ptr, M, N, K, stride_as, stride_bs, stride_om,
            NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
            PRODUCER_WARPS: gl.constexpr):  # fmt: skip
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [2 * STAGES, ROWS, 128], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, 128], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    args = ((a_desc, b_desc, a_ring, b_ring, ready, empty),
            (a_scale_ptr, b_scale_ptr, out_ptr, stride_as, stride_bs, stride_om), (M, N, K, NUM_PROGRAMS))  # fmt: skip
    gl.warp_specialize(
        [(_first, (args, GROUP_M, STAGES, BLOCK_N)), (_second, (args, GROUP_M, STAGES, BLOCK_N)),
         (_producer, (args, GROUP_M, STAGES, BLOCK_N))],
        [4, PRODUCER_WARPS],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
