"""aot/decode_fp8 and jit/decode_fp8: the CUDA extension's decode over an fp8-e4m3 KV buffer
(csrc/attention/decode_fp8.cu), two builds of one kernel.

    decode_fp8_aot   torch.ops.rapid_llm.decode      (rapid_llm._C: RAPID_LLM_BUILD_EXT=1)
    decode_fp8_jit   torch.ops.rapid_llm_jit.decode  (compiled on first use: RAPID_LLM_JIT=1)

attention.decode's public order (q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale);
the schema's is outputs first: decode(Tensor! out, Tensor! partial, Tensor! partial_lse, Tensor q, Tensor
kv_buffer, Tensor page_table, Tensor seq_lens, Tensor k_scale, Tensor v_scale, int page_size, float sm_scale,
int num_splits) -> (). The split count comes from host-known sizes only (splits.one_wave_splits with the
kernel's blocks per SM, then splits.splits_filled_at_reach), so a call is capturable in a CUDA graph; partial / partial_lse are the splits'
scratch (empty with one split), merged into out by the launcher. q fp16/bf16 [B, Hq, 128], kv_buffer [rows, 2*Hk, 128] e4m3 with
16-byte aligned rows (layout ``kv:paged``), page_size a power of two (the rows' shape constraints). Unchecked
kernels: the op's check ran before (attention/checks.py); the C++ launcher still validates with TORCH_CHECK.
Importing this module loads no extension.
"""

from __future__ import annotations

import torch

from .... import aot, jit
from ...device_facts import shared_memory_per_multiprocessor
from ..splits import one_wave_splits, splits_filled_at_reach

#: The kernel's block (decode_fp8.cu's defaults): 128 threads, a ring of 3 slots x 4 warps x 8 KiB of shared
#: memory, __launch_bounds__(128, 2); a block reserves 1 KiB more.
BLOCK_SHARED_BYTES = 3 * 4 * 8192 + 1024
MAX_BLOCKS_PER_SM = 2
#: Query heads per block (the mma rows): a KV head's group takes ceil(G / 16) blocks.
HEADS_PER_BLOCK = 16


def blocks_per_sm(device: torch.device) -> int:
    """Resident blocks per SM: 2 where two blocks' shared memory fits (sm90: 228 KiB), else 1 (sm89: 100 KiB)."""
    return max(1, min(MAX_BLOCKS_PER_SM, shared_memory_per_multiprocessor(device) // BLOCK_SHARED_BYTES))


#: The kernel's split length is a whole number of these positions (decode_fp8.cu's kChunk). Keeping only the
#: splits a full-reach sequence fills (splits.splits_filled_at_reach) drops empty splits, each a block with
#: nothing to read.
CHUNK = 32


def _decode(op, q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale):
    batch, num_q_heads, head_dim = q.shape
    out = torch.empty((batch, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    num_kv_heads = kv_buffer.shape[1] // 2
    head_blocks = -(-(num_q_heads // num_kv_heads) // HEADS_PER_BLOCK)
    capacity = page_table.shape[1] * int(page_size)
    splits = splits_filled_at_reach(
        one_wave_splits(batch, num_kv_heads * head_blocks, capacity, q.device, blocks_per_sm(q.device)), capacity, CHUNK
    )
    scratch = (batch, num_q_heads, splits) if splits > 1 else (0, 0, 0)
    partial = torch.empty((*scratch, head_dim), dtype=torch.float32, device=q.device)
    partial_lse = torch.empty(scratch, dtype=torch.float32, device=q.device)
    op(
        out,
        partial,
        partial_lse,
        q,
        kv_buffer,
        page_table,
        seq_lens,
        k_scale,
        v_scale,
        int(page_size),
        float(sm_scale),
        splits,
    )
    return out


def decode_fp8_aot(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    return _decode(aot.op("decode"), q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale)


def decode_fp8_jit(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
):
    return _decode(jit.op("decode"), q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale)


__all__ = ["decode_fp8_aot", "decode_fp8_jit"]
