"""native/fp8_block_mm_gluon: gemm.fp8_block_mm in Gluon (sm90), out = (a * a_scale) @ (b * b_scale).T in bf16.

a: [M, K] float8_e4m3fn, b: [N, K] float8_e4m3fn (a:tma, b:tma: TMA boxes), K % 128 == 0; a_scale [M, K/128]
and b_scale [N/128, K/128] fp32 through their strides (either layout per_token_group_fp8 writes); out [M, N]
any strides.

Why Gluon: each 128-wide K step's product must be scaled by a_scale[m, step] * b_scale[n // 128, step] in fp32
before it is added (the DeepSeek-V3 block format), and Triton waits for every product's warpgroup MMA before
those multiply-adds, so the tensor cores idle while the CUDA cores scale (native/fp8_block_mm). Here step s's
product is issued asynchronously and the wait leaves it in flight while step s - 1's product is scaled and
added: the scaling hides under the next MMA, as DeepGEMM's promotion does.

One program per SM walks BLOCK_M x BLOCK_N output tiles in grouped order (native/fp8_block_mm's order). A
ring of STAGES shared-memory slots holds (a, b) tile pairs, each filled by two TMA copies completing on its
mbarrier; a slot is refilled with the step STAGES ahead once every warpgroup's product on it finished (a
CTA barrier after the wait). Rows past M and columns past N read TMA's zero fill; their outputs are not
stored. One rounding to bf16 at the store.
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
from . import SCALE_BLOCK, block_scales, prepare

ROW = "native/fp8_block_mm_gluon"


@functools.lru_cache(maxsize=None)
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
    """Launch over a [M, K], b [N, K], out [M, N] with explicit knobs (ops/gemm/tiles.py: BLOCK_M, BLOCK_N,
    BLOCK_K = 128, GROUP_M, num_warps, and num_stages: the ring's slots); bias must be None (the block op
    has none: the argument keeps the fp8 kernels' launch signature for perf/tune_gemm.py)."""
    assert bias is None, "gemm.fp8_block_mm has no bias"
    m, k = a.shape
    n = b.shape[0]
    knobs = dict(knobs)
    stages = knobs.pop("num_stages")
    block_m, block_n = knobs["BLOCK_M"], knobs["BLOCK_N"]
    a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [block_m, SCALE_BLOCK], _operand_layout(block_m))
    b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [block_n, SCALE_BLOCK], _operand_layout(block_n))
    tiles = cdiv(m, block_m) * cdiv(n, block_n)
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
        NUM_PROGRAMS=programs,
        STAGES=stages,
        **knobs,
    )


@gluon.jit
def _issue(a_desc, b_desc, a_ring, b_ring, ready, slot, first_row, first_column, k, pred):
    """The (a, b) boxes of one K step into ring slot `slot`, completing on ready[slot] (nothing if not pred)."""
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [first_row, k], bar, a_ring.index(slot), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [first_column, k], bar, b_ring.index(slot), pred=pred)


@gluon.jit
def _scaled(
    product, a_scale_ptr, b_scale_ptr, safe_rows, weight_block, step, stride_asm, stride_ask, stride_bsn, stride_bsk
):
    """A step's fp32 product times a_scale[m, step] * b_scale[weight_block, step]."""
    row_scale = gl.load(a_scale_ptr + safe_rows * stride_asm + step * stride_ask)
    column_scale = gl.load(b_scale_ptr + weight_block * stride_bsn + step * stride_bsk)
    return product * gl.expand_dims(row_scale * column_scale, 1)


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
    NUM_PROGRAMS: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    gl.static_assert(BLOCK_N == BLOCK_K, "one weight scale per tile and K step: BLOCK_N is the 128-row block")
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps(), 1], instr_shape=[16, BLOCK_N, 32]
    )
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()

    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    k_steps = K // BLOCK_K
    per_group = GROUP_M * tiles_n
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=mma)
    issued = 0  # this program's K steps so far: ring slot and mbarrier phase of every step
    for tile in range(gl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS):
        first_m = (tile // per_group) * GROUP_M
        group_rows = gl.minimum(tiles_m - first_m, GROUP_M)
        first_row = (first_m + (tile % per_group) % group_rows) * BLOCK_M
        first_column = ((tile % per_group) // group_rows) * BLOCK_N
        rows = first_row + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma))
        columns = first_column + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        safe_rows = gl.where(rows < M, rows, M - 1).to(gl.int64)
        weight_block = first_column // BLOCK_N

        for i in gl.static_range(STAGES):  # fill the ring (every slot is free between tiles)
            _issue(a_desc, b_desc, a_ring, b_ring, ready, (issued + i) % STAGES, first_row, first_column,
                   i * BLOCK_K, i < k_steps)  # fmt: skip
        mbarrier.wait(ready.index(issued % STAGES), (issued // STAGES) & 1)
        previous = warpgroup_mma(
            a_ring.index(issued % STAGES), b_ring.index(issued % STAGES).permute((1, 0)), zero, use_acc=False,
            is_async=True,
        )  # fmt: skip
        acc = zero
        for step in range(1, k_steps):
            at = issued + step
            slot = at % STAGES
            mbarrier.wait(ready.index(slot), (at // STAGES) & 1)
            current = warpgroup_mma(
                a_ring.index(slot), b_ring.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True
            )
            # the previous step's product is done (this one stays in flight) on every warpgroup: its slot
            # takes the step STAGES ahead, and its product is scaled and added while this one runs
            previous = warpgroup_mma_wait(num_outstanding=1, deps=(previous,))
            gl.thread_barrier()
            _issue(a_desc, b_desc, a_ring, b_ring, ready, (at - 1) % STAGES, first_row, first_column,
                   (step - 1 + STAGES) * BLOCK_K, step - 1 + STAGES < k_steps)  # fmt: skip
            acc += _scaled(
                previous, a_scale_ptr, b_scale_ptr, safe_rows, weight_block, step - 1, stride_asm, stride_ask,
                stride_bsn, stride_bsk,
            )  # fmt: skip
            previous = current
        previous = warpgroup_mma_wait(num_outstanding=0, deps=(previous,))
        acc += _scaled(
            previous, a_scale_ptr, b_scale_ptr, safe_rows, weight_block, k_steps - 1, stride_asm, stride_ask,
            stride_bsn, stride_bsk,
        )  # fmt: skip
        issued += k_steps
        gl.thread_barrier()  # every warpgroup is past the tile's last slot before the next tile refills it

        out_tile = (
            out_ptr
            + gl.expand_dims(rows.to(gl.int64), 1) * stride_om
            + gl.expand_dims(columns.to(gl.int64), 0) * stride_on
        )
        inside = gl.expand_dims(rows < M, 1) & gl.expand_dims(columns < N, 0)
        gl.store(out_tile, acc.to(out_ptr.dtype.element_ty), mask=inside)

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
