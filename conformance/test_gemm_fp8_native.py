"""The fp8 GEMMs' native kernels (ops/gemm/fp8/) run by Triton's interpreter on the CPU.

Their rows need sm89+ (fp8 tl.dot; never eligible under the interpreter), so the parity matrix runs them on
the GPU only. Here each row's target is called directly on every CPU case whose a and b it can read (a:tma,
b:tma), in several tile shapes forced through the one launch-knob hook (ops.launch_override): column tiles
narrower than, equal to and wider than a 128-row weight block, one and several K slices, a persistent grid
with several tiles per program. The interpreter widens e4m3 exactly and multiplies in fp32, so the results
must meet the op's tolerance against the float64 oracle (the contract's accuracy term included). Catches the
kernels' indexing: a scale of the wrong row, column block or K step (the TMA-aligned column-major a_scale,
strided and column-major b_scale, the N % 128 tail block), a K tail or split-K slice dropped or doubled, a
bias or channel scale misplaced, a strided out= written at the wrong place. It cannot catch what only the
GPU's compiler does (fp8 MMA precision, layouts): that is the H200 parity run.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, ORACLES
from conformance.rows_here import TABLE, torch_device
from conformance.tolerances import assert_within_tolerance
from rapid_llm.kernels.dispatcher import resolve_target
from rapid_llm.kernels.ops.gemm import FP8_BLOCK_MM, FP8_MM
from rapid_llm.kernels.ops.launch_override import launch_override

DEVICE = torch_device()
ROWS = {
    FP8_BLOCK_MM: (
        "native/fp8_block_mm",
        "native/fp8_block_mm_splitk",
        "native/fp8_block_mm_swap_ab",
        "native/fp8_block_mm_gemv",
    ),
    FP8_MM: ("native/fp8_mm", "native/fp8_mm_splitk"),
}
#: Forced tiles per kernel: (BLOCK_N, and SPLIT_K or GROUP_M); BLOCK_M 16 keeps several row tiles per case.
TILES = {
    "native/fp8_block_mm": [{"BLOCK_N": 32, "GROUP_M": 2}, {"BLOCK_N": 128, "GROUP_M": 8}, {"BLOCK_N": 256}],
    "native/fp8_block_mm_splitk": [{"BLOCK_N": 64, "SPLIT_K": 1}, {"BLOCK_N": 32, "SPLIT_K": 3}, {"BLOCK_N": 256}],
    # operands swapped: weight rows per tile dividing the 128-row weight block (one scale a step)
    "native/fp8_block_mm_swap_ab": [{"BLOCK_N": 64, "SPLIT_K": 1}, {"BLOCK_N": 32, "SPLIT_K": 3}, {"BLOCK_N": 128}],
    "native/fp8_mm": [{"BLOCK_N": 32, "GROUP_M": 2}, {"BLOCK_N": 128, "BLOCK_K": 256}],
    "native/fp8_mm_splitk": [{"BLOCK_N": 32, "SPLIT_K": 3}, {"BLOCK_N": 64, "SPLIT_K": 2, "BLOCK_K": 256}],
    # one token: columns per program dividing the 128-row weight block, one and several scale groups a step
    "native/fp8_block_mm_gemv": [{"BLOCK_N": 4, "BLOCK_K": 256}, {"BLOCK_N": 32, "BLOCK_K": 128}, {"BLOCK_N": 128}],
}
#: Rows that serve one token only (shape num_tokens max 1).
ONE_TOKEN = {"native/fp8_block_mm_gemv"}
_PARAMS = [
    pytest.param(op, row, case.id, id=f"{row}-{case.id}")
    for op, rows in ROWS.items()
    for row in rows
    for case in CASES[op]
    if not case.gpu_only
]


@pytest.mark.parametrize("op,row,case_id", _PARAMS)
def test_fp8_kernel_logic_matches_the_oracle_in_the_interpreter(op, row, case_id):
    if DEVICE != "cpu":
        pytest.skip("on CUDA the parity matrix runs these rows through dispatch")
    import os

    if os.environ.get("RAPID_LLM_TRITON_INTERPRET") != "1":
        pytest.skip("needs Triton's interpreter (RAPID_LLM_TRITON_INTERPRET=1) to run a Triton kernel on the CPU")
    case = next(case for case in CASES[op] if case.id == case_id)
    args, _, layout = case.make(torch.float32, DEVICE, torch.Generator().manual_seed(0))
    if not {"a:tma", "b:tma"} <= layout:
        pytest.skip("the case's a or b has no unit-stride rows the kernels read (layout a:tma or b:tma absent)")
    if row in ONE_TOKEN and args[0].shape[0] != 1:
        pytest.skip(f"{row} serves one token (shape num_tokens max 1); the case has {args[0].shape[0]}")
    kernel, reason = resolve_target(TABLE.rows_by_name[row].target, None)
    assert kernel is not None, reason
    want = ORACLES[op](*args)
    for knobs in TILES[row]:
        fresh, _, _ = case.make(torch.float32, DEVICE, torch.Generator().manual_seed(0))  # out= NaN again, as placed
        with launch_override(row, BLOCK_M=16, num_warps=4, num_stages=1, **knobs):
            got = kernel(*fresh)
        if op == FP8_BLOCK_MM and args[4] is not None:
            assert got is fresh[4], f"{row} did not return the out= it was given"
        assert_within_tolerance(op, "fp8_e4m3", 0, got, want, args=args, describe=f"{row} {knobs}")


#: native/fp8_block_mm_gluon's knob sets (one tile: 128 x 128 x 128): the fewest and most ring slots, one slot
#: (every step waits for its refill), row groupings of 1 and larger than the row tiles.
GLUON_KNOBS = {
    "1_slot": {"num_stages": 1, "GROUP_M": 8},
    "3_slots": {"num_stages": 3, "GROUP_M": 1},
    "5_slots": {"num_stages": 5, "GROUP_M": 16},
}
GLUON = "native/fp8_block_mm_gluon"


def _gluon_planned(case_id):
    """(PlannedOp running native/fp8_block_mm_gluon on the case, the case's arguments), or pytest.skip with the
    row's explain() reason."""
    from conformance.rows_here import planner_forcing, skip_reason
    from rapid_llm.kernels.dispatcher import NoEligibleKernel

    case = next(case for case in CASES[FP8_BLOCK_MM] if case.id == case_id)
    args, dims, layout = case.make(torch.float32, DEVICE, torch.Generator().manual_seed(0))
    try:
        planned = planner_forcing(FP8_BLOCK_MM, GLUON).plan(FP8_BLOCK_MM, dtype="fp8_e4m3", shape=dims, layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(GLUON, error))
    return planned, args


_GLUON_CASES = ("prefill_tails_strided", "m_130_tma_scales_padded_to_132", "prefill_m4096_n7168_k7168_tma_scales")


@pytest.mark.parametrize("knobs", list(GLUON_KNOBS.values()), ids=list(GLUON_KNOBS))
@pytest.mark.parametrize("case_id", _GLUON_CASES)
def test_gluon_knob_sets_match_the_oracle(case_id, knobs):
    """native/fp8_block_mm_gluon (sm90: a producer warp and two consumer warpgroups, persistent) in each
    knob set on its cases (GPU only). Catches a ring slot refilled before both consumers released it, a wrong
    barrier phase across tiles, a step's row or weight scales taken from another step, the second consumer's
    rows scaled or stored as the first's, an output buffer overwritten before its store read it, and rows
    past M or columns past N written."""
    planned, args = _gluon_planned(case_id)
    want = ORACLES[FP8_BLOCK_MM](*args)
    with launch_override(GLUON, **knobs):
        got = planned(*args)
    if args[4] is not None:
        assert got is args[4], f"{GLUON} did not return the out= it was given"
    assert_within_tolerance(FP8_BLOCK_MM, "fp8_e4m3", 0, got, want, args=args, describe=f"{GLUON} {knobs}")


@pytest.mark.parametrize("knobs", [{"BLOCK_M": 64}, {"BLOCK_M": 256}, {"num_stages": 6}], ids=str)
def test_gluon_refuses_tiles_it_cannot_run(knobs):
    """Catches a tile without a consumer layout (64 or 256 rows) or a ring past the shared memory beside the
    output buffers launching anyway (a hang, wrong rows, or a launch failure) instead of a ValueError that
    names the row (GPU only)."""
    planned, args = _gluon_planned("m_130_tma_scales_padded_to_132")
    with launch_override(GLUON, **knobs), pytest.raises(ValueError, match=GLUON):
        planned(*args)


@pytest.mark.parametrize("knobs", [{"BLOCK_N": 48}, {"BLOCK_K": 192}], ids=str)
def test_gemv_refuses_tiles_across_scale_blocks(knobs):
    """Catches native/fp8_block_mm_gemv launching with columns that straddle two 128-row weight blocks, or a K
    step that ends inside a scale group (it reads one weight block scale per program and whole groups per
    step: a wrong scale, silently) instead of a ValueError that names the row."""
    pytest.importorskip("triton", reason="the kernel module imports Triton; Triton is absent in this cell")
    row = "native/fp8_block_mm_gemv"
    case = next(case for case in CASES[FP8_BLOCK_MM] if case.id == "one_token_tails_strided")
    args, _, _ = case.make(torch.float32, DEVICE, torch.Generator().manual_seed(0))
    kernel, reason = resolve_target(TABLE.rows_by_name[row].target, None)
    assert kernel is not None, reason
    with launch_override(row, **knobs), pytest.raises(ValueError, match=row):
        kernel(*args)
