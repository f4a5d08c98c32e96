"""FlashInfer 0.6.0 adapter of embedding.rotary (imported only through the row's target).

    rotary(positions, q, k, head_dim, cos_sin_cache, is_neox) -> (q, k) rotated in place
    via flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(index, q, k, head_dim, cos_sin_cache, is_neox)

Unchecked entry: embedding/checks.py ran, and the row requires qk:rows16,
cos_sin_cache:vector16 (fp32 contiguous cache), head_dim in (64, 128, 256),
fp16/bf16 (why: the row in ops/embedding/__init__.py).

Padding and out-of-range positions. FlashInfer rotates every token with the
cache row at cos_sin_cache + pos * rotary_dim, unchecked
(include/flashinfer/pos_enc.cuh), where our contract leaves tokens whose
position is negative or >= max_position unrotated. The adapter passes an int64
index instead of the positions:

    index[t] = positions[t]      if 0 <= positions[t] < max_position
             = IDENTITY          otherwise

where IDENTITY is the (possibly huge, possibly negative) row number at which
cos_sin_cache + IDENTITY * rotary_dim lands on an identity row (cos 1, sin 0)
kept in a small buffer of this module: the kernel's index arithmetic is
64-bit and signed for int64 pos_ids (IdType int64_t times uint32_t
rotary_dim), so the row may sit anywhere in the address space as long as its
address is congruent to the cache's modulo the row size; the buffer is
allocated once per (device, rotary_dim, cache address mod row size) and
never changes (it does not depend on the cache's values, so nothing goes
stale: the cache itself is read live, as by every row). Rotating by the
identity row computes x * 1 - y * 0 in fp32 and rounds back: the value is
unchanged (a signed zero may flip its sign, an inf/NaN partner gives NaN).

Cost per call: the remap is 3 small device ops over T positions (4 for
int32 positions: widening to int64), no host sync, no per-call host data;
graph-capturable (the buffer and IDENTITY are fixed for a given cache
tensor). The first call per process is logged (jit_log.py: the "rope" module
is JIT-compiled then); zero tokens return at once (FlashInfer would launch an
empty grid, which CUDA rejects).
"""

from __future__ import annotations

import torch
import tvm_ffi.libinfo  # noqa: F401  (FlashInfer 0.6.0's JIT reads this submodule without importing it)
import flashinfer

from .jit_log import first_call_logged

_MODULE = "flashinfer module 'rope'"
#: Floats after the identity row: the GPT-J path reads up to 4 floats past a row (pos_enc.cuh).
_TAIL_FLOATS = 16
#: (device, rotary_dim, cache address mod row bytes) -> identity row (a view into its buffer). Bounded in
#: practice by the distinct alignments of the caches a process uses (one row of floats each).
_IDENTITY_ROWS: dict[tuple, torch.Tensor] = {}


def rotary(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, head_dim: int, cos_sin_cache: torch.Tensor, is_neox: bool
):
    if positions.shape[0] == 0:
        return q, k
    max_position = cos_sin_cache.shape[0]
    index = positions.to(torch.int64)  # a no-op for int64 positions; index is never written in place
    if max_position:
        in_range = index.clamp(0, max_position - 1) == index  # exactly 0 <= index < max_position
    else:
        in_range = torch.zeros_like(index, dtype=torch.bool)
    index = torch.where(in_range, index, identity_row_index(cos_sin_cache))
    with first_call_logged(_MODULE):
        flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(index, q, k, head_dim, cos_sin_cache, is_neox)
    return q, k


def identity_row_index(cache: torch.Tensor) -> int:
    """The row number IDENTITY (module docstring) of `cache` [P, R] (fp32, 16-byte aligned)."""
    rotary_dim = cache.shape[1]
    row_bytes = 4 * rotary_dim
    residue = cache.data_ptr() % row_bytes
    key = (cache.device, rotary_dim, residue)
    row = _IDENTITY_ROWS.get(key)
    if row is None:
        buffer = torch.zeros(2 * rotary_dim + _TAIL_FLOATS, dtype=torch.float32, device=cache.device)
        # Both addresses are multiples of 4 bytes, so the shift is a whole number of floats (< rotary_dim).
        shift = (residue - buffer.data_ptr()) % row_bytes // 4
        row = buffer[shift:]
        row[: rotary_dim // 2] = 1.0  # cos half 1, sin half (and the tail) 0
        _IDENTITY_ROWS[key] = row
    distance = row.data_ptr() - cache.data_ptr()
    assert distance % row_bytes == 0, "identity row not congruent to the cache's rows"
    return distance // row_bytes
