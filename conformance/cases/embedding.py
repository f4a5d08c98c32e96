"""Parity cases of the embedding family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, index_view, randn as _randn, with_padding
from rapid_llm.kernels.ops.embedding.checks import check_rotary

# ---------------------------------------------------------------------------
# embedding.vocab_embedding
# ---------------------------------------------------------------------------


def _embedding_case(
    ids_shape,
    rows,
    hidden,
    *,
    vocab_start=0,
    vocab_end=None,
    id_range=None,
    ids_dtype=torch.int64,
    row_pad=0,
    ids_view=None,
    padding=False,
):
    def make(dtype, device, generator):
        low, high = id_range or (vocab_start, vocab_start + rows)
        ids = torch.randint(low, high, ids_shape, generator=generator, dtype=torch.int64).to(ids_dtype).to(device)
        if padding:
            ids = with_padding(ids)
        ids = index_view(ids, ids_view)
        if row_pad:
            table = _randn((rows, hidden + row_pad), dtype, device, generator)[:, :hidden]
        else:
            table = _randn((rows, hidden), dtype, device, generator)
        layout = frozenset({"table:rows"}) if hidden == 1 or table.stride(1) == 1 else frozenset()
        return (ids, table, vocab_start, vocab_end), {"num_tokens": ids.numel(), "hidden": hidden}, layout

    return make


def _embedding_large_offsets(dtype, device, generator):
    """A Qwen2.5-sized vocab with wide rows: 152064 x 14336 > 2**31 elements; ids hit the last rows."""
    rows, hidden = 152064, 14336
    table = torch.empty((rows, hidden), dtype=dtype, device=device)
    table.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    ids = torch.cat([torch.arange(rows - 64, rows), torch.randint(0, rows, (64,), generator=generator)]).to(device)
    return (ids, table, 0, None), {"num_tokens": ids.numel(), "hidden": hidden}, frozenset({"table:rows"})


def vocab_embedding_oracle(ids, table, vocab_start, vocab_end):
    vocab_end = vocab_start + table.shape[0] if vocab_end is None else vocab_end
    out = torch.zeros((*ids.shape, table.shape[1]), dtype=table.dtype, device=table.device)
    for index, token in enumerate(ids.reshape(-1).tolist()):
        if vocab_start <= token < vocab_end:
            out.view(-1, table.shape[1])[index] = table[token - vocab_start]
    return out


EMBEDDING_CASES = (
    Case("one_token", _embedding_case((1,), 1000, 64)),
    Case("int32_ids_2d", _embedding_case((4, 5), 1000, 64, ids_dtype=torch.int32)),
    Case("hidden_1000_tail", _embedding_case((9,), 512, 1000)),
    Case("hidden_5", _embedding_case((7,), 50, 5)),
    Case("shard_zero_rows", _embedding_case((40,), 400, 96, vocab_start=300, id_range=(0, 1000))),
    Case(
        "shard_with_padding_rows", _embedding_case((40,), 416, 96, vocab_start=300, vocab_end=700, id_range=(0, 1000))
    ),
    Case("empty_ids", _embedding_case((0,), 100, 64)),
    Case("strided_table_rows", _embedding_case((17,), 300, 256, row_pad=32)),
    # ids with a non-unit stride: a kernel reading them as contiguous gathers the wrong rows.
    Case("ids_every_other", _embedding_case((11,), 200, 64, ids_view="every_other")),
    Case("ids_column_of_pairs_int32", _embedding_case((9,), 200, 64, ids_view="column", ids_dtype=torch.int32)),
    # negative ids are padding: zero rows in every row.
    Case("padding_ids", _embedding_case((12,), 200, 64, padding=True)),
    Case("empty_table_shard", _embedding_case((6,), 0, 32, vocab_start=50, id_range=(0, 100))),
    Case("int64_offsets_2pow31", _embedding_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# embedding.rotary (in place on q and k; both compared)
# ---------------------------------------------------------------------------


def _cos_sin_cache(max_position, rotary_dim, dtype, device, base=10000.0):
    inverse = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inverse[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype).to(device)


def _rotary_case(
    tokens,
    q_heads,
    k_heads,
    head_dim,
    *,
    rotary_dim=None,
    is_neox=True,
    fused_qkv=False,
    cache_in_q_dtype=False,
    positions_dtype=torch.int64,
    max_position=4096,
    positions_view=None,
    padding=False,
    cache_row_pad=0,
    qkv_pad=0,
    cache_tail_rows=0,
):
    def make(dtype, device, generator):
        width_q, width_k = q_heads * head_dim, k_heads * head_dim
        if fused_qkv:
            # qkv_pad extra columns per token: a token stride off the 16-byte alignment when odd
            qkv = _randn((tokens, width_q + 2 * width_k + qkv_pad), dtype, device, generator)
            q, k = qkv[:, :width_q], qkv[:, width_q : width_q + width_k]
        else:
            q, k = (
                _randn((tokens, width_q), dtype, device, generator),
                _randn((tokens, width_k), dtype, device, generator),
            )
        cache = _cos_sin_cache(
            max_position, rotary_dim or head_dim, dtype if cache_in_q_dtype else torch.float32, device
        )
        if cache_row_pad:
            # the cache as rows of a wider tensor: a row stride of its own (layout qk:rows still holds)
            wide = torch.zeros((cache.shape[0], cache.shape[1] + cache_row_pad), dtype=cache.dtype, device=device)
            wide[:, : cache.shape[1]] = cache
            cache = wide[:, : cache.shape[1]]
        if cache_tail_rows:
            # the cache as the first rows of a longer buffer (storage past its last row)
            longer = torch.zeros((cache.shape[0] + cache_tail_rows, cache.shape[1]), dtype=cache.dtype, device=device)
            longer[: cache.shape[0]] = cache
            cache = longer[: cache.shape[0]]
        positions = torch.randint(0, max_position, (tokens,), generator=generator).to(positions_dtype).to(device)
        if padding:
            positions = with_padding(positions)
        positions = index_view(positions, positions_view)
        shape = {"num_tokens": tokens, "num_q_heads": q_heads, "num_kv_heads": k_heads, "head_dim": head_dim}
        args = (positions, q, k, head_dim, cache, is_neox)
        # The layout tags are the op's check's: qk:rows, and FlashInfer's qk:rows16 / cos_sin_cache:vector16.
        return args, shape, check_rotary(*args)[1]

    return make


def _rotary_large_offsets(dtype, device, generator):
    """q past 2**31 elements: token offsets need int64 arithmetic."""
    q_heads, k_heads, head_dim = 32, 8, 128
    tokens = (1 << 31) // (q_heads * head_dim) + 5
    seeded = torch.Generator(device=device).manual_seed(int(generator.initial_seed()))
    q = torch.empty((tokens, q_heads * head_dim), dtype=dtype, device=device).normal_(generator=seeded)
    k = torch.empty((tokens, k_heads * head_dim), dtype=dtype, device=device).normal_(generator=seeded)
    positions = torch.randint(0, 8192, (tokens,), device=device, generator=seeded)
    shape = {"num_tokens": tokens, "num_q_heads": q_heads, "num_kv_heads": k_heads, "head_dim": head_dim}
    args = (positions, q, k, head_dim, _cos_sin_cache(8192, head_dim, torch.float32, device), True)
    return args, shape, check_rotary(*args)[1]


def rotary_oracle(positions, q, k, head_dim, cache, is_neox):
    rotary_dim = cache.shape[1]
    half = rotary_dim // 2
    valid = (positions >= 0) & (positions < cache.shape[0])
    cos, sin = cache[positions.long().clamp(0, cache.shape[0] - 1)].double().split(half, dim=-1)
    outs = []
    for tensor in (q, k):
        heads = tensor.double().view(tensor.shape[0], tensor.shape[1] // head_dim, head_dim).clone()
        rotated = heads[..., :rotary_dim]
        if is_neox:
            x1, x2 = rotated[..., :half], rotated[..., half:]
            result = torch.cat((x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]), -1)
        else:
            x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
            result = torch.stack(
                (x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]), -1
            ).flatten(-2)
        heads[..., :rotary_dim] = torch.where(valid[:, None, None], result, rotated)
        outs.append(heads.view(tensor.shape).to(tensor.dtype))
    return tuple(outs)


ROTARY_CASES = (
    Case("neox_gqa", _rotary_case(5, 4, 2, 64)),
    Case("gptj_gqa", _rotary_case(5, 4, 2, 64, is_neox=False)),
    Case("neox_partial_rotary", _rotary_case(6, 3, 1, 64, rotary_dim=32)),
    Case("gptj_partial_rotary", _rotary_case(6, 3, 1, 64, rotary_dim=16, is_neox=False)),
    Case("llama_heads_fused_qkv_views", _rotary_case(7, 32, 8, 128, fused_qkv=True)),
    Case(
        "cache_in_q_dtype_int32_positions",
        _rotary_case(4, 2, 2, 128, cache_in_q_dtype=True, positions_dtype=torch.int32),
    ),
    Case("one_token", _rotary_case(1, 8, 1, 128)),
    # positions with a non-unit stride: a kernel reading them as contiguous rotates by wrong angles.
    Case("positions_column_of_pairs", _rotary_case(6, 4, 2, 64, positions_view="column")),
    Case(
        "positions_every_other_int32",
        _rotary_case(5, 4, 2, 64, positions_view="every_other", positions_dtype=torch.int32),
    ),
    # negative positions are padding: those tokens stay unrotated in every row.
    Case("padding_positions", _rotary_case(7, 4, 2, 64, padding=True)),
    Case("cache_rows_strided", _rotary_case(5, 4, 2, 64, cache_row_pad=16)),
    Case("empty", _rotary_case(0, 4, 2, 64)),
    # GPT-J with a cache that has storage past its last row: the case FlashInfer's GPT-J path may serve (it
    # reads up to 4 floats past a cache row; cos_sin_cache:vector16), full and partial rotary.
    Case("gptj_cache_with_tail", _rotary_case(6, 4, 2, 64, is_neox=False, cache_tail_rows=1)),
    Case(
        "gptj_partial_rotary_cache_with_tail",
        _rotary_case(6, 3, 1, 128, rotary_dim=32, is_neox=False, cache_tail_rows=1, padding=True),
    ),
    Case("head_dim_256_padding_int32", _rotary_case(5, 2, 1, 256, padding=True, positions_dtype=torch.int32)),
    # FlashInfer's boundaries: rotary_dim 24 (its 8-pair vectors would mix cos and sin), a token stride of
    # q and k off the 16-byte alignment (qk:rows16), head_dim 96 (not one of its 64/128/256 kernels).
    Case("rotary_dim_24_off_vector", _rotary_case(4, 2, 1, 64, rotary_dim=24)),
    Case("qkv_token_stride_off_vector", _rotary_case(5, 4, 2, 64, fused_qkv=True, qkv_pad=3)),
    Case("head_dim_96", _rotary_case(4, 2, 1, 96)),
    Case("int64_offsets_2pow31", _rotary_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


CASES = {"embedding.vocab_embedding": EMBEDDING_CASES, "embedding.rotary": ROTARY_CASES}
ORACLES = {"embedding.vocab_embedding": vocab_embedding_oracle, "embedding.rotary": rotary_oracle}
TOLERANCES = {
    ("embedding.vocab_embedding", "fp32"): (0.0, 0.0),
    ("embedding.vocab_embedding", "fp16"): (0.0, 0.0),
    ("embedding.vocab_embedding", "bf16"): (0.0, 0.0),
    # Rotary: two fp32 products and a sum per output, one rounding; cos/sin read from the same cache.
    ("embedding.rotary", "fp32"): (1e-5, 1e-5),
    ("embedding.rotary", "fp16"): (1e-3, 2e-3),
    ("embedding.rotary", "bf16"): (1e-2, 8e-3),
}
