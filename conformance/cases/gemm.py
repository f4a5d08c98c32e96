"""Parity cases of the gemm family: gemm.mm (float GEMM, x @ w.T + bias), gemm.w8a16_mm (int8 weights with
one scale per output channel), gemm.w4a16_mm (GPTQ / AWQ int4 weights) and the block-scaled fp8 GEMMs (dense, m-grouped contiguous, m-grouped masked).

gemm.mm inputs: x ~ N(0, 1), w ~ N(0, 1/K), bias ~ N(0, 1), so outputs are ~N(0, 1) (N(0, 2) with the
bias) at every K; placed like the fp8 cases' (rows of a wider buffer, column-major storage, every other
element, an offset start), filled elsewhere with junk. Cases without x:rows (a non-unit stride along K)
or w:rows (w stored transposed) are served by the reference and cuBLAS only; the native rows are skipped
with the reason.

gemm.w8a16_mm inputs: x ~ N(0, 1) and bias ~ N(0, 1) as gemm.mm's; the weight w ~ N(0, 1/K) quantized on
the CPU the compressed-tensors W8A16 channel-wise way: scale[n] = absmax(w[n]) / 127, w_q = round(w / scale)
clamped to [-127, 127] (int8), the scale stored in fp32 or x's dtype, as [N] or [N, 1]; so outputs are
~N(0, 1) again. Placed as gemm.mm's (the int8 junk is 3, a scale's junk 3.0: ~1000x a real scale).

gemm.w4a16_mm inputs: x ~ N(0, 1), bias ~ N(0, 1); w ~ N(0, 1/K) [K, N] quantized here (not with the
library's code) the GPTQ / AWQ min-max way per group of g along K and column: scale = (max - min) / 15 stored
in its dtype first, zero = round(-min / scale), q = clamp(round(w / scale) + zero, 0, 15); packed by this
module's own packers, written from the checkpoint formats (GPTQ v1: 8 values along K, value i at bits 4i, zeros
along N stored minus 1; AWQ: 8 columns a word in AutoAWQ's order [0, 2, 4, 6, 1, 3, 5, 7]). The oracle unpacks
them with its own unpacker (not the reference row's) and multiplies in float64.

fp8 inputs are seeded random data quantized the DeepSeek-V3 way: activations
x ~ N(0, 1) in 1x128 groups, weights w ~ N(0, 1/K) in 128x128 blocks, each
scale = max(absmax, 1e-4) / 448 (positive, finite), so outputs are ~N(0, 1).
Each case builds its tensors on the target device directly in the layout it
tests (a view of a wider buffer, column-major storage, the TMA-aligned
column-major scales of quantization.per_token_group_fp8, every other
element, an offset start), filled elsewhere with junk. The layout tags a case
reports are the ones the op's check reports for its arguments, so a case
plans exactly as the public op would: DeepGEMM rows run the cases whose
layouts they accept and are skipped (with the reason) on the others.

OUTPUT_MASKS: the grouped ops leave some output rows unspecified (padding
rows; rows past masked_m): parity compares the specified elements only.
ACCUMULATION_BOUNDS: the fp8 tensor-core accumulation term of the contract's
accuracy (see TOLERANCES below), per output element.
See conformance/cases/__init__.py for what a case is.
"""

from __future__ import annotations

import math

import torch

from conformance.cases.case import Case, index_view
from rapid_llm.kernels.ops.gemm import (
    FP8_BLOCK_MM,
    FP8_GROUPED_MM_CONTIGUOUS,
    FP8_GROUPED_MM_MASKED,
    FP8_MM,
    MM,
    W4A16_MM,
    W8A16_MM,
)
from rapid_llm.kernels.ops.gemm.checks import (
    check_fp8_block_mm,
    check_fp8_mm,
    check_fp8_grouped_mm_contiguous,
    check_fp8_grouped_mm_masked,
    check_mm,
    check_w4a16_mm,
    check_w8a16_mm,
)

_FP8 = torch.float8_e4m3fn
_BLOCK = 128
_DTYPES = frozenset({"fp8_e4m3"})
_OUTPUT_FILL = float("nan")  # a given out starts as NaN: a specified element left unwritten fails parity

# ---------------------------------------------------------------------------
# Quantized inputs
# ---------------------------------------------------------------------------


def _activations(shape, generator, outlier=None):
    """(q e4m3, scale fp32 [.., K/128]) of x ~ N(0, 1) in 1x128 groups (CPU, contiguous)."""
    x = torch.randn(shape, generator=generator)
    if outlier is not None:
        x[..., ::_BLOCK] = outlier  # one per group: the rest of the group lands in e4m3's subnormals
    groups = x.unflatten(-1, (-1, _BLOCK))
    scale = groups.abs().amax(-1).clamp_min(1e-4) / 448.0
    return (groups / scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(_FP8).flatten(-2), scale


def _weights(shape, generator):
    """(q e4m3 [.., N, K], scale fp32 [.., ceil(N/128), K/128]) of w ~ N(0, 1/K) in 128x128 blocks (CPU)."""
    *lead, n, k = shape
    rows = math.ceil(n / _BLOCK) * _BLOCK
    w = torch.zeros((*lead, rows, k))
    w[..., :n, :] = torch.randn(shape, generator=generator) / math.sqrt(k)
    blocks = w.unflatten(-1, (-1, _BLOCK)).unflatten(-3, (-1, _BLOCK))  # [.., N/128, 128, K/128, 128]
    scale = blocks.abs().amax(dim=(-3, -1)).clamp_min(1e-4) / 448.0
    q = (blocks / scale[..., :, None, :, None]).clamp(-448.0, 448.0).to(_FP8)
    return q.flatten(-2).flatten(-3, -2)[..., :n, :].contiguous(), scale


def _junk(shape, dtype, device):
    return torch.full(shape, 3.0).to(dtype).to(device)


def _place(values, device, how=None):
    """`values` (CPU, contiguous) on `device`, stored the way `how` says; the other elements hold junk.

    None: contiguous. "wide:E": rows of a buffer E elements wider. "column_major": the last two dims
    stored transposed. "tma_scales": the column-major TMA-aligned scale layout (strides (1, ceil(M/4)*4)
    per group). "every_other": every other element of a twice-wider last dim. "offset": one element in.
    "rows_from:R": rows R.. of a buffer R rows taller (an offset start: the v rows of a fused qkv weight).
    "lead_gap": one junk row after each group of the second-to-last dim (3-D and up: the leading dims
    do not view as one row stride).
    """
    if how is None:
        return values.to(device)
    shape = values.shape
    if how.startswith("wide:"):
        view = _junk((*shape[:-1], shape[-1] + int(how[5:])), values.dtype, device)[..., : shape[-1]]
    elif how == "column_major":
        view = _junk((*shape[:-2], shape[-1], shape[-2]), values.dtype, device).transpose(-1, -2)
    elif how == "tma_scales":
        aligned = (shape[-2] + 3) // 4 * 4
        view = _junk((*shape[:-2], shape[-1], aligned), values.dtype, device)[..., : shape[-2]].transpose(-1, -2)
    elif how == "every_other":
        view = _junk((*shape[:-1], 2 * shape[-1]), values.dtype, device)[..., ::2]
    elif how == "offset":
        view = _junk((values.numel() + 1,), values.dtype, device)[1:].view(shape)
    elif how.startswith("rows_from:"):
        skip = int(how[10:])
        view = _junk((*shape[:-2], shape[-2] + skip, shape[-1]), values.dtype, device)[..., skip:, :]
    elif how == "lead_gap":
        view = _junk((*shape[:-2], shape[-2] + 1, shape[-1]), values.dtype, device)[..., : shape[-2], :]
    else:
        raise ValueError(f"unknown placement {how!r}")
    view.copy_(values.to(device))
    return view


def _out(shape, device, how):
    """The case's out= argument: None (allocated by the op), or NaN-filled bf16 stored as `how` says."""
    if how == "none":
        return None
    values = torch.full(shape, _OUTPUT_FILL, dtype=torch.bfloat16)
    return _place(values, device, None if how == "contiguous" else how)


# ---------------------------------------------------------------------------
# gemm.mm
# ---------------------------------------------------------------------------


def _mm_case(lead, n, k, *, bias=False, x=None, w=None, b=None):
    """x [*lead, k] @ w [n, k].T (+ bias [n]), each placed as `x`, `w`, `b` say (see _place)."""

    def make(dtype, device, generator):
        xs = torch.randn((*lead, k), generator=generator).to(dtype)
        ws = (torch.randn((n, k), generator=generator) / math.sqrt(k)).to(dtype)
        bs = torch.randn((n,), generator=generator).to(dtype) if bias else None
        args = (_place(xs, device, x), _place(ws, device, w), None if bs is None else _place(bs, device, b))
        _, layout, dims = check_mm(*args)
        return args, dict(dims), layout

    return make


MM_CASES = (
    # Token counts across the contract's buckets (1 | 2-16 | 17-128): native/mm_splitk serves m <= 16.
    # n and k are not multiples of 16 or 64: tails in N and K on every tile (K masks, clamped columns).
    Case("m1_n96_k200", _mm_case((1,), 96, 200)),
    Case("m7_n33_k65_bias", _mm_case((7,), 33, 65, bias=True)),
    Case("m16_n96_k200_bias", _mm_case((16,), 96, 200, bias=True)),
    Case("m128_n96_k200", _mm_case((128,), 96, 200)),
    Case("m128_n33_k65_bias", _mm_case((128,), 33, 65, bias=True)),
    # K = 150 is three 64-wide K steps: at BLOCK_K 64 (the interpreter's and pre-Hopper tiles; n <= 64
    # gives SPLIT_K 2 there) split-K slices of unequal length, the last one shorter.
    Case("m16_n33_k150_bias", _mm_case((16,), 33, 150, bias=True)),
    # Multiples of every tile: the unmasked K loop (EVEN_K) and whole column tiles.
    Case("m7_n128_k256_even", _mm_case((7,), 128, 256, bias=True)),
    Case("empty_m0", _mm_case((0,), 96, 200, bias=True)),
    # A contiguous empty [2, 0, K] has strides (K, K, 1): no x:rows (rows_view_ok), so the reference serves it.
    Case("empty_leading_2x0", _mm_case((2, 0), 33, 65)),
    # Leading dims [3, 5] (M = 15), bias with stride 2.
    Case("leading_3x5_strided_bias", _mm_case((3, 5), 96, 200, bias=True, b="every_other")),
    # x rows of a wider buffer (still x:rows): an odd row stride (213 elements), then 8 elements wider.
    Case("x_rows_of_wider_buffer_3x5", _mm_case((3, 5), 33, 200, bias=True, x="wide:13")),
    Case("x_rows_of_wider_buffer_m128", _mm_case((128,), 96, 65, x="wide:8")),
    # No x:rows: x with stride 2 along K, x stored transposed, leading dims without one row stride.
    Case("x_k_stride_2", _mm_case((7,), 96, 200, bias=True, x="every_other")),
    Case("x_column_major", _mm_case((16,), 33, 65, x="column_major")),
    Case("x_leading_dims_gap", _mm_case((3, 5), 33, 65, x="lead_gap")),
    # w rows of a wider [N, K + 56] buffer (a column slice of a fused weight), and rows 40.. of a taller
    # one (the v rows of a fused qkv weight: an offset start); both keep w:rows.
    Case("w_rows_of_wider_buffer", _mm_case((7,), 96, 200, bias=True, w="wide:56")),
    Case("w_row_slice_of_fused_weight", _mm_case((128,), 33, 65, w="rows_from:40")),
    # No w:rows: w = buffer.t() of a [K, N] buffer (stride (1, N)).
    Case("w_transposed_storage", _mm_case((7,), 96, 200, bias=True, w="column_major")),
    # Real projections (Llama-3-8B, Mistral-7B: hidden 4096, MLP 14336) at a 4096-token prefill and at
    # decode; GPU only (the interpreter would take hours).
    Case("prefill_m4096_n4096_k4096", _mm_case((4096,), 4096, 4096), gpu_only=True),
    Case("prefill_m4096_n14336_k4096_bias", _mm_case((4096,), 14336, 4096, bias=True), gpu_only=True),
    Case("decode_m1_n14336_k4096", _mm_case((1,), 14336, 4096), gpu_only=True),
    Case("decode_m16_n4096_k14336", _mm_case((16,), 4096, 14336), gpu_only=True),
)

# ---------------------------------------------------------------------------
# gemm.w8a16_mm
# ---------------------------------------------------------------------------

#: gemm.w8a16_mm's dtypes (its contract has no fp32).
_W8A16_DTYPES = frozenset({"fp16", "bf16"})


def _int8_weights(n, k, generator, scale_dtype):
    """(w_q int8 [n, k], scale [n] of scale_dtype) of w ~ N(0, 1/K), symmetric per output channel (CPU)."""
    w = torch.randn((n, k), generator=generator) / math.sqrt(k)
    scale = (w.abs().amax(1) / 127.0).to(scale_dtype)  # stored in its dtype first: w_q is quantized by it
    w_q = torch.round(w / scale.float().unsqueeze(1)).clamp(-127.0, 127.0).to(torch.int8)
    return w_q, scale


def _w8a16_case(lead, n, k, *, bias=False, scale="n1", scale_dtype="fp32", x=None, w=None, s=None, b=None):
    """x [*lead, k] @ (w_q [n, k] * w_scale).T (+ bias [n]); w_scale [n] (scale="n") or [n, 1] ("n1", the
    checkpoint's layout) in fp32 or x's dtype (scale_dtype="x"); each placed as `x`, `w`, `s`, `b` say."""

    def make(dtype, device, generator):
        xs = torch.randn((*lead, k), generator=generator).to(dtype)
        w_q, ss = _int8_weights(n, k, generator, torch.float32 if scale_dtype == "fp32" else dtype)
        bs = torch.randn((n,), generator=generator).to(dtype) if bias else None
        ss = ss.unsqueeze(1) if scale == "n1" else ss
        args = (
            _place(xs, device, x),
            _place(w_q, device, w),
            _place(ss, device, s),
            None if bs is None else _place(bs, device, b),
        )
        _, layout, dims = check_w8a16_mm(*args)
        return args, dict(dims), layout

    return make


def _w8a16(id, make, gpu_only=False):
    return Case(id, make, gpu_only=gpu_only, dtypes=_W8A16_DTYPES)


W8A16_MM_CASES = (
    # Token counts across the contract's buckets (1 | 2-16 | 17-128): native/w8a16_mm_splitk serves
    # m <= 16. n and k are not multiples of 16: tails in N and K on every tile. Scales: [N, 1] fp32
    # (compressed-tensors' weight_scale) unless the case says otherwise.
    _w8a16("m1_n96_k200", _w8a16_case((1,), 96, 200)),
    _w8a16("m1_n33_k65_bias", _w8a16_case((1,), 33, 65, bias=True)),
    _w8a16("m7_n33_k65_bias", _w8a16_case((7,), 33, 65, bias=True)),
    _w8a16("m7_n96_k200", _w8a16_case((7,), 96, 200)),
    _w8a16("m16_n96_k200_bias", _w8a16_case((16,), 96, 200, bias=True)),
    _w8a16("m16_n33_k65", _w8a16_case((16,), 33, 65)),
    _w8a16("m128_n96_k200", _w8a16_case((128,), 96, 200)),
    _w8a16("m128_n33_k65_bias", _w8a16_case((128,), 33, 65, bias=True)),
    # K = 150: split-K slices of unequal length at BLOCK_K 64 (see gemm.mm's case), each slice scaled.
    _w8a16("m16_n33_k150_bias", _w8a16_case((16,), 33, 150, bias=True)),
    # Multiples of every tile: the unmasked K loop (EVEN_K) and whole column tiles.
    _w8a16("m7_n128_k256_even", _w8a16_case((7,), 128, 256, bias=True)),
    # Scale shape [N] and dtype x's (fp16 or bf16: exact in fp32, converted before the multiply).
    _w8a16("scale_n_fp32_m7", _w8a16_case((7,), 96, 200, bias=True, scale="n")),
    _w8a16("scale_n_x_dtype_m16", _w8a16_case((16,), 33, 65, scale="n", scale_dtype="x")),
    _w8a16("scale_n1_x_dtype_m128", _w8a16_case((128,), 96, 200, bias=True, scale_dtype="x")),
    # Strided scales: [N] with stride 2; [N, 1] as column 0 of an [N, 3] buffer (row stride 3).
    _w8a16("scale_n_every_other", _w8a16_case((7,), 33, 65, bias=True, scale="n", s="every_other")),
    _w8a16("scale_n1_column_of_wider", _w8a16_case((16,), 96, 200, scale_dtype="x", s="wide:2")),
    _w8a16("empty_m0", _w8a16_case((0,), 96, 200, bias=True)),
    # A contiguous empty [2, 0, K]: no x:rows (rows_view_ok), so the reference serves it.
    _w8a16("empty_leading_2x0", _w8a16_case((2, 0), 33, 65)),
    # Leading dims [3, 5] (M = 15), bias with stride 2.
    _w8a16("leading_3x5_strided_bias", _w8a16_case((3, 5), 96, 200, bias=True, b="every_other")),
    # x rows of a wider buffer (still x:rows): an odd row stride (213 elements), then 8 elements wider.
    _w8a16("x_rows_of_wider_buffer_3x5", _w8a16_case((3, 5), 33, 200, bias=True, x="wide:13")),
    _w8a16("x_rows_of_wider_buffer_m128", _w8a16_case((128,), 96, 65, x="wide:8")),
    # No x:rows: x with stride 2 along K (only the reference serves it).
    _w8a16("x_k_stride_2", _w8a16_case((7,), 96, 200, bias=True, x="every_other")),
    # w_q rows of a wider [N, K + 56] buffer (a column slice of a fused weight), and rows 40.. of a taller
    # one (the v rows of a fused qkv weight: an offset start); both keep w:rows.
    _w8a16("w_rows_of_wider_buffer", _w8a16_case((7,), 96, 200, bias=True, w="wide:56")),
    _w8a16("w_row_slice_of_fused_weight", _w8a16_case((128,), 33, 65, scale="n", w="rows_from:40")),
    # No w:rows: w_q = buffer.t() of a [K, N] buffer (stride (1, N)): only the reference serves it.
    _w8a16("w_transposed_storage", _w8a16_case((7,), 96, 200, bias=True, w="column_major")),
    # Real projections (Llama-3-8B, Mistral-7B: hidden 4096, MLP 14336): the down projection at decode
    # (1 and 16 tokens: split-K's range) and a 4096-token prefill; GPU only (the interpreter would take
    # hours).
    _w8a16("decode_m1_n4096_k14336", _w8a16_case((1,), 4096, 14336), gpu_only=True),
    _w8a16("decode_m16_n4096_k14336_bias", _w8a16_case((16,), 4096, 14336, bias=True), gpu_only=True),
    _w8a16("prefill_m4096_n4096_k4096", _w8a16_case((4096,), 4096, 4096), gpu_only=True),
)

# ---------------------------------------------------------------------------
# gemm.w4a16_mm
# ---------------------------------------------------------------------------

#: AutoAWQ's packing order: nibble i of a word holds column order[i] of its 8 columns.
_AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _as_int32(words):
    """int64 words of 32 bits -> int32 with the same bits (two's complement: the top nibble's sign)."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _pack_along_k(q):
    """GPTQ's qweight: q [K, N] (0..15) -> int32 [K/8, N], q[8r + i, n] at bits 4i of word [r, n]."""
    words = torch.zeros((q.shape[0] // 8, q.shape[1]), dtype=torch.int64)
    for i in range(8):
        words |= q[i::8].long() << (4 * i)
    return _as_int32(words)


def _pack_along_n(q, order):
    """q [R, N] (0..15) -> int32 [R, N/8], column 8c + order[i] at bits 4i of word [r, c] (AWQ's order, or
    0..7 for GPTQ's zeros)."""
    words = torch.zeros((q.shape[0], q.shape[1] // 8), dtype=torch.int64)
    for i, column in enumerate(order):
        words |= q[:, column::8].long() << (4 * i)
    return _as_int32(words)


def _int4_weights(n, k, group, packing, generator, scale_dtype, symmetric=False, positive_groups=False):
    """(qweight, scales, qzeros) of w ~ N(0, 1/K) [K, N] quantized per group of `group` along K (CPU);
    positive_groups: every other group shifted above zero (its zero is 0, which GPTQ v1 cannot store)."""
    w = (torch.randn((k, n), generator=generator) / math.sqrt(k)).view(k // group, group, n)
    if positive_groups:
        w[::2] = w[::2] - w[::2].amin(1, keepdim=True)
    low, high = w.amin(1), w.amax(1)
    if symmetric:  # GPTQ sym: zero 8, scale from the larger magnitude
        scale = (torch.maximum(-low, high) / 7.5).to(scale_dtype)
        zero = torch.full_like(scale, 8.0, dtype=torch.float32)
    else:
        scale = ((high - low) / 15.0).to(scale_dtype)
        # GPTQ v1 stores zero - 1 in a nibble: zeros 1..16; AWQ stores the zero: 0..15
        zero = torch.round(-low / scale.float()).clamp(1 if packing == "gptq" else 0, 16 if packing == "gptq" else 15)
    q = torch.round(w / scale.float().unsqueeze(1)) + zero.unsqueeze(1)
    q = q.clamp(0, 15).to(torch.int64).view(k, n)
    zero = zero.to(torch.int64)
    if packing == "gptq":
        return _pack_along_k(q), scale, _pack_along_n(zero - 1, range(8))
    if packing == "gptq_v2":
        return _pack_along_k(q), scale, _pack_along_n(zero, range(8))
    return _pack_along_n(q, _AWQ_ORDER), scale, _pack_along_n(zero, _AWQ_ORDER)


def _w4a16_case(
    lead, n, k, group, packing, *, bias=False, scales="fp16", symmetric=False, positive_groups=False, x=None,
    q=None, s=None, z=None, b=None,
):  # fmt: skip
    """x [*lead, k] @ W (+ bias [n]) of a `packing` checkpoint with group size `group`; scales stored in fp16
    (what GPTQ and AWQ checkpoints hold), "fp32" or "x" (x's dtype); each tensor placed as `x`, `q`, `s`, `z`, `b`
    say."""

    def make(dtype, device, generator):
        xs = torch.randn((*lead, k), generator=generator).to(dtype)
        scale_dtype = {"fp16": torch.float16, "fp32": torch.float32, "x": dtype}[scales]
        qweight, ss, qzeros = _int4_weights(n, k, group, packing, generator, scale_dtype, symmetric, positive_groups)
        bs = torch.randn((n,), generator=generator).to(dtype) if bias else None
        args = (
            _place(xs, device, x),
            _place(qweight, device, q),
            _place(ss, device, s),
            _place(qzeros, device, z),
            group,
            packing,
            None if bs is None else _place(bs, device, b),
        )
        _, layout, dims = check_w4a16_mm(*args)
        return args, dict(dims), layout

    return make


def _w4a16(id, make, gpu_only=False):
    return Case(id, make, gpu_only=gpu_only, dtypes=_W8A16_DTYPES)


W4A16_MM_CASES = (
    # Both packings x both group sizes at token counts across the buckets (1: native/w4a16_mm_gemv; <= 16:
    # native/w4a16_mm split over K; 128 and 512: one output tile per program). N = 40 and 200 are not
    # multiples of any BLOCK_N (the last tile reads clamped words); K = 5 groups of 64 (320) or 3 of 128 (384)
    # is not a multiple of 128 or of the split: split-K slices of unequal length.
    *(
        _w4a16(
            f"{packing}_g{group}_m{m}_n{n}",
            _w4a16_case((m,), n, 5 * 64 if group == 64 else 3 * 128, group, packing, bias=m == 7),
        )
        for packing in ("gptq", "awq")
        for group in (64, 128)
        for m, n in ((1, 200), (7, 40), (16, 200), (128, 40))
    ),
    _w4a16("gptq_g128_m1_n8_k128", _w4a16_case((1,), 8, 128, 128, "gptq", bias=True)),
    # gptq_v2 (zeros as stored, 0..15): zeros of 0 in every other group, at each kernel's token counts
    *(
        _w4a16(f"gptq_v2_zero_0_g{group}_m{m}", _w4a16_case((m,), 40, 256, group, "gptq_v2", positive_groups=True))
        for m in (1, 7, 128)
        for group in (64, 128)
    ),
    _w4a16("awq_g64_m1_n40_k64_bias", _w4a16_case((1,), 40, 64, 64, "awq", bias=True)),
    _w4a16("gptq_g64_m512_n72_k192", _w4a16_case((512,), 72, 192, 64, "gptq")),
    _w4a16("awq_g128_m512_n72_k256_bias", _w4a16_case((512,), 72, 256, 128, "awq", bias=True)),
    # GPTQ symmetric (zero 8, stored 7 in every nibble), scales in fp32 and in x's dtype.
    _w4a16("gptq_sym_g128_m7", _w4a16_case((7,), 96, 256, 128, "gptq", symmetric=True)),
    _w4a16("gptq_scales_fp32_m1", _w4a16_case((1,), 96, 256, 64, "gptq", scales="fp32", bias=True)),
    _w4a16("awq_scales_x_dtype_m16", _w4a16_case((16,), 96, 256, 128, "awq", scales="x")),
    _w4a16("empty_m0", _w4a16_case((0,), 40, 128, 64, "awq", bias=True)),
    _w4a16("empty_leading_2x0", _w4a16_case((2, 0), 40, 128, 64, "gptq")),
    _w4a16("leading_3x5_strided_bias", _w4a16_case((3, 5), 40, 128, 64, "gptq", bias=True, b="every_other")),
    # Strided arguments (the kernels take every stride but x's along K): qweight rows of a wider buffer
    # (junk words 3 between), qweight stored transposed, qzeros rows from 1 of a taller buffer, scales every
    # other element, x rows of a wider buffer.
    _w4a16("gptq_qweight_wide_m1", _w4a16_case((1,), 40, 128, 64, "gptq", q="wide:3", z="rows_from:1")),
    _w4a16("awq_qweight_wide_m7", _w4a16_case((7,), 40, 128, 64, "awq", q="wide:3", s="every_other")),
    _w4a16("gptq_qweight_column_major_m16", _w4a16_case((16,), 40, 192, 64, "gptq", q="column_major", bias=True)),
    _w4a16("awq_qzeros_offset_m1", _w4a16_case((1,), 48, 256, 128, "awq", z="offset", s="wide:5")),
    _w4a16("x_rows_of_wider_buffer_3x5", _w4a16_case((3, 5), 40, 128, 128, "awq", x="wide:13")),
    # No x:rows: x with stride 2 along K (only the reference serves it).
    _w4a16("x_k_stride_2", _w4a16_case((7,), 40, 128, 64, "gptq", x="every_other")),
    # Real projections (Llama-3-8B: hidden 4096, MLP 14336) at decode and prefill, and the 8192^2 anchor; GPU
    # only (the interpreter would take hours).
    _w4a16("gptq_decode_m1_n4096_k14336", _w4a16_case((1,), 4096, 14336, 128, "gptq"), gpu_only=True),
    _w4a16("awq_decode_m1_n14336_k4096", _w4a16_case((1,), 14336, 4096, 128, "awq"), gpu_only=True),
    _w4a16("gptq_v2_decode_m1_n8192_k8192", _w4a16_case((1,), 8192, 8192, 128, "gptq_v2"), gpu_only=True),
    _w4a16("gptq_decode_m16_n8192_k8192_bias", _w4a16_case((16,), 8192, 8192, 128, "gptq", bias=True), gpu_only=True),
    _w4a16("awq_decode_m16_n4096_k14336_g64", _w4a16_case((16,), 4096, 14336, 64, "awq"), gpu_only=True),
    _w4a16("gptq_prefill_m4096_n4096_k4096", _w4a16_case((4096,), 4096, 4096, 128, "gptq"), gpu_only=True),
    _w4a16("awq_prefill_m4096_n4096_k4096_g64", _w4a16_case((4096,), 4096, 4096, 64, "awq"), gpu_only=True),
)

# ---------------------------------------------------------------------------
# gemm.fp8_block_mm
# ---------------------------------------------------------------------------


def _block_mm_case(m, n, k, *, a=None, a_scale=None, b=None, b_scale=None, out="none", outlier=None):
    def make(dtype, device, generator):
        qa, sa = _activations((m, k), generator, outlier)
        qb, sb = _weights((n, k), generator)
        args = (
            _place(qa, device, a),
            _place(sa, device, a_scale),
            _place(qb, device, b),
            _place(sb, device, b_scale),
            _out((m, n), device, out),
        )
        _, layout, dims = check_fp8_block_mm(*args)
        return args, dict(dims), layout

    return make


FP8_BLOCK_MM_CASES = (
    Case("one_token", _block_mm_case(1, 256, 256), dtypes=_DTYPES),
    # One token with every tail and stride the one-token rows handle: a half last weight block (N = 200),
    # three scale groups (K = 384, not a multiple of a 256-wide step), gapped scales both ways, strided out.
    Case(
        "one_token_tails_strided",
        _block_mm_case(1, 200, 384, a_scale="every_other", b_scale="every_other", out="wide:64"),
        dtypes=_DTYPES,
    ),
    # N % 128 == 64: the last row of weight blocks covers a half block.
    Case("tail_rows_n_tail_tma_scales", _block_mm_case(77, 320, 384, a_scale="tma_scales"), dtypes=_DTYPES),
    Case(
        "m_130_tma_scales_padded_to_132",
        _block_mm_case(130, 128, 256, a_scale="tma_scales", out="contiguous"),
        dtypes=_DTYPES,
    ),
    Case("n_not_a_multiple_of_64", _block_mm_case(5, 200, 256), dtypes=_DTYPES),
    Case("empty", _block_mm_case(0, 128, 256), dtypes=_DTYPES),
    Case("outlier_groups_subnormal_rest", _block_mm_case(9, 192, 256, outlier=1e3), dtypes=_DTYPES),
    # Strided, still what DeepGEMM accepts: 16-byte row strides, column-major weight scales.
    Case(
        "strided_tma_ready",
        _block_mm_case(
            33, 256, 384, a="wide:128", a_scale="every_other", b="wide:128", b_scale="column_major", out="wide:64"
        ),
        dtypes=_DTYPES,
    ),
    # Strided beyond DeepGEMM (reference only): 8-byte row stride, gapped weight scales, unaligned scales,
    # a stored column-major.
    Case(
        "strided_beyond_tma",
        _block_mm_case(6, 128, 256, a="wide:8", a_scale="offset", b_scale="every_other", out="wide:3"),
        dtypes=_DTYPES,
    ),
    Case("a_column_major", _block_mm_case(4, 128, 256, a="column_major", b="column_major"), dtypes=_DTYPES),
    # Prefill-sized tails: 300 rows (a partial last row tile), a half last weight block, strided operands,
    # row-major scales with a gap.
    Case(
        "prefill_tails_strided",
        _block_mm_case(
            300, 320, 384, a="wide:128", a_scale="every_other", b="wide:128", b_scale="column_major", out="wide:64"
        ),
        dtypes=_DTYPES,
    ),
    # DeepSeek-V3's projections (hidden 7168; 2112 = the fused q_a and kv_a rows of its MLA) at decode
    # (the native split-K kernel's range: 1, 16, 64 tokens, several K slices) and a 4096-token prefill
    # (many output tiles per program of the persistent kernel); GPU only (the interpreter would take hours).
    Case("decode_m1_n7168_k7168", _block_mm_case(1, 7168, 7168), dtypes=_DTYPES, gpu_only=True),
    Case(
        "decode_m16_n2112_k7168_tma_scales",
        _block_mm_case(16, 2112, 7168, a_scale="tma_scales"),
        dtypes=_DTYPES,
        gpu_only=True,
    ),
    Case("decode_m64_n7168_k7168_out", _block_mm_case(64, 7168, 7168, out="contiguous"), dtypes=_DTYPES, gpu_only=True),
    Case(
        "prefill_m4096_n7168_k7168_tma_scales",
        _block_mm_case(4096, 7168, 7168, a_scale="tma_scales"),
        dtypes=_DTYPES,
        gpu_only=True,
    ),
)

# ---------------------------------------------------------------------------
# gemm.fp8_mm
# ---------------------------------------------------------------------------


def _row_quantized(rows, k, generator, std, per_tensor):
    """(q e4m3 [rows, k], scale fp32 [rows, 1], or [1, 1] per tensor) of N(0, std^2) values, one scale per
    row (or one for all) = max(absmax, 1e-4) / 448 (CPU)."""
    x = torch.randn((rows, k), generator=generator) * std
    absmax = x.abs().amax() if per_tensor else x.abs().amax(dim=1, keepdim=True)
    scale = (absmax.clamp_min(1e-4) / 448.0).reshape(-1, 1)
    return (x / scale).clamp(-448.0, 448.0).to(_FP8), scale.reshape(1, 1) if per_tensor else scale


def _fp8_mm_case(
    m, n, k, *, a_scale_shape="m1", b_scale_shape="n1", bias=False, a=None, sa=None, b=None, sb=None, bb=None
):
    """a [m, k] with per-token scales [m, 1] ("m1"), or per tensor ("1": [1], "11": [1, 1]); b [n, k] with
    per-channel scales [n, 1] ("n1") or per tensor; bias bf16 [n] ~ N(0, 1); each placed as a, sa, b, sb, bb say."""

    def make(dtype, device, generator):
        qa, scale_a = _row_quantized(m, k, generator, 1.0, a_scale_shape != "m1")
        qb, scale_b = _row_quantized(n, k, generator, 1.0 / math.sqrt(k), b_scale_shape != "n1")
        scale_a = scale_a.reshape(1) if a_scale_shape == "1" else scale_a
        scale_b = scale_b.reshape(1) if b_scale_shape == "1" else scale_b
        bias_values = torch.randn((n,), generator=generator).to(torch.bfloat16) if bias else None
        args = (
            _place(qa, device, a),
            _place(scale_a, device, sa),
            _place(qb, device, b),
            _place(scale_b, device, sb),
            torch.bfloat16,
            None if bias_values is None else _place(bias_values, device, bb),
        )
        _, layout, dims = check_fp8_mm(*args)
        return args, dict(dims), layout

    return make


FP8_MM_CASES = (
    # Token counts across the buckets (1 | 2-16 | 17-128 | 129-256); per-token x per-channel scales unless
    # the case says otherwise.
    Case("m1_n96_k256", _fp8_mm_case(1, 96, 256), dtypes=_DTYPES),
    # N = 200: not a multiple of 16 (cuBLAS's fp8 GEMM refuses it: reference and native only); column tails.
    Case("m7_n200_k384_bias", _fp8_mm_case(7, 200, 384, bias=True), dtypes=_DTYPES),
    # K = 208: a multiple of 16 (cuBLAS serves it), not of the native kernels' BLOCK_K (masked K steps).
    Case("m16_n128_k208_k_tail", _fp8_mm_case(16, 128, 208, bias=True), dtypes=_DTYPES),
    Case("m77_n256_k512_per_tensor_a", _fp8_mm_case(77, 256, 512, a_scale_shape="1", bias=True), dtypes=_DTYPES),
    Case("m130_n256_k256_per_tensor_b", _fp8_mm_case(130, 256, 256, b_scale_shape="11"), dtypes=_DTYPES),
    Case(
        "m33_n128_k256_per_tensor_both",
        _fp8_mm_case(33, 128, 256, a_scale_shape="11", b_scale_shape="1", bias=True),
        dtypes=_DTYPES,
    ),
    Case("empty_m0", _fp8_mm_case(0, 128, 256, bias=True), dtypes=_DTYPES),
    # Strided, still a:tma / b:tma (16-byte row strides): rows of wider buffers, scales every other element
    # and a column of a wider buffer.
    Case(
        "strided_tma_ready",
        _fp8_mm_case(9, 192, 256, bias=True, a="wide:128", sa="every_other", b="wide:64", sb="wide:2"),
        dtypes=_DTYPES,
    ),
    # A strided bias (no bias:unit: cuBLAS's epilogue skipped) and weights from row 40 of a fused buffer.
    Case(
        "strided_bias_weight_row_slice",
        _fp8_mm_case(20, 128, 256, bias=True, b="rows_from:40", sb="offset", bb="every_other"),
        dtypes=_DTYPES,
    ),
    # No a:tma / b:tma: an 8-byte row stride, a stored column-major (reference only).
    Case("a_rows_8_bytes_apart", _fp8_mm_case(6, 128, 256, a="wide:8"), dtypes=_DTYPES),
    Case("column_major_operands", _fp8_mm_case(4, 128, 256, a="column_major", b="column_major"), dtypes=_DTYPES),
    # The bench's anchors: 8192^3 and decode on 8192^2 (1 and 16 tokens), and a DeepSeek-sized decode
    # at 64 tokens; GPU only (the interpreter would take hours).
    Case("prefill_m8192_n8192_k8192", _fp8_mm_case(8192, 8192, 8192), dtypes=_DTYPES, gpu_only=True),
    Case("decode_m1_n8192_k8192", _fp8_mm_case(1, 8192, 8192), dtypes=_DTYPES, gpu_only=True),
    Case("decode_m16_n8192_k8192_bias", _fp8_mm_case(16, 8192, 8192, bias=True), dtypes=_DTYPES, gpu_only=True),
    Case(
        "decode_m64_n7168_k7168_per_tensor_a",
        _fp8_mm_case(64, 7168, 7168, a_scale_shape="1"),
        dtypes=_DTYPES,
        gpu_only=True,
    ),
)

# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_contiguous: blocks of 128 rows, each (group, rows used) or (-1, 0) for all padding
# ---------------------------------------------------------------------------


def _group_ids(blocks):
    ids = torch.full((len(blocks) * _BLOCK,), -1, dtype=torch.int32)
    for index, (group, used) in enumerate(blocks):
        ids[index * _BLOCK : index * _BLOCK + used] = group
    return ids


def _contiguous_case(blocks, groups, n, k, *, a=None, a_scale=None, b=None, b_scale=None, ids=None, out="none"):
    def make(dtype, device, generator):
        m = len(blocks) * _BLOCK
        qa, sa = _activations((m, k), generator)
        qb, sb = _weights((groups, n, k), generator)
        m_indices = index_view(_group_ids(blocks).to(device), ids)
        args = (
            _place(qa, device, a),
            _place(sa, device, a_scale),
            _place(qb, device, b),
            _place(sb, device, b_scale),
            m_indices,
            _out((m, n), device, out),
        )
        _, layout, dims = check_fp8_grouped_mm_contiguous(*args)
        return args, dict(dims), layout

    return make


FP8_GROUPED_MM_CONTIGUOUS_CASES = (
    Case(
        "padded_groups_tma_scales",
        _contiguous_case([(0, 128), (2, 77), (-1, 0), (1, 1), (2, 128)], 3, 192, 256, a_scale="tma_scales"),
        dtypes=_DTYPES,
    ),
    Case(
        "row_major_scales_n_tail_out",
        _contiguous_case([(1, 3), (0, 128)], 2, 320, 256, out="contiguous"),
        dtypes=_DTYPES,
    ),
    Case("one_group_one_row", _contiguous_case([(0, 1)], 1, 128, 384), dtypes=_DTYPES),
    Case("all_padding", _contiguous_case([(-1, 0), (-1, 0)], 2, 128, 256, out="contiguous"), dtypes=_DTYPES),
    Case("empty", _contiguous_case([], 2, 128, 256), dtypes=_DTYPES),
    Case("n_not_a_multiple_of_64", _contiguous_case([(1, 50), (0, 128)], 2, 136, 256), dtypes=_DTYPES),
    Case(
        "strided_tma_ready",
        _contiguous_case(
            [(1, 100), (0, 128), (1, 7)],
            2,
            256,
            256,
            a="wide:128",
            a_scale="every_other",
            b_scale="column_major",
            out="wide:64",
        ),
        dtypes=_DTYPES,
    ),
    Case(
        "strided_beyond_tma",
        _contiguous_case(
            [(0, 20), (1, 128)],
            2,
            192,
            256,
            a="wide:8",
            a_scale="offset",
            b="wide:128",
            b_scale="every_other",
            ids="every_other",
            out="wide:3",
        ),
        dtypes=_DTYPES,
    ),
)

# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_masked
# ---------------------------------------------------------------------------


def _masked_case(
    masked_m, max_m, n, k, *, expected_m=64, a=None, a_scale=None, b=None, b_scale=None, counts=None, out="none"
):
    def make(dtype, device, generator):
        groups = len(masked_m)
        qa, sa = _activations((groups, max_m, k), generator)
        qb, sb = _weights((groups, n, k), generator)
        counts_tensor = index_view(torch.tensor(masked_m, dtype=torch.int32).to(device), counts)
        args = (
            _place(qa, device, a),
            _place(sa, device, a_scale),
            _place(qb, device, b),
            _place(sb, device, b_scale),
            counts_tensor,
            expected_m,
            _out((groups, max_m, n), device, out),
        )
        _, layout, dims = check_fp8_grouped_mm_masked(*args)
        return args, dict(dims), layout

    return make


FP8_GROUPED_MM_MASKED_CASES = (
    Case(
        "empty_and_full_groups_tma_scales",
        _masked_case([0, 128, 37], 128, 192, 256, a_scale="tma_scales"),
        dtypes=_DTYPES,
    ),
    Case(
        "row_major_scales_n_tail_out",
        _masked_case([5, 1, 128], 128, 320, 256, expected_m=8, out="contiguous"),
        dtypes=_DTYPES,
    ),
    Case("single_group", _masked_case([77], 128, 128, 384, expected_m=77), dtypes=_DTYPES),
    Case("max_m_not_a_multiple_of_128", _masked_case([70, 0, 3], 70, 128, 256), dtypes=_DTYPES),
    Case("no_rows", _masked_case([0, 0], 0, 128, 256), dtypes=_DTYPES),
    Case(
        "strided_beyond_tma",
        _masked_case(
            [3, 128],
            128,
            192,
            256,
            a="wide:128",
            a_scale="every_other",
            b="wide:128",
            b_scale="column_major",
            counts="every_other",
            out="wide:64",
        ),
        dtypes=_DTYPES,
    ),
    Case(
        "offset_scales_column_major_a",
        _masked_case(
            [2, 9], 128, 128, 256, a="column_major", a_scale="offset", b_scale="every_other", out="contiguous"
        ),
        dtypes=_DTYPES,
    ),
)

# ---------------------------------------------------------------------------
# float64 oracles, specified outputs, tolerances
# ---------------------------------------------------------------------------


def mm_oracle(x, w, bias=None):
    """float64 product and bias, rounded once to x's dtype."""
    out = x.double() @ w.double().T
    if bias is not None:
        out = out + bias.double()
    return out.to(x.dtype)


def w8a16_mm_oracle(x, w_q, w_scale, bias=None):
    """float64 product of the int8 weights, times the scales as stored, plus the bias, rounded once."""
    out = (x.double() @ w_q.double().T) * w_scale.double().reshape(-1)
    if bias is not None:
        out = out + bias.double()
    return out.to(x.dtype)


def _unpacked64(words, along, count):
    """int32 words -> int64 nibbles: along "k" ([K/8, N] -> [K, N], value k at bits 4 (k % 8) of word k // 8),
    or along "n" with AutoAWQ's order or in order ([R, N/8] -> [R, N]); written apart from the reference row."""
    wide = words.long()
    if along == "k":
        k = torch.arange(count)
        return (wide[k // 8] >> (4 * (k % 8)).unsqueeze(1)) & 0xF
    out = torch.empty((words.shape[0], count), dtype=torch.int64)
    for i, column in enumerate(_AWQ_ORDER if along == "awq" else range(8)):
        out[:, column::8] = (wide >> (4 * i)) & 0xF
    return out


def w4a16_mm_oracle(x, qweight, scales, qzeros, group_size, packing, bias=None):
    """float64 x @ W, W = (q - zero) * scale from the packed words (the formats as the contract states them),
    plus the bias, rounded once."""
    cpu = (qweight.cpu(), scales.cpu(), qzeros.cpu())
    qweight, scales, qzeros = cpu
    k, n = x.shape[-1], scales.shape[1]
    if packing in ("gptq", "gptq_v2"):
        q, zero = _unpacked64(qweight, "k", k), _unpacked64(qzeros, "n", n) + (packing == "gptq")
    else:
        q, zero = _unpacked64(qweight, "awq", n), _unpacked64(qzeros, "awq", n)
    group = torch.arange(k) // group_size
    w = (q - zero[group]).double() * scales.double()[group]
    out = x.double() @ w.to(x.device)
    if bias is not None:
        out = out + bias.double()
    return out.to(x.dtype)


def _rows64(a, a_scale):
    return a.double() * a_scale.double().repeat_interleave(_BLOCK, dim=-1)


def _weight64(b, b_scale):
    scale = b_scale.double().repeat_interleave(_BLOCK, dim=-2)[..., : b.shape[-2], :]
    return b.double() * scale.repeat_interleave(_BLOCK, dim=-1)


def fp8_block_mm_oracle(a, a_scale, b, b_scale, out=None):
    return (_rows64(a, a_scale) @ _weight64(b, b_scale).T).to(torch.bfloat16)


def fp8_mm_oracle(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    out = (a.double() * a_scale.double().reshape(-1, 1)) @ (b.double() * b_scale.double().reshape(-1, 1)).T
    if bias is not None:
        out = out + bias.double()
    return out.to(out_dtype)


def fp8_grouped_mm_contiguous_oracle(a, a_scale, b, b_scale, m_indices, out=None):
    rows, weights = _rows64(a, a_scale), _weight64(b, b_scale)
    result = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float64, device=a.device)
    for index, group in enumerate(m_indices.tolist()):
        if group >= 0:
            result[index] = weights[group] @ rows[index]
    return result.to(torch.bfloat16)


def fp8_grouped_mm_masked_oracle(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    rows, weights = _rows64(a, a_scale), _weight64(b, b_scale)
    result = torch.zeros((a.shape[0], a.shape[1], b.shape[1]), dtype=torch.float64, device=a.device)
    for group, used in enumerate(masked_m.tolist()):
        result[group, :used] = rows[group, :used] @ weights[group].T
    return result.to(torch.bfloat16)


def _contiguous_specified(a, a_scale, b, b_scale, m_indices, out=None):
    """The rows of padding ids (negative) are unspecified."""
    return (m_indices >= 0).unsqueeze(1).expand(a.shape[0], b.shape[1])


def _masked_specified(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    """Rows m >= masked_m[g] of group g are unspecified."""
    rows = torch.arange(a.shape[1], device=a.device)
    return (rows < masked_m.unsqueeze(1)).unsqueeze(2).expand(a.shape[0], a.shape[1], b.shape[1])


CASES = {
    MM: MM_CASES,
    W8A16_MM: W8A16_MM_CASES,
    W4A16_MM: W4A16_MM_CASES,
    FP8_BLOCK_MM: FP8_BLOCK_MM_CASES,
    FP8_MM: FP8_MM_CASES,
    FP8_GROUPED_MM_CONTIGUOUS: FP8_GROUPED_MM_CONTIGUOUS_CASES,
    FP8_GROUPED_MM_MASKED: FP8_GROUPED_MM_MASKED_CASES,
}
ORACLES = {
    MM: mm_oracle,
    W8A16_MM: w8a16_mm_oracle,
    W4A16_MM: w4a16_mm_oracle,
    FP8_BLOCK_MM: fp8_block_mm_oracle,
    FP8_MM: fp8_mm_oracle,
    FP8_GROUPED_MM_CONTIGUOUS: fp8_grouped_mm_contiguous_oracle,
    FP8_GROUPED_MM_MASKED: fp8_grouped_mm_masked_oracle,
}
OUTPUT_MASKS = {FP8_GROUPED_MM_CONTIGUOUS: _contiguous_specified, FP8_GROUPED_MM_MASKED: _masked_specified}
#: k extent of one Hopper fp8 MMA step (wgmma m64nNk32 on e4m3 inputs).
_MMA_K = 32
#: The truncation charge of one MMA step, relative to its largest product (derivation in TOLERANCES below).
_MMA_TRUNCATION = 2.0**-7


def _step_max(values):
    """max |value| over each 32-wide k step: [.., K] -> [.., K/32] (float64)."""
    return values.abs().unflatten(-1, (-1, _MMA_K)).amax(-1)


def fp8_mm_bound(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    """fp8_block_mm_bound's term for per-row scales; K padded with zeros to whole 32-wide steps."""
    pad = -a.shape[1] % _MMA_K
    rows = torch.nn.functional.pad(a.double() * a_scale.double().reshape(-1, 1), (0, pad))
    weight = torch.nn.functional.pad(b.double() * b_scale.double().reshape(-1, 1), (0, pad))
    return _MMA_TRUNCATION * (_step_max(rows) @ _step_max(weight).T)


def fp8_block_mm_bound(a, a_scale, b, b_scale, out=None):
    """2**-7 * sum over k steps of max|A[m, step]| * max|B[n, step]| ([M, N] float64)."""
    return _MMA_TRUNCATION * (_step_max(_rows64(a, a_scale)) @ _step_max(_weight64(b, b_scale)).T)


def fp8_grouped_mm_contiguous_bound(a, a_scale, b, b_scale, m_indices, out=None):
    """One product per group (a gather of each row's [N, S] weights would be M x N x S float64: 123 GiB at
    16384 rows of n=4096, k=7168); rows of padding ids (negative) are unspecified and stay 0."""
    rows, weights = _step_max(_rows64(a, a_scale)), _step_max(_weight64(b, b_scale))  # [M, S], [G, N, S]
    bound = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float64, device=a.device)
    for group in m_indices.unique().tolist():
        if group >= 0:
            mine = m_indices == group
            bound[mine] = rows[mine] @ weights[group].T
    return _MMA_TRUNCATION * bound


def fp8_grouped_mm_masked_bound(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    rows, weights = _step_max(_rows64(a, a_scale)), _step_max(_weight64(b, b_scale))  # [G, M, S], [G, N, S]
    return _MMA_TRUNCATION * (rows @ weights.transpose(-1, -2))


ACCUMULATION_BOUNDS = {
    FP8_BLOCK_MM: fp8_block_mm_bound,
    FP8_MM: fp8_mm_bound,
    FP8_GROUPED_MM_CONTIGUOUS: fp8_grouped_mm_contiguous_bound,
    FP8_GROUPED_MM_MASKED: fp8_grouped_mm_masked_bound,
}
TOLERANCES = {
    # The contract's accuracy (rapid_llm/kernels/ops/gemm/__init__.py): per output element,
    #   |out - exact| <= 2**-7 * (1 + |exact|)  +  2**-7 * sum over 32-wide k steps of max|A| * max|B| in the step.
    # First term, bf16 out (8 significant bits): the reference (fp32 products and sums, one rounding) and the
    # float64 oracle (one rounding) round values ~1e-6 apart, so they differ by at most one bf16 step.
    # Second term (ACCUMULATION_BOUNDS), fp8 tensor-core accumulation: Hopper's fp8 MMA adds the 32 products
    # of a k step in fixed point aligned to the largest of them, keeping about 14 bits (DeepSeek-V3 report,
    # section 3.3.2); charging 13 (one less), each product is truncated by less than 2**-12 of the step's
    # largest product and the 32 of a step by less than 2**-7 of it. DeepGEMM promotes to fp32 every 128 of
    # K, so the steps' errors add up, bounded by the sum above. It matters only where one product dominates a
    # step and the output cancels: the H200 parity run measured DeepGEMM 0.156 from the reference on
    # outlier_groups_subnormal_rest at out[6, 169] = 7.22 (products up to 134 in its sum), 2.4x the first term
    # there, 0.064 (perf/results/h200/libraries_2026-12-01/golden_first_run.log); elsewhere DeepGEMM met the
    # first term. A wrong scale, block or group is an O(1) error, far past both terms.
    # gemm.fp8_mm promises the same accuracy by the same argument: its scales are per row of a and b (or per
    # tensor) instead of per block, A = a * a_scale and B = b * b_scale are still exact in fp32, the bias is
    # added in fp32 before the one rounding (the first term's |exact| includes it), and every row promotes
    # the fp8 MMA's sums to fp32 at least every 128 of K, so the truncation term is the same sum over steps.
    **{
        (op, "fp8_e4m3"): (2.0**-7, 2.0**-7)
        for op in (FP8_BLOCK_MM, FP8_MM, FP8_GROUPED_MM_CONTIGUOUS, FP8_GROUPED_MM_MASKED)
    },
    # gemm.mm: fp32 accumulation, one rounding to the dtype (the contract). Every row, and the float64
    # oracle, forms the same sum in fp32 (or float64) and rounds it once; they differ only in the order
    # of the fp32 additions (tiles, split-K slices, cuBLAS's blocking) and in where a rounding lands.
    #   rtol, one rounding: two fp32 values that differ by much less than a unit in the last place of the
    #   output round to the same or to adjacent values of the dtype, at most one unit apart, and one unit
    #   is at most 2**-p * |ref| for a normal value (p = 10 for fp16, 7 for bf16, 23 for fp32).
    #   atol, fp32 accumulation order: each fp32 addition rounds by up to 2**-24 of its partial sum, and the
    #   partial sums of these inputs are O(1) (unit-variance outputs at every K), so two orders differ by
    #   about 2**-24 * sqrt(K) (errors of either sign): 2**-17 at K = 14336, the largest K of the cases,
    #   2**-14 leaving 8x for the tail over the 58M elements of the largest case. It also covers outputs
    #   near 0, where a unit of the dtype is smaller than that. Measured on the CPU (fp32 matmul vs float64,
    #   512 x 1024 outputs at K = 200, 4096, 14336): at most 3e-6.
    # What it still catches: TF32 operands in an fp32 call (2**-11 of each product: ~5e-4 at these
    # magnitudes), fp16/bf16 accumulation, a dropped or doubled K step (~1/sqrt(K) per product), junk read
    # from a wider buffer (3.0 per element), a missing or misplaced bias (O(1)).
    **{(MM, dtype): (2.0**-14, 2.0**-bits) for dtype, bits in (("fp32", 23), ("fp16", 10), ("bf16", 7))},
    # gemm.w8a16_mm: the same numerics as gemm.mm's (the contract: fp32 accumulation, the scale applied in
    # fp32, one rounding to x's dtype), so the same tolerance, by the same argument:
    #   - the operands are exact: an int8 weight (|w_q| <= 127) converts to fp16/bf16 without rounding, and
    #     its product with an fp16/bf16 x (11 or 8 significant bits times 7) is exact in fp32; a scale in
    #     x's dtype is exact in fp32; the oracle uses the scale as stored, so quantization is no error here;
    #   - rtol, one rounding: as gemm.mm's, at most one unit of the output dtype (2**-10 fp16, 2**-7 bf16);
    #   - atol, fp32 accumulation order: the unscaled sum sum_k x * w_q is 1/scale (~127 sqrt(K) / 4) times
    #     the output, but fp32 rounding is relative, so after the scale its order error is the same
    #     2**-24 * sqrt(K) of the O(1) output as gemm.mm's (2**-17 at K = 14336); the scale multiply (and,
    #     split-K, scaling each slice before the slices are added) is one more fp32 rounding, 2**-24 relative.
    # What it still catches: a skipped scale (outputs ~100x too large), a scale of another channel or read
    # with the wrong stride (O(1); a scale's junk is 3.0, ~1000x a real one), int8 read as uint8 (+256 on
    # negative weights), a dropped or doubled K step, junk from a wider buffer, a missing or misplaced bias.
    **{(W8A16_MM, dtype): (2.0**-14, 2.0**-bits) for dtype, bits in (("fp16", 10), ("bf16", 7))},
    # gemm.w4a16_mm: again gemm.mm's numerics and tolerance. The oracle dequantizes the stored integers with
    # the stored scales, so quantization is no error; q - zero is an integer in -16..15 and its product with
    # an fp16/bf16 x is exact in fp32 (and the reference's fp32 W = (q - zero) * scale is exact: 5 bits times
    # an fp16/bf16 scale, 11 bits; fp32 scales round once, 2**-24). The rows sum exact products per group in
    # fp32 and scale the group's sum: the same sums as gemm.mm's, so the same order error.
    # What it still catches: a nibble read from the wrong position (AWQ's order taken as GPTQ's: columns
    # permuted within each 8, O(1)), a v1 zero without its +1 (every weight off by one step: O(1)), a scale
    # or zero of the wrong group or column, junk words (3) or scales (3.0) from a wider buffer, a dropped group.
    **{(W4A16_MM, dtype): (2.0**-14, 2.0**-bits) for dtype, bits in (("fp16", 10), ("bf16", 7))},
}
