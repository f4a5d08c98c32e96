"""Parity cases per op: inputs, the layout tags they provide, and a float64 oracle.

Every row of an op runs every case its conditions admit. Non-reference rows
are compared with the op's reference row; the reference row itself is
compared with a float64 oracle (so a broken reference cannot hide).

A case builds fresh random inputs from a seeded generator (never zeros: they
hide unwritten outputs). `gpu_only` cases need more memory than the CPU
interpreter can process in reasonable time (int64-offset cases past 2**31
elements).
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch

from rapid_llm.kernels.ops.checks import rows_view_ok

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@attrs.frozen
class Case:
    id: str
    make: Callable  # (dtype, device, generator) -> (args tuple, shape dims dict, layout frozenset)
    gpu_only: bool = False
    dtypes: frozenset = frozenset({"fp32", "fp16", "bf16"})


def _randn(shape, dtype, device, generator, scale=1.0):
    return (torch.randn(shape, generator=generator, dtype=torch.float32) * scale).to(dtype).to(device)


# ---------------------------------------------------------------------------
# norm.rms_norm
# ---------------------------------------------------------------------------


def _rms_case(shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0):
    def make(dtype, device, generator):
        hidden = shape[-1]
        if row_pad:
            # rows of a wider buffer: row stride hidden + row_pad (layout x:rows still holds)
            wide = _randn((*shape[:-1], hidden + row_pad), dtype, device, generator, scale)
            x = wide[..., :hidden]
        else:
            x = _randn(shape, dtype, device, generator, scale)
        weight = _randn((hidden,), torch.float32 if weight_fp32 else dtype, device, generator)
        num_tokens = x.numel() // hidden
        layout = frozenset({"x:rows"}) if rows_view_ok(x) else frozenset()
        return (x, weight, eps), {"num_tokens": num_tokens, "hidden": hidden}, layout
    return make


def _rms_large_offsets(dtype, device, generator):
    """More than 2**31 elements: row offsets need int64 arithmetic in the kernel."""
    hidden = 4096
    rows = (1 << 31) // hidden + 7
    x = torch.empty((rows, hidden), dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    weight = _randn((hidden,), dtype, device, generator)
    return (x, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, frozenset({"x:rows"})


def _rms_transposed(dtype, device, generator):
    """Hidden not contiguous: no row may claim layout x:rows (only the reference serves it)."""
    x = _randn((64, 6), dtype, device, generator).t()
    weight = _randn((64,), dtype, device, generator)
    return (x, weight, 1e-6), {"num_tokens": 6, "hidden": 64}, frozenset()


def rms_norm_oracle(x, weight, eps):
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * weight.double()
    return y.to(x.dtype)


RMS_NORM_CASES = (
    Case("one_token", _rms_case((1, 4096))),
    Case("hidden_5", _rms_case((3, 5))),
    Case("hidden_1000", _rms_case((7, 1000))),
    Case("hidden_5120_3d", _rms_case((2, 3, 5120))),
    Case("packed_rows_tail", _rms_case((37, 128))),
    Case("wide_rows_two_pass", _rms_case((3, 20000))),
    Case("empty_batch", _rms_case((0, 256))),
    Case("large_magnitudes", _rms_case((5, 2048), scale=1e3)),
    Case("tiny_values_eps_dominates", _rms_case((5, 512), scale=1e-4, eps=1e-5)),
    Case("weight_fp32", _rms_case((9, 768), weight_fp32=True)),
    Case("strided_rows", _rms_case((11, 1024), row_pad=64)),
    Case("hidden_not_contiguous", _rms_transposed),
    Case("int64_offsets_2pow31", _rms_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# norm.fused_add_rms_norm (in place: every case returns (x, residual) written)
# ---------------------------------------------------------------------------


def _fused_case(shape, *, scale=1.0, eps=1e-6, weight_fp32=False, row_pad=0):
    def make(dtype, device, generator):
        hidden = shape[-1]

        def tensor():
            if row_pad:
                wide = _randn((*shape[:-1], hidden + row_pad), dtype, device, generator, scale)
                return wide[..., :hidden]
            return _randn(shape, dtype, device, generator, scale)

        x, residual = tensor(), tensor()
        weight = _randn((hidden,), torch.float32 if weight_fp32 else dtype, device, generator)
        layout = frozenset(tag for tag, t in (("x:rows", x), ("residual:rows", residual)) if rows_view_ok(t))
        return (x, residual, weight, eps), {"num_tokens": x.numel() // hidden, "hidden": hidden}, layout
    return make


def _fused_large_offsets(dtype, device, generator):
    """More than 2**31 elements in each of x and residual: int64 row offsets."""
    hidden = 4096
    rows = (1 << 31) // hidden + 7
    seeded = torch.Generator(device=device).manual_seed(int(generator.initial_seed()))
    x = torch.empty((rows, hidden), dtype=dtype, device=device).normal_(generator=seeded)
    residual = torch.empty((rows, hidden), dtype=dtype, device=device).normal_(generator=seeded)
    weight = _randn((hidden,), dtype, device, generator)
    return (x, residual, weight, 1e-6), {"num_tokens": rows, "hidden": hidden}, frozenset({"x:rows", "residual:rows"})


def fused_add_rms_norm_oracle(x, residual, weight, eps):
    stored = (residual.double() + x.double()).to(residual.dtype)
    return rms_norm_oracle(stored, weight, eps), stored


FUSED_ADD_RMS_NORM_CASES = (
    Case("one_token", _fused_case((1, 4096))),
    Case("hidden_5", _fused_case((3, 5))),
    Case("hidden_1000", _fused_case((7, 1000))),
    Case("hidden_5120_3d", _fused_case((2, 3, 5120))),
    Case("packed_rows_tail", _fused_case((37, 128))),
    Case("wide_rows_two_pass", _fused_case((3, 20000))),
    Case("empty_batch", _fused_case((0, 256))),
    Case("large_magnitudes", _fused_case((5, 2048), scale=1e3)),
    Case("weight_fp32", _fused_case((9, 768), weight_fp32=True)),
    Case("strided_rows", _fused_case((11, 1024), row_pad=64)),
    Case("int64_offsets_2pow31", _fused_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# elementwise.scale
# ---------------------------------------------------------------------------


def _scale_case(shape, factor, *, scale=1.0, transpose=False):
    def make(dtype, device, generator):
        x = _randn(shape, dtype, device, generator, scale)
        if transpose:
            x = x.t()
        layout = frozenset({"x:contiguous"}) if x.is_contiguous() else frozenset()
        return (x, factor), {"num_elements": x.numel()}, layout
    return make


def _scale_large_offsets(dtype, device, generator):
    numel = (1 << 31) + 4099
    x = torch.empty(numel, dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    return (x, 0.75), {"num_elements": numel}, frozenset({"x:contiguous"})


def scale_oracle(x, factor):
    """torch's rule: factor rounded to fp32, exact product (fits in fp64) rounded to fp32, then to x's dtype."""
    factor32 = torch.tensor(factor, dtype=torch.float32).double()
    return (x.double() * factor32).float().to(x.dtype)


SCALE_CASES = (
    Case("one_element", _scale_case((1,), 0.5)),
    Case("tail_1023", _scale_case((1023,), -3.0)),
    Case("three_d_odd", _scale_case((3, 5, 7), 1e-3)),
    Case("empty", _scale_case((0,), 2.0)),
    Case("many_blocks_with_tail", _scale_case((16387,), 0.37)),
    Case("zero_factor", _scale_case((257,), 0.0)),
    Case("large_magnitudes_overflow", _scale_case((513,), 4.0, scale=2e4)),
    Case("non_contiguous", _scale_case((33, 65), 1.5, transpose=True)),
    Case("int64_offsets_2pow31", _scale_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)

# ---------------------------------------------------------------------------
# activation.silu_and_mul / activation.gelu_tanh_and_mul (x: [..., 2d] -> [..., d])
# ---------------------------------------------------------------------------


def _gated_case(shape, *, scale=1.0, row_pad=0, with_out=False):
    def make(dtype, device, generator):
        width = shape[-1]
        if row_pad:
            x = _randn((*shape[:-1], width + row_pad), dtype, device, generator, scale)[..., :width]
        else:
            x = _randn(shape, dtype, device, generator, scale)
        out = None
        if with_out:
            # a caller's buffer with a row stride of its own (rows of a wider tensor)
            out = torch.full((*shape[:-1], width // 2 + 8), float("nan"), dtype=dtype, device=device)[..., : width // 2]
        layout = frozenset(tag for tag, ok in (("x:rows", rows_view_ok(x)),
                                               ("out:rows", out is None or rows_view_ok(out))) if ok)
        return (x, out), {"num_tokens": x.numel() // width, "intermediate": width // 2}, layout
    return make


def _gated_large_offsets(dtype, device, generator):
    """More than 2**31 elements in x: int64 row offsets."""
    width = 2 * 4096
    rows = (1 << 31) // width + 5
    x = torch.empty((rows, width), dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    return (x, None), {"num_tokens": rows, "intermediate": width // 2}, frozenset({"x:rows", "out:rows"})


def _gated_oracle(activation):
    def oracle(x, out):
        d = x.shape[-1] // 2
        return (activation(x[..., :d].double()) * x[..., d:].double()).to(x.dtype)
    return oracle


def _silu64(gate):
    return gate * torch.sigmoid(gate)


def _gelu_tanh64(gate):
    return 0.5 * gate * (1.0 + torch.tanh(0.7978845608028654 * (gate + 0.044715 * gate.pow(3))))


GATED_CASES = (
    Case("one_token", _gated_case((1, 2 * 4096))),
    Case("odd_d_5", _gated_case((3, 2 * 5))),
    Case("d_1000_3d", _gated_case((2, 3, 2 * 1000))),
    Case("two_column_blocks_with_tail", _gated_case((2, 2 * 1500))),
    Case("empty_batch", _gated_case((0, 2 * 128))),
    Case("saturating_gates", _gated_case((4, 2 * 768), scale=30.0)),
    Case("strided_rows", _gated_case((5, 2 * 512), row_pad=32)),
    Case("caller_out_strided", _gated_case((6, 2 * 384), with_out=True)),
    Case("int64_offsets_2pow31", _gated_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# embedding.vocab_embedding
# ---------------------------------------------------------------------------


def _embedding_case(ids_shape, rows, hidden, *, vocab_start=0, vocab_end=None, id_range=None,
                    ids_dtype=torch.int64, row_pad=0):
    def make(dtype, device, generator):
        low, high = id_range or (vocab_start, vocab_start + rows)
        ids = torch.randint(low, high, ids_shape, generator=generator, dtype=torch.int64).to(ids_dtype).to(device)
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
    Case("shard_with_padding_rows", _embedding_case((40,), 416, 96, vocab_start=300, vocab_end=700,
                                                    id_range=(0, 1000))),
    Case("empty_ids", _embedding_case((0,), 100, 64)),
    Case("strided_table_rows", _embedding_case((17,), 300, 256, row_pad=32)),
    Case("int64_offsets_2pow31", _embedding_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# embedding.rotary (in place on q and k; both compared)
# ---------------------------------------------------------------------------


def _cos_sin_cache(max_position, rotary_dim, dtype, device, base=10000.0):
    inverse = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inverse[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype).to(device)


def _rotary_case(tokens, q_heads, k_heads, head_dim, *, rotary_dim=None, is_neox=True, fused_qkv=False,
                 cache_in_q_dtype=False, positions_dtype=torch.int64, max_position=4096):
    def make(dtype, device, generator):
        width_q, width_k = q_heads * head_dim, k_heads * head_dim
        if fused_qkv:
            qkv = _randn((tokens, width_q + 2 * width_k), dtype, device, generator)
            q, k = qkv[:, :width_q], qkv[:, width_q:width_q + width_k]
        else:
            q, k = _randn((tokens, width_q), dtype, device, generator), _randn((tokens, width_k), dtype, device, generator)
        cache = _cos_sin_cache(max_position, rotary_dim or head_dim, dtype if cache_in_q_dtype else torch.float32,
                               device)
        positions = torch.randint(0, max_position, (tokens,), generator=generator).to(positions_dtype).to(device)
        shape = {"num_tokens": tokens, "num_q_heads": q_heads, "num_kv_heads": k_heads, "head_dim": head_dim}
        return (positions, q, k, head_dim, cache, is_neox), shape, frozenset({"qk:rows"})
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
    return (positions, q, k, head_dim, _cos_sin_cache(8192, head_dim, torch.float32, device), True), shape, \
        frozenset({"qk:rows"})


def rotary_oracle(positions, q, k, head_dim, cache, is_neox):
    rotary_dim = cache.shape[1]
    half = rotary_dim // 2
    cos, sin = cache[positions.long()].double().split(half, dim=-1)
    outs = []
    for tensor in (q, k):
        heads = tensor.double().view(tensor.shape[0], tensor.shape[1] // head_dim, head_dim).clone()
        rotated = heads[..., :rotary_dim]
        if is_neox:
            x1, x2 = rotated[..., :half], rotated[..., half:]
            result = torch.cat((x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]), -1)
        else:
            x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
            result = torch.stack((x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]),
                                 -1).flatten(-2)
        heads[..., :rotary_dim] = result
        outs.append(heads.view(tensor.shape).to(tensor.dtype))
    return tuple(outs)


ROTARY_CASES = (
    Case("neox_gqa", _rotary_case(5, 4, 2, 64)),
    Case("gptj_gqa", _rotary_case(5, 4, 2, 64, is_neox=False)),
    Case("neox_partial_rotary", _rotary_case(6, 3, 1, 64, rotary_dim=32)),
    Case("gptj_partial_rotary", _rotary_case(6, 3, 1, 64, rotary_dim=16, is_neox=False)),
    Case("llama_heads_fused_qkv_views", _rotary_case(7, 32, 8, 128, fused_qkv=True)),
    Case("cache_in_q_dtype_int32_positions", _rotary_case(4, 2, 2, 128, cache_in_q_dtype=True,
                                                          positions_dtype=torch.int32)),
    Case("one_token", _rotary_case(1, 8, 1, 128)),
    Case("empty", _rotary_case(0, 4, 2, 64)),
    Case("int64_offsets_2pow31", _rotary_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer (in place: the whole buffer is compared, untouched rows included)
# ---------------------------------------------------------------------------


def _packed(t):
    return (t.shape[2] == 1 or t.stride(2) == 1) and (t.shape[1] == 1 or t.stride(1) == t.shape[2])


def _kv_case(tokens, rows, heads, head_dim, *, loc_dtype=torch.int32, kv_token_pad=0, buffer_row_pad=0):
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
        out[row] = kv[token]
    return out


KV_CASES = (
    Case("one_token", _kv_case(1, 64, 16, 128)),
    Case("scattered_subset_int32", _kv_case(37, 300, 16, 128)),
    Case("int64_loc_gqa4", _kv_case(20, 50, 8, 128, loc_dtype=torch.int64)),
    Case("odd_head_dim", _kv_case(9, 40, 2, 72)),
    Case("empty", _kv_case(0, 16, 4, 64)),
    Case("strided_kv_tokens", _kv_case(13, 100, 8, 64, kv_token_pad=128)),
    Case("strided_buffer_rows", _kv_case(13, 100, 8, 64, buffer_row_pad=64)),
    Case("int64_offsets_2pow31", _kv_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer_fp8 (an e4m3 buffer, per-tensor K and V scales; whole buffer compared)
# ---------------------------------------------------------------------------


def _kv_fp8_case(tokens, rows, heads, head_dim, *, kv_scale=1.0, k_scale=0.05, v_scale=0.02, loc_dtype=torch.int32,
                 kv_token_pad=0):
    base = _kv_case(tokens, rows, heads, head_dim, loc_dtype=loc_dtype, kv_token_pad=kv_token_pad)

    def make(dtype, device, generator):
        (kv, loc, buffer), shape, layout = base(dtype, device, generator)
        kv.mul_(kv_scale)
        # Untouched rows hold arbitrary earlier values: random bytes, NaN encodings (0x7f/0xff) excluded.
        raw = torch.randint(0, 255, buffer.shape, generator=generator, dtype=torch.int32)
        raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw).to(torch.uint8)
        fp8_buffer = raw.view(torch.float8_e4m3fn).to(device)
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
    out = buffer.clone()
    half = kv.shape[1] // 2
    scales = torch.tensor([k_scale.item()] * half + [v_scale.item()] * half, dtype=torch.float64)[:, None]
    quantized = (kv.double().cpu() / scales).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    for token, row in enumerate(loc.tolist()):
        out[row] = quantized[token].to(out.device)
    return out


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
)


# ---------------------------------------------------------------------------
# quantization.per_token_fp8 / per_token_group_fp8 (outputs: e4m3 values, fp32 scales)
# ---------------------------------------------------------------------------


def _quant_case(shape, *, scale=1.0, zero_rows=(), group_size=None, column_major=False, outlier=None):
    def make(dtype, device, generator):
        x = _randn(shape, dtype, device, generator, scale)
        for row in zero_rows:
            x[row] = 0
        if outlier is not None and shape[0]:
            x[:, ::97] = outlier  # one (or more) per group of >= 97 columns
        args = (x,) if group_size is None else (x, group_size, column_major)
        return args, {"num_tokens": shape[0], "hidden": shape[1]}, frozenset({"x:rows"})
    return make


def _fp8_oracle(x64, group):
    """float64 scales and quotients; the cast to e4m3 is the only rounding."""
    tokens, hidden = x64.shape
    groups = x64.view(tokens, hidden // group, group)
    scale = groups.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
    q = (groups / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(tokens, hidden)
    return q, scale.view(tokens, hidden // group).float()


def per_token_fp8_oracle(x):
    q, scale = _fp8_oracle(x.double(), x.shape[1])
    return q, scale


def per_token_group_fp8_oracle(x, group_size, column_major_scales):
    return _fp8_oracle(x.double(), group_size)


PER_TOKEN_FP8_CASES = (
    Case("one_token", _quant_case((1, 4096))),
    Case("odd_hidden", _quant_case((5, 1000))),
    Case("zero_rows_stay_finite", _quant_case((4, 256), zero_rows=(0, 2))),
    # 1e4 * randn stays inside fp16's range (65504): non-finite x is outside the contract.
    Case("large_magnitudes", _quant_case((3, 512), scale=1e4)),
    Case("empty", _quant_case((0, 128))),
    Case("hidden_5120_tail_tokens", _quant_case((17, 5120))),
    Case("wide_rows_two_pass", _quant_case((3, 20000))),
    # One huge value per row: the rest of the row lands in e4m3's subnormal range, or flushes to zero.
    Case("outliers_push_rest_subnormal", _quant_case((6, 1024), outlier=1e4)),
)
PER_TOKEN_GROUP_FP8_CASES = (
    Case("one_token_g128", _quant_case((1, 4096), group_size=128)),
    Case("groups_of_64", _quant_case((7, 512), group_size=64)),
    Case("zero_rows_stay_finite", _quant_case((4, 256), zero_rows=(1,), group_size=128)),
    Case("column_major_scales_unaligned_tokens", _quant_case((5, 384), group_size=128, column_major=True)),
    Case("large_magnitudes", _quant_case((3, 512), scale=1e4, group_size=128)),
    Case("deepseek_7168_column_major", _quant_case((33, 7168), group_size=128, column_major=True)),
    Case("groups_of_32_odd_tokens", _quant_case((9, 96), group_size=32)),
    Case("empty_column_major", _quant_case((0, 256), group_size=128, column_major=True)),
    Case("outliers_push_rest_subnormal", _quant_case((5, 1024), group_size=128, outlier=1e4)),
)


CASES = {"norm.rms_norm": RMS_NORM_CASES, "norm.fused_add_rms_norm": FUSED_ADD_RMS_NORM_CASES,
         "elementwise.scale": SCALE_CASES, "activation.silu_and_mul": GATED_CASES,
         "activation.gelu_tanh_and_mul": GATED_CASES, "embedding.vocab_embedding": EMBEDDING_CASES,
         "kvcache.update_kv_buffer": KV_CASES, "kvcache.update_kv_buffer_fp8": KV_FP8_CASES,
         "embedding.rotary": ROTARY_CASES,
         "quantization.per_token_fp8": PER_TOKEN_FP8_CASES,
         "quantization.per_token_group_fp8": PER_TOKEN_GROUP_FP8_CASES}
ORACLES = {"norm.rms_norm": rms_norm_oracle, "norm.fused_add_rms_norm": fused_add_rms_norm_oracle,
           "elementwise.scale": scale_oracle, "activation.silu_and_mul": _gated_oracle(_silu64),
           "activation.gelu_tanh_and_mul": _gated_oracle(_gelu_tanh64),
           "embedding.vocab_embedding": vocab_embedding_oracle, "kvcache.update_kv_buffer": update_kv_buffer_oracle,
           "kvcache.update_kv_buffer_fp8": update_kv_buffer_fp8_oracle,
           "embedding.rotary": rotary_oracle, "quantization.per_token_fp8": per_token_fp8_oracle,
           "quantization.per_token_group_fp8": per_token_group_fp8_oracle}
