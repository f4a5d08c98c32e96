"""norm family rows (data only, torch-free). Contract: ops/interfaces.py."""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/rms_norm",
        op="norm.rms_norm",
        backend="torch",
        target="rapid_llm.kernels.ops.norm.reference:rms_norm",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        description="fp32 PyTorch reference",
    ),
    KernelSpec(
        name="native/rms_norm",
        op="norm.rms_norm",
        backend="native",
        target="rapid_llm.kernels.ops.norm.rms_norm:rms_norm",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:rows",),
        description="Triton: one pass per row tile, fp32 accumulation",
    ),
)
