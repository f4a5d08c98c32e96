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
        description="Triton: one program per (row, column block), fp32 math",
    ),
)
