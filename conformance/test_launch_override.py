"""The one launch-knob hook (rapid_llm.kernels.ops.launch_override) reaches every native row's launch policy.

Catches a row whose kernel takes its tile knobs from somewhere the hook does not reach (a sweep or a test would
then time or test the default while believing it set a knob): every native row that runs here, called through
a PlannedOp forcing it on its op's first case, must refuse a knob its policy does not have, naming the row. A
row that does not run here is skipped with its explain() reason.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, TORCH_DTYPES
from conformance.rows_here import TABLE, planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.launch_override import launch_override

DEVICE = torch_device()
_NATIVE = [row for op in TABLE.ops for row in TABLE.rows(op) if row.backend == "native"]


@pytest.mark.parametrize("row", _NATIVE, ids=[row.name for row in _NATIVE])
def test_every_native_row_reads_its_knobs_through_the_hook(row):
    for case in CASES[row.op]:
        dtype = next((label for label in ("fp32", "fp16", "bf16") if label in row.dtypes & case.dtypes), None)
        if dtype is None or case.gpu_only:
            continue
        args, dims, layout = case.make(TORCH_DTYPES[dtype], DEVICE, torch.Generator().manual_seed(0))
        if any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args[:1]):
            continue  # an empty call launches nothing
        try:
            planned = planner_forcing(row.op, row.name).plan(row.op, dtype=dtype, shape=dims, layout=layout)
        except NoEligibleKernel as error:
            reason = skip_reason(row.name, error)
            continue
        with launch_override(row.name, NOT_A_KNOB=1), pytest.raises(ValueError, match=f"{row.name}.*NOT_A_KNOB"):
            planned(*args)
        return
    pytest.skip(reason if "reason" in locals() else f"{row.name}: no case of {row.op} runs here")
