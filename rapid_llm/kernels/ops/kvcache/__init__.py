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
        # Bitwise equal to torch/update_kv_buffer on every case, the whole buffer compared.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer",
                            evidence="perf/results/h200/parity_2026-11-29_run7.json"),
        # 3.71 TB/s (88% of copy) for 32768 tokens x 16 x 128 bf16 into random rows, 2.9x torch's
        # index_copy_; 1.2-1.4 us per call at 1-64 tokens in graph replay
        # (perf/results/h200/bench_h200.json).
        priority=10,
        description="Triton: one program per (token, block of the row), int64 offsets, no host sync",
    ),
)
