"""kvcache family rows (data only, torch-free). Contracts: ops/interfaces.py."""

from ...dispatcher.spec import CapabilityRequirement, GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES, TRITON_FP8_DEVICES
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
        # 3.70 TB/s (88% of copy) for 32768 tokens x 16 x 128 bf16 into random rows, 2.9x torch's
        # index_copy_; 1.1-1.4 us per call at 1-64 tokens in graph replay (perf/results/h200/
        # bench_h200.json). 4 KV heads: 3.38 TB/s (80%) in that run, 3.53 (83%) with today's 2-warp
        # config (sweep_kv_write_2026-11-29.json).
        priority=10,
        description="Triton: one program per (token, block of the row), int64 offsets, no host sync",
    ),
    # The CUDA extension (csrc/kvcache/update_kv_buffer.cu), built ahead of time or on first use: the
    # CUDA counterpart of native/update_kv_buffer. Measured on the H200 (perf/results/h200/
    # extension_2026-11-29/kv_write/bench_h200_kv_ext.json, bitwise equal to the reference before
    # timing in all 10 cases): 3.44 / 3.23 TB/s at 32768 tokens x 8 / 4 KV heads against native's
    # 3.71 / 3.48, and 0.1-0.3 us slower per call at 1-64 tokens: so ranked below native
    # (priority 5). Golden unverified: that run's parity suite did not get to these rows (a
    # launcher's error path crashed the process first; fixed in update_kv_buffer.cu, not yet
    # re-run on a GPU), so default dispatch does not pick them yet.
    KernelSpec(
        name="aot/update_kv_buffer",
        op="kvcache.update_kv_buffer",
        backend="aot",
        target="rapid_llm.kernels.ops.kvcache.update_kv_buffer_aot:update_kv_buffer",
        available="rapid_llm.kernels.aot:available",
        dtypes=FLOAT_DTYPES,
        capability=(CapabilityRequirement("cuda", min_sm=80),),
        layout=("kv:rows", "buffer:rows"),
        golden=GoldenRecord.unverified(),
        priority=5,
        description="CUDA extension rapid_llm._C: one block per token, 16-byte vectors, int64 offsets",
    ),
    KernelSpec(
        name="jit/update_kv_buffer",
        op="kvcache.update_kv_buffer",
        backend="jit",
        target="rapid_llm.kernels.ops.kvcache.update_kv_buffer_jit:update_kv_buffer",
        available="rapid_llm.kernels.jit:available",
        dtypes=FLOAT_DTYPES,
        capability=(CapabilityRequirement("cuda", min_sm=80),),
        layout=("kv:rows", "buffer:rows"),
        golden=GoldenRecord.unverified(),
        priority=5,
        description="the same CUDA source built on first use (RAPID_LLM_JIT=1) into the JIT cache",
    ),
    KernelSpec(
        name="torch/update_kv_buffer_fp8",
        op="kvcache.update_kv_buffer_fp8",
        backend="torch",
        target="rapid_llm.kernels.ops.kvcache.reference:update_kv_buffer_fp8",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        graph_safe=False,  # the host-side row-id check, as torch/update_kv_buffer
        description="PyTorch reference: fp32 divide by k/v scale, clamp, e4m3 cast, byte index_copy_",
    ),
    KernelSpec(
        name="native/update_kv_buffer_fp8",
        op="kvcache.update_kv_buffer_fp8",
        backend="native",
        target="rapid_llm.kernels.ops.kvcache.update_kv_buffer_fp8:update_kv_buffer_fp8",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        # Bitwise equal to torch/update_kv_buffer_fp8 (the whole buffer) on every case on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer_fp8",
                            evidence="perf/results/h200/parity_2026-11-29_run10.json"),
        # 3.61 TB/s (85% of copy) for 32768 tokens x 16 x 128 bf16 into random rows of an e4m3 buffer,
        # 16x the reference; 1.5-1.7 us per call at 1-64 tokens in graph replay (perf/results/h200/
        # bench_h200.json). 4 KV heads: 3.04 TB/s (72%) there, 3.21 (76%) with today's 2-warp config.
        priority=10,
        description="Triton: quantize to e4m3 in registers and scatter, one program per (token, row block)",
    ),
)
