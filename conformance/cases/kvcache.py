"""Parity cases of the kvcache family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, index_view, randn as _randn, with_padding
from rapid_llm.kernels.ops.checks import rows_view_ok

# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer (in place: the whole buffer is compared, untouched rows included)
# ---------------------------------------------------------------------------


def _packed(t):
    return (t.shape[2] == 1 or t.stride(2) == 1) and (t.shape[1] == 1 or t.stride(1) == t.shape[2])


def _slot_ids(tokens, rows, loc_dtype, padding, loc_view, device, generator):
    """`tokens` distinct row ids < rows in shuffled order (every third -1 with `padding`), as `loc_view` names."""
    loc = torch.randperm(rows, generator=generator)[:tokens].to(loc_dtype).to(device)  # no repeats, any order
    if padding:
        loc = with_padding(loc)
    return index_view(loc, loc_view)


def _last_rows_and_others(rows, device, generator):
    """int32 ids of 64 tokens of a large-offset case: the buffer's last 32 rows, then 32 random others."""
    return (
        torch.cat([torch.arange(rows - 32, rows), torch.randperm(rows - 32, generator=generator)[:32]])
        .to(torch.int32)
        .to(device)
    )


def _random_e4m3(rows, width, row_pad, device, generator):
    """[rows, width] float8_e4m3fn of random bytes (NaN encodings 0x7f/0xff excluded): the arbitrary earlier
    values of untouched cache rows. row_pad: the rows inside wider rows (a row stride of their own)."""
    raw = torch.randint(0, 255, (rows, width + row_pad), generator=generator, dtype=torch.int32)
    raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw).to(torch.uint8)
    return raw.view(torch.float8_e4m3fn).to(device)[:, :width]


def _scale_tensors(values, as_views, device):
    """One one-element fp32 tensor per value; `as_views`: elements of one table (an engine's per-layer scale
    table), i.e. offset views."""
    if as_views:
        table = torch.tensor([v for value in values for v in (9.0, value)], device=device)
        return tuple(table[2 * i + 1 : 2 * i + 2] for i in range(len(values)))
    return tuple(torch.tensor([value], device=device) for value in values)


def _kv_case(
    tokens,
    rows,
    heads,
    head_dim,
    *,
    loc_dtype=torch.int32,
    kv_token_pad=0,
    buffer_row_pad=0,
    loc_view=None,
    padding=False,
):
    def make(dtype, device, generator):
        width = heads * head_dim
        kv = (
            _randn((tokens, width + kv_token_pad), dtype, device, generator)[:, :width].view(tokens, heads, head_dim)
            if kv_token_pad
            else _randn((tokens, heads, head_dim), dtype, device, generator)
        )
        if buffer_row_pad:
            buffer = _randn((rows, width + buffer_row_pad), dtype, device, generator)[:, :width]
            buffer = buffer.view(rows, heads, head_dim)
        else:
            buffer = _randn((rows, heads, head_dim), dtype, device, generator)
        loc = _slot_ids(tokens, rows, loc_dtype, padding, loc_view, device, generator)
        layout = frozenset(tag for tag, t in (("kv:rows", kv), ("buffer:rows", buffer)) if _packed(t))
        return (kv, loc, buffer), {"num_tokens": tokens, "num_kv_heads": heads // 2, "head_dim": head_dim}, layout

    return make


def _kv_large_offsets(dtype, device, generator):
    """A buffer past 2**31 elements; tokens land in its last rows and elsewhere."""
    heads, head_dim = 16, 128
    rows = (1 << 31) // (heads * head_dim) + 64
    buffer = torch.empty((rows, heads, head_dim), dtype=dtype, device=device)
    buffer.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    loc = _last_rows_and_others(rows, device, generator)
    kv = _randn((64, heads, head_dim), dtype, device, generator)
    return (
        (kv, loc, buffer),
        {"num_tokens": 64, "num_kv_heads": heads // 2, "head_dim": head_dim},
        frozenset({"kv:rows", "buffer:rows"}),
    )


def update_kv_buffer_oracle(kv, loc, buffer):
    out = buffer.clone()
    for token, row in enumerate(loc.tolist()):
        if 0 <= row < out.shape[0]:  # negative slots are padding
            out[row] = kv[token].to(out.device)
    return out


KV_CASES = (
    Case("one_token", _kv_case(1, 64, 16, 128)),
    Case("scattered_subset_int32", _kv_case(37, 300, 16, 128)),
    Case("int64_loc_gqa4", _kv_case(20, 50, 8, 128, loc_dtype=torch.int64)),
    Case("odd_head_dim", _kv_case(9, 40, 2, 72)),
    Case("empty", _kv_case(0, 16, 4, 64)),
    Case("strided_kv_tokens", _kv_case(13, 100, 8, 64, kv_token_pad=128)),
    Case("strided_buffer_rows", _kv_case(13, 100, 8, 64, buffer_row_pad=64)),
    # loc with a non-unit stride: a kernel reading it as contiguous writes slots loc never names.
    Case("loc_column_of_pairs", _kv_case(7, 60, 8, 64, loc_view="column")),
    Case("loc_every_other_int64", _kv_case(6, 60, 4, 64, loc_view="every_other", loc_dtype=torch.int64)),
    # negative slots are padding: those tokens are not written by any row.
    Case("padding_slots", _kv_case(10, 60, 8, 64, padding=True)),
    Case("int64_offsets_2pow31", _kv_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer_fp8 (an e4m3 buffer, per-tensor K and V scales; whole buffer compared)
# ---------------------------------------------------------------------------


def _kv_fp8_case(
    tokens,
    rows,
    heads,
    head_dim,
    *,
    kv_scale=1.0,
    k_scale=0.05,
    v_scale=0.02,
    loc_dtype=torch.int32,
    kv_token_pad=0,
    loc_view=None,
    padding=False,
    scale_views=False,
    buffer_row_pad=0,
):
    base = _kv_case(
        tokens,
        rows,
        heads,
        head_dim,
        loc_dtype=loc_dtype,
        kv_token_pad=kv_token_pad,
        loc_view=loc_view,
        padding=padding,
    )

    def make(dtype, device, generator):
        (kv, loc, buffer), shape, layout = base(dtype, device, generator)
        kv.mul_(kv_scale)
        rows_, heads_, head_dim_ = buffer.shape
        fp8_buffer = _random_e4m3(rows_, heads_ * head_dim_, buffer_row_pad, device, generator)
        fp8_buffer = fp8_buffer.view(rows_, heads_, head_dim_)
        return (kv, loc, fp8_buffer) + _scale_tensors((k_scale, v_scale), scale_views, device), shape, layout

    return make


def _kv_fp8_large_offsets(dtype, device, generator):
    """An fp8 buffer just past 2**31 elements (2 GiB); tokens land in its last rows and elsewhere."""
    heads, head_dim = 16, 128
    rows = (1 << 31) // (heads * head_dim) + 64
    raw = torch.empty((rows, heads, head_dim), dtype=torch.uint8, device=device)
    raw.random_(0, 0x7F, generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    loc = _last_rows_and_others(rows, device, generator)
    kv = _randn((64, heads, head_dim), dtype, device, generator)
    scales = torch.tensor([0.03], device=device), torch.tensor([0.01], device=device)
    return (
        (kv, loc, raw.view(torch.float8_e4m3fn)) + scales,
        {"num_tokens": 64, "num_kv_heads": heads // 2, "head_dim": head_dim},
        frozenset({"kv:rows", "buffer:rows"}),
    )


def update_kv_buffer_fp8_oracle(kv, loc, buffer, k_scale, v_scale):
    """float64 quotients; the cast to e4m3 is the only rounding."""
    half = kv.shape[1] // 2
    scales = torch.tensor([k_scale.item()] * half + [v_scale.item()] * half, dtype=torch.float64)[:, None]
    quantized = (kv.double().cpu() / scales).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return update_kv_buffer_oracle(quantized, loc, buffer)


KV_FP8_CASES = (
    Case("one_token", _kv_fp8_case(1, 64, 16, 128)),
    Case("scattered_subset_int32", _kv_fp8_case(37, 300, 16, 128)),
    Case("int64_loc_gqa4", _kv_fp8_case(20, 50, 8, 128, loc_dtype=torch.int64)),
    Case("odd_head_dim", _kv_fp8_case(9, 40, 2, 72)),
    Case("empty", _kv_fp8_case(0, 16, 4, 64)),
    Case("strided_kv_tokens", _kv_fp8_case(13, 100, 8, 64, kv_token_pad=128)),
    # |kv / scale| far past 448 (clamped to +-448) and far below e4m3's smallest normal (subnormals, zeros).
    Case("saturating_values", _kv_fp8_case(11, 30, 8, 64, kv_scale=200.0)),
    Case("subnormal_values", _kv_fp8_case(11, 30, 8, 64, kv_scale=1e-3)),
    Case("int64_offsets_2pow31", _kv_fp8_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
    Case("loc_column_of_pairs", _kv_fp8_case(7, 60, 8, 64, loc_view="column")),
    Case("padding_slots", _kv_fp8_case(10, 60, 8, 64, padding=True)),
    Case("scales_are_views_into_a_table", _kv_fp8_case(5, 40, 4, 64, scale_views=True)),
    Case("strided_buffer_rows", _kv_fp8_case(9, 40, 8, 64, buffer_row_pad=32)),
)


# ---------------------------------------------------------------------------
# kvcache.update_mla_buffer (in place: latent | rope per row; the whole buffer is compared)
# ---------------------------------------------------------------------------

#: DeepSeek-V2/V3: kv_lora_rank 512, rope dims 64 (the [rows, 576] latent cache attention.mla_decode reads).
DEEPSEEK_RANK, DEEPSEEK_ROPE = 512, 64


def _mla_case(
    tokens,
    rows,
    kv_lora_rank,
    rope_dim,
    *,
    loc_dtype=torch.int32,
    fused_projection=0,
    latent_pad=0,
    buffer_row_pad=0,
    loc_view=None,
    padding=False,
    column_major=False,
):
    """latent [T, R], rope [T, P] and a random buffer [rows, R + P] (untouched rows keep their values).

    fused_projection: latent and rope are column slices of one [T, R + P + fused_projection] output (as an
    engine splits its kv_a projection); latent_pad: latent alone inside wider rows; column_major: latent
    and rope transposed views (no unit stride along the row: no latent_rope:rows tag)."""
    width = kv_lora_rank + rope_dim

    def make(dtype, device, generator):
        if fused_projection:
            projection = _randn((tokens, width + fused_projection), dtype, device, generator)
            latent, rope = projection[:, :kv_lora_rank], projection[:, kv_lora_rank:width]
        elif column_major:
            latent = _randn((kv_lora_rank, tokens), dtype, device, generator).t()
            rope = _randn((rope_dim, tokens), dtype, device, generator).t()
        else:
            latent = _randn((tokens, kv_lora_rank + latent_pad), dtype, device, generator)[:, :kv_lora_rank]
            rope = _randn((tokens, rope_dim), dtype, device, generator)
        buffer = _randn((rows, width + buffer_row_pad), dtype, device, generator)[:, :width]
        loc = _slot_ids(tokens, rows, loc_dtype, padding, loc_view, device, generator)
        layout = frozenset(
            tag
            for tag, ok in (
                ("latent_rope:rows", rows_view_ok(latent) and rows_view_ok(rope)),
                ("buffer:rows", rows_view_ok(buffer)),
            )
            if ok
        )
        shape = {"num_tokens": tokens, "kv_lora_rank": kv_lora_rank, "rope_dim": rope_dim}
        return (latent, rope, loc, buffer), shape, layout

    return make


def _mla_large_offsets(fp8: bool):
    """A DeepSeek latent cache past 2**31 elements (bf16, or e4m3 with `fp8`); tokens land in its last rows
    and elsewhere."""

    def make(dtype, device, generator):
        width = DEEPSEEK_RANK + DEEPSEEK_ROPE
        rows = (1 << 31) // width + 64
        seeded = torch.Generator(device=device).manual_seed(int(generator.initial_seed()))
        if fp8:
            raw = torch.empty((rows, width), dtype=torch.uint8, device=device).random_(0, 0x7F, generator=seeded)
            buffer = raw.view(torch.float8_e4m3fn)
        else:
            buffer = torch.empty((rows, width), dtype=dtype, device=device).normal_(generator=seeded)
        loc = _last_rows_and_others(rows, device, generator)
        latent = _randn((64, DEEPSEEK_RANK), dtype, device, generator)
        rope = _randn((64, DEEPSEEK_ROPE), dtype, device, generator)
        scale = (torch.tensor([0.02], device=device),) if fp8 else ()
        return (
            (latent, rope, loc, buffer) + scale,
            {"num_tokens": 64, "kv_lora_rank": DEEPSEEK_RANK, "rope_dim": DEEPSEEK_ROPE},
            frozenset({"latent_rope:rows", "buffer:rows"}),
        )

    return make


def update_mla_buffer_oracle(latent, rope, loc, buffer):
    return update_kv_buffer_oracle(torch.cat((latent, rope), dim=1), loc, buffer)


#: (case id, (tokens, rows, kv_lora_rank, rope_dim), _mla_case options): the cases both MLA writes run.
_MLA_LAYOUT_CASES = (
    ("one_token_deepseek", (1, 64, DEEPSEEK_RANK, DEEPSEEK_ROPE), {}),
    # shuffled distinct ids into a larger cache: rows not named stay as they were (the whole buffer compared)
    ("scattered_deepseek_int32", (37, 300, DEEPSEEK_RANK, DEEPSEEK_ROPE), {}),
    ("int64_loc_deepseek", (20, 50, DEEPSEEK_RANK, DEEPSEEK_ROPE), {"loc_dtype": torch.int64}),
    ("small_rank_24_rope_8", (9, 40, 24, 8), {}),
    # widths off every power of two and block size: masks of both parts, rope starting mid-vector
    ("odd_rank_37_rope_3", (6, 30, 37, 3), {}),
    # wider than one 1024-element block: each part is copied in several blocks
    ("wide_parts_1500_1100", (3, 8, 1500, 1100), {}),
    ("empty", (0, 16, DEEPSEEK_RANK, DEEPSEEK_ROPE), {}),
    # latent and rope sliced from one projection output: a row stride that is not their width
    ("latent_rope_of_one_projection", (13, 100, DEEPSEEK_RANK, DEEPSEEK_ROPE), {"fused_projection": 1536}),
    ("latent_in_wider_rows_small", (7, 40, 24, 8), {"latent_pad": 5}),
    ("strided_buffer_rows", (13, 100, DEEPSEEK_RANK, DEEPSEEK_ROPE), {"buffer_row_pad": 64}),
    # no unit stride along the row: only rows without the latent_rope:rows tag (the reference) serve it
    ("latent_rope_column_major", (5, 20, 24, 8), {"column_major": True}),
    # loc with a non-unit stride: a kernel reading it as contiguous writes slots loc never names.
    ("loc_column_of_pairs", (7, 60, DEEPSEEK_RANK, DEEPSEEK_ROPE), {"loc_view": "column"}),
    ("loc_every_other_int64", (6, 60, 24, 8), {"loc_view": "every_other", "loc_dtype": torch.int64}),
    # negative slots are padding: those tokens are not written by any row.
    ("padding_slots", (10, 60, DEEPSEEK_RANK, DEEPSEEK_ROPE), {"padding": True}),
)

MLA_CASES = tuple(Case(case_id, _mla_case(*dims, **options)) for case_id, dims, options in _MLA_LAYOUT_CASES) + (
    Case("int64_offsets_2pow31", _mla_large_offsets(fp8=False), gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# kvcache.update_mla_buffer_fp8 (an e4m3 latent cache, one per-tensor scale; whole buffer compared)
# ---------------------------------------------------------------------------


def _mla_fp8_case(
    tokens, rows, kv_lora_rank, rope_dim, *, value_scale=1.0, scale=0.03, scale_view=False, buffer_row_pad=0, **layout
):
    """As _mla_case (`layout`: its loc and stride options) into random e4m3 rows (buffer_row_pad: in wider
    rows), inputs times value_scale."""
    base = _mla_case(tokens, rows, kv_lora_rank, rope_dim, **layout)

    def make(dtype, device, generator):
        (latent, rope, loc, _), shape, tags = base(dtype, device, generator)
        latent.mul_(value_scale)
        rope.mul_(value_scale)
        buffer = _random_e4m3(rows, kv_lora_rank + rope_dim, buffer_row_pad, device, generator)
        return (latent, rope, loc, buffer) + _scale_tensors((scale,), scale_view, device), shape, tags

    return make


def update_mla_buffer_fp8_oracle(latent, rope, loc, buffer, scale):
    """float64 quotients; the cast to e4m3 is the only rounding."""
    quantized = (torch.cat((latent, rope), dim=1).double().cpu() / scale.item()).clamp(-448.0, 448.0)
    return update_kv_buffer_oracle(quantized.to(torch.float8_e4m3fn), loc, buffer)


MLA_FP8_CASES = tuple(
    Case(case_id, _mla_fp8_case(*dims, **options)) for case_id, dims, options in _MLA_LAYOUT_CASES
) + (
    # |x / scale| far past 448 (clamped to +-448) and far below e4m3's smallest normal (subnormals, zeros).
    Case("saturating_values", _mla_fp8_case(11, 30, DEEPSEEK_RANK, DEEPSEEK_ROPE, value_scale=200.0)),
    Case("subnormal_values", _mla_fp8_case(11, 30, DEEPSEEK_RANK, DEEPSEEK_ROPE, value_scale=1e-3)),
    Case("scale_is_a_view_into_a_table", _mla_fp8_case(5, 40, 24, 8, scale_view=True)),
    Case("int64_offsets_2pow31", _mla_large_offsets(fp8=True), gpu_only=True, dtypes=frozenset({"bf16"})),
)


CASES = {
    "kvcache.update_kv_buffer": KV_CASES,
    "kvcache.update_kv_buffer_fp8": KV_FP8_CASES,
    "kvcache.update_mla_buffer": MLA_CASES,
    "kvcache.update_mla_buffer_fp8": MLA_FP8_CASES,
}
ORACLES = {
    "kvcache.update_kv_buffer": update_kv_buffer_oracle,
    "kvcache.update_kv_buffer_fp8": update_kv_buffer_fp8_oracle,
    "kvcache.update_mla_buffer": update_mla_buffer_oracle,
    "kvcache.update_mla_buffer_fp8": update_mla_buffer_fp8_oracle,
}
TOLERANCES = {
    # The fp8 KV writes: the same single rounding (x / scale cast to e4m3) as the quantization ops.
    **{
        (op, dtype): (2.0**-9, 0.125)
        for op in ("kvcache.update_kv_buffer_fp8", "kvcache.update_mla_buffer_fp8")
        for dtype in ("fp32", "fp16", "bf16")
    },
    # The plain writes copy: bitwise.
    **{
        (op, dtype): (0.0, 0.0)
        for op in ("kvcache.update_kv_buffer", "kvcache.update_mla_buffer")
        for dtype in ("fp32", "fp16", "bf16")
    },
}
