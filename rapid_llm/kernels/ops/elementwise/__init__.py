"""elementwise family rows (data only, torch-free). Contract: ops/interfaces.py."""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/scale",
        op="elementwise.scale",
        backend="torch",
        target="rapid_llm.kernels.ops.elementwise.reference:scale",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="PyTorch reference: x * factor",
    ),
    KernelSpec(
        name="native/scale",
        op="elementwise.scale",
        backend="native",
        target="rapid_llm.kernels.ops.elementwise.scale:scale",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:contiguous",),
        description="Triton: flat 1-D blocks over a contiguous tensor",
    ),
)
