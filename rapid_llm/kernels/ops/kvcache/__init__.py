"""kvcache family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
update_kv_buffer.py and update_kv_buffer_fp8.py (native Triton rows),
update_kv_buffer_cuda.py (the CUDA extension's rows).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import CUDA_EXTENSION_DEVICES, H200_PARITY, TRITON, TRITON_DEVICES, TRITON_FP8_DEVICES

UPDATE_KV_BUFFER = "kvcache.update_kv_buffer"
UPDATE_KV_BUFFER_FP8 = "kvcache.update_kv_buffer_fp8"
_HERE = __name__
_DIMS = (("num_tokens", TOKEN_BUCKETS), ("num_kv_heads", EXACT), ("head_dim", EXACT))

_SLOTS = """loc: int32/int64 [T] buffer row ids, any order, any stride. Slot ids:
  - negative ids are padding: that token is not written, by every row;
  - ids >= rows are an error, reported (OpInputError) for CPU tensors and,
    on CUDA, under RAPID_LLM_CHECK_BOUNDS=1 (a device sync); unchecked
    otherwise, when every row drops that token's write;
  - a repeated id is allowed but races: each element of that row ends up
    holding the same element of one of the tokens naming it, and the rows
    that write a row in several programs may mix tokens element by element
    (no order between tokens is promised).
Rows not named in loc are untouched. kv and loc must not share memory with
buffer."""

CONTRACTS = (
    OpContract(
        op=UPDATE_KV_BUFFER,
        parameters=("kv", "loc", "buffer"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("kv:rows", "buffer:rows"),
        check=f"{_HERE}.checks:check_update_kv_buffer",
        doc=f"""update_kv_buffer(kv, loc, buffer) -> buffer, written in place: buffer[loc[i]] = kv[i]

kv: [T, 2*Hk, D] (K heads then V heads of each token, SGLang's fused KV
layout); buffer: [rows, 2*Hk, D], kv's dtype and device.
{_SLOTS}""",
    ),
    OpContract(
        op=UPDATE_KV_BUFFER_FP8,
        parameters=("kv", "loc", "buffer", "k_scale", "v_scale"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("kv:rows", "buffer:rows"),
        check=f"{_HERE}.checks:check_update_kv_buffer_fp8",
        doc=f"""update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale) -> buffer, written in place

The fp8 KV cache: buffer[loc[i], h] = e4m3(clamp(kv[i, h] * (1 / s), -448, 448))
with s = k_scale for the K heads (h < Hk) and v_scale for the V heads, fp32
math (IEEE reciprocal, one multiply per element), round-to-nearest-even
cast. kv: [T, 2*Hk, D] fp32/fp16/bf16 (the dispatch dtype); buffer: [rows,
2*Hk, D] float8_e4m3fn; k_scale, v_scale: one-element fp32 tensors on kv's
device (per-tensor dequant scales, as vLLM's/SGLang's k_scale and v_scale: a
reader computes q.float() * s), positive and finite: a scale <= 0 or
non-finite is an error reported like an id >= rows (CPU always, CUDA under
RAPID_LLM_CHECK_BOUNDS=1), and unspecified output otherwise.
{_SLOTS}""",
    ),
)

ROWS = (
    KernelSpec(
        name="torch/update_kv_buffer",
        op=UPDATE_KV_BUFFER,
        backend="torch",
        target=f"{_HERE}.reference:update_kv_buffer",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        # Selecting the valid slots (padding and unchecked ids dropped) reads loc on the host.
        graph_safe=False,
        description="PyTorch reference: index_copy_ of the tokens with valid slots (one host sync)",
    ),
    KernelSpec(
        name="native/update_kv_buffer",
        op=UPDATE_KV_BUFFER,
        backend="native",
        target=f"{_HERE}.update_kv_buffer:update_kv_buffer",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        # Bitwise equal to torch/update_kv_buffer on every case, the whole buffer compared.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer",
                            evidence=H200_PARITY),
        # 3.70 TB/s (88% of copy) for 32768 tokens x 16 x 128 bf16 into random rows, 2.9x torch's
        # index_copy_; 1.1-1.4 us per call at 1-64 tokens in graph replay (perf/results/h200/
        # bench_h200.json). 4 KV heads: 3.53 TB/s (83%) with the 2-warp config
        # (sweep_kv_write_2026-11-29.json).
        priority=10,
        description="Triton: one program per (token, block of the row), int64 offsets, no host sync",
    ),
    # The CUDA extension (csrc/kvcache/update_kv_buffer.cu), built ahead of time or on first use: the
    # CUDA counterpart of native/update_kv_buffer. Measured on the H200 (perf/results/h200/
    # extension_2026-11-29/kv_write/bench_h200_kv_ext.json): 3.44 / 3.23 TB/s at 32768 tokens x 8 / 4
    # KV heads against native's 3.71 / 3.48, and 0.1-0.3 us slower per call at 1-64 tokens: so ranked
    # below native (priority 5). Bitwise equal to torch/update_kv_buffer on every case (strided loc,
    # padding slots, 2**31+ elements included), both builds, in the 2026-11-30 H200 run.
    KernelSpec(
        name="aot/update_kv_buffer",
        op=UPDATE_KV_BUFFER,
        backend="aot",
        target=f"{_HERE}.update_kv_buffer_cuda:update_kv_buffer_aot",
        available="rapid_llm.kernels.aot:available",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=CUDA_EXTENSION_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer", evidence=H200_PARITY),
        priority=5,
        description="CUDA extension rapid_llm._C: one block per token, 16-byte vectors, int64 offsets",
    ),
    KernelSpec(
        name="jit/update_kv_buffer",
        op=UPDATE_KV_BUFFER,
        backend="jit",
        target=f"{_HERE}.update_kv_buffer_cuda:update_kv_buffer_jit",
        available="rapid_llm.kernels.jit:available",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=CUDA_EXTENSION_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer", evidence=H200_PARITY),
        priority=5,
        description="the same CUDA source built on first use (RAPID_LLM_JIT=1) into the JIT cache",
    ),
    KernelSpec(
        name="torch/update_kv_buffer_fp8",
        op=UPDATE_KV_BUFFER_FP8,
        backend="torch",
        target=f"{_HERE}.reference:update_kv_buffer_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        graph_safe=False,  # the valid-slot selection reads loc on the host, as torch/update_kv_buffer
        description="PyTorch reference: fp32 multiply by the k/v scale's reciprocal, clamp, e4m3 cast, byte "
                    "index_copy_",
    ),
    KernelSpec(
        name="native/update_kv_buffer_fp8",
        op=UPDATE_KV_BUFFER_FP8,
        backend="native",
        target=f"{_HERE}.update_kv_buffer_fp8:update_kv_buffer_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        # Bitwise equal to torch/update_kv_buffer_fp8 (the whole buffer) on every case on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/update_kv_buffer_fp8",
                            evidence=H200_PARITY),
        # 3.61 TB/s (85% of copy) for 32768 tokens x 16 x 128 bf16 into random rows of an e4m3 buffer,
        # 16x the reference; 1.5-1.7 us per call at 1-64 tokens in graph replay (perf/results/h200/
        # bench_h200.json). 4 KV heads: 3.21 TB/s (76%) with the 2-warp config.
        priority=10,
        description="Triton: quantize to e4m3 in registers and scatter, one program per (token, row block)",
    ),
)
