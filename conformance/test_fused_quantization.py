"""The fused quantization epilogues equal their unfused pipelines (the two public ops one after the other).

quantization.rms_norm_per_token_group_fp8 is per_token_group_fp8(rms_norm(x)), its fused-add form
fused_add_rms_norm then per_token_group_fp8 (residual updated as fused_add_rms_norm updates it), the
static forms rms_norm then one reciprocal multiply by the per-tensor scale, and
silu_and_mul_per_token_group_fp8 silu_and_mul then per_token_group_fp8. For every row of each fused op
that runs here (the reference on the CPU; the native Triton rows too on an sm89+ GPU), on every case of
the op (conformance/cases/quantization.py) that runs here, its outputs are compared with the unfused
pipeline of the public ops as dispatched here, at the op's conformance tolerances (q: one e4m3 step;
group scales: one step of x's dtype, where the rounded intermediate can land), and the written residual
with the pipeline's within one unit of x's dtype (equal on the GPU, where every row rounds to nearest).

Catches: a fused op whose intermediate is not rounded to x's dtype (or rounded twice), a scale formula or
layout (row- or column-major TMA-aligned) other than per_token_group_fp8's, a static scale divided where
the contract multiplies by its reciprocal, a residual not updated (or updated twice), and a fused row
normalising something else than the stored residual.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from conformance.cases import CASES, TORCH_DTYPES
from conformance.rows_here import TABLE, planner_forcing, skip_reason
from conformance.tolerances import assert_within_tolerance
from rapid_llm import kernels
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.activation import reference as activation_reference
from rapid_llm.kernels.ops.norm import reference as norm_reference
from rapid_llm.kernels.ops.quantization import reference as quantization_reference

FUSED_OPS = (
    "quantization.rms_norm_per_token_group_fp8",
    "quantization.fused_add_rms_norm_per_token_group_fp8",
    "quantization.rms_norm_static_fp8",
    "quantization.fused_add_rms_norm_static_fp8",
    "quantization.silu_and_mul_per_token_group_fp8",
)


#: The unfused ops as dispatched here (public functions), and as their torch rows (the references' targets).
DISPATCHED = {
    "rms_norm": kernels.rms_norm,
    "fused_add_rms_norm": kernels.fused_add_rms_norm,
    "silu_and_mul": kernels.silu_and_mul,
    "per_token_group_fp8": kernels.per_token_group_fp8,
}
TORCH_ROWS = {
    "rms_norm": norm_reference.rms_norm,
    "fused_add_rms_norm": norm_reference.fused_add_rms_norm,
    "silu_and_mul": activation_reference.silu_and_mul,
    "per_token_group_fp8": quantization_reference.per_token_group_fp8,
}


def _unfused(op: str, args: tuple, ops: dict):
    """(outputs, the residual as written or None): the two unfused ops (`ops`) one after the other."""
    name = op.partition(".")[2]
    if name == "silu_and_mul_per_token_group_fp8":
        x, group_size, column_major = args
        return ops["per_token_group_fp8"](ops["silu_and_mul"](x), group_size, column_major), None
    static = "static" in name
    if name.startswith("fused_add_"):
        x, residual, weight, *rest = args
        y, residual = ops["fused_add_rms_norm"](x.clone(), residual, weight, rest[-1 if static else 0])
    else:
        x, weight, *rest = args
        y, residual = ops["rms_norm"](x, weight, rest[-1 if static else 0]), None
    if static:
        # No public static quantizer: the contract's arithmetic (one reciprocal, one multiply) in torch.
        return quantization_reference.static_fp8(y, rest[0]), residual
    return ops["per_token_group_fp8"](y, *rest[1:]), residual


def _parameters():
    for op in FUSED_OPS:
        for row in TABLE.rows(op):
            for case in CASES[op]:
                if case.gpu_only:  # past 2**31 elements: addressing, which the parity run covers
                    continue
                for dtype in sorted(row.dtypes & case.dtypes):
                    yield pytest.param(op, row.name, case, dtype, id=f"{row.name}-{case.id}-{dtype}")


def _fresh(op, case, dtype, device):
    seed = zlib.crc32(f"{op}/{case.id}/{dtype}/pipeline".encode())
    return case.make(TORCH_DTYPES[dtype], device, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "op, case, dtype",
    [
        pytest.param(op, case, dtype, id=f"{op}-{case.id}-{dtype}")
        for op in FUSED_OPS
        for case in CASES[op]
        if not case.gpu_only
        for dtype in sorted(case.dtypes)
    ],
)
def test_reference_is_the_unfused_torch_rows_bit_for_bit(op, case, dtype, env):
    """The fused op's torch row equals the unfused ops' torch rows one after the other, bit for bit
    (outputs, their strides, the residual): the rounding of the intermediate to x's dtype included."""
    device = "cuda" if env.device.kind == "cuda" else "cpu"
    reference = planner_forcing(op, TABLE.reference(op).name, env)
    args, shape, layout = _fresh(op, case, dtype, device)
    outs = reference.plan(op, dtype=dtype, shape=shape, layout=layout)(*args)
    pipeline_args = _fresh(op, case, dtype, device)[0]
    expected, residual_expected = _unfused(op, pipeline_args, TORCH_ROWS)
    outs, expected = (outs, expected) if isinstance(outs, tuple) else ((outs,), (expected,))
    for index, (out, want) in enumerate(zip(outs, expected)):
        assert (out.shape, out.dtype, out.stride()) == (want.shape, want.dtype, want.stride()), index
        assert torch.equal(
            out.view(torch.uint8) if out.dtype == torch.float8_e4m3fn else out,
            want.view(torch.uint8) if want.dtype == torch.float8_e4m3fn else want,
        ), f"output {index} differs from the pipeline"
    if residual_expected is not None:
        assert torch.equal(args[1], residual_expected), "the residual differs from fused_add_rms_norm's"


@pytest.mark.parametrize("op, row, case, dtype", list(_parameters()))
def test_fused_op_equals_the_unfused_pipeline(op, row, case, dtype, env):
    """Every row of the fused op against the unfused public ops as dispatched here, at the op's tolerances."""
    device = "cuda" if env.device.kind == "cuda" else "cpu"
    args, shape, layout = _fresh(op, case, dtype, device)
    try:
        fused = planner_forcing(op, row, env).plan(op, dtype=dtype, shape=shape, layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))
    outs = fused(*args)
    pipeline_args = _fresh(op, case, dtype, device)[0]
    expected, residual_expected = _unfused(op, pipeline_args, DISPATCHED)
    outs, expected = (outs, expected) if isinstance(outs, tuple) else ((outs,), (expected,))
    assert len(outs) == len(expected)
    for index, (out, want) in enumerate(zip(outs, expected)):
        assert (out.shape, out.dtype, out.stride()) == (want.shape, want.dtype, want.stride()), (
            f"{row} output {index}: {out.dtype}{list(out.shape)} strides {out.stride()}, the unfused pipeline's "
            f"{want.dtype}{list(want.shape)} strides {want.stride()}"
        )
        assert_within_tolerance(
            op, dtype, index, out, want, describe=f"{row} output {index} vs the unfused pipeline on {case.id}/{dtype}"
        )
    if residual_expected is not None:
        residual = args[1]
        unit = torch.finfo(residual.dtype).eps
        torch.testing.assert_close(
            residual.float(), residual_expected.float(), rtol=unit, atol=0, msg=lambda m: f"{row} residual: {m}"
        )
