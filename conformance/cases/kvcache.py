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


def _kv_case(tokens, rows, heads, head_dim, *, loc_dtype=torch.int32, kv_token_pad=0, buffer_row_pad=0,
             loc_view=None, padding=False):
    def make(dtype, device, generator):
        width = heads * head_dim
        kv = _randn((tokens, width + kv_token_pad), dtype, device, generator)[:, :width].view(tokens, heads, head_dim) \
            if kv_token_pad else _randn((tokens, heads, head_dim), dtype, device, generator)
        if buffer_row_pad:
            buffer = _randn((rows, width + buffer_row_pad), dtype, device, generator)[:, :width]
            buffer = buffer.view(rows, heads, head_dim)
        else:
            buffer = _randn((rows, heads, head_dim), dtype, device, generator)
        loc = torch.randperm(rows, generator=generator)[:tokens].to(loc_dtype).to(device)  # no repeats, any order
        if padding:
            loc = with_padding(loc)
        loc = index_view(loc, loc_view)
        layout = frozenset(tag for tag, t in (("kv:rows", kv), ("buffer:rows", buffer)) if _packed(t))
        return (kv, loc, buffer), {"num_tokens": tokens, "num_kv_heads": heads // 2, "head_dim": head_dim}, layout
    return make


def _kv_large_offsets(dtype, device, generator):
    """A buffer past 2**31 elements; tokens land in its last rows and elsewhere."""
    heads, head_dim = 16, 128
    rows = (1 << 31) // (heads * head_dim) + 64
    buffer = torch.empty((rows, heads, head_dim), dtype=dtype, device=device)
    buffer.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    loc = torch.cat([torch.arange(rows - 32, rows), torch.randperm(rows - 32, generator=generator)[:32]]).to(device)
    kv = _randn((64, heads, head_dim), dtype, device, generator)
    return (kv, loc.to(torch.int32), buffer), {"num_tokens": 64, "num_kv_heads": heads // 2, "head_dim": head_dim}, \
        frozenset({"kv:rows", "buffer:rows"})


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


def _kv_fp8_case(tokens, rows, heads, head_dim, *, kv_scale=1.0, k_scale=0.05, v_scale=0.02, loc_dtype=torch.int32,
                 kv_token_pad=0, loc_view=None, padding=False, scale_views=False, buffer_row_pad=0):
    base = _kv_case(tokens, rows, heads, head_dim, loc_dtype=loc_dtype, kv_token_pad=kv_token_pad,
                    loc_view=loc_view, padding=padding)

    def make(dtype, device, generator):
        (kv, loc, buffer), shape, layout = base(dtype, device, generator)
        kv.mul_(kv_scale)
        # Untouched rows hold arbitrary earlier values: random bytes, NaN encodings (0x7f/0xff) excluded.
        rows_, heads_, head_dim_ = buffer.shape
        raw = torch.randint(0, 255, (rows_, heads_ * head_dim_ + buffer_row_pad), generator=generator,
                            dtype=torch.int32)
        raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw).to(torch.uint8)
        # buffer_row_pad: the buffer's rows inside wider rows (a row stride of its own; buffer:rows holds)
        fp8_buffer = raw.view(torch.float8_e4m3fn).to(device)[:, :heads_ * head_dim_].view(rows_, heads_, head_dim_)
        if scale_views:
            # the scales as elements of one tensor (an engine's per-layer scale table): offset views
            table = torch.tensor([9.0, k_scale, 7.0, v_scale], device=device)
            scales = (table[1:2], table[3:4])
        else:
            scales = (torch.tensor([k_scale], device=device), torch.tensor([v_scale], device=device))
        return (kv, loc, fp8_buffer) + scales, shape, layout
    return make


def _kv_fp8_large_offsets(dtype, device, generator):
    """An fp8 buffer just past 2**31 elements (2 GiB); tokens land in its last rows and elsewhere."""
    heads, head_dim = 16, 128
    rows = (1 << 31) // (heads * head_dim) + 64
    raw = torch.empty((rows, heads, head_dim), dtype=torch.uint8, device=device)
    raw.random_(0, 0x7F, generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    loc = torch.cat([torch.arange(rows - 32, rows), torch.randperm(rows - 32, generator=generator)[:32]]).to(device)
    kv = _randn((64, heads, head_dim), dtype, device, generator)
    scales = torch.tensor([0.03], device=device), torch.tensor([0.01], device=device)
    return (kv, loc.to(torch.int32), raw.view(torch.float8_e4m3fn)) + scales, \
        {"num_tokens": 64, "num_kv_heads": heads // 2, "head_dim": head_dim}, frozenset({"kv:rows", "buffer:rows"})


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


CASES = {"kvcache.update_kv_buffer": KV_CASES, "kvcache.update_kv_buffer_fp8": KV_FP8_CASES}
ORACLES = {"kvcache.update_kv_buffer": update_kv_buffer_oracle, "kvcache.update_kv_buffer_fp8": update_kv_buffer_fp8_oracle}
TOLERANCES = {
    # The fp8 KV write: the same single rounding (x / scale cast to e4m3) as the quantization ops.
    **{("kvcache.update_kv_buffer_fp8", dtype): (2.0 ** -9, 0.125) for dtype in ("fp32", "fp16", "bf16")},
    ("kvcache.update_kv_buffer", "fp32"): (0.0, 0.0),
    ("kvcache.update_kv_buffer", "fp16"): (0.0, 0.0),
    ("kvcache.update_kv_buffer", "bf16"): (0.0, 0.0),
}
