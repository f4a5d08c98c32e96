"""moe.fused_moe's native pipelines, one module each (each module is one row):

sorted.py  native/fused_moe and native/fused_moe_fp8_block: the expert-sorted layout (native/align's
           kernel), then tiled tl.dot GEMMs that read each expert's weights once per block of its rows:
           every token count; fp8 weights quantize the activations per 1 x 128 group in registers.
slots.py   native/fused_moe_slots and native/fused_moe_slots_fp8_block: the token slots as routing left
           them, one slot's dot products per program (no sort, no padding): decode token counts.

Both take their launch knobs from the GEMM family's tile policy (ops/gemm/tiles.py: tuning store, then a
heuristic per GPU tier), keyed by "<row>.gate_up" / "<row>.down" with m = the rows an expert gets on
average (slots / experts, rounded up).
"""

from __future__ import annotations

import torch

from ... import launch_override
from ...dtypes import TORCH_DTYPES
from ...gemm.tiles import resolve_tiles

_LABELS = {dtype: label for label, dtype in TORCH_DTYPES.items()}


def expert_rows(tokens: int, top_k: int, experts: int) -> int:
    """The rows an expert gets on average: the m the GEMM tiles are chosen by."""
    return -(-tokens * top_k // experts)


def pipeline_knobs(row: str, gemms: dict, dtype: torch.dtype, device, shared=(), block_k_multiple=None) -> dict:
    """{stage: knobs} of a pipeline's GEMM stages (gemms: {stage: (m, n, k)}; "gate_up": n = 2I, k = H;
    "down": n = H, k = I), each from the tile policy under "<row>.<stage>" (block_k_multiple: the scale group
    of fp8 weights); a knob in `shared` is the first stage's,
    used by every stage. The row's launch_override then applies to the flattened names "<stage>.<knob>"
    ("BLOCK_M" bare when shared): `launch_override("native/fused_moe", **{"down.BLOCK_N": 64})`."""
    stages = {
        stage: resolve_tiles(f"{row}.{stage}", m, n, k, _LABELS[dtype], device, block_k_multiple).knobs
        for stage, (m, n, k) in gemms.items()
    }
    first = next(iter(stages.values()))
    flat = {name: first[name] for name in shared}
    for stage, knobs in stages.items():
        flat.update({f"{stage}.{name}": value for name, value in knobs.items() if name not in shared})
    flat = launch_override.apply(row, flat)
    return {
        stage: {
            **{name: flat[name] for name in shared},
            **{name.partition(".")[2]: value for name, value in flat.items() if name.startswith(stage + ".")},
        }
        for stage in stages
    }


def scale_arguments(weight, scale) -> tuple:
    """A weight's block-scale pointer and its 3 strides as the kernels take them; float weights have none, so
    the pointer is the weight's and the strides 0 (the kernels' FP8 constexpr never reads it)."""
    return (scale, *scale.stride()) if scale is not None else (weight, 0, 0, 0)


def output(x, out):
    """The caller's out, or a new contiguous [T, H] of x's dtype."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device) if out is None else out
