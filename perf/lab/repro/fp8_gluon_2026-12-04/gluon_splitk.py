"""Lab variant of native/fp8_block_mm_gluon for decode m (not a row): the K steps split over SPLIT programs.

At m <= 128 the 128 x 128 tiles are too few to occupy the SMs (7168 columns: 56 tiles for 132 SMs) and
each tile walks all of K alone. Here a work unit is (tile, split): K steps [split * per, (split + 1) * per)
of one tile; programs take units p, p + P, ... Each consumer stores its fp32 partial [64, 128] by TMA into
a [SPLIT, M, N] fp32 workspace (a 3-D view, so rows past M are clipped per slice), and ops/gemm/mm/splitk's
merge adds the slices in order and rounds once to bf16. SPLIT == 1 stores bf16 as the row does. Rows past M
(m < 128) are TMA's zero fill: the MMA work is wasted, not the memory traffic (the weight stream is the
cost at decode). Roles, ring and barriers are the row's (commit 4243d16); measure beside
native/fp8_block_mm_splitk and DeepGEMM with bench_splitk.py.
"""

from __future__ import annotations

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
from rapid_llm.kernels.ops.gemm.fp8.gluon import (
    CONSUMER_REGS,
    MAX_REGISTERS,
    PLAIN,
    PRODUCER_REGS,
    ROWS,
    SCALE_BOX,
    _box_layout,
    _tile_origin,
    tma_row_scales,
)
from rapid_llm.kernels.ops.gemm.mm.splitk import merge


def launch(a, a_scale, b, b_scale, out, knobs: dict) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[0]
    k_steps = k // 128
    per = cdiv(k_steps, knobs["SPLIT_K"])
    split = cdiv(k_steps, per)
    a_scale = tma_row_scales(a_scale)
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [64, 128], _box_layout(64, gl.float8e4nv))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [128, 128], _box_layout(128, gl.float8e4nv))
    s_desc = TensorDescriptor(a_scale, [k_steps, m], [a_scale.stride(1), 1], [1, 64], SCALE_BOX)
    if split == 1:
        target = out.unsqueeze(0)
        layout = gl.NVMMASharedLayout.get_default_for([1, 64, 128], gl.bfloat16)
    else:
        target = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        layout = gl.NVMMASharedLayout.get_default_for([1, 64, 128], gl.float32)
    o_desc = TensorDescriptor(target, list(target.shape), list(target.stride()), [1, 64, 128], layout)
    units = cdiv(m, 128) * cdiv(n, 128) * split
    programs = max(1, min(units, multiprocessor_count(a.device)))
    _kernel[(programs,)](
        a_desc, b_desc, s_desc, o_desc, b_scale, m, n, k, *b_scale.stride(), per, split,
        NUM_PROGRAMS=programs, GROUP_M=knobs.get("GROUP_M", 8), STAGES=knobs["num_stages"],
        num_warps=4, maxnreg=MAX_REGISTERS,
    )  # fmt: skip
    if split > 1:
        merge(target, None, out, split)
    return out


@gluon.jit
def _producer(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    ring, _, sizes = args
    a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty = ring
    M, N, K, per, splits, NUM_PROGRAMS = sizes
    k_steps = K // 128
    step_bytes: gl.constexpr = 2 * (a_desc.block_type.nbytes + s_desc.block_type.nbytes) + b_desc.block_type.nbytes
    count = 0
    for unit in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, 128) * splits, NUM_PROGRAMS):
        first_row, first_column = _tile_origin(unit // splits, M, N, GROUP_M)
        first_step = (unit % splits) * per
        for step in range(first_step, gl.minimum(first_step + per, k_steps)):
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
    ring, epilogue, sizes = args
    _, _, _, a_ring, b_ring, scale_ring, ready, empty = ring
    out_desc, out_buffer, b_scale_ptr, stride_bsn, stride_bsk = epilogue
    M, N, K, per, splits, NUM_PROGRAMS = sizes
    k_steps = K // 128
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32])
    per_row: gl.constexpr = gl.SliceLayout(1, mma)
    zero = gl.zeros([ROWS, 128], gl.float32, layout=mma)
    count = 0
    for unit in range(gl.program_id(0), gl.cdiv(M, 2 * ROWS) * gl.cdiv(N, 128) * splits, NUM_PROGRAMS):
        first_row, first_column = _tile_origin(unit // splits, M, N, GROUP_M)
        split = unit % splits
        first_step = split * per
        last_step = gl.minimum(first_step + per, k_steps)
        column_scales = b_scale_ptr + (first_column // 128) * stride_bsn
        column_scale = gl.load(column_scales + first_step * stride_bsk)
        acc = zero
        for step in range(first_step, last_step):
            following = gl.load(column_scales + gl.minimum(step + 1, last_step - 1) * stride_bsk)
            slot = count % STAGES
            mbarrier.wait(ready.index(slot), (count // STAGES) & 1)
            part = slot * 2 + ROLE
            product = warpgroup_mma(a_ring.index(part), b_ring.index(slot).permute((1, 0)), zero,
                                    use_acc=False, is_async=True)  # fmt: skip
            row_scale = scale_ring.index(part)._reinterpret(gl.float32, [ROWS], PLAIN).load(per_row)
            scale = gl.expand_dims(row_scale * column_scale, 1)
            product = warpgroup_mma_wait(num_outstanding=0, deps=(product,))
            mbarrier.arrive(empty.index(slot), count=1)
            acc += product * scale
            column_scale = following
            count += 1
        tma.store_wait(pendings=0)
        out_buffer.reshape([ROWS, 128]).store(acc.to(out_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(out_desc, [split, first_row + ROLE * ROWS, first_column], out_buffer)
    tma.store_wait(pendings=0)


@gluon.jit
def _first(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, 0)


@gluon.jit
def _second(args, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    _consumer(args, GROUP_M, STAGES, 1)


@gluon.jit(do_not_specialize=["M"])
def _kernel(a_desc, b_desc, s_desc, out_desc, b_scale_ptr, M, N, K, stride_bsn, stride_bsk, per, splits,
            NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES * 2, ROWS, 128], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, 128, 128], b_desc.layout)
    scale_ring = gl.allocate_shared_memory(gl.float32, [STAGES * 2, 1, ROWS], s_desc.layout)
    first_buffer = gl.allocate_shared_memory(out_desc.dtype, [1, ROWS, 128], out_desc.layout)
    second_buffer = gl.allocate_shared_memory(out_desc.dtype, [1, ROWS, 128], out_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    ring = (a_desc, b_desc, s_desc, a_ring, b_ring, scale_ring, ready, empty)
    sizes = (M, N, K, per, splits, NUM_PROGRAMS)
    first = (ring, (out_desc, first_buffer, b_scale_ptr, stride_bsn, stride_bsk), sizes)
    second = (ring, (out_desc, second_buffer, b_scale_ptr, stride_bsn, stride_bsk), sizes)
    gl.warp_specialize(
        [(_first, (first, GROUP_M, STAGES)), (_second, (second, GROUP_M, STAGES)), (_producer, (first, GROUP_M, STAGES))],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
