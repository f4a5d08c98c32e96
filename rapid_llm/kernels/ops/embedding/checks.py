"""Argument checks of the embedding family: each op's one validation site (see ops/checks.py).

Rotary layout tags: qk:rows (the native row), and for FlashInfer's rope
kernels (include/flashinfer/pos_enc.cuh: 16-byte vector loads of q/k rows,
cos/sin read from the fp32 cache as 8-float vectors) qk:rows16 and
cos_sin_cache:vector16.
"""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_bool,
    expect_disjoint,
    expect_float_tensor,
    expect_int,
    expect_same_device,
    expect_tensor,
    tag_table,
    values_checked,
)
from . import ROTARY, VOCAB_EMBEDDING

_TABLE_ROWS = frozenset({"table:rows"})
_ROTARY_TAGS = tag_table("qk:rows", "qk:rows16", "cos_sin_cache:vector16")
#: FlashInfer's GPT-J path reads the sin vector of a row's last pairs up to 4 floats past the row's end
#: (pos_enc.cuh, BatchQKApplyRotaryPosIdsCosSinCache*Kernel: vec_idx = tx * 8 / 2, 8-float loads).
_GPTJ_OVERREAD_BYTES = 16
_NO_TAGS = frozenset()
_INDEX_DTYPES = (torch.int32, torch.int64)


def check_vocab_embedding(ids, table, vocab_start=0, vocab_end=None):
    """vocab_embedding's check: (table, {table:rows if unit stride along hidden}, (num_tokens, hidden))."""
    op = VOCAB_EMBEDDING
    expect_tensor(op, "ids", ids)
    if ids.dtype not in _INDEX_DTYPES:
        raise OpInputError(op, "ids", "dtype torch.int32 or torch.int64", str(ids.dtype))
    expect_float_tensor(op, "table", table)
    if table.dim() != 2 or table.shape[1] == 0:
        raise OpInputError(op, "table", "shape [rows, hidden] with hidden >= 1", f"shape {list(table.shape)}")
    expect_same_device(op, "table", table, "ids", ids)
    expect_int(op, "vocab_start", vocab_start, minimum=0)
    rows = table.shape[0]
    if vocab_end is not None:
        expect_int(op, "vocab_end", vocab_end)
        if not vocab_start <= vocab_end <= vocab_start + rows:
            raise OpInputError(
                op,
                "vocab_end",
                f"an int in [vocab_start, vocab_start + table rows] = [{vocab_start}, {vocab_start + rows}]",
                repr(vocab_end),
            )
    hidden = table.shape[1]
    tags = _TABLE_ROWS if hidden == 1 or table.stride(1) == 1 else _NO_TAGS
    return table, tags, (("num_tokens", ids.numel()), ("hidden", hidden))


def shard_end(table, vocab_start: int, vocab_end) -> int:
    """vocab_end as the contract resolves it: vocab_start + the table's rows when None."""
    return vocab_start + table.shape[0] if vocab_end is None else vocab_end


def check_rotary(positions, q, k, head_dim, cos_sin_cache, is_neox):
    """rotary's check: (q, {qk:rows if q, k and the cache have unit stride along their last dim}, dims).

    Positions >= max_position raise when values are checked (ops/checks.py: values_checked)."""
    op = ROTARY
    expect_tensor(op, "positions", positions)
    if positions.dtype not in _INDEX_DTYPES or positions.dim() != 1:
        raise OpInputError(
            op, "positions", "a 1-D int32/int64 tensor [T]", f"{positions.dtype} of shape {list(positions.shape)}"
        )
    expect_int(op, "head_dim", head_dim, minimum=1)
    tokens = positions.shape[0]
    heads = []
    for name, tensor in (("q", q), ("k", k)):
        expect_float_tensor(op, name, tensor)
        if tensor.dim() != 2 or tensor.shape[0] != tokens or tensor.shape[1] % head_dim or tensor.shape[1] == 0:
            raise OpInputError(op, name, f"shape [{tokens}, heads * {head_dim}]", f"shape {list(tensor.shape)}")
        heads.append(tensor.shape[1] // head_dim)
    if k.dtype != q.dtype:
        raise OpInputError(op, "k", f"q's dtype {q.dtype}", str(k.dtype))
    expect_bool(op, "is_neox", is_neox)
    expect_float_tensor(op, "cos_sin_cache", cos_sin_cache)
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] % 2 or not 0 < cos_sin_cache.shape[1] <= head_dim:
        raise OpInputError(
            op,
            "cos_sin_cache",
            f"shape [max_position, rotary_dim], rotary_dim even and <= {head_dim}",
            f"shape {list(cos_sin_cache.shape)}",
        )
    if cos_sin_cache.dtype not in (torch.float32, q.dtype):
        expected = "dtype torch.float32" + ("" if q.dtype == torch.float32 else f" or q's {q.dtype}")
        raise OpInputError(op, "cos_sin_cache", expected, str(cos_sin_cache.dtype))
    for name, tensor in (("q", q), ("k", k), ("cos_sin_cache", cos_sin_cache)):
        expect_same_device(op, name, tensor, "positions", positions)
    expect_disjoint(op, "k", k, "q", q)
    for name, tensor in (("positions", positions), ("cos_sin_cache", cos_sin_cache)):
        expect_disjoint(op, name, tensor, "q", q)
        expect_disjoint(op, name, tensor, "k", k)
    if tokens and values_checked(positions):
        high = int(positions.max())
        if high >= cos_sin_cache.shape[0]:
            raise OpInputError(
                op,
                "positions",
                f"positions < {cos_sin_cache.shape[0]} (the cache's rows; negative positions are padding)",
                f"a position of {high}",
            )
    unit = all(t.shape[1] == 1 or t.stride(1) == 1 for t in (q, k, cos_sin_cache))
    tags = _ROTARY_TAGS[(unit, rows16(q) and rows16(k), cache_vector16(cos_sin_cache, is_neox))]
    dims = (("num_tokens", tokens), ("num_q_heads", heads[0]), ("num_kv_heads", heads[1]), ("head_dim", head_dim))
    return q, tags, dims


def cache_vector16(cache, is_neox: bool) -> bool:
    """Whether cos_sin_cache has layout cos_sin_cache:vector16 (dispatcher/contract.py LAYOUT_TAGS)."""
    if cache.dtype != torch.float32 or cache.shape[1] % 16 or not cache.is_contiguous() or cache.data_ptr() % 16:
        return False
    if is_neox:
        return True
    end = (cache.storage_offset() + cache.numel()) * cache.element_size()
    return end + _GPTJ_OVERREAD_BYTES <= cache.untyped_storage().nbytes()


def rows16(tensor) -> bool:
    """[T, width] with unit stride along width, a 16-byte aligned data pointer and (T > 1) token stride."""
    size = tensor.element_size()
    return (
        tensor.stride(1) == 1
        and tensor.data_ptr() % 16 == 0
        and (tensor.shape[0] <= 1 or tensor.stride(0) * size % 16 == 0)
    )
