"""Ragged prefill with TMA tile loads (sm90+): attention.prefill and attention.mla_prefill on Hopper.

    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // G] * sm_scale) v[j, h // G]     (G = Hq / Hk)

Same tiling, grid, block order and results as prefill.py's ragged kernel (FlashAttention-2's forward,
base-2 logits, fp32 online softmax); what differs is how the bulk of the tiles reach shared memory.
The query block and every key/value tile the whole query block sees (the causal off-band tiles, or
every full tile without causal) are copied by the Tensor Memory Accelerator from 2D descriptors,
one instruction per tile and no per-element address arithmetic in registers, so the registers and
issue slots go to the two products and the softmax. On those tiles the logit scale is one fused
multiply-add (qk * scale - m) and the row maximum is taken on the raw products (scale > 0; a
negative scale takes the row minimum). The diagonal and tail tiles (masked: keys past the query or
the sequence) run prefill.py's masked step with pointer loads, which never reads a row of another
sequence into the products.

Descriptors: a [T, H, D] tensor with unit head-dim stride is the 2D array rows = tokens, columns =
h * stride_h + d (width (H - 1) * stride_h + D, row stride stride_t): a query block is the box
[BLOCK_M, D] at (first token, h * stride_h), a key tile [BLOCK_N, D] at (token, kv_head * stride_h).
TMA needs a 16-byte aligned base and 16-byte multiples for stride_t and stride_h (fp16/bf16: multiples
of 8 elements); `tma_ready` checks this and the caller falls back to prefill.py's kernel otherwise
(fp32, odd strides, overlapping views, CPU). Rows of a query box past the sequence's end hold other
sequences' queries (or TMA's zero fill past T): their rows of the result are never stored.
Head dims D_A + D_B (192 = 128 + 64 for MLA) use two descriptors per tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device_facts import capability_major
from ..launch_fitting import launch_fitting
from .prefill import _LOG2E, _attend_tile, split_head_dim

try:  # triton >= 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older triton: the pointer kernel serves
    TensorDescriptor = None

#: Dtypes whose tiles the TMA kernel takes (fp32 keeps IEEE products on the pointer kernel).
_TMA_DTYPES = (torch.float16, torch.bfloat16)


def tma_ready(*tensors: torch.Tensor) -> bool:
    """True when every [T, H, D] tensor can be read through a 2D TMA descriptor on this device (see the
    module docstring): CUDA sm90+, fp16/bf16, unit head-dim stride, 16-byte aligned base and strides,
    heads and tokens that do not overlap."""
    if TensorDescriptor is None or tensors[0].device.type != "cuda":
        return False
    if capability_major(tensors[0].device) < 9:  # one device: the op's check ran
        return False
    for tensor in tensors:
        if tensor.dtype not in _TMA_DTYPES:
            return False
        tokens, heads, dim = tensor.shape
        stride_t, stride_h, stride_d = tensor.stride()
        size = tensor.element_size()
        if tokens == 0 or stride_d != 1 or tensor.data_ptr() % 16:
            return False
        if (stride_t * size) % 16 or (stride_h * size) % 16 or stride_h < dim:
            return False
        if stride_t < (heads - 1) * stride_h + dim:
            return False
    return True


def launch_config(head_dim: int, head_dim_v: int, dtype: torch.dtype, device: torch.device) -> dict:
    """Tiles of the TMA kernel (sm90; no first-call tuning): BLOCK_M = 128 query rows, BLOCK_N = 64 keys.
    Head dims <= 128: 4 warps (one warpgroup issues both m64 halves of each product) and 2 stages;
    q/k head dim 192 (MLA): 8 warps and 3 stages. H200 sweep (perf/sweeps/attention_tiles.py,
    common_rows.ATTENTION_SWEEP): 4 x 4096 causal GQA 32/8 d128 1096.2 us (501 TFLOP/s; 128 x 128 tiles
    with 8 warps 1223.3; the pointer kernel's best 1292.6), 16 x 1024 378.9 us, MLA 4 x 4096 747.2 us.
    Warp specialization (tl.range(warp_specialize=True)) changed nothing where it compiled and failed
    to compile at these tiles (triton 3.6, sm90). Two variants measured slower and not kept
    (attention_2026-12-01/mla_tma/experiments/sweep_lazy_rescale_tma_mla_and_prefill.json, 4 x 4096):
    lazy rescaling (acc rescaled only when a row maximum grows by more than 2^8, a block-uniform branch)
    1221.6 us against 1094.4, and TMA loads for the in-sequence diagonal tiles 1110.4. Value head dim 256
    (not swept):
    64 x 32 tiles, 4 warps, 2 stages, which fit shared memory (128 x 64 needs 257 KiB there)."""
    if head_dim_v > 128:
        return {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    if head_dim > 128:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


def _descriptor(tensor: torch.Tensor, rows: int, first: int, width: int) -> "TensorDescriptor":
    """Descriptor of the [T, H, D] tensor as 2D (tokens x h * stride_h + d), boxes [rows, width] that
    start at column `first` of a head (the caller adds h * stride_h)."""
    tokens, heads, dim = tensor.shape
    columns = (heads - 1) * tensor.stride(1) + dim
    view = tensor if first == 0 else tensor[:, :, first:]
    # the base moves to column `first` (a 16-byte multiple: first is D_A, a power of two >= 16)
    return TensorDescriptor(view, shape=[tokens, columns - first], strides=[tensor.stride(0), 1],
                            block_shape=[rows, width])


def gluon_fits(q, v, sm_scale) -> bool:
    """True where prefill_gluon.py's kernel can serve a call tma_ready accepted: sm90 (wgmma), q/k/v head dim
    128, a positive scale (its row maximum is taken on the raw logits and then scaled)."""
    return capability_major(q.device) == 9 and q.shape[2] == 128 and v.shape[2] == 128 and sm_scale > 0


def prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False, *, config=None):
    """attention.prefill / mla_prefill through TMA descriptors (unchecked entry; tma_ready(q, k, v) holds).
    Where gluon_fits (sm90, q/k/v head dim 128, sm_scale > 0) prefill_gluon.py's warp-specialized kernel serves
    (two consumer warpgroups: 1001.8 us at 4 x 4096 causal GQA 32/8 against this module's 1094.5 in the same run,
    attention_2026-12-01/variants/call19; three: 946.5 in the benchmark of call26, 910.5 with the output through
    TMA in call27; two with 128-key tiles, the default since call30); this module's kernel serves the rest
    (MLA's 192, head dims 64 and 256, sm100). A config {"GLUON": True, ...} forces prefill_gluon.py with optional
    "BLOCK_N" (keys per tile), "STAGES" (ring slots), "Q_SLOTS", "PINGPONG" (turns between its consumers),
    "CONSUMERS" (its consumer warpgroups, 2 or 3) and "PROGRAMS" (the grid); any other config takes this
    module's kernel."""
    tokens, num_q_heads, head_dim = q.shape
    head_dim_v = v.shape[2]
    out = torch.empty((tokens, num_q_heads, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((tokens, num_q_heads), dtype=torch.float32, device=q.device) if return_lse else None
    batch = cu_seqlens.shape[0] - 1
    max_seqlen = int(max_seqlen)
    if tokens == 0 or batch == 0 or max_seqlen == 0:
        return (out, lse) if return_lse else out
    if config is None and gluon_fits(q, v, sm_scale):
        config = {"GLUON": True}  # head dim 128 on sm90: prefill_gluon.py's kernel (its defaults)
    config = dict(config or launch_config(head_dim, head_dim_v, q.dtype, q.device))
    if config.pop("GLUON", False):
        if not gluon_fits(q, v, sm_scale):
            raise ValueError("prefill_gluon serves sm90 with q/k/v head dim 128 and sm_scale > 0 only; got "
                             f"head dims {head_dim}/{head_dim_v}, sm_scale {sm_scale}")
        from . import prefill_gluon  # Gluon (sm90): imported only where it runs
        # the config's keys are launch's keyword arguments, upper-cased; launch holds the defaults
        prefill_gluon.launch(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, out, lse,
                             **{key.lower(): value for key, value in config.items()})
        return (out, lse) if return_lse else out
    d_a, d_b = split_head_dim(head_dim)
    block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
    q_a = _descriptor(q, block_m, 0, d_a)
    k_a = _descriptor(k, block_n, 0, d_a)
    q_b = _descriptor(q, block_m, d_a, d_b) if d_b else q_a
    k_b = _descriptor(k, block_n, d_a, d_b) if d_b else k_a
    v_desc = _descriptor(v, block_n, 0, head_dim_v)
    num_blocks = triton.cdiv(max_seqlen, block_m)
    launch_fitting(_prefill_tma_kernel, (num_blocks * batch, num_q_heads), q.device,
        q_a, q_b, k_a, k_b, v_desc,
        q, k, v, out, lse if lse is not None else out, cu_seqlens,
        q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1),
        lse.stride(0) if lse is not None else 0, lse.stride(1) if lse is not None else 0, cu_seqlens.stride(0),
        batch, num_blocks, num_q_heads // k.shape[1], float(sm_scale) * _LOG2E, tokens,
        CAUSAL=causal, WRITE_LSE=lse is not None, NEGATIVE_SCALE=sm_scale < 0,
        D_A=d_a, D_B=d_b, D_B_PAD=max(d_b, 16), DV=head_dim_v, **config,
    )
    return (out, lse) if return_lse else out


@triton.jit
def _prefill_tma_kernel(
    q_desc_a, q_desc_b, k_desc_a, k_desc_b, v_desc,
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, cu_q_ptr,
    stride_qh, stride_kt, stride_kh, stride_kd, stride_vt, stride_vh, stride_vd,
    stride_ot, stride_oh, stride_lt, stride_lh, stride_cu,
    batch, num_blocks, group, qk_scale, total_q,
    CAUSAL: tl.constexpr, WRITE_LSE: tl.constexpr, NEGATIVE_SCALE: tl.constexpr,
    D_A: tl.constexpr, D_B: tl.constexpr, D_B_PAD: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False,
):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    sequence = pid % batch
    block = num_blocks - 1 - pid // batch
    # clamped as in prefill.py: offsets outside the contract give an unspecified result, never a fault
    q_start = tl.minimum(tl.maximum(tl.load(cu_q_ptr + sequence * stride_cu), 0), total_q)
    q_end = tl.minimum(tl.maximum(tl.load(cu_q_ptr + (sequence + 1) * stride_cu), q_start), total_q)
    q_len = q_end - q_start
    if block * BLOCK_M >= q_len:
        return
    kv_head = head // group
    first_row = q_start + block * BLOCK_M

    q_a = q_desc_a.load([first_row, head * stride_qh])
    if D_B > 0:
        q_b = q_desc_b.load([first_row, head * stride_qh])
    else:
        q_b = q_a
    offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_da = tl.arange(0, D_A)
    offs_db = D_A + tl.arange(0, D_B_PAD)
    offs_dv = tl.arange(0, DV)
    row_valid = offs_m < q_len

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, DV), dtype=tl.float32)
    if CAUSAL:
        full_end = ((block * BLOCK_M) // BLOCK_N) * BLOCK_N
        end = tl.minimum(q_len, (block + 1) * BLOCK_M)
    else:
        full_end = (q_len // BLOCK_N) * BLOCK_N
        end = q_len
    k_column = kv_head * stride_kh
    v_column = kv_head * stride_vh
    # Off-band: every query of the block sees every key of these tiles (all inside the sequence).
    for start in tl.range(0, full_end, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        row = q_start + start
        qk = tl.dot(q_a, k_desc_a.load([row, k_column]).T)
        if D_B > 0:
            qk = tl.dot(q_b, k_desc_b.load([row, k_column]).T, qk)
        if NEGATIVE_SCALE:
            m_new = tl.maximum(m_i, tl.min(qk, 1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([row, v_column])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    # Diagonal and tail tiles: masked logits and pointer loads of the sequence's own rows only.
    k_base = k_ptr + kv_head * stride_kh
    v_base = v_ptr + kv_head * stride_vh
    query_pos = offs_m
    for start in range(full_end, end, BLOCK_N):
        positions = start + offs_n
        key_valid = positions < end
        rows = q_start.to(tl.int64) + tl.where(key_valid, positions, 0)
        visible = key_valid[None, :] & row_valid[:, None]
        if CAUSAL:
            visible = visible & (positions[None, :] <= query_pos[:, None])
        acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q_a, q_b, (k_base + rows * stride_kt)[:, None],
                                     (v_base + rows * stride_vt)[:, None], key_valid, visible,
                                     offs_da * stride_kd, offs_db * stride_kd, offs_dv * stride_vd, qk_scale,
                                     D_B, "tf32", True, True)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    out = acc / l_safe[:, None]
    out_index = q_start.to(tl.int64) + tl.where(row_valid, offs_m, 0).to(tl.int64)
    out_rows = out_ptr + out_index[:, None] * stride_ot + head * stride_oh
    tl.store(out_rows + offs_dv[None, :], out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
    if WRITE_LSE:
        lse = (m_i + tl.math.log2(l_safe)) * 0.6931471805599453
        tl.store(lse_ptr + out_index * stride_lt + head * stride_lh, lse, mask=row_valid)


__all__ = ["gluon_fits", "prefill", "tma_ready"]
