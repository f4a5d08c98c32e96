"""Native Triton MLA decode (attention.mla_decode): DeepSeek's absorbed form over a paged latent cache.

    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512],   c[j] = latent_cache row of position j

q [B, Hq, 576] (512 latent + 64 rope dims), latent_cache [rows, 576] paged like attention.decode,
out [B, Hq, 512]. Every query head reads the same latent rows, so one program holds BLOCK_H heads
as the rows of its tiles: per BLOCK_N positions it loads the latent tile once ([BLOCK_N, 512] and
[BLOCK_N, 64]), takes the logits as two tensor-core products (q_nope . c_nope^T + q_rope . c_rope^T)
and accumulates P . c_nope into a [BLOCK_H, 512] fp32 accumulator (online softmax, base-2 logits).
At Hq = 128 the op is compute-bound (2 * Hq * (576 + 512) FLOPs per 1152 cache bytes); at Hq = 16
(one GPU of TP=8) it is bound by the cache read.

Split-K as decode.py: NUM_SPLITS equal chunks of each sequence's own length (device side), the
split count from host-known sizes (graph-capturable: mla_num_splits, one wave of programs), partial
outputs merged by decode.merge_splits. Grid: (B, cdiv(Hq, BLOCK_H), NUM_SPLITS).

Three kernels share this mapping: this module's, which gathers latent rows by pointer loads (any page
size, fp32, pre-sm90; with UNMASKED_BODY its whole tiles load without masks); mla_decode_tma.py's, which
copies whole tiles with TMA boxes on sm90 when the page size is a multiple of BLOCK_N (Hq >= 64 there);
and mla_decode_gluon.py's (Gluon, sm90, Hq < 64), which makes the 64 positions of a tile the rows of
warpgroup products and keeps two tiles in flight through an explicit TMA ring. launch_config says which
one a shape should take; mla_decode() falls back to the pointer kernel wherever the cache does not allow
the boxes. A fourth, mla_decode_gluon_wide.py (Gluon, sm90, Hq >= 64), holds 64 heads per program with the
two warpgroups splitting each product, and issues a tile's logits behind the previous tile's value products.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import MLA_LATENT_DIM, MLA_VALUE_DIM
from ..device_facts import capability_major, multiprocessor_count
from ..launch_fitting import launch_fitting
from . import mla_decode_tma
from .decode import MAX_SPLITS, merge_splits, split_bounds
from .prefill import paged_rows, softmax_step
from .splits import splits_filled_at_reach

_LOG2E = 1.4426950408889634
_ROPE_DIM = MLA_LATENT_DIM - MLA_VALUE_DIM
#: A split should cover at least this many positions of the page table's reach (B=1 L=32768: 256 splits).
MIN_SPLIT_POSITIONS = 128
#: Splits of at most this many positions take the short-tile configuration at Hq < 64 (launch_config).
SHORT_SPLIT_POSITIONS = 256
#: The H200 sweep behind launch_config and mla_num_splits (perf/sweeps/attention_tiles.py --only mla_decode).
MLA_SWEEP = "perf/results/h200/attention_2026-12-01/mla_tma/sweep_attention_tiles_mla_decode.json"
#: The H200 runs behind the Gluon kernel's configuration (perf/sweeps/attention_variants.py, graph replay).
GLUON_SWEEP = "perf/results/h200/attention_2026-12-01/variants/call7/attention_variants.json"
#: Query heads below which the Gluon kernel serves on sm90 (at 64 and more the heads fill the m64 product rows
#: and mla_decode_gluon_pingpong.py serves).
GLUON_MAX_HEADS = 64
#: The H200 runs behind the wide Gluon kernel's schedule (EARLY_NEXT, LEAN; graph replay beside FlashMLA).
GLUON_WIDE_SWEEP = "perf/results/h200/attention_2026-12-01/variants/call13/attention_variants.json"
#: The H200 run behind the warp-specialised Gluon kernel serving Hq >= 64 (beside the wide kernel and FlashMLA).
GLUON_PINGPONG_SWEEP = "perf/results/h200/attention_2026-12-01/variants/call49/attention_variants.json"


@functools.lru_cache(maxsize=None)
def _gluon_importable() -> bool:
    try:
        from triton.experimental.gluon.language import warp_specialize  # noqa: F401
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except ImportError:  # a triton without Gluon's Hopper ops or warp specialisation: the Triton kernels serve
        return False
    return True


def gluon_ready(latent_cache: torch.Tensor, page_size: int) -> bool:
    """True when mla_decode_gluon.py can read this cache: CUDA sm90 (wgmma: sm90a only, not sm100), a triton
    with Gluon, and the TMA conditions of mla_decode_tma.tma_ready for 64-position tiles."""
    return (latent_cache.device.type == "cuda" and capability_major(latent_cache.device) == 9
            and _gluon_importable() and mla_decode_tma.tma_ready(latent_cache, page_size, 64))


def launch_config(num_q_heads: int, dtype: torch.dtype, device: torch.device, split_positions: int | None = None,
                  gluon: bool = False) -> dict:
    """BLOCK_H heads x BLOCK_N positions per program (no first-call tuning), how many programs of that
    shape an SM holds ("resident", read by mla_num_splits), and whether the TMA kernel should serve
    ("TMA": taken where mla_decode_tma.tma_ready allows). "resident" and "TMA" are not kernel arguments.
    BLOCK_H and "resident" do not depend on `split_positions` (positions of the page table's reach per
    split), so launch_plan can take the split count first and then the tiles for it.

    sm90 without Gluon (gluon false), Hq >= 64: the TMA kernel, BLOCK_H = 64 heads with 8 warps (two warpgroups; each holds half of the
    two [64, 256] fp32 accumulators: 128 registers per thread), BLOCK_N = 64, 2 stages (144 KiB), one
    program per SM: a latent tile feeds 64 heads' products. Hq < 64 takes BLOCK_H = 16 (the tensor-core
    minimum; Hq = 16 is one program per sequence and split) with 4 warps, two programs per SM, and by the
    split's length: long splits (> SHORT_SPLIT_POSITIONS: B=64 L=4096 has 4 of 1024) stream 64-position
    tiles through the pointer kernel with unmasked whole tiles (the TMA kernel's 64-row boxes need 72 KiB
    a stage: one program per SM, 147.8 us); short ones (B=1 L=32768 has 256 of 128) take the TMA kernel's
    32-position tiles, whose copies issue without address arithmetic. fp32 halves BLOCK_H and takes one
    stage (IEEE products, twice the bytes; TMA serves fp16/bf16 only). The CPU interpreter takes 16 heads
    x 32 positions. H200 sweep (MLA_SWEEP: both kernels, 2-4 stages, 32 / 64 positions, splits):
    Hq=128 B=64 L=4096 273.8 us (3 stages 315.3 and the pointer kernel's best 323.0 in the sweep before);
    Hq=16 B=64 114.2 us (4 splits; the TMA kernel's best 112.2, at 32 positions; its 64-position boxes
    147.8); Hq=16 B=1 L=32768 20.2 us in graph replay (the pointer kernel's best 22.2); Hq=128 B=1 55.5 us.
    Lazy rescaling of the accumulator (only when a row maximum grows by more than 2^8) was swept on both
    kernels and lost everywhere (Hq=128: 317.9 against 271.9; mla_tma/experiments/), so it is not kept.

    gluon (gluon_ready(cache, page_size): sm90, fp16/bf16, pages of whole 64-position tiles) and Hq < 64: the
    Gluon kernel ("GLUON"), 16 heads x 64 positions, 4 warps, one program per SM (its ring takes 164 KiB),
    STAGES = 2 with the rope columns in the ring (ROPE_RING: all three boxes of a tile land together).
    H200, graph replay (GLUON_SWEEP; event timing there adds the host's ~170 us per eager call where it
    outlasts the L2 flush): Hq=16 B=64 L=4096 81.2 us with 2 splits (3.72 TB/s, 88% of copy; the Triton
    kernels' best 105.5, FlashMLA 107.4), Hq=16 B=1 L=32768 14.2 us with 128 splits (20.2, FlashMLA 65.0),
    Hq=16 B=8 L=32768 78.1 us with 16 splits (101.2, FlashMLA 103.3), Hq=32 B=64 105.7 us with 1 split
    (183.1, FlashMLA 110.7). The 3-slot ring with a one-slot rope ("GLUON", num_stages 3, 220 KiB) was
    3-5% slower at B=64 and B=8 and 13-14% slower at B=1 (16.0) and Hq=32 (120.3). Measured and not kept (variants/call1): the same
    transposed products in plain Triton (mla_decode_narrow, removed), 134.8 us at B=64 Hq=16, because
    Triton 3.6 issued each tile's copy after the previous tile's products and waited on every product.

    gluon and Hq >= 64: mla_decode_gluon_pingpong.py ("GLUON_PINGPONG"), 64 heads x 64 positions, two
    warp-specialised warpgroups (4 warps and a 4-warp worker) on alternate tiles of a pair, each with its
    own m64n64 logits and softmax under the other's products, O split by columns; two tile buffers and Q
    (217 KiB), one program per SM. H200, graph replay (GLUON_PINGPONG_SWEEP, variants/call49, two readings
    each beside the wide kernel and FlashMLA in the same run): Hq=128 B=64 L=4096 152.4 / 145.4 us (the wide
    kernel 170.6 / 169.0, FlashMLA 141.7: 0.93-0.97x), Hq=128 B=1 L=32768 34.8 (wide 38.1; LEAN alone 36.2;
    FlashMLA 52.4), Hq=128 B=8 L=32768 161.5 / 160.1 (wide 178.2-179.0, FlashMLA 140.7), Hq=64 B=64 114.1 with
    2 splits (131.7 with 1; wide 117.1 with 2; FlashMLA 120.2). Its splits follow mla_num_splits' rule
    (resident 1): 1, 64, 8 and 2 there (2 splits at Hq=128 B=64: 197.5). As the heuristic (variants/call50):
    144.3 / 34.8 / 149.7 / 114.0 us at those four shapes against FlashMLA's 139.4 / 53.6 / 141.0 / 120.6.

    mla_decode_gluon_wide.py ("GLUON_WIDE", opt-in; it served Hq >= 64 before the ping-pong kernel): 64 heads x
    64 positions, 8 warps (the two warpgroups split each product: the logits by positions, the values by
    columns), the 2-slot ring of whole tiles, one program per SM. LEAN (row maxima through one exchange
    barrier, row sums once at the end: 7 barriers a tile instead of 11); EARLY_NEXT (a tile's logits issued
    behind the previous tile's value products) measured faster on splits of >= 1024 positions, slower than
    LEAN alone on B=1's 512-position splits (8 tiles). H200, graph replay, FlashMLA in the same runs (GLUON_WIDE_SWEEP and variants/call12, call14; run to run the numbers moved by up to 7%):
    Hq=128 B=64 L=4096 170.9-176.7 us (serial 186.9, LEAN alone 167.0-181.7, EARLY_NEXT alone 172.5-186.8;
    FlashMLA 132.2-141.7; the Triton TMA kernel 261-272), Hq=128 B=1 L=32768 36.0-36.2 with LEAN alone (both
    38.6-39.6; FlashMLA 52.3-53.3), Hq=128 B=8 L=32768 174.6-176.1 (FlashMLA 139.5-143.1), Hq=64 B=64 116.9
    with 2 splits (FlashMLA 119.9). ncu of one launch at Hq=128 B=64: 171.2 us with both, 182.3 with
    EARLY_NEXT alone; the tensor pipe 44% busy with EARLY_NEXT alone (call12), the shared pipe (mostly tensor
    work) 47% with both (call13): the softmax between the products is not overlapped. variants/call48: one
    TMA copy per part and a barrier per part (7 -> 4 CTA barriers a tile), Q's rope columns in registers:
    164-168 us; each warpgroup owning one value half (m64n256 products) 166-170, no gain.
    """
    if device.type != "cuda":
        return {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "resident": 1, "TMA": False}
    if gluon and num_q_heads < GLUON_MAX_HEADS:
        return {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "resident": 1, "TMA": True,
                "GLUON": True, "ROPE_RING": True}
    if gluon:
        return {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "resident": 1, "TMA": True,
                "GLUON_PINGPONG": True}
    if num_q_heads >= 64:
        config = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "resident": 1, "TMA": True}
    elif split_positions is not None and split_positions <= SHORT_SPLIT_POSITIONS:
        config = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "resident": 2, "TMA": True}
    else:
        config = {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "resident": 2, "TMA": False}
    config["UNMASKED_BODY"] = True  # the pointer kernel's whole tiles without masks (the TMA kernel drops it)
    if dtype == torch.float32:
        config["BLOCK_H"] = max(16, config["BLOCK_H"] // 2)
        config["num_stages"] = 1
    return config


def mla_num_splits(batch: int, head_blocks: int, capacity: int, resident: int, device: torch.device) -> int:
    """Splits per sequence: one wave of programs, batch * head_blocks * splits ~= SMs * resident (a
    second, partial wave costs a whole program's time; a split adds an fp32 partial of 2 KiB per head),
    at least MIN_SPLIT_POSITIONS positions of the page table's reach per split, at most MAX_SPLITS.
    One split on the CPU. H200 sweep (page 64, MLA_SWEEP): Hq=16 B=64 -> 4 (114.2 us; 2 and 8 splits
    slower), Hq=128 B=64 -> 1 (273.8; 2 splits 312.8 in the sweep before), Hq=16 B=1 L=32768 -> 256 (20.2
    in graph replay; 128 splits 21.9), Hq=128 B=1 -> 66 (55.5). The Gluon kernel (resident 1, GLUON_SWEEP,
    graph replay): Hq=16 B=64 -> 2 (81.2 us; 1 split 103.7), B=1 -> 128 (14.2; 112 splits 15.6; 132, of which
    4 empty, 15.1 in the bench of variants/call8 before the rounding below), B=8 L=32768 -> 16 (78.1; 32 splits
    85.0), Hq=32 B=64 -> 1 (105.7; 2 splits 123.9). The wide Gluon kernel (resident 1, 64 heads a program; the
    serial schedule in variants/call11): Hq=128 B=64 -> 1 (185.6; 2 splits 234.3), B=1 -> 64 (38.6; 32 splits
    53.7), B=8 -> 8 (196.1; 16 splits 205.0), Hq=64 B=64 -> 2 (120.7; 1 split 178.3). The count is rounded to whole chunks of MIN_SPLIT_POSITIONS
    of the page table's reach, so no split is empty for a full-length sequence (Hq=128 B=1: 66 -> 64)."""
    if device.type != "cuda" or batch == 0:
        return 1
    wanted = (multiprocessor_count(device) * resident) // (batch * head_blocks)
    reach = max(1, capacity // MIN_SPLIT_POSITIONS)
    splits = max(1, min(wanted, reach, MAX_SPLITS))
    # as many splits as chunks of whole MIN_SPLIT_POSITIONS cover the reach: no split is empty for a full-length
    # sequence (132 wanted at B=1 L=32768 are 128 chunks of 256; the other 4 would only write -inf partials)
    return splits_filled_at_reach(splits, capacity, MIN_SPLIT_POSITIONS)


def launch_plan(batch: int, num_q_heads: int, capacity: int, dtype: torch.dtype, device: torch.device,
                splits: int | None = None, gluon: bool = False) -> tuple[dict, int]:
    """(launch_config, split count) of a call: the split count from BLOCK_H and resident (the same for any
    split length) unless given, then the tiles for that split's length (positions of the page table's
    reach per split). `gluon`: gluon_ready() holds for the call's cache."""
    if splits is None:
        base = launch_config(num_q_heads, dtype, device, gluon=gluon)
        splits = mla_num_splits(batch, triton.cdiv(num_q_heads, base["BLOCK_H"]), capacity, base["resident"],
                                device)
    return launch_config(num_q_heads, dtype, device, split_positions=capacity // splits, gluon=gluon), splits


def mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, *, splits=None, config=None, tma=None):
    """attention.mla_decode (unchecked kernel entry: the op's check ran). Where the cache allows TMA boxes
    (mla_decode_tma.tma_ready) the TMA kernel serves, or the Gluon kernel when the config says GLUON
    (launch_config: gluon_ready, Hq < 64); otherwise this module's pointer kernel. `tma` forces boxes
    (True: the config's TMA or Gluon kernel) or pointer loads (False); `splits` and `config` override the
    heuristics (tests and sweeps)."""
    batch, num_q_heads, _ = q.shape
    out = torch.empty((batch, num_q_heads, MLA_VALUE_DIM), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    capacity = page_table.shape[1] * int(page_size)
    if config is None:
        config, splits = launch_plan(batch, num_q_heads, capacity, q.dtype, q.device, splits,
                                     gluon=gluon_ready(latent_cache, page_size))
    config = dict(config)
    resident = config.pop("resident", 1)
    tma_wanted = config.pop("TMA", True)
    gluon = config.pop("GLUON", False)
    gluon_wide = config.pop("GLUON_WIDE", False)
    gluon_pingpong = config.pop("GLUON_PINGPONG", False)
    early_next, lean = config.pop("EARLY_NEXT", False), config.pop("LEAN", False)  # the wide kernel's schedule
    rope_ring = config.pop("ROPE_RING", False)
    head_blocks = triton.cdiv(num_q_heads, config["BLOCK_H"])
    if splits is None:
        splits = mla_num_splits(batch, head_blocks, capacity, resident, q.device)
    if splits > 1:
        partial = torch.empty((batch, num_q_heads, splits, MLA_VALUE_DIM), dtype=torch.float32, device=q.device)
        partial_lse = torch.empty((batch, num_q_heads, splits), dtype=torch.float32, device=q.device)
    else:
        partial, partial_lse = out, out  # not read: the kernel writes out directly
    if tma is None:
        boxes_wanted = tma_wanted or gluon or gluon_wide or gluon_pingpong
        tma = boxes_wanted and mla_decode_tma.tma_ready(latent_cache, page_size, config["BLOCK_N"])
    if tma and gluon_pingpong:
        from . import mla_decode_gluon_pingpong  # Gluon (sm90): imported only where it runs
        mla_decode_gluon_pingpong.launch(q, latent_cache, page_table, seq_lens, page_size, float(sm_scale) * _LOG2E,
                                         out, partial, partial_lse, splits, head_blocks)
    elif tma and gluon_wide:
        from . import mla_decode_gluon_wide  # Gluon (sm90): imported only where it runs
        mla_decode_gluon_wide.launch(q, latent_cache, page_table, seq_lens, page_size, float(sm_scale) * _LOG2E,
                                     out, partial, partial_lse, splits, head_blocks,
                                     early_next=early_next, lean=lean)
    elif tma and gluon:
        from . import mla_decode_gluon  # Gluon (sm90): imported only where it runs
        mla_decode_gluon.launch(q, latent_cache, page_table, seq_lens, page_size, float(sm_scale) * _LOG2E, out,
                                partial, partial_lse, splits, head_blocks, stages=config.get("num_stages", 3),
                                rope_ring=rope_ring)
    elif tma:
        config.pop("UNMASKED_BODY", None)  # the TMA kernel's whole tiles never carry masks
        mla_decode_tma.launch(q, latent_cache, page_table, seq_lens, page_size, float(sm_scale) * _LOG2E, out,
                              partial, partial_lse, splits, head_blocks, config)
    else:
        _launch_pointer_kernel(q, latent_cache, page_table, seq_lens, page_size, sm_scale, out, partial,
                               partial_lse, splits, head_blocks, config)
    if splits > 1:
        merge_splits(partial, partial_lse, out)
    return out


def _launch_pointer_kernel(q, latent_cache, page_table, seq_lens, page_size, sm_scale, out, partial, partial_lse,
                           splits, head_blocks, config):
    batch, num_q_heads, _ = q.shape
    launch_fitting(_mla_decode_kernel, (batch, head_blocks, splits), q.device,
        q, latent_cache, page_table, seq_lens, out, partial, partial_lse,
        q.stride(0), q.stride(1), q.stride(2), latent_cache.stride(0), latent_cache.stride(1),
        page_table.stride(0), page_table.stride(1), seq_lens.stride(0), num_q_heads, float(sm_scale) * _LOG2E,
        splits, latent_cache.shape[0], page_table.shape[1],
        PAGE_SIZE=int(page_size), SINGLE=splits == 1, DV=MLA_VALUE_DIM, DR=_ROPE_DIM,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", **config,
    )


@triton.jit
def _latent_tile(acc, m_i, l_i, q_nope, q_rope, positions, end, sequence, cache_ptr, table_ptr, stride_row, stride_d,
                 table_stride0, table_stride1, num_rows, max_pages, offs_v, offs_r, qk_scale,
                 PAGE_SIZE: tl.constexpr, PRECISION: tl.constexpr, MASKED: tl.constexpr):
    """One tile of latent rows at `positions`: logits q . c (base 2), online softmax, acc += P . c[:, :512].
    MASKED: positions at or past `end` load nothing and get -inf logits; otherwise every position is valid
    (a whole tile of the split) and the loads carry no mask."""
    valid = positions < end
    rows = paged_rows(positions, valid, sequence, table_ptr, table_stride0, table_stride1, num_rows, max_pages,
                      PAGE_SIZE)
    row_ptrs = cache_ptr + rows[:, None] * stride_row
    if MASKED:
        c_nope = tl.load(row_ptrs + offs_v[None, :] * stride_d, mask=valid[:, None], other=0.0)
        c_rope = tl.load(row_ptrs + offs_r[None, :] * stride_d, mask=valid[:, None], other=0.0)
    else:
        c_nope = tl.load(row_ptrs + offs_v[None, :] * stride_d)
        c_rope = tl.load(row_ptrs + offs_r[None, :] * stride_d)
    qk = tl.dot(q_nope, tl.trans(c_nope), input_precision=PRECISION)
    qk += tl.dot(q_rope, tl.trans(c_rope), input_precision=PRECISION)
    qk = qk * qk_scale
    if MASKED:
        qk = tl.where(valid[None, :], qk, float("-inf"))
    p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i)
    acc = tl.dot(p.to(c_nope.dtype), c_nope, acc * alpha[:, None], input_precision=PRECISION)
    return acc, m_i, l_i


@triton.jit
def _mla_decode_kernel(
    q_ptr, cache_ptr, table_ptr, seq_lens_ptr, out_ptr, partial_ptr, partial_lse_ptr,
    stride_qb, stride_qh, stride_qd, stride_row, stride_d, table_stride0, table_stride1, stride_sl,
    num_q_heads, qk_scale,
    num_splits, num_rows, max_pages,
    PAGE_SIZE: tl.constexpr, SINGLE: tl.constexpr, DV: tl.constexpr, DR: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, UNMASKED_BODY: tl.constexpr = False,
):
    sequence = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    head_valid = heads < num_q_heads
    start, end = split_bounds(seq_lens_ptr, sequence, stride_sl, num_splits, split, BLOCK_N)

    offs_v = tl.arange(0, DV)
    offs_r = DV + tl.arange(0, DR)
    q_rows = q_ptr + sequence * stride_qb + heads[:, None] * stride_qh
    q_nope = tl.load(q_rows + offs_v[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    q_rope = tl.load(q_rows + offs_r[None, :] * stride_qd, mask=head_valid[:, None], other=0.0)
    offs_n = tl.arange(0, BLOCK_N)

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, DV), dtype=tl.float32)
    # UNMASKED_BODY: whole tiles of the split first, without load or logit masks, then the tail, masked.
    full_end = start
    if UNMASKED_BODY:
        full_end = start + (tl.maximum(end - start, 0) // BLOCK_N) * BLOCK_N
    for tile in range(start, full_end, BLOCK_N):
        acc, m_i, l_i = _latent_tile(acc, m_i, l_i, q_nope, q_rope, tile + offs_n, end, sequence, cache_ptr,
                                     table_ptr, stride_row, stride_d, table_stride0, table_stride1, num_rows,
                                     max_pages, offs_v, offs_r, qk_scale, PAGE_SIZE, PRECISION, False)
    for tile in range(full_end, end, BLOCK_N):
        acc, m_i, l_i = _latent_tile(acc, m_i, l_i, q_nope, q_rope, tile + offs_n, end, sequence, cache_ptr,
                                     table_ptr, stride_row, stride_d, table_stride0, table_stride1, num_rows,
                                     max_pages, offs_v, offs_r, qk_scale, PAGE_SIZE, PRECISION, True)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    result = acc / l_safe[:, None]
    if SINGLE:
        # out: new contiguous [B, Hq, DV]
        out_rows = out_ptr + (sequence * num_q_heads + heads)[:, None] * DV
        tl.store(out_rows + offs_v[None, :], result.to(out_ptr.dtype.element_ty), mask=head_valid[:, None])
    else:
        slots = (sequence * num_q_heads + heads) * num_splits + split
        tl.store(partial_ptr + slots[:, None] * DV + offs_v[None, :], result, mask=head_valid[:, None])
        lse = tl.where(l_i > 0.0, m_i + tl.math.log2(l_safe), float("-inf"))
        tl.store(partial_lse_ptr + slots, lse, mask=head_valid)
