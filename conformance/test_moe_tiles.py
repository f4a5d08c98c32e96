"""moe.fused_moe's GEMM stages on the GEMM tile policy (ops/gemm/tiles.py, "<row>.gate_up" / "<row>.down"), on
the CPU: the heuristic's knobs are the stage kernels' tile parameters, fit each GPU tier and the fp8 scale
blocks; the tuner's candidates are entries the store would serve; the row's launch_override reaches each
stage by its flattened knob names.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from rapid_llm.kernels.ops.gemm import tiles
from rapid_llm.kernels.ops.launch_override import launch_override

SORTED = ("native/fused_moe", "native/fused_moe_fp8_block")
STAGES = ("gate_up", "down")
TIER_LIMITS = {80: 99 * 1024, 90: 227 * 1024}
#: An expert's average rows across the buckets (decode's 1 to prefill's thousands).
EXPERT_ROWS = (1, 4, 16, 17, 64, 128, 129, 512, 4096)


def _stage_kernel(row: str, stage: str):
    """(the Triton kernel of a stage, the constexprs its launch sets itself)."""
    from rapid_llm.kernels.dispatcher import probe_environment

    probe_environment()
    pytest.importorskip("triton", reason="the MoE pipelines are Triton kernels; Triton is absent in this cell")
    from rapid_llm.kernels.ops.moe.fused import slots, sorted as sorted_layout

    if row.startswith("native/fused_moe_slots"):
        return getattr(slots, f"_{stage}_kernel"), {"FP8"}
    return getattr(sorted_layout, f"_{stage}_kernel"), {"PRECISION", "FP8"}


def _constexprs(kernel) -> set:
    function = kernel.fn if hasattr(kernel, "fn") else kernel
    while hasattr(function, "fn"):
        function = function.fn
    return {
        name
        for name, parameter in inspect.signature(function).parameters.items()
        if "constexpr" in str(parameter.annotation)
    }


@pytest.mark.parametrize("row", (*SORTED, "native/fused_moe_slots", "native/fused_moe_slots_fp8_block"))
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("sm", [80, 90])
def test_stage_heuristics_are_the_stage_kernels_tile_parameters(row, stage, sm):
    """Catches a stage table missing a tile argument of its kernel, or naming one it does not have (a launch
    error on the GPU tier only), and tiles tl.arange / tl.dot cannot build (powers of two, >= 16 for a dot)."""
    kernel, set_by_launch = _stage_kernel(row, stage)
    options = {"num_warps", "num_stages"}
    for m in EXPERT_ROWS:
        knobs = tiles.heuristic(f"{row}.{stage}", m, 4096, 2048, sm, 132)
        assert set(knobs) - options == _constexprs(kernel) - set_by_launch, (m, knobs)
        for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            if name in knobs:
                assert knobs[name] & (knobs[name] - 1) == 0, (m, knobs)
        if row in SORTED:
            assert min(knobs["BLOCK_M"], knobs["BLOCK_N"], knobs["BLOCK_K"]) >= 16, (m, knobs)


@pytest.mark.parametrize("row, dtype", [("native/fused_moe", "bf16"), ("native/fused_moe_fp8_block", "fp8_e4m3")])
@pytest.mark.parametrize("stage", STAGES)
def test_sorted_stage_tiles_fit_each_tier_and_the_fp8_scale_blocks(row, dtype, stage):
    """Catches a Hopper-sized tile in the pre-Hopper table (two weight tiles per gate_up step counted), and
    an fp8 tile whose K step is not one 128-wide scale group or whose columns span two weight blocks."""
    kernel = f"{row}.{stage}"
    multiple = 128 if dtype == "fp8_e4m3" else None
    for sm, limit in TIER_LIMITS.items():
        for m in EXPERT_ROWS:
            knobs = tiles.heuristic(kernel, m, 4096, 2048, sm, 132)
            assert tiles.refusal(knobs, dtype, limit, multiple, kernel) is None, (sm, m, knobs)


def test_the_gate_up_tile_counts_its_two_weight_tiles():
    """Catches the shared-memory estimate counting one weight tile for gate_up (which loads a gate and an up
    tile per step): a tile that fits for down must not be taken as fitting for gate_up."""
    knobs = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 4}
    down = tiles.shared_memory_bytes(knobs, "bf16", "native/fused_moe.down")
    gate_up = tiles.shared_memory_bytes(knobs, "bf16", "native/fused_moe.gate_up")
    assert gate_up == down + 4 * 128 * 128 * 2


def test_tuner_candidates_are_entries_the_store_serves():
    """Catches perf/tune_moe.py writing an fp8 entry the store would refuse on the H200 (a K step other than
    the scale group, columns across two weight blocks): the tuned tiles would never serve."""
    from perf.tune_moe import sorted_candidates

    for rows in EXPERT_ROWS:
        gate_up, down = sorted_candidates(rows, fp8=True)
        for flat, stage in [(c, "gate_up") for c in gate_up] + [(c, "down") for c in down]:
            knobs = {name.partition(".")[2] or name: value for name, value in flat.items()}
            knobs.setdefault("BLOCK_M", 16)
            reason = tiles.refusal(knobs, "fp8_e4m3", 0, 128, f"native/fused_moe_fp8_block.{stage}")
            assert reason is None, (rows, stage, knobs, reason)


def test_slots_fp8_tiles_and_tuner_candidates_hold_whole_scale_groups_and_blocks():
    """Catches a slots fp8 tile (heuristic or tuner candidate) whose K step splits a 128-wide scale group or
    whose columns span two weight blocks: its quantized groups or its one weight scale per group would be
    wrong (the store refuses such entries)."""
    from perf.tune_moe import slots_candidates

    for stage in STAGES:
        kernel = f"native/fused_moe_slots_fp8_block.{stage}"
        for m in EXPERT_ROWS:
            knobs = tiles.heuristic(kernel, m, 4096, 2048, 90, 132)
            assert tiles.refusal(knobs, "fp8_e4m3", 0, 128, kernel) is None, (m, knobs)
    gate_up, down = slots_candidates(fp8=True)
    for flat, stage in [(c, "gate_up") for c in gate_up] + [(c, "down") for c in down]:
        knobs = {name.partition(".")[2]: value for name, value in flat.items()}
        kernel = f"native/fused_moe_slots_fp8_block.{stage}"
        assert tiles.refusal(knobs, "fp8_e4m3", 0, 128, kernel) is None, (stage, knobs)


def test_the_rows_launch_override_reaches_each_stage_by_name():
    """Catches an override that does not reach the stage it names (a sweep would time the default) or that
    splits the sorted layout's one BLOCK_M between the two GEMMs."""
    from rapid_llm.kernels.ops.moe.fused import pipeline_knobs

    gemms = {"gate_up": (4, 1536, 2048), "down": (4, 2048, 768)}
    device = torch.device("cpu")
    with launch_override("native/fused_moe", **{"BLOCK_M": 32, "down.BLOCK_N": 16, "gate_up.num_warps": 2}):
        stages = pipeline_knobs("native/fused_moe", gemms, torch.bfloat16, device, shared=("BLOCK_M",))
    assert stages["gate_up"]["BLOCK_M"] == stages["down"]["BLOCK_M"] == 32
    assert stages["down"]["BLOCK_N"] == 16 and stages["gate_up"]["num_warps"] == 2
    plain = pipeline_knobs("native/fused_moe", gemms, torch.bfloat16, device, shared=("BLOCK_M",))
    assert plain["gate_up"]["BLOCK_N"] == stages["gate_up"]["BLOCK_N"]
    with launch_override("native/fused_moe", **{"down.NOT_A_KNOB": 1}), pytest.raises(ValueError, match="NOT_A_KNOB"):
        pipeline_knobs("native/fused_moe", gemms, torch.bfloat16, device, shared=("BLOCK_M",))
