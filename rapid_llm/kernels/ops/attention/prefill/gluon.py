"""native/prefill_gluon: ragged prefill in Gluon (sm90), q/k/v head dim 128: FlashAttention-3's warp roles, persistent.

    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // G] * sm_scale) v[j, h // G]     (G = Hq / Hk)

Row conditions: sm90 (wgmma), fp16/bf16, head dims 128/128, q and k/v readable by TMA (q:tma, kv:tma), and
sm_scale > 0 (scale:positive: the row maximum is taken on the raw logits and then scaled).

Why Gluon: Triton runs every warp of a program through one instruction stream, so a warpgroup's softmax
and its tensor-core products alternate instead of overlapping. Here separate warpgroups (a producer and
two or three consumers) run their own streams: one consumer's softmax runs under the other's products.

Work: one item is 64 * CONSUMERS query rows (a block) of one head of one sequence. The grid is persistent:
min(SMs, items) programs, program p takes items p, p + P, p + 2P, ... in the order all heads of every
sequence's last block (the largest causal one) first (longest work first, and the G query heads that read the
same K/V tiles side by side in time, so those tiles are read from L2). A program has CONSUMERS + 1 partitions
(gl.warp_specialize), which walk the same items:

- a producer (one warpgroup, 40 registers a thread; one elected thread issues the copies): an item's query
  block by one 64-row TMA copy per consumer into one of two Q slots (the next item's Q lands while the
  consumers finish the current one), then its key/value tiles through a STAGES-slot ring that runs on across
  items (TMA for tiles wholly inside the sequence; masked pointer loads, zeros past the sequence's end, for
  its partial last tile, so no row of another sequence reaches a product);
- CONSUMERS consumer warpgroups (2 by default, or 3), 64 query rows each: S = Q_w . K^T (wgmma, both operands
  in shared memory), the online softmax in fp32 with base-2 logits (the row reductions stay inside a warp: a
  warpgroup's product rows are its own 16-row warp slices), then O += P . V with P straight from registers
  (wgmma's register A operand). A consumer releases a ring slot's keys (one arrive of the CONSUMERS its
  `k_empty` barrier counts) once its logits of that tile are done, the slot's values (`v_empty`) once its value
  product is, and a Q slot once its output rows, written into that slot, have left by TMA: the producer
  refills keys a value product ahead. A consumer computes only the tiles holding a key its rows see (causal:
  none past its last query; none at all where its rows lie before the sequence's start) and releases the
  others unread once they land (a landed tile implies every consumer released the slot's previous one; an
  earlier release would count toward that one's). Every partition loads the next item's sequence bounds
  (cu_seqlens) while it works on the current item (_sequence_bounds).

PINGPONG (a constexpr switch, two consumers only, off by default: slower where measured) makes the two consumers
take turns issuing products (two mbarriers, `turn`: a warpgroup waits for its turn, issues, and hands the turn
over), meant to put one's softmax under the other's products.

The loop is FA3's in-warpgroup order: one turn issues tile j + 1's logits and tile j's value product, then
the softmax of tile j + 1 runs while they execute (the first tile's logits go ahead, the last value product
after the loop).

Blocks are counted from the sequence's end (_item), so a sequence's one partial block is its first rows,
whose causal rows see one or two tiles. Causal masking (bottom-right aligned within the sequence, as
the pointer kernel): tiles before a warpgroup's first query are unmasked; its diagonal tiles and a partial last tile
take the mask; rows before the sequence's start see no key and are never stored.
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
from ...fast_launch import LaunchPolicy, cached, cdiv
from ..gluon_tiles import GL_DTYPES
from ..tiles import LOG2E
from . import launch

#: Query rows of a consumer warpgroup (its wgmma's M), of one Q copy and of one Q buffer.
ROWS = gl.constexpr(64)
#: The one q/k/v head dim this kernel serves.
HEAD_DIM = 128
#: Rows per masked pointer-load chunk of the producer's partial tile ([8, 128] over its four warps: 8
#: elements a thread, inside the producer's register budget).
TAIL_ROWS = gl.constexpr(8)
#: Per consumer count: (registers of a worker consumer, of the producer, the kernel's limit). The warps at
#: the limit fill the SM's 64K registers and the default partition (the first consumer) gets the rest: two
#: consumers, 12 warps at 168: (12 * 168 - 4 * 232 - 4 * 40) / 4 = 232; three, 16 warps at 128:
#: (16 * 128 - 8 * 160 - 4 * 24) / 4 = 168. The producer takes a whole warpgroup: Triton counts a
#: partition's registers per warp, the hardware per warpgroup.
REGISTERS = {2: (232, 40, 168), 3: (160, 40, 128)}
PRODUCER_WARPS = gl.constexpr(4)


@functools.lru_cache(maxsize=None)
def _layouts(dtype: torch.dtype, block_n: int) -> dict:
    element = GL_DTYPES[dtype]
    default = gl.NVMMASharedLayout.get_default_for
    return {
        "q": default([ROWS.value, HEAD_DIM], element),
        "kv": default([block_n, HEAD_DIM], element),
        "DTYPE": element,
    }


def _descriptor(tensor: torch.Tensor, rows: int, layout) -> TensorDescriptor:
    """The [T, H, D] tensor as 2D (tokens x h * stride_h + d), boxes [rows, D] (native/prefill_tma's view)."""
    tokens, heads, dim = tensor.shape
    columns = (heads - 1) * tensor.stride(1) + dim
    return TensorDescriptor(tensor, [tokens, columns], [tensor.stride(0), 1], [rows, dim], layout)


def prefill_gluon(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen,
    sm_scale,
    causal=True,
    return_lse=False,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
):
    """native/prefill_gluon (unchecked kernel entry: the op's check ran and the row's conditions hold). Launches
    min(SMs, items) persistent programs (launch.gluon's PROGRAMS overrides the grid). Shared memory: Q_SLOTS x
    CONSUMERS x 16 KiB + STAGES x BLOCK_N x 512 B, at most ~227 KiB."""
    tokens, num_q_heads, _ = q.shape
    out = torch.empty((tokens, num_q_heads, v.shape[2]), dtype=q.dtype, device=q.device)
    lse = torch.empty((tokens, num_q_heads), dtype=torch.float32, device=q.device) if return_lse else None
    batch = cu_seqlens.shape[0] - 1
    if tokens == 0 or batch == 0 or int(max_seqlen) == 0:
        return (out, lse) if return_lse else out
    block_m, block_n, programs, config = _PLANS.get((q.dtype, q.device))
    layouts = _layouts(q.dtype, block_n)
    num_blocks = cdiv(int(max_seqlen), block_m)
    items = num_blocks * batch * num_q_heads
    _prefill_gluon_kernel[(min(items, programs),)](
        _descriptor(q, ROWS.value, layouts["q"]),
        _descriptor(k, block_n, layouts["kv"]),
        _descriptor(v, block_n, layouts["kv"]),
        _descriptor(out, ROWS.value, layouts["q"]),
        k,
        v,
        out,
        lse if lse is not None else out,
        cu_seqlens,
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        lse.stride(0) if lse is not None else 0,
        lse.stride(1) if lse is not None else 0,
        cu_seqlens.stride(0),
        batch,
        num_blocks,
        num_q_heads,
        num_q_heads // k.shape[1],
        float(sm_scale) * LOG2E,
        tokens,
        items,
        CAUSAL=bool(causal),
        WRITE_LSE=lse is not None,
        **config,
    )
    return (out, lse) if return_lse else out


def _plan(dtype: torch.dtype, device: torch.device) -> tuple[int, int, int, dict]:
    """(BLOCK_M, BLOCK_N, programs, the kernel's keyword arguments but CAUSAL and WRITE_LSE) from launch.gluon's
    knobs (which apply launch_override), checked."""
    knobs = launch.gluon(device)
    consumers, block_n, stages = knobs["CONSUMERS"], int(knobs["BLOCK_N"]), int(knobs["STAGES"])
    if consumers not in REGISTERS or (knobs["PINGPONG"] and consumers != 2) or (consumers == 3 and block_n != 64):
        raise ValueError(f"native/prefill_gluon: 2 or 3 consumers (2 with PINGPONG; 3 with 64-key tiles), got {knobs}")
    block_m = ROWS.value * consumers
    consumer_regs, producer_regs, max_registers = REGISTERS[consumers]
    config = {
        "DTYPE": _layouts(dtype, block_n)["DTYPE"],
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "HEAD_DIM": HEAD_DIM,
        "STAGES": stages,
        "Q_SLOTS": int(knobs["Q_SLOTS"]),
        "PINGPONG": bool(knobs["PINGPONG"]),
        "CONSUMER_REGS": consumer_regs,
        "PRODUCER_REGS": producer_regs,
        "num_warps": 4,
        "maxnreg": max_registers,
    }
    return block_m, block_n, knobs["PROGRAMS"] or multiprocessor_count(device), config


#: _plan per (dtype, device), built once (launch.gluon applies launch_override itself).
_PLANS = LaunchPolicy(None, _plan)


@gluon.jit
def _sequence_bounds(w, cu_q_ptr, stride_cu, batch, num_q_heads, total_q):
    """Item w's sequence: (q_start, q_end) from cu_seqlens, clamped as in the pointer kernel (offsets outside the contract
    give an unspecified result, never a fault). Any w >= 0 names a sequence of the batch, so the partitions load
    the next item's bounds while they work on the current one: the load's latency (at each item's start, the
    largest stall outside the loops) then lies under an item's work."""
    sequence = (w // num_q_heads) % batch
    q_start = gl.minimum(gl.maximum(gl.load(cu_q_ptr + sequence * stride_cu), 0), total_q)
    q_end = gl.minimum(gl.maximum(gl.load(cu_q_ptr + (sequence + 1) * stride_cu), q_start), total_q)
    return q_start, q_end


@gluon.jit
def _item(
    w, q_start, q_end, batch, num_q_heads, group, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr
):
    """Item w of the sequence q_start .. q_end (_sequence_bounds): (head, kv_head, first_row, q_len, n_tiles,
    n_whole). Blocks are counted from the sequence's end: block b holds rows q_len - (b + 1) * BLOCK_M ..
    q_len - b * BLOCK_M - 1, so first_row may be negative and a sequence's one partial block is its first, whose
    causal rows see the fewest keys (aligned to the start, 1024 = 5 x 192 + 64 rows left the last block's 64
    rows to one consumer of three across all 16 of its tiles). n_tiles is 0 where the block lies wholly before
    the sequence's start (a shorter sequence of the batch): every partition skips the item."""
    head = w % num_q_heads
    block = (w // num_q_heads) // batch  # 0: the last rows, the most keys: longest work first
    q_len = q_end - q_start
    rows_end = q_len - block * BLOCK_M
    key_end = rows_end if CAUSAL else q_len
    n_tiles = gl.where(rows_end > 0, gl.cdiv(key_end, BLOCK_N), 0)
    n_whole = q_len // BLOCK_N  # tiles wholly inside the sequence: TMA copies
    return head, head // group, rows_end - BLOCK_M, q_len, n_tiles, n_whole


@gluon.jit
def _producer(
    args,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """The producer: per item i, its query block into Q slot i % Q_SLOTS once both consumers released it, then its
    tiles into ring slot c % STAGES (c counts tiles across items): the K tile once both consumers released the
    slot's K (their logits of its previous tile are done), the V tile once they released its V. The `*_empty`
    phases start complete: the first waits of each slot pass."""
    (
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        k_ptr,
        v_ptr,
        out_ptr,
        lse_ptr,
        cu_q_ptr,
        q_smem,
        k_smem,
        v_smem,
        q_ready,
        q_empty,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        turn,
        stride_qh,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        stride_cu,
        batch,
        num_blocks,
        num_q_heads,
        group,
        qk_scale,
        total_q,
        items,
    ) = args
    Q_SLOTS: gl.constexpr = q_smem[0].shape[0]
    tiles_done = 0
    items_done = 0
    next_start, next_end = _sequence_bounds(gl.program_id(0), cu_q_ptr, stride_cu, batch, num_q_heads, total_q)
    for w in range(gl.program_id(0), items, gl.num_programs(0)):
        q_start = next_start
        q_end = next_end
        next_start, next_end = _sequence_bounds(
            w + gl.num_programs(0), cu_q_ptr, stride_cu, batch, num_q_heads, total_q
        )
        head, kv_head, first_row, q_len, n_tiles, n_whole = _item(
            w, q_start, q_end, batch, num_q_heads, group, CAUSAL, BLOCK_M, BLOCK_N
        )
        if n_tiles > 0:
            q_slot = items_done % Q_SLOTS
            mbarrier.wait(q_empty.index(q_slot), ((items_done // Q_SLOTS) & 1) ^ 1)
            # one 64-row copy per consumer warpgroup (a copy's rows are a power of two: 192 is not)
            mbarrier.expect(q_ready.index(q_slot), (BLOCK_M // ROWS) * q_desc.block_type.nbytes)
            for part in gl.static_range(BLOCK_M // ROWS):
                # rows before the sequence's start (first_row < 0): another sequence's or TMA's zeros, never stored
                tma.async_copy_global_to_shared(
                    q_desc,
                    [q_start + first_row + part * ROWS, head * stride_qh],
                    q_ready.index(q_slot),
                    q_smem[part].index(q_slot),
                )
            for j in range(n_tiles):
                count = tiles_done + j
                slot = count % STAGES
                released = ((count // STAGES) & 1) ^ 1
                row = q_start + j * BLOCK_N
                mbarrier.wait(k_empty.index(slot), released)
                if j < n_whole:  # every key of the tile inside the sequence
                    mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(
                        k_desc, [row, kv_head * stride_kh], k_ready.index(slot), k_smem.index(slot)
                    )
                    mbarrier.wait(v_empty.index(slot), released)
                    mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
                    tma.async_copy_global_to_shared(
                        v_desc, [row, kv_head * stride_vh], v_ready.index(slot), v_smem.index(slot)
                    )
                else:  # the partial last tile: the sequence's own rows, zeros past its end
                    mbarrier.wait(v_empty.index(slot), released)
                    _tail_to_shared(
                        k_ptr + kv_head * stride_kh,
                        stride_kt,
                        k_smem.index(slot),
                        q_start,
                        q_len,
                        j * BLOCK_N,
                        BLOCK_N,
                        HEAD_DIM,
                    )
                    _tail_to_shared(
                        v_ptr + kv_head * stride_vh,
                        stride_vt,
                        v_smem.index(slot),
                        q_start,
                        q_len,
                        j * BLOCK_N,
                        BLOCK_N,
                        HEAD_DIM,
                    )
                    fence_async_shared()  # generic-proxy stores before the products' asynchronous reads
                    mbarrier.arrive(k_ready.index(slot), count=1)
                    mbarrier.arrive(v_ready.index(slot), count=1)
            tiles_done += n_tiles
            items_done += 1


@gluon.jit
def _tail_to_shared(base, stride_t, smem, q_start, q_len, first, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Keys first .. first + BLOCK_N of the sequence into `smem` [BLOCK_N, HEAD_DIM] by masked loads,
    TAIL_ROWS rows at a time (the producer's warps); rows at or past q_len are zeros and their addresses stay
    inside the sequence."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [PRODUCER_WARPS, 1], [1, 0])
    dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    for chunk in gl.static_range(BLOCK_N // TAIL_ROWS):
        positions = first + chunk * TAIL_ROWS + gl.arange(0, TAIL_ROWS, layout=gl.SliceLayout(1, layout))
        valid = positions < q_len
        rows = (q_start + gl.minimum(positions, q_len - 1)).to(gl.int64)
        tile = gl.load(
            base + gl.expand_dims(rows, 1) * stride_t + gl.expand_dims(dims, 0),
            mask=gl.expand_dims(valid, 1),
            other=0.0,
        )
        smem.slice(chunk * TAIL_ROWS, TAIL_ROWS).store(tile)


@gluon.jit
def _online_softmax(
    s,
    j,
    queries,
    keys_in_tile,
    q_len,
    m_i,
    l_i,
    qk_scale,
    CAUSAL: gl.constexpr,
    BLOCK_N: gl.constexpr,
    O_LAYOUT: gl.constexpr,
    MASK: gl.constexpr,
):
    """Tile j's waited logits S [64 queries, BLOCK_N keys]: masked (MASK: the diagonal tile, a partial last
    tile) and the online softmax (fp32, base 2; the row reductions stay inside each warp's 16 rows). m is in
    scaled units: the row maximum is taken on the raw logits and scaled once (qk_scale > 0: the row's scale:positive), and
    the scale goes into each exponent's one FFMA, s * qk_scale - m, instead of a multiply per element first.
    Returns P (fp32, S's layout), the accumulator's rescale factor in O's layout, m and l."""
    if MASK:
        keys = j * BLOCK_N + keys_in_tile
        visible = gl.expand_dims(keys < q_len, 0)
        if CAUSAL:
            visible = visible & (gl.expand_dims(keys, 0) <= gl.expand_dims(queries, 1))
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_safe, 1))
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 1)
    alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, O_LAYOUT)), 1)
    return p, alpha_o, m_new, l_i


@gluon.jit
def _first_softmax(
    s,
    n_unmasked,
    queries,
    keys_in_tile,
    q_len,
    m_i,
    l_i,
    qk_scale,
    CAUSAL: gl.constexpr,
    BLOCK_N: gl.constexpr,
    O_LAYOUT: gl.constexpr,
):
    """_online_softmax of an item's first tile: unmasked where the tile lies wholly before the warpgroup's first
    query (n_unmasked > 0: every key visible to every row; the masked step is 470 instructions against 326,
    SASS), masked otherwise."""
    if n_unmasked > 0:
        p, alpha_o, m_i, l_i = _online_softmax(
            s, 0, queries, keys_in_tile, q_len, m_i, l_i, qk_scale, CAUSAL, BLOCK_N, O_LAYOUT, False
        )
    else:
        p, alpha_o, m_i, l_i = _online_softmax(
            s, 0, queries, keys_in_tile, q_len, m_i, l_i, qk_scale, CAUSAL, BLOCK_N, O_LAYOUT, True
        )
    return p, alpha_o, m_i, l_i


@gluon.jit
def _p_operand(p, dtype: gl.constexpr, P_LAYOUT: gl.constexpr):
    """P [64, BLOCK_N] fp32 as the value product's register operand."""
    return gl.convert_layout(p.to(dtype), P_LAYOUT)


@gluon.jit
def _take_turn(turn, turns, ROLE: gl.constexpr, PINGPONG: gl.constexpr):
    """Wait for this warpgroup's turn to issue products (its turns-th; turn[0] was handed over once at launch)."""
    if PINGPONG:
        mbarrier.wait(turn.index(ROLE), turns & 1)


@gluon.jit
def _hand_over(turn, ROLE: gl.constexpr, PINGPONG: gl.constexpr):
    """Give the turn to the other consumer warpgroup (its products queue behind this one's)."""
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - ROLE), count=1)


@gluon.jit
def _pipelined_step(
    j,
    count,
    turns,
    q_rows,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    turn,
    p_operand,
    acc,
    m_i,
    l_i,
    s_zero,
    queries,
    keys_in_tile,
    q_len,
    qk_scale,
    dtype: gl.constexpr,
    CAUSAL: gl.constexpr,
    BLOCK_N: gl.constexpr,
    STAGES: gl.constexpr,
    O_LAYOUT: gl.constexpr,
    P_LAYOUT: gl.constexpr,
    ROLE: gl.constexpr,
    PINGPONG: gl.constexpr,
    MASK: gl.constexpr,
):
    """Step j (ring position `count`): one turn issues tile j + 1's logits and tile j's value product
    (P = p_operand); tile j + 1's softmax runs while the value product executes. Returns tile j + 1's P, the
    rescaled accumulator, m, l and the turn count."""
    slot = count % STAGES
    following = (count + 1) % STAGES
    mbarrier.wait(k_ready.index(following), ((count + 1) // STAGES) & 1)
    mbarrier.wait(v_ready.index(slot), (count // STAGES) & 1)
    _take_turn(turn, turns, ROLE, PINGPONG)
    s = warpgroup_mma(q_rows, k_smem.index(following).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    acc = warpgroup_mma(p_operand, v_smem.index(slot), acc, is_async=True)
    _hand_over(turn, ROLE, PINGPONG)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))  # the logits (issued first) are done
    mbarrier.arrive(k_empty.index(following), count=1)  # this warpgroup is done with tile j + 1's keys
    p, alpha_o, m_i, l_i = _online_softmax(
        s, j + 1, queries, keys_in_tile, q_len, m_i, l_i, qk_scale, CAUSAL, BLOCK_N, O_LAYOUT, MASK
    )
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(v_empty.index(slot), count=1)  # and with tile j's values
    # P is converted after the wait, as FA3 does: ptxas gives tile j + 1's operand the registers of tile j's
    # (SASS; the wait sits above the exponentials whether the conversion comes before or after it)
    return _p_operand(p, dtype, P_LAYOUT), acc * alpha_o, m_i, l_i, turns + 1


@gluon.jit
def _consumer(
    args,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    ROLE: gl.constexpr,
):
    """Warpgroup ROLE: query rows ROLE * 64 .. + 64 of each item's block against the item's tiles that hold a
    key they see (n_own: causal tiles past the warpgroup's last query hold none; a warpgroup whose rows all lie
    before the sequence's start sees none), releasing the item's other tiles unread once they are loaded (the
    other warpgroups are done with the slot's previous tile by then). Every warpgroup takes n_tiles + 1 turns
    an item (a released tile, and an item it computes nothing of, take empty turns), so the turns alternate."""
    (
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        k_ptr,
        v_ptr,
        out_ptr,
        lse_ptr,
        cu_q_ptr,
        q_smem,
        k_smem,
        v_smem,
        q_ready,
        q_empty,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        turn,
        stride_qh,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        stride_cu,
        batch,
        num_blocks,
        num_q_heads,
        group,
        qk_scale,
        total_q,
        items,
    ) = args
    Q_SLOTS: gl.constexpr = q_smem[ROLE].shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_smem[ROLE].dtype
    keys_in_tile = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    s_zero = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    tiles_done = 0
    items_done = 0
    turns = 0
    next_start, next_end = _sequence_bounds(gl.program_id(0), cu_q_ptr, stride_cu, batch, num_q_heads, total_q)
    for w in range(gl.program_id(0), items, gl.num_programs(0)):
        q_start = next_start
        q_end = next_end
        next_start, next_end = _sequence_bounds(
            w + gl.num_programs(0), cu_q_ptr, stride_cu, batch, num_q_heads, total_q
        )
        head, kv_head, block_row, q_len, n_tiles, n_whole = _item(
            w, q_start, q_end, batch, num_q_heads, group, CAUSAL, BLOCK_M, BLOCK_N
        )
        if n_tiles > 0:
            first_row = block_row + ROLE * ROWS
            n_own = n_tiles
            if CAUSAL:  # tiles before the warpgroup's first query take no mask
                n_own = gl.minimum(n_tiles, gl.cdiv(first_row + ROWS, BLOCK_N))
                n_unmasked = gl.maximum(first_row, 0) // BLOCK_N
            else:
                n_unmasked = q_len // BLOCK_N
            n_own = gl.where(first_row + ROWS > 0, n_own, 0)  # rows wholly before the sequence: none
            q_slot = items_done % Q_SLOTS
            if n_own > 0:
                queries = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
                q_rows = q_smem[ROLE].index(q_slot)
                m_i = gl.full([ROWS], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
                l_i = gl.zeros([ROWS], gl.float32, layout=gl.SliceLayout(1, s_layout))
                acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)
                mbarrier.wait(q_ready.index(q_slot), (items_done // Q_SLOTS) & 1)
                # tiles before n_unmasked take no mask: two loops, so no step branches on the mask
                slot = tiles_done % STAGES
                mbarrier.wait(k_ready.index(slot), (tiles_done // STAGES) & 1)
                _take_turn(turn, turns, ROLE, PINGPONG)
                s = warpgroup_mma(q_rows, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
                _hand_over(turn, ROLE, PINGPONG)
                turns += 1
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                mbarrier.arrive(k_empty.index(slot), count=1)
                p, alpha_o, m_i, l_i = _first_softmax(
                    s, n_unmasked, queries, keys_in_tile, q_len, m_i, l_i, qk_scale, CAUSAL, BLOCK_N, o_layout
                )
                p_operand = _p_operand(p, dtype, p_layout)
                # step j: tile j + 1's logits and tile j's value product, then tile j + 1's softmax
                unmasked_steps = gl.maximum(gl.minimum(n_own - 1, n_unmasked - 1), 0)
                for j in range(unmasked_steps):
                    p_operand, acc, m_i, l_i, turns = _pipelined_step(
                        j,
                        tiles_done + j,
                        turns,
                        q_rows,
                        k_smem,
                        v_smem,
                        k_ready,
                        v_ready,
                        k_empty,
                        v_empty,
                        turn,
                        p_operand,
                        acc,
                        m_i,
                        l_i,
                        s_zero,
                        queries,
                        keys_in_tile,
                        q_len,
                        qk_scale,
                        dtype,
                        CAUSAL,
                        BLOCK_N,
                        STAGES,
                        o_layout,
                        p_layout,
                        ROLE,
                        PINGPONG,
                        False,
                    )
                for j in range(unmasked_steps, n_own - 1):
                    p_operand, acc, m_i, l_i, turns = _pipelined_step(
                        j,
                        tiles_done + j,
                        turns,
                        q_rows,
                        k_smem,
                        v_smem,
                        k_ready,
                        v_ready,
                        k_empty,
                        v_empty,
                        turn,
                        p_operand,
                        acc,
                        m_i,
                        l_i,
                        s_zero,
                        queries,
                        keys_in_tile,
                        q_len,
                        qk_scale,
                        dtype,
                        CAUSAL,
                        BLOCK_N,
                        STAGES,
                        o_layout,
                        p_layout,
                        ROLE,
                        PINGPONG,
                        True,
                    )
                count = tiles_done + n_own - 1
                slot = count % STAGES
                mbarrier.wait(v_ready.index(slot), (count // STAGES) & 1)
                _take_turn(turn, turns, ROLE, PINGPONG)
                acc = warpgroup_mma(p_operand, v_smem.index(slot), acc, is_async=True)
                _hand_over(turn, ROLE, PINGPONG)
                turns += 1
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(v_empty.index(slot), count=1)
                # the rows leave through the warpgroup's own Q buffer, so the Q slot is released once the copy has
                # read it (the tiles this warpgroup sees no key of are released while the copy runs)
                _store_rows(
                    acc,
                    m_i,
                    l_i,
                    queries,
                    first_row,
                    q_start,
                    q_len,
                    head,
                    q_rows,
                    o_desc,
                    out_ptr,
                    lse_ptr,
                    stride_ot,
                    stride_oh,
                    stride_lt,
                    stride_lh,
                    HEAD_DIM,
                    o_layout,
                    WRITE_LSE,
                )
                _release_unread(
                    n_own, n_tiles, tiles_done, k_ready, v_ready, k_empty, v_empty, turn, turns, ROLE, STAGES, PINGPONG
                )
                tma.store_wait(0)
                mbarrier.arrive(q_empty.index(q_slot), count=1)
                turns += n_tiles - n_own
            else:
                # released once landed: its ready phase implies every warpgroup released the slot's previous
                # item (an earlier arrive would count toward that item's release: wrong rows, a hang)
                mbarrier.wait(q_ready.index(q_slot), (items_done // Q_SLOTS) & 1)
                mbarrier.arrive(q_empty.index(q_slot), count=1)
                _release_unread(
                    0, n_tiles, tiles_done, k_ready, v_ready, k_empty, v_empty, turn, turns, ROLE, STAGES, PINGPONG
                )
                turns += n_tiles
                _take_turn(turn, turns, ROLE, PINGPONG)  # the turn of the item's last value product
                _hand_over(turn, ROLE, PINGPONG)
                turns += 1
            tiles_done += n_tiles
            items_done += 1


@gluon.jit
def _release_unread(
    first,
    n_tiles,
    tiles_done,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    turn,
    turns,
    ROLE: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """Release the item's tiles first .. n_tiles - 1 unread, each once it is loaded (its ready phase implies the
    other warpgroups released the slot's previous tile), one empty turn per tile."""
    for j in range(first, n_tiles):
        count = tiles_done + j
        slot = count % STAGES
        mbarrier.wait(k_ready.index(slot), (count // STAGES) & 1)
        mbarrier.arrive(k_empty.index(slot), count=1)
        mbarrier.wait(v_ready.index(slot), (count // STAGES) & 1)
        mbarrier.arrive(v_empty.index(slot), count=1)
        _take_turn(turn, turns + j - first, ROLE, PINGPONG)
        _hand_over(turn, ROLE, PINGPONG)


@gluon.jit
def _store_rows(
    acc,
    m_i,
    l_i,
    queries,
    first_row,
    q_start,
    q_len,
    head,
    q_rows,
    o_desc,
    out_ptr,
    lse_ptr,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_DIM: gl.constexpr,
    O_LAYOUT: gl.constexpr,
    WRITE_LSE: gl.constexpr,
):
    """The warpgroup's normalised rows of the output (and their log-sum-exp). Rows wholly inside the sequence
    (first_row >= 0; a block ends at or before q_len) go into q_rows, the warpgroup's own Q buffer (its last
    product is done), and leave by one TMA copy; the caller waits for the copy to have read the buffer before
    the producer may refill it. A sequence's partial first block takes _store_rows_masked, which leaves the
    previous sequence's rows alone. Why TMA stores: masked 32-bit stores measured slower, their
    memory-queue throttle among the largest stalls outside the loops."""
    # each row scaled by its reciprocal (one division a row; the division per element compiled to 196 FMUL and
    # 66 FSEL of an item's ~1000 instructions outside its loops, SASS)
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    out = acc * gl.expand_dims(gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, O_LAYOUT)), 1)
    lse = (m_i + gl.log2(l_safe)) * 0.6931471805599453  # natural log
    if first_row >= 0:
        q_rows.store(out.to(q_rows.dtype))
        fence_async_shared()  # the generic-proxy stores before the copy's asynchronous read
        tma.async_copy_shared_to_global(o_desc, [q_start + first_row, head * stride_oh], q_rows)
        if WRITE_LSE:
            lse_index = (q_start + queries).to(gl.int64)
            gl.store(lse_ptr + lse_index * stride_lt + head * stride_lh, lse)
    else:
        _store_rows_masked(
            out,
            lse,
            queries,
            first_row,
            q_start,
            q_len,
            head,
            out_ptr,
            lse_ptr,
            stride_ot,
            stride_oh,
            stride_lt,
            stride_lh,
            HEAD_DIM,
            O_LAYOUT,
            WRITE_LSE,
        )


@gluon.jit
def _store_rows_masked(
    out,
    lse,
    queries,
    first_row,
    q_start,
    q_len,
    head,
    out_ptr,
    lse_ptr,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    HEAD_DIM: gl.constexpr,
    O_LAYOUT: gl.constexpr,
    WRITE_LSE: gl.constexpr,
):
    """_store_rows' normalised rows `out` (and `lse`) by masked stores: rows before the sequence's start
    (first_row < 0) are not written."""
    out_queries = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, O_LAYOUT))
    valid = (out_queries >= 0) & (out_queries < q_len)  # a sequence's first block starts before its first row
    index = (q_start + gl.where(valid, out_queries, 0)).to(gl.int64)
    dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, O_LAYOUT))
    rows = out_ptr + gl.expand_dims(index, 1) * stride_ot + head * stride_oh
    gl.store(rows + gl.expand_dims(dims, 0), out.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(valid, 1))
    if WRITE_LSE:
        lse_valid = (queries >= 0) & (queries < q_len)
        lse_index = (q_start + gl.where(lse_valid, queries, 0)).to(gl.int64)
        gl.store(lse_ptr + lse_index * stride_lt + head * stride_lh, lse, mask=lse_valid)


@gluon.jit
def _consumer_first(
    args,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """The first consumer warpgroup (the default partition)."""
    _consumer(args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG, 0)


@gluon.jit
def _consumer_second(
    args,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """The second consumer warpgroup (worker partitions share one signature: the producer's)."""
    _consumer(args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG, 1)


@gluon.jit
def _consumer_third(
    args,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    """The third consumer warpgroup (BLOCK_M = 192)."""
    _consumer(args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG, 2)


@cached
@gluon.jit
def _prefill_gluon_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    k_ptr,
    v_ptr,
    out_ptr,
    lse_ptr,
    cu_q_ptr,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    stride_cu,
    batch,
    num_blocks,
    num_q_heads,
    group,
    qk_scale,
    total_q,
    items,
    CAUSAL: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    DTYPE: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_DIM: gl.constexpr,
    STAGES: gl.constexpr,
    Q_SLOTS: gl.constexpr,
    PINGPONG: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    CONSUMERS: gl.constexpr = BLOCK_M // ROWS
    # one query buffer per consumer warpgroup (a buffer's dimensions are powers of two: 192 rows are not)
    if CONSUMERS == 3:
        q_smem = (
            gl.allocate_shared_memory(DTYPE, [Q_SLOTS, ROWS, HEAD_DIM], q_desc.layout),
            gl.allocate_shared_memory(DTYPE, [Q_SLOTS, ROWS, HEAD_DIM], q_desc.layout),
            gl.allocate_shared_memory(DTYPE, [Q_SLOTS, ROWS, HEAD_DIM], q_desc.layout),
        )
    else:
        q_smem = (
            gl.allocate_shared_memory(DTYPE, [Q_SLOTS, ROWS, HEAD_DIM], q_desc.layout),
            gl.allocate_shared_memory(DTYPE, [Q_SLOTS, ROWS, HEAD_DIM], q_desc.layout),
        )
    k_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(DTYPE, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_SLOTS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_SLOTS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(Q_SLOTS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=CONSUMERS)  # one arrive per consumer warpgroup
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    fence_async_shared()
    mbarrier.arrive(turn.index(0), count=1)  # the first consumer issues first

    args = (
        q_desc,
        k_desc,
        v_desc,
        o_desc,
        k_ptr,
        v_ptr,
        out_ptr,
        lse_ptr,
        cu_q_ptr,
        q_smem,
        k_smem,
        v_smem,
        q_ready,
        q_empty,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        turn,
        stride_qh,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        stride_cu,
        batch,
        num_blocks,
        num_q_heads,
        group,
        qk_scale,
        total_q,
        items,
    )
    if CONSUMERS == 3:
        gl.warp_specialize(
            [
                (_consumer_first, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
                (_consumer_second, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
                (_consumer_third, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
                (_producer, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
            ],
            [4, 4, PRODUCER_WARPS],
            [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS],
        )
    else:
        gl.warp_specialize(
            [
                (_consumer_first, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
                (_consumer_second, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
                (_producer, (args, CAUSAL, WRITE_LSE, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, PINGPONG)),
            ],
            [4, PRODUCER_WARPS],
            [CONSUMER_REGS, PRODUCER_REGS],
        )


__all__ = ["HEAD_DIM", "prefill_gluon"]
