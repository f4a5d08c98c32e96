"""quantization family rows (data only, torch-free). Contracts: ops/interfaces.py.

Only the torch reference rows exist so far: native Triton rows need the GPU
(sm89+ for the native e4m3 cast; Triton's CPU interpreter rounds fp8 casts
differently) and land with their H200 parity evidence.
"""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/per_token_fp8",
        op="quantization.per_token_fp8",
        backend="torch",
        target="rapid_llm.kernels.ops.quantization.reference:per_token_fp8",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="PyTorch reference: fp32 absmax per row, divide, clamp, cast to e4m3",
    ),
    KernelSpec(
        name="torch/per_token_group_fp8",
        op="quantization.per_token_group_fp8",
        backend="torch",
        target="rapid_llm.kernels.ops.quantization.reference:per_token_group_fp8",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="PyTorch reference: fp32 absmax per group, divide, clamp, cast to e4m3",
    ),
)
