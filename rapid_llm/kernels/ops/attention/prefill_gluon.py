"""Ragged prefill in Gluon (sm90), q/k/v head dim 128: FlashAttention-3's warp roles.

    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // G] * sm_scale) v[j, h // G]     (G = Hq / Hk)

STATUS: compiled for sm90 (perf/profiles/sm90_compile.py under triton 3.6.0: 12 warps at 168 registers,
232 / 232 / 40 a thread in the two consumers and the producer, 160 KiB of shared memory, no spills in the
consumers' loops; the same with 64-key tiles and 4 slots, and with PIPELINE, whose next-tile logits the
SASS issues ahead of the softmax's exponentials) and not yet run on a GPU: no launch configuration selects
it; prefill_tma.prefill takes it only with config {"GLUON": True} (optionally "BLOCK_N" 64, "STAGES" 4,
"PIPELINE" True), and conformance/test_attention_native.py holds its GPU tests against the pointer kernel.

Why: the Triton kernels (prefill.py, prefill_tma.py) run every warp of a program through the same
instruction stream, so a warpgroup's softmax and its tensor-core products alternate instead of
overlapping (1136.8 us at 4 x 4096 causal GQA 32/8 against torch SDPA's 935.6 and FA3's 848.4; Triton's
own warp specialization did not compile at these tiles, prefill_tma.launch_config). Here one program
(128 query rows of one head, one sequence) has three partitions (gl.warp_specialize):

- a producer (one warpgroup, 40 registers a thread; one elected thread issues the copies): the query block
  by one TMA copy, then every key/value tile of the program through a
  STAGES-slot ring (TMA for tiles wholly inside the sequence; masked pointer loads, zeros past the
  sequence's end, for its partial last tile, so no row of another sequence reaches a product);
- two consumer warpgroups, 64 query rows each: S = Q_w . K^T (wgmma, both operands in shared memory),
  the online softmax in fp32 with base-2 logits (the row reductions stay inside a warp: a warpgroup's
  product rows are its own 16-row warp slices), then O += P . V with P straight from registers (wgmma's
  register A operand). Each consumer releases a slot (one arrive of the two its `empty` barrier counts)
  once its value product is done with it. The two warpgroups share no barrier, so one's softmax runs
  under the other's products. PIPELINE adds FA3's in-warpgroup order: tile j + 1's logits are issued before
  tile j's softmax (the last tile peeled off).

Causal masking (bottom-right aligned within the sequence, as prefill.py): tiles before the block's first
query are unmasked; the diagonal tile and a partial last tile take the mask. Grid and block order as
prefill_tma.py: (cdiv(max_seqlen, 128) * batch, Hq), the largest causal blocks first.
"""

from __future__ import annotations

import functools

import torch
import triton

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .prefill import _LOG2E

#: Query rows per program (two consumer warpgroups of 64) and keys per tile.
BLOCK_M = 128
BLOCK_N = 128
#: The one q/k/v head dim this kernel serves.
HEAD_DIM = 128
#: Key/value tiles in flight: Q 32 KiB + STAGES x (K + V) 64 KiB.
STAGES = 2
#: Rows per masked pointer-load chunk of the producer's partial tile ([8, 128] over its four warps: 8
#: elements a thread, inside the producer's register budget).
TAIL_ROWS = gl.constexpr(8)
#: Warps and register budgets of the worker partitions (the second consumer, the producer) and the kernel's
#: register limit: 12 warps at MAX_REGISTERS = 168 fill the SM's 64K registers, and the default partition (the
#: first consumer) gets what is left, (12 * 168 - 4 * 232 - 4 * 40) / 4 = 232. The producer takes a whole
#: warpgroup: Triton counts a partition's registers per warp, the hardware per warpgroup, and with a 1-warp
#: producer the default partition asked for 256 (SASS), more than the pool holds beside the others.
CONSUMER_REGS = gl.constexpr(232)
PRODUCER_REGS = gl.constexpr(40)
PRODUCER_WARPS = gl.constexpr(4)
MAX_REGISTERS = 168
_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@functools.lru_cache(maxsize=None)
def _layouts(dtype: torch.dtype, block_n: int) -> dict:
    element = _GL_DTYPES[dtype]
    default = gl.NVMMASharedLayout.get_default_for
    return {"q": default([BLOCK_M, HEAD_DIM], element), "kv": default([block_n, HEAD_DIM], element),
            "DTYPE": element}


def _descriptor(tensor: torch.Tensor, rows: int, layout) -> TensorDescriptor:
    """The [T, H, D] tensor as 2D (tokens x h * stride_h + d), boxes [rows, D] (prefill_tma's view)."""
    tokens, heads, dim = tensor.shape
    columns = (heads - 1) * tensor.stride(1) + dim
    return TensorDescriptor(tensor, [tokens, columns], [tensor.stride(0), 1], [rows, dim], layout)


def launch(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, out, lse, block_n=BLOCK_N, stages=STAGES,
           pipeline=False):
    """Launch over (cdiv(max_seqlen, 128) * batch, Hq); prefill.prefill checked the call and allocated.
    block_n / stages: keys per tile and ring slots (64 / 4 is the variant for the first sweep); pipeline:
    FA3's in-warpgroup order (PIPELINE: the next tile's logits issued before this tile's softmax)."""
    layouts = _layouts(q.dtype, block_n)
    batch = cu_seqlens.shape[0] - 1
    num_blocks = triton.cdiv(int(max_seqlen), BLOCK_M)
    _prefill_gluon_kernel[(num_blocks * batch, q.shape[1])](
        _descriptor(q, BLOCK_M, layouts["q"]), _descriptor(k, block_n, layouts["kv"]),
        _descriptor(v, block_n, layouts["kv"]), k, v, out, lse if lse is not None else out, cu_seqlens,
        q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        lse.stride(0) if lse is not None else 0, lse.stride(1) if lse is not None else 0, cu_seqlens.stride(0),
        batch, num_blocks, q.shape[1] // k.shape[1], float(sm_scale) * _LOG2E, q.shape[0],
        CAUSAL=bool(causal), WRITE_LSE=lse is not None, DTYPE=layouts["DTYPE"], BLOCK_M=BLOCK_M,
        BLOCK_N=int(block_n), HEAD_DIM=HEAD_DIM, STAGES=int(stages), PIPELINE=bool(pipeline), num_warps=4,
        maxnreg=MAX_REGISTERS,
    )


@gluon.jit
def _producer(args, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PIPELINE: gl.constexpr):
    """The producer: the query block, then tile j of the program into slot j % STAGES once both consumers
    released it (empty's phase starts complete: the first STAGES waits pass)."""
    (q_desc, k_desc, v_desc, k_ptr, v_ptr, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, empty, q_start,
     q_len, first_row, head, kv_head, n_tiles, n_whole, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
     out_ptr, lse_ptr, stride_ot, stride_oh, stride_lt, stride_lh, block, qk_scale, n_unmasked) = args
    mbarrier.expect(q_ready, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [first_row, head * stride_qh], q_ready, q_smem)
    for j in range(n_tiles):
        slot = j % STAGES
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        row = q_start + j * BLOCK_N
        if j < n_whole:  # every key of the tile inside the sequence
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row, kv_head * stride_kh], k_ready.index(slot),
                                            k_smem.index(slot))
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row, kv_head * stride_vh], v_ready.index(slot),
                                            v_smem.index(slot))
        else:  # the partial last tile: the sequence's own rows, zeros past its end
            _tail_to_shared(k_ptr + kv_head * stride_kh, stride_kt, k_smem.index(slot), q_start, q_len,
                            j * BLOCK_N, BLOCK_N, HEAD_DIM)
            _tail_to_shared(v_ptr + kv_head * stride_vh, stride_vt, v_smem.index(slot), q_start, q_len,
                            j * BLOCK_N, BLOCK_N, HEAD_DIM)
            fence_async_shared()  # generic-proxy stores before the products' asynchronous reads
            mbarrier.arrive(k_ready.index(slot), count=1)
            mbarrier.arrive(v_ready.index(slot), count=1)


@gluon.jit
def _tail_to_shared(base, stride_t, smem, q_start, q_len, first, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Keys first .. first + BLOCK_N of the sequence into `smem` [BLOCK_N, HEAD_DIM] by masked loads,
    TAIL_ROWS rows at a time (the producer's warps); rows at or past q_len are zeros and their addresses stay inside the
    sequence."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [PRODUCER_WARPS, 1], [1, 0])
    dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    for chunk in gl.static_range(BLOCK_N // TAIL_ROWS):
        positions = first + chunk * TAIL_ROWS + gl.arange(0, TAIL_ROWS, layout=gl.SliceLayout(1, layout))
        valid = positions < q_len
        rows = (q_start + gl.minimum(positions, q_len - 1)).to(gl.int64)
        tile = gl.load(base + gl.expand_dims(rows, 1) * stride_t + gl.expand_dims(dims, 0),
                       mask=gl.expand_dims(valid, 1), other=0.0)
        smem.slice(chunk * TAIL_ROWS, TAIL_ROWS).store(tile)


@gluon.jit
def _online_softmax(s, j, queries, keys_in_tile, q_len, n_unmasked, m_i, l_i, qk_scale, dtype: gl.constexpr,
                    CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr, O_LAYOUT: gl.constexpr, P_LAYOUT: gl.constexpr):
    """Tile j's waited logits S [64 queries, BLOCK_N keys]: scaled, masked on the diagonal and the partial last
    tile, the online softmax (fp32, base 2; the row reductions stay inside each warp's 16 rows). Returns P as
    the value product's register operand, the accumulator's rescale factor in O's layout, m and l."""
    s = s * qk_scale
    if j >= n_unmasked:  # the diagonal tile or the sequence's partial last tile
        keys = j * BLOCK_N + keys_in_tile
        visible = gl.expand_dims(keys < q_len, 0)
        if CAUSAL:
            visible = visible & (gl.expand_dims(keys, 0) <= gl.expand_dims(queries, 1))
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 1)
    alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    return gl.convert_layout(p.to(dtype), P_LAYOUT), alpha_o, m_new, l_i


@gluon.jit
def _consumer(args, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PIPELINE: gl.constexpr, ROLE: gl.constexpr):
    """Warpgroup ROLE: query rows ROLE * 64 .. + 64 of the block against every tile of the program."""
    (q_desc, k_desc, v_desc, k_ptr, v_ptr, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, empty, q_start,
     q_len, first_row, head, kv_head, n_tiles, n_whole, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
     out_ptr, lse_ptr, stride_ot, stride_oh, stride_lt, stride_lh, block, qk_scale, n_unmasked) = args
    ROWS: gl.constexpr = BLOCK_M // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    queries = block * BLOCK_M + ROLE * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    keys_in_tile = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    q_rows = q_smem.slice(ROLE * ROWS, ROWS)

    m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_ready, 0)
    if PIPELINE:
        # FA3's in-warpgroup order: tile j + 1's logits are issued before tile j's softmax, so the tensor cores
        # run them while the warps exponentiate; the last tile is peeled off (no product past it)
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(warpgroup_mma(q_rows, k_smem.index(0).permute((1, 0)),
                                                                      s_zero, use_acc=False, is_async=True), ))
        for j in range(n_tiles - 1):
            slot = j % STAGES
            following = (j + 1) % STAGES
            mbarrier.wait(k_ready.index(following), ((j + 1) // STAGES) & 1)
            s_next = warpgroup_mma(q_rows, k_smem.index(following).permute((1, 0)), s_zero, use_acc=False,
                                   is_async=True)
            p_operand, alpha_o, m_i, l_i = _online_softmax(s, j, queries, keys_in_tile, q_len, n_unmasked, m_i, l_i,
                                                           qk_scale, q_smem.dtype, CAUSAL, BLOCK_N, o_layout,
                                                           p_layout)
            mbarrier.wait(v_ready.index(slot), (j // STAGES) & 1)
            acc = warpgroup_mma(p_operand, v_smem.index(slot), acc * alpha_o, is_async=True)
            acc, s = warpgroup_mma_wait(num_outstanding=0, deps=(acc, s_next))
            mbarrier.arrive(empty.index(slot), count=1)  # this warpgroup is done with the slot
        last = n_tiles - 1
        p_operand, alpha_o, m_i, l_i = _online_softmax(s, last, queries, keys_in_tile, q_len, n_unmasked, m_i, l_i,
                                                       qk_scale, q_smem.dtype, CAUSAL, BLOCK_N, o_layout, p_layout)
        mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
        acc = warpgroup_mma(p_operand, v_smem.index(last % STAGES), acc * alpha_o, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index(last % STAGES), count=1)
    else:
        for j in range(n_tiles):
            slot = j % STAGES
            phase = (j // STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            s = warpgroup_mma(q_rows, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            p_operand, alpha_o, m_i, l_i = _online_softmax(s, j, queries, keys_in_tile, q_len, n_unmasked, m_i, l_i,
                                                           qk_scale, q_smem.dtype, CAUSAL, BLOCK_N, o_layout,
                                                           p_layout)
            mbarrier.wait(v_ready.index(slot), phase)
            acc = warpgroup_mma(p_operand, v_smem.index(slot), acc * alpha_o, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index(slot), count=1)  # this warpgroup is done with the slot

    l_safe = gl.where(l_i > 0.0, l_i, 1.0)
    out = acc / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout)), 1)
    out_queries = block * BLOCK_M + ROLE * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    valid = out_queries < q_len
    index = (q_start + gl.where(valid, out_queries, 0)).to(gl.int64)
    dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    rows = out_ptr + gl.expand_dims(index, 1) * stride_ot + head * stride_oh
    gl.store(rows + gl.expand_dims(dims, 0), out.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(valid, 1))
    if WRITE_LSE:
        lse_valid = queries < q_len
        lse_index = (q_start + gl.where(lse_valid, queries, 0)).to(gl.int64)
        gl.store(lse_ptr + lse_index * stride_lt + head * stride_lh, (m_i + gl.log2(l_safe)) * 0.6931471805599453,
                 mask=lse_valid)


@gluon.jit
def _consumer_first(args, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                    HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PIPELINE: gl.constexpr):
    """The first consumer warpgroup (the default partition)."""
    _consumer(args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PIPELINE, 0)


@gluon.jit
def _consumer_worker(args, CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                     HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PIPELINE: gl.constexpr):
    """The second consumer warpgroup (worker partitions share one signature: the producer's)."""
    _consumer(args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PIPELINE, 1)


@gluon.jit
def _prefill_gluon_kernel(
    q_desc, k_desc, v_desc, k_ptr, v_ptr, out_ptr, lse_ptr, cu_q_ptr,
    stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, stride_lt, stride_lh, stride_cu,
    batch, num_blocks, group, qk_scale, total_q,
    CAUSAL: gl.constexpr, WRITE_LSE: gl.constexpr, DTYPE: gl.constexpr, BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, PIPELINE: gl.constexpr,
):
    pid = gl.program_id(0)
    head = gl.program_id(1)
    sequence = pid % batch
    block = num_blocks - 1 - pid // batch
    # clamped as in prefill.py: offsets outside the contract give an unspecified result, never a fault
    q_start = gl.minimum(gl.maximum(gl.load(cu_q_ptr + sequence * stride_cu), 0), total_q)
    q_end = gl.minimum(gl.maximum(gl.load(cu_q_ptr + (sequence + 1) * stride_cu), q_start), total_q)
    q_len = q_end - q_start
    if block * BLOCK_M < q_len:
        kv_head = head // group
        first_row = q_start + block * BLOCK_M
        if CAUSAL:
            key_end = gl.minimum(q_len, (block + 1) * BLOCK_M)
            n_unmasked = (block * BLOCK_M) // BLOCK_N  # tiles before the block's first query
        else:
            key_end = q_len
            n_unmasked = q_len // BLOCK_N
        n_tiles = gl.cdiv(key_end, BLOCK_N)
        n_whole = q_len // BLOCK_N  # tiles wholly inside the sequence: TMA copies

        q_smem = gl.allocate_shared_memory(DTYPE, [BLOCK_M, HEAD_DIM], q_desc.layout)
        k_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
        v_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
        q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_ready, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)  # one arrive per consumer warpgroup
        fence_async_shared()

        args = (q_desc, k_desc, v_desc, k_ptr, v_ptr, q_smem, k_smem, v_smem, q_ready, k_ready, v_ready, empty,
                q_start, q_len, first_row, head, kv_head, n_tiles, n_whole, stride_qh, stride_kt, stride_kh,
                stride_vt, stride_vh, out_ptr, lse_ptr, stride_ot, stride_oh, stride_lt, stride_lh, block, qk_scale,
                n_unmasked)
        gl.warp_specialize([
            (_consumer_first, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PIPELINE)),
            (_consumer_worker, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PIPELINE)),
            (_producer, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PIPELINE)),
        ], [4, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


__all__ = ["BLOCK_M", "BLOCK_N", "HEAD_DIM", "launch"]
