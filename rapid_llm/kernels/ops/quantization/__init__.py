"""quantization family rows (data only, torch-free). Contracts: ops/interfaces.py.

The native Triton rows need sm89+ (the hardware e4m3 cast); they are not
offered under the CPU interpreter, whose fp8 cast is wrong (common_rows.py).
"""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_FP8_DEVICES
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
    KernelSpec(
        name="native/per_token_fp8",
        op="quantization.per_token_fp8",
        backend="native",
        target="rapid_llm.kernels.ops.quantization.per_token_fp8:per_token_fp8",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_fp8 (q and scales) on every case and dtype on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/per_token_fp8",
                            evidence="perf/results/h200/parity_2026-11-29_run10.json"),
        # 4.13-4.28 TB/s (98-101% of copy) at 32768 tokens x 4096/7168 bf16, 16x the reference; 1.8-2.0
        # us per call at 64 tokens in graph replay vs 23-30 us (perf/results/h200/
        # sweep_fp8_kv_2026-11-29.json, bench_h200.json).
        priority=10,
        description="Triton: one row per program in registers (two passes past 16384 columns), RNE cast",
    ),
    KernelSpec(
        name="native/per_token_group_fp8",
        op="quantization.per_token_group_fp8",
        backend="native",
        target="rapid_llm.kernels.ops.quantization.per_token_group_fp8:per_token_group_fp8",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_group_fp8 (q and scales, both scale layouts) on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/per_token_group_fp8",
                            evidence="perf/results/h200/parity_2026-11-29_run10.json"),
        # 3.70-3.83 TB/s (88-91% of copy) at 32768 tokens x 4096/7168 bf16, groups of 128, column-major
        # scales, 16x the reference; 1.8-2.2 us per call at 64 tokens in graph replay vs 18-20 us
        # (perf/results/h200/sweep_fp8_kv_2026-11-29.json, bench_h200.json).
        priority=10,
        description="Triton: a tile of groups per program, scales stored through strides (row- or column-major)",
    ),
)
