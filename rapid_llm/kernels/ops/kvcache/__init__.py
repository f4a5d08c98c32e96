"""kvcache family rows (data only, torch-free). Contract: ops/interfaces.py."""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/update_kv_buffer",
        op="kvcache.update_kv_buffer",
        backend="torch",
        target="rapid_llm.kernels.ops.kvcache.reference:update_kv_buffer",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        # The row-id check reads loc on the host: a device sync, not capturable.
        graph_safe=False,
        description="PyTorch reference: index_copy_ after a host-side row-id check",
    ),
    KernelSpec(
        name="native/update_kv_buffer",
        op="kvcache.update_kv_buffer",
        backend="native",
        target="rapid_llm.kernels.ops.kvcache.update_kv_buffer:update_kv_buffer",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        description="Triton: one program per (token, block of the row), int64 offsets, no host sync",
    ),
)
