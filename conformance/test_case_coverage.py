"""The parity cases cover every tensor argument of every op with a non-unit stride.

Catches an op whose kernels were only ever fed contiguous tensors: a native
row reading a strided argument as if contiguous (ids [1, 3, 5] read as
[1, 2, 3]; a strided weight used as [w0, w1, ...]) gives a silent wrong
answer that parity cannot see unless some case passes such a view. Every
contract parameter that is a tensor in some case must be non-contiguous in
at least one case (built on the CPU in fp32, or in the first dtype the case and the op's contract share
when fp32 is not one: gemm.w8a16_mm's; no kernel runs here).
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, TORCH_DTYPES
from conformance.rows_here import TABLE


def _strided(tensor) -> bool:
    """Whether `tensor` has a stride other than the contiguous one on a dim of size > 1 (or an offset view)."""
    if tensor.numel() <= 1:
        return tensor.storage_offset() != 0
    return not tensor.is_contiguous() or tensor.untyped_storage().nbytes() > tensor.numel() * tensor.element_size()


def _build_dtype(op, case):
    """fp32 where the case and the op's contract admit it, else the first dtype they share (gemm.w8a16_mm's
    check refuses an fp32 x; the fp8 cases ignore the dtype they are given)."""
    shared = case.dtypes & TABLE.contracts[op].dtypes
    if "fp32" in shared or not shared:
        return torch.float32
    return TORCH_DTYPES[min(shared)]


@pytest.mark.parametrize("op", TABLE.ops)
def test_every_tensor_argument_has_a_strided_case(op):
    parameters = TABLE.contracts[op].parameters
    seen_tensor, seen_strided = set(), set()
    for case in CASES[op]:
        if case.gpu_only:
            continue
        args, _, _ = case.make(_build_dtype(op, case), "cpu", torch.Generator().manual_seed(0))
        for name, value in zip(parameters, args):
            if isinstance(value, torch.Tensor):
                seen_tensor.add(name)
                if _strided(value):
                    seen_strided.add(name)
    missing = sorted(seen_tensor - seen_strided)
    assert not missing, f"{op}: no parity case passes {missing} as a strided view"
