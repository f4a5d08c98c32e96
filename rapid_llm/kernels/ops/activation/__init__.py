"""activation family rows (data only, torch-free). Contracts: ops/interfaces.py."""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/silu_and_mul",
        op="activation.silu_and_mul",
        backend="torch",
        target="rapid_llm.kernels.ops.activation.reference:silu_and_mul",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="fp32 PyTorch reference",
    ),
    KernelSpec(
        name="native/silu_and_mul",
        op="activation.silu_and_mul",
        backend="native",
        target="rapid_llm.kernels.ops.activation.silu_and_mul:silu_and_mul",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/silu_and_mul over every case: 0.00098 (bf16, H200), 3.8e-6 (fp16/fp32,
        # CPU interpreter).
        golden=GoldenRecord(verified=True, max_abs_diff=0.0009765625, baseline="torch/silu_and_mul",
                            evidence="perf/results/h200/parity_2026-11-29_run5.json"),
        # 4.36 TB/s (103% of the 2 GiB copy) at 32768 x 14336 bf16 with the flat grid, above FlashInfer's
        # 4.14 in the same run (perf/results/h200/sweep_gated_2026-11-29.json); 3.8x torch eager, 10x the
        # reference; 1.3-1.5 us per call at 1-16 tokens in graph replay vs FlashInfer's 3.3
        # (perf/results/h200/bench_h200.json). Flat-grid parity: parity_2026-11-29_run12.json.
        priority=10,
        description="Triton: one program per (row, column block), fp32 math",
    ),
    KernelSpec(
        name="torch/gelu_tanh_and_mul",
        op="activation.gelu_tanh_and_mul",
        backend="torch",
        target="rapid_llm.kernels.ops.activation.reference:gelu_tanh_and_mul",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="fp32 PyTorch reference",
    ),
    KernelSpec(
        name="native/gelu_tanh_and_mul",
        op="activation.gelu_tanh_and_mul",
        backend="native",
        target="rapid_llm.kernels.ops.activation.gelu_tanh_and_mul:gelu_tanh_and_mul",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/gelu_tanh_and_mul: 0.0625 in bf16 on the H200 (the int64-offset
        # case, one bf16 step at its largest outputs), 0.00012 on the CPU interpreter.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0625, baseline="torch/gelu_tanh_and_mul",
                            evidence="perf/results/h200/parity_2026-11-29_run5.json"),
        # Same kernel as native/silu_and_mul, same numbers (perf/results/h200/bench_h200.json).
        priority=10,
        description="Triton: one program per (row, column block), fp32 math",
    ),
)
