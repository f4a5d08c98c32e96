"""PyTorch references for the GEMMs (arguments checked by gemm/checks.py).

mm(x, w, bias=None) -> out [..., N]: fp32 operands, fp32 matmul, one rounding to x's dtype.
w8a16_mm(x, w_q, w_scale, bias=None) -> out [..., N]: fp32 x @ fp32 w_q.T, times the scales in fp32, one rounding.
w4a16_mm(x, qweight, scales, qzeros, group_size, packing, bias=None) -> out [..., N]: the int4 weight unpacked
and dequantized to fp32 [K, N], fp32 x @ W, one rounding.

fp8_block_mm(a, a_scale, b, b_scale, out=None) -> out [M, N] bf16
fp8_mm(a, a_scale, b, b_scale, out_dtype=bf16, bias=None) -> out [M, N]: (a * a_scale) @ (b * b_scale).T
    + bias in fp32 (scales per row of a and b, or per tensor), one rounding.
fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None) -> out [M, N] bf16
fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None) -> out [G, M_max, N] bf16

A[m, k] = a[m, k] * a_scale[m, k // 128]; B[n, k] = b[n, k] * b_scale[n // 128, k // 128]; out = A @ B.T.
Both operands are dequantized to fp32 (one rounded fp32 product per element), multiplied in fp32
(torch's fp32 matmul: TF32 only if the process enabled it) and rounded once to bf16. Scales are
broadcast with expand + reshape (no repeat_interleave: its output size is read on the host), and
the grouped ops select rows with device masks, so no reference reads device values on the host:
all three are capturable in a CUDA graph. The unspecified rows of the grouped ops (padding rows,
rows past masked_m) are written as zeros.
"""

from __future__ import annotations

import torch

from . import SCALE_BLOCK


def _dequantize_rows(a: torch.Tensor, a_scale: torch.Tensor) -> torch.Tensor:
    """a [.., M, K] e4m3 and a_scale [.., M, K/128] -> fp32 [.., M, K] (each scale over its 1x128 group)."""
    scale = a_scale.float().unsqueeze(-1).expand(*a_scale.shape, SCALE_BLOCK).reshape(a.shape)
    return a.float() * scale


def _dequantize_weight(b: torch.Tensor, b_scale: torch.Tensor) -> torch.Tensor:
    """b [N, K] e4m3 and b_scale [ceil(N/128), K/128] -> fp32 [N, K] (each scale over its 128x128 block)."""
    n, k = b.shape
    row_blocks, column_blocks = b_scale.shape
    scale = b_scale.float()[:, None, :, None].expand(row_blocks, SCALE_BLOCK, column_blocks, SCALE_BLOCK)
    return b.float() * scale.reshape(row_blocks * SCALE_BLOCK, k)[:n]


def _finish(result32: torch.Tensor, out):
    if out is None:
        return result32.to(torch.bfloat16)
    out.copy_(result32)
    return out


def fp8_block_mm(a, a_scale, b, b_scale, out=None):
    return _finish(_dequantize_rows(a, a_scale) @ _dequantize_weight(b, b_scale).T, out)


def fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None):
    rows = _dequantize_rows(a, a_scale)
    result = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    for group in range(b.shape[0]):
        # Every row times group g's weights, kept where m_indices names g: G matmuls, no host sync.
        selected = (m_indices == group).unsqueeze(1)
        result = torch.where(selected, rows @ _dequantize_weight(b[group], b_scale[group]).T, result)
    return _finish(result, out)


def fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    groups, max_m, _ = a.shape
    result = torch.empty((groups, max_m, b.shape[1]), dtype=torch.float32, device=a.device)
    row_ids = torch.arange(max_m, device=a.device)
    for group in range(groups):
        product = _dequantize_rows(a[group], a_scale[group]) @ _dequantize_weight(b[group], b_scale[group]).T
        # masked_m[group] stays a device tensor: the comparison needs no host read.
        result[group] = torch.where((row_ids < masked_m[group]).unsqueeze(1), product, 0.0)
    return _finish(result, out)


def mm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ w[N, K].T (+ bias) in fp32, rounded once to x's dtype (the contract's numerics)."""
    out = torch.matmul(x.float(), w.float().t())
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


def w8a16_mm(x: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None):
    """w_scale[n] * (x [..., K] @ w_q[N, K].T)[..., n] (+ bias) in fp32, rounded once to x's dtype."""
    out = torch.matmul(x.float(), w_q.float().t()) * w_scale.float().reshape(-1)
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


def fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None):
    """(a * a_scale) @ (b * b_scale).T (+ bias) in fp32, rounded once; a scale of one element broadcasts."""
    rows = a.float() * a_scale.float().reshape(-1, 1)
    weight = b.float() * b_scale.float().reshape(-1, 1)
    out = rows @ weight.T
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


#: AWQ's nibble of column j of a word (the inverse of AutoAWQ's packing order [0, 2, 4, 6, 1, 3, 5, 7]).
AWQ_NIBBLE_OF_COLUMN = (0, 4, 1, 5, 2, 6, 3, 7)


def _unpack(words: torch.Tensor, nibbles) -> torch.Tensor:
    """int32 [R, C] -> int32 [R, C, 8]: entry j of word w is nibble nibbles[j] of w (0..15)."""
    shifts = 4 * torch.tensor(nibbles, dtype=torch.int32, device=words.device)
    return (words.unsqueeze(-1) >> shifts) & 15


def w4a16_weight(qweight, scales, qzeros, group_size: int, packing: str) -> torch.Tensor:
    """The fp32 weight W [K, N] of gemm.w4a16_mm's packed arguments (the contract's formula)."""
    along_n = AWQ_NIBBLE_OF_COLUMN if packing == "awq" else tuple(range(8))
    if packing in ("gptq", "gptq_v2"):
        q = _unpack(qweight.t(), range(8)).reshape(qweight.shape[1], -1).t()  # [K/8, N] -> [N, K/8, 8] -> [K, N]
        zeros = _unpack(qzeros, along_n).reshape(qzeros.shape[0], -1) + (packing == "gptq")  # v1: stored zero - 1
    else:
        q = _unpack(qweight, along_n).reshape(qweight.shape[0], -1)
        zeros = _unpack(qzeros, along_n).reshape(qzeros.shape[0], -1)
    k = q.shape[0]

    def per_k(t):  # [K/g, N] -> [K, N], each group's row repeated over its g rows of K
        return t.float().unsqueeze(1).expand(k // group_size, group_size, t.shape[1]).reshape(k, -1)

    return (q.float() - per_k(zeros)) * per_k(scales)


def w4a16_mm(x, qweight, scales, qzeros, group_size: int, packing: str, bias=None):
    """x [..., K] @ W [K, N] (+ bias) in fp32, W dequantized in fp32; rounded once to x's dtype."""
    out = torch.matmul(x.float(), w4a16_weight(qweight, scales, qzeros, group_size, packing))
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)
