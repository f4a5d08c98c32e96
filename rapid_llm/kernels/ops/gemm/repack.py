"""Load-time repack of int4 checkpoints for gemm.w4a16_mm (plain torch; once per weight, never per step).

    qweight, qzeros = awq_to_gptq_v2(awq_qweight, awq_qzeros)
    out = rapid_llm.kernels.w4a16_mm(x, qweight, scales, qzeros, group_size, "gptq_v2")   # scales unchanged

AutoAWQ's GEMM format packs 8 output columns in a word (qweight int32 [K, N/8], interleaved order
[0, 2, 4, 6, 1, 3, 5, 7]); the "gptq_v2" layout packs 8 consecutive k of one column (qweight int32
[K/8, N]) and its zeros along N in order, stored as they are. Both give the same W[k, n] = (q - z) * scale
bit for bit, so the op's output does not change; the GPTQ layout's one-token kernel reads each word's 8
nibbles as 8 k of one column and adds them within a thread, where AWQ's layout needs a sum across threads
every group.

Cost: reads the two int32 tensors once and writes as many words (K * N / 8 + K / g * N / 8), through a
few elementwise torch ops on the tensors' device, with [K, N] int32 temporaries (4 bytes per weight:
twice the fp16 weight's size) while it runs.
"""

from __future__ import annotations

import torch

from ..checks import OpInputError, expect_tensor
from .reference import AWQ_NIBBLE_OF_COLUMN

_NAME = "gemm.awq_to_gptq_v2"


def awq_to_gptq_v2(qweight: torch.Tensor, qzeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(qweight int32 [K/8, N], qzeros int32 [K/g, N/8]) in the "gptq_v2" layout from AutoAWQ's qweight
    int32 [K, N/8] and qzeros int32 [K/g, N/8] (any strides, one device; K % 8 == 0). New contiguous
    tensors on the inputs' device; the scales stay as they are."""
    for name, tensor in (("qweight", qweight), ("qzeros", qzeros)):
        expect_tensor(_NAME, name, tensor)
        if tensor.dtype != torch.int32 or tensor.dim() != 2:
            raise OpInputError(
                _NAME, name, "a 2-d int32 tensor (AutoAWQ's packing)", f"{tensor.dtype} {list(tensor.shape)}"
            )
    k, words = qweight.shape
    if k == 0 or k % 8 or words == 0:
        raise OpInputError(
            _NAME, "qweight", "[K, N/8] with K a positive multiple of 8 and N >= 8", f"shape {list(qweight.shape)}"
        )
    if qzeros.shape[1] != words or qzeros.shape[0] == 0 or k % qzeros.shape[0]:
        raise OpInputError(
            _NAME, "qzeros", f"[K/g, N/8] with K/g dividing K = {k} and N/8 = {words}", f"shape {list(qzeros.shape)}"
        )
    if qzeros.device != qweight.device:
        raise OpInputError(_NAME, "qzeros", f"on qweight's device {qweight.device}", str(qzeros.device))
    q = _columns_in_order(qweight)  # [K, N], 0..15
    n = q.shape[1]
    packed = torch.zeros((k // 8, n), dtype=torch.int32, device=q.device)
    for i in range(8):  # k = 8r + i at bits 4i of word [r, n]
        packed |= q[i::8] << (4 * i)
    zeros = _columns_in_order(qzeros)
    in_order = torch.zeros((zeros.shape[0], words), dtype=torch.int32, device=q.device)
    for j in range(8):  # column 8c + j at bits 4j of word [r, c]
        in_order |= zeros[:, j::8] << (4 * j)
    return packed, in_order


def _columns_in_order(words: torch.Tensor) -> torch.Tensor:
    """AutoAWQ's words [R, N/8] -> nibbles [R, N] int32 (0..15), column 8c + j from nibble
    AWQ_NIBBLE_OF_COLUMN[j] of word c."""
    shifts = torch.tensor([4 * nibble for nibble in AWQ_NIBBLE_OF_COLUMN], dtype=torch.int32, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & 15).reshape(words.shape[0], -1)
