"""Argument checks for the embedding family (shared by every implementation)."""

from __future__ import annotations

import numbers

import torch

from ..checks import OpInputError, expect_float_tensor, expect_same_device, expect_tensor

VOCAB_EMBEDDING = "embedding.vocab_embedding"


def check_vocab_embedding_args(ids, table, vocab_start, vocab_end) -> tuple[int, int, int]:
    """Validate the arguments; return (vocab_start, vocab_end, hidden) with vocab_end resolved."""
    op = VOCAB_EMBEDDING
    expect_tensor(op, "ids", ids)
    if ids.dtype not in (torch.int32, torch.int64):
        raise OpInputError(op, "ids", "dtype torch.int32 or torch.int64", str(ids.dtype))
    expect_float_tensor(op, "table", table)
    if table.dim() != 2 or table.shape[1] == 0:
        raise OpInputError(op, "table", "shape [rows, hidden] with hidden >= 1", f"shape {list(table.shape)}")
    expect_same_device(op, "table", table, "ids", ids)
    for name, value in (("vocab_start", vocab_start), ("vocab_end", vocab_end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise OpInputError(op, name, "a Python int", type(value).__name__)
    if vocab_start < 0:
        raise OpInputError(op, "vocab_start", "an int >= 0", repr(vocab_start))
    rows = table.shape[0]
    if vocab_end is None:
        vocab_end = vocab_start + rows
    if not vocab_start <= vocab_end <= vocab_start + rows:
        raise OpInputError(op, "vocab_end", f"an int in [vocab_start, vocab_start + table rows] = "
                           f"[{vocab_start}, {vocab_start + rows}]", repr(vocab_end))
    return int(vocab_start), int(vocab_end), table.shape[1]
