"""Argument checks of the gemm family: each op's one validation site (see ops/checks.py).

Each check returns (a, layout tags, dims). The tags say which of DeepGEMM's
layout needs the arguments meet (dispatcher/contract.py LAYOUT_TAGS, gemm
family): a row that needs a tag is never handed arguments without it.
"""

from __future__ import annotations

import torch

from ..checks import (
    OpInputError,
    expect_disjoint,
    expect_float_tensor,
    expect_int,
    expect_same_device,
    expect_tensor,
    rows_view_ok,
    tag_table,
    values_checked,
)
from . import (
    FP8_BLOCK_MM,
    FP8_GROUPED_MM_CONTIGUOUS,
    FP8_GROUPED_MM_MASKED,
    FP8_MM,
    M_ALIGNMENT,
    MM,
    SCALE_BLOCK,
    W4A16_MM,
    W8A16_MM,
)

_FP8 = torch.float8_e4m3fn


def _expect_dtype(op, argument, value, dtype, role):
    expect_tensor(op, argument, value)
    if value.dtype != dtype:
        raise OpInputError(op, argument, f"dtype {dtype} ({role})", str(value.dtype))


def _expect_shape(op, argument, value, shape, meaning):
    if tuple(value.shape) != tuple(shape):
        raise OpInputError(op, argument, f"shape {list(shape)} ({meaning})", f"shape {list(value.shape)}")


def _check_k(op, a):
    k = a.shape[-1]
    if k == 0 or k % SCALE_BLOCK:
        raise OpInputError(
            op,
            "a",
            f"K (the last dim) a positive multiple of {SCALE_BLOCK} (the scale block)",
            f"shape {list(a.shape)}",
        )
    return k


def _check_out(op, out, shape, a, inputs):
    if out is None:
        return
    _expect_dtype(op, "out", out, torch.bfloat16, "the output")
    _expect_shape(op, "out", out, shape, "the output")
    expect_same_device(op, "out", out, "a", a)
    for name, value in inputs:
        expect_disjoint(op, "out", out, name, value)


def tma_operand(t) -> bool:
    """DeepGEMM's TMA view of t: unit last stride, 16-byte-aligned start and row stride, rows not overlapping,
    and (3-D) groups packed without gaps (it checks stride(0) == size(1) * size(2) literally). An empty
    tensor is never read (the adapters skip the launch)."""
    if t.numel() == 0:
        return True
    if t.stride(-1) != 1:
        return False
    row_stride = t.stride(-2)
    if t.data_ptr() % 16 or (row_stride * t.element_size()) % 16 or row_stride < t.shape[-1]:
        return False
    return t.dim() == 2 or t.stride(0) == t.shape[1] * t.shape[2]


def dense_scales(t) -> bool:
    """Row-major or column-major without gaps (3-D: packed groups): what DeepGEMM's sm90 kernels read as b_scale."""
    rows, columns = t.shape[-2], t.shape[-1]
    row_stride, column_stride = t.stride(-2), t.stride(-1)
    dense = (column_stride == 1 and row_stride == columns) or (column_stride == rows and row_stride == 1)
    return dense and (t.dim() == 2 or t.stride(0) == rows * columns)


def _tags(a, a_scale, b, b_scale, out, groups_name=None, groups=None) -> frozenset:
    tags = set()
    if tma_operand(a):
        tags.add("a:tma")
    if tma_operand(b):
        tags.add("b:tma")
    if out is None or tma_operand(out):
        tags.add("out:tma")
    if a_scale.data_ptr() % 16 == 0:
        tags.add("a_scale:aligned")
    if dense_scales(b_scale):
        tags.add("b_scale:dense")
    if groups_name is not None and groups.is_contiguous():
        tags.add(f"{groups_name}:contiguous")
    return frozenset(tags)


def _check_operands(op, a, a_scale, b, b_scale, *, grouped_b: bool, a_dims: int):
    """dtypes, shapes and devices of a, a_scale, b, b_scale; returns (k, n, groups or None)."""
    _expect_dtype(op, "a", a, _FP8, "fp8 e4m3 activations")
    if a.dim() != a_dims:
        expected = "[M, K]" if a_dims == 2 else "[G, M_max, K]"
        raise OpInputError(op, "a", f"shape {expected}", f"shape {list(a.shape)}")
    k = _check_k(op, a)
    k_blocks = k // SCALE_BLOCK
    _expect_dtype(op, "a_scale", a_scale, torch.float32, "one scale per 1x128 group of a")
    _expect_shape(op, "a_scale", a_scale, (*a.shape[:-1], k_blocks), "a's shape with K / 128 scale columns")
    expect_same_device(op, "a_scale", a_scale, "a", a)
    _expect_dtype(op, "b", b, _FP8, "fp8 e4m3 weights")
    weight_shape = "[G, N, K]" if grouped_b else "[N, K]"
    if b.dim() != (3 if grouped_b else 2) or b.shape[-1] != k or b.shape[-2] == 0 or (grouped_b and b.shape[0] == 0):
        raise OpInputError(
            op,
            "b",
            f"shape {weight_shape} with K = {k} (a's K), N >= 1" + (", G >= 1" if grouped_b else ""),
            f"shape {list(b.shape)}",
        )
    expect_same_device(op, "b", b, "a", a)
    n = b.shape[-2]
    groups = b.shape[0] if grouped_b else None
    _expect_dtype(op, "b_scale", b_scale, torch.float32, "one scale per 128x128 block of b")
    scale_shape = (*b.shape[:-2], -(-n // SCALE_BLOCK), k_blocks)
    _expect_shape(
        op, "b_scale", b_scale, scale_shape, "ceil(N / 128) x K / 128 blocks" + (" per group" if grouped_b else "")
    )
    expect_same_device(op, "b_scale", b_scale, "a", a)
    return k, n, groups


def check_fp8_block_mm(a, a_scale, b, b_scale, out=None):
    """fp8_block_mm's check: (a, DeepGEMM layout tags, (num_tokens, n, k))."""
    op = FP8_BLOCK_MM
    k, n, _ = _check_operands(op, a, a_scale, b, b_scale, grouped_b=False, a_dims=2)
    _check_out(op, out, (a.shape[0], n), a, (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale)))
    return a, _tags(a, a_scale, b, b_scale, out), (("num_tokens", a.shape[0]), ("n", n), ("k", k))


def _group_block_violation(m_indices, groups: int) -> str | None:
    """What the first row breaking the contiguous layout's value rules does wrong, or None (one host read)."""
    ids = m_indices.reshape(-1, M_ALIGNMENT)
    valid = ids >= 0
    padding = (~valid).to(torch.int32)
    too_high = ids >= groups
    # A group row after a padding row of its block, or a row of another group than its block's first row.
    after_padding = valid & ((padding.cumsum(dim=1) - padding) > 0)
    other_group = valid & (ids != ids[:, :1])
    bad = (too_high | after_padding | other_group).reshape(-1)
    if not bool(bad.any()):
        return None
    row = int(bad.nonzero()[0, 0])
    block, offset = divmod(row, M_ALIGNMENT)
    value = int(ids[block, offset])
    rows = f"block {block} (rows {block * M_ALIGNMENT}..{block * M_ALIGNMENT + M_ALIGNMENT - 1})"
    if value >= groups:
        return f"group id {value} at row {row}"
    if bool(after_padding[block, offset]):
        return f"row {row} of group {value} after a padding row of {rows}"
    return f"row {row} of group {value} in {rows}, whose first row is of group {int(ids[block, 0])}"


def check_fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None):
    """fp8_grouped_mm_contiguous's check: (a, tags, (num_tokens, n, k, num_groups)); group ids checked when
    values_checked(m_indices)."""
    op = FP8_GROUPED_MM_CONTIGUOUS
    k, n, groups = _check_operands(op, a, a_scale, b, b_scale, grouped_b=True, a_dims=2)
    rows = a.shape[0]
    if rows % M_ALIGNMENT:
        raise OpInputError(
            op,
            "a",
            f"M (rows) a multiple of {M_ALIGNMENT} (groups are padded to aligned blocks)",
            f"shape {list(a.shape)}",
        )
    _expect_dtype(op, "m_indices", m_indices, torch.int32, "one group id per row")
    _expect_shape(op, "m_indices", m_indices, (rows,), "one group id per row of a")
    expect_same_device(op, "m_indices", m_indices, "a", a)
    _check_out(
        op,
        out,
        (rows, n),
        a,
        (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("m_indices", m_indices)),
    )
    if rows and values_checked(m_indices):
        violation = _group_block_violation(m_indices, groups)
        if violation is not None:
            raise OpInputError(
                op,
                "m_indices",
                f"group ids < G = {groups} (negative: padding), each block of "
                f"{M_ALIGNMENT} rows holding rows of one group followed only by padding rows",
                violation,
            )
    return (
        a,
        _tags(a, a_scale, b, b_scale, out, "m_indices", m_indices),
        (("num_tokens", rows), ("n", n), ("k", k), ("num_groups", groups)),
    )


def check_fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    """fp8_grouped_mm_masked's check: (a, tags, (num_groups, max_m, n, k)); masked_m checked when
    values_checked(masked_m)."""
    op = FP8_GROUPED_MM_MASKED
    k, n, groups = _check_operands(op, a, a_scale, b, b_scale, grouped_b=True, a_dims=3)
    if a.shape[0] != groups:
        raise OpInputError(op, "a", f"shape [G, M_max, K] with G = {groups} (b's groups)", f"shape {list(a.shape)}")
    max_m = a.shape[1]
    _expect_dtype(op, "masked_m", masked_m, torch.int32, "rows used per group")
    _expect_shape(op, "masked_m", masked_m, (groups,), "one row count per group")
    expect_same_device(op, "masked_m", masked_m, "a", a)
    expect_int(op, "expected_m", expected_m, minimum=1)
    _check_out(
        op,
        out,
        (groups, max_m, n),
        a,
        (("a", a), ("a_scale", a_scale), ("b", b), ("b_scale", b_scale), ("masked_m", masked_m)),
    )
    if values_checked(masked_m):
        low, high = torch.stack([masked_m.min(), masked_m.max()]).tolist()
        if low < 0 or high > max_m:
            raise OpInputError(
                op, "masked_m", f"row counts in [0, M_max = {max_m}]", f"a count of {low if low < 0 else high}"
            )
    return (
        a,
        _tags(a, a_scale, b, b_scale, out, "masked_m", masked_m),
        (("num_groups", groups), ("max_m", max_m), ("n", n), ("k", k)),
    )


_MM_TAGS = tag_table("x:rows", "w:rows", "bias:unit")


def _check_bias(op, bias, x, n: int, weight: str) -> None:
    """The GEMMs' bias: None, or [N] in x's dtype on x's device (N = the rows of the weight argument)."""
    if bias is None:
        return
    expect_tensor(op, "bias", bias)
    if bias.dtype != x.dtype:
        raise OpInputError(op, "bias", f"dtype {x.dtype} (x's dtype)", str(bias.dtype))
    if tuple(bias.shape) != (n,):
        raise OpInputError(op, "bias", f"None or shape [{n}] (N = {weight}'s rows)", f"shape {list(bias.shape)}")
    expect_same_device(op, "bias", bias, "x", x)


def check_mm(x, w, bias=None):
    """gemm.mm's check: x [..., K], w [N, K], bias None or [N], one float dtype, one device.
    Tags: x:rows (x views as [M, K] with unit stride along K), w:rows (unit stride along K), bias:unit."""
    op = MM
    expect_float_tensor(op, "x", x)
    if x.dim() == 0:
        raise OpInputError(op, "x", "a tensor of shape [..., K]", "a 0-d tensor")
    k = x.shape[-1]
    if k == 0:
        raise OpInputError(op, "x", "K (the last dim) >= 1", f"shape {list(x.shape)}")
    expect_tensor(op, "w", w)
    if w.dtype != x.dtype:
        raise OpInputError(op, "w", f"dtype {x.dtype} (x's dtype)", str(w.dtype))
    if w.dim() != 2 or w.shape[1] != k or w.shape[0] == 0:
        raise OpInputError(op, "w", f"shape [N, {k}] with N >= 1 (K = x's last dim)", f"shape {list(w.shape)}")
    expect_same_device(op, "w", w, "x", x)
    n = w.shape[0]
    _check_bias(op, bias, x, n, "w")
    rows = x.numel() // k
    w_rows = k == 1 or w.stride(1) == 1
    bias_unit = bias is None or n == 1 or bias.stride(0) == 1
    return x, _MM_TAGS[(rows_view_ok(x), w_rows, bias_unit)], (("num_tokens", rows), ("n", n), ("k", k))


_W8A16_TAGS = tag_table("x:rows", "w:rows")


def _half_activations(op, x) -> int:
    """The weight-only GEMMs' x: float16 or bfloat16 [..., K] with K >= 1; returns K."""
    expect_tensor(op, "x", x)
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise OpInputError(op, "x", "dtype float16 or bfloat16", str(x.dtype))
    if x.dim() == 0 or x.shape[-1] == 0:
        raise OpInputError(op, "x", "a tensor of shape [..., K] with K >= 1", f"shape {list(x.shape)}")
    return x.shape[-1]


def check_w8a16_mm(x, w_q, w_scale, bias=None):
    """gemm.w8a16_mm's check: x [..., K] fp16/bf16, w_q [N, K] int8, w_scale [N] or [N, 1] (fp32 or x's
    dtype), bias None or [N] in x's dtype, one device. Tags: x:rows, w:rows (w_q unit stride along K)."""
    op = W8A16_MM
    k = _half_activations(op, x)
    expect_tensor(op, "w_q", w_q)
    if w_q.dtype != torch.int8:
        raise OpInputError(op, "w_q", "dtype int8 (the quantized weight)", str(w_q.dtype))
    if w_q.dim() != 2 or w_q.shape[1] != k or w_q.shape[0] == 0:
        raise OpInputError(op, "w_q", f"shape [N, {k}] with N >= 1 (K = x's last dim)", f"shape {list(w_q.shape)}")
    expect_same_device(op, "w_q", w_q, "x", x)
    n = w_q.shape[0]
    expect_tensor(op, "w_scale", w_scale)
    if w_scale.dtype not in (torch.float32, x.dtype):
        raise OpInputError(op, "w_scale", f"dtype float32 or {x.dtype} (x's dtype)", str(w_scale.dtype))
    if tuple(w_scale.shape) not in ((n,), (n, 1)):
        raise OpInputError(
            op, "w_scale", f"shape [{n}] or [{n}, 1] (one scale per output channel)", f"shape {list(w_scale.shape)}"
        )
    expect_same_device(op, "w_scale", w_scale, "x", x)
    _check_bias(op, bias, x, n, "w_q")
    rows = x.numel() // k
    w_rows = k == 1 or w_q.stride(1) == 1
    return x, _W8A16_TAGS[(rows_view_ok(x), w_rows)], (("num_tokens", rows), ("n", n), ("k", k))


_FP8_MM_TAGS = tag_table("a:tma", "b:tma", "a:dense", "b:dense", "bias:unit")


def _check_row_scale(op, argument, scale, rows: int, meaning: str) -> None:
    """fp8_mm's scales: float32 [rows, 1] (one per row of the operand) or [1] / [1, 1] (per tensor)."""
    _expect_dtype(op, argument, scale, torch.float32, meaning)
    if tuple(scale.shape) not in ((rows, 1), (1,), (1, 1)):
        raise OpInputError(
            op, argument, f"shape [{rows}, 1] ({meaning}) or [1] / [1, 1] (per tensor)", f"shape {list(scale.shape)}"
        )


def check_fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    """gemm.fp8_mm's check: a [M, K] and b [N, K] e4m3, a_scale [M, 1] or per-tensor, b_scale [N, 1] or
    per-tensor (fp32), out_dtype bfloat16, bias None or bf16 [N], one device. Tags: a:tma, b:tma (unit
    stride along K, 16-byte-aligned start and row stride), a:dense, b:dense (row stride K), bias:unit."""
    op = FP8_MM
    _expect_dtype(op, "a", a, _FP8, "fp8 e4m3 activations")
    if a.dim() != 2 or a.shape[1] == 0:
        raise OpInputError(op, "a", "shape [M, K] with K >= 1", f"shape {list(a.shape)}")
    m, k = a.shape
    _check_row_scale(op, "a_scale", a_scale, m, "one scale per token")
    expect_same_device(op, "a_scale", a_scale, "a", a)
    _expect_dtype(op, "b", b, _FP8, "fp8 e4m3 weights")
    if b.dim() != 2 or b.shape[1] != k or b.shape[0] == 0:
        raise OpInputError(op, "b", f"shape [N, {k}] with N >= 1 (K = a's K)", f"shape {list(b.shape)}")
    expect_same_device(op, "b", b, "a", a)
    n = b.shape[0]
    _check_row_scale(op, "b_scale", b_scale, n, "one scale per output channel")
    expect_same_device(op, "b_scale", b_scale, "a", a)
    if out_dtype != torch.bfloat16:
        raise OpInputError(op, "out_dtype", "torch.bfloat16 (the one output dtype)", repr(out_dtype))
    if bias is not None:
        _expect_dtype(op, "bias", bias, torch.bfloat16, "out_dtype")
        _expect_shape(op, "bias", bias, (n,), "one per output channel; or None")
        expect_same_device(op, "bias", bias, "a", a)
    bias_unit = bias is None or n == 1 or bias.stride(0) == 1
    dense = [t.numel() == 0 or (t.stride(1) == 1 and (t.shape[0] == 1 or t.stride(0) == k)) for t in (a, b)]
    tags = _FP8_MM_TAGS[(tma_operand(a), tma_operand(b), *dense, bias_unit)]
    return a, tags, (("num_tokens", m), ("n", n), ("k", k))


_W4A16_TAGS = tag_table("x:rows", "w:gptq")
#: gemm.w4a16_mm's accepted group sizes and packings (the contract's docstring says what each packing means).
W4A16_GROUP_SIZES = (64, 128)
W4A16_PACKINGS = ("gptq", "gptq_v2", "awq")


def _expect_int32(op, argument, value, shape, meaning):
    expect_tensor(op, argument, value)
    if value.dtype != torch.int32:
        raise OpInputError(op, argument, f"dtype torch.int32 ({meaning})", str(value.dtype))
    _expect_shape(op, argument, value, shape, meaning)


def check_w4a16_mm(x, qweight, scales, qzeros, group_size, packing, bias=None):
    """gemm.w4a16_mm's check: x [..., K] fp16/bf16; group_size 64 or 128 dividing K; packing "gptq" or
    "gptq_v2" (qweight int32 [K/8, N]) or "awq" (qweight int32 [K, N/8]); N % 8 == 0; qzeros int32 [K/g, N/8];
    scales [K/g, N] fp16/bf16/fp32; bias None or [N] in x's dtype; one device. Tags: x:rows, w:gptq (not awq)."""
    op = W4A16_MM
    k = _half_activations(op, x)
    if packing not in W4A16_PACKINGS:
        raise OpInputError(op, "packing", '"gptq", "gptq_v2" or "awq"', repr(packing))
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in W4A16_GROUP_SIZES:
        raise OpInputError(op, "group_size", "the int 64 or 128", repr(group_size))
    if k % group_size:
        raise OpInputError(op, "x", f"K (the last dim) a multiple of group_size {group_size}", f"shape {list(x.shape)}")
    expect_tensor(op, "qweight", qweight)
    if qweight.dim() != 2:
        raise OpInputError(op, "qweight", "a 2-d int32 tensor", f"shape {list(qweight.shape)}")
    if packing != "awq":
        n = qweight.shape[1]
        _expect_int32(op, "qweight", qweight, (k // 8, n), f"{packing}: [K/8 = {k // 8}, N], 8 values packed along K")
    else:
        n = 8 * qweight.shape[1]
        _expect_int32(op, "qweight", qweight, (k, n // 8), f"awq: [K = {k}, N/8], 8 values packed along N")
    if n == 0 or n % 8:
        raise OpInputError(op, "qweight", "N >= 8 with N % 8 == 0 (qzeros pack 8 columns a word)", f"N = {n}")
    expect_same_device(op, "qweight", qweight, "x", x)
    groups = k // group_size
    _expect_int32(op, "qzeros", qzeros, (groups, n // 8), f"[K/g, N/8] = [{groups}, {n // 8}], packed along N")
    expect_same_device(op, "qzeros", qzeros, "x", x)
    expect_tensor(op, "scales", scales)
    if scales.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise OpInputError(op, "scales", "dtype float16, bfloat16 or float32", str(scales.dtype))
    _expect_shape(op, "scales", scales, (groups, n), "[K/g, N]: one scale per group and column")
    expect_same_device(op, "scales", scales, "x", x)
    _check_bias(op, bias, x, n, "the weight")
    rows = x.numel() // k
    return x, _W4A16_TAGS[(rows_view_ok(x), packing != "awq")], (("num_tokens", rows), ("n", n), ("k", k))
