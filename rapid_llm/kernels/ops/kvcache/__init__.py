"""kvcache family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
update_kv_buffer.py, update_kv_buffer_fp8.py, update_mla_buffer.py and
update_mla_buffer_fp8.py (native Triton rows), update_kv_buffer_cuda.py (the
CUDA extension's rows).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import (ATTENTION_RESULTS, CUDA_EXTENSION_DEVICES, H200_PARITY, TRITON, TRITON_DEVICES,
                           TRITON_FP8_DEVICES)

UPDATE_KV_BUFFER = "kvcache.update_kv_buffer"
UPDATE_KV_BUFFER_FP8 = "kvcache.update_kv_buffer_fp8"
UPDATE_MLA_BUFFER = "kvcache.update_mla_buffer"
UPDATE_MLA_BUFFER_FP8 = "kvcache.update_mla_buffer_fp8"
_HERE = __name__
_DIMS = (("num_tokens", TOKEN_BUCKETS), ("num_kv_heads", EXACT), ("head_dim", EXACT))
_MLA_DIMS = (("num_tokens", TOKEN_BUCKETS), ("kv_lora_rank", EXACT), ("rope_dim", EXACT))
_MLA_LAYOUTS = ("latent_rope:rows", "buffer:rows")

_SLOTS = """loc: int32/int64 [T] buffer row ids, any order, any stride. Slot ids:
  - negative ids are padding: that token is not written, by every row;
  - ids >= rows are an error, reported (OpInputError) for CPU tensors and,
    on CUDA, under RAPID_LLM_CHECK_BOUNDS=1 (a device sync); unchecked
    otherwise, when every row drops that token's write;
  - a repeated id is allowed but races: each element of that row ends up
    holding the same element of one of the tokens naming it, and the rows
    that write a row in several programs may mix tokens element by element
    (no order between tokens is promised).
Rows not named in loc are untouched. The token data (kv; latent and rope) and
loc must not share memory with buffer."""

#: The fp8 writes' per-tensor scales (k_scale and v_scale; scale).
_SCALE = """Each scale is a one-element fp32 tensor on the input's device (a
per-tensor dequant scale, as vLLM's/SGLang's k_scale and v_scale: a reader
computes q.float() * s), positive and finite: a scale <= 0 or non-finite is
an error reported like an id >= rows (CPU always, CUDA under
RAPID_LLM_CHECK_BOUNDS=1), and unspecified output otherwise."""

_MLA_SHAPES = """latent: [T, R] (the compressed KV, kv_lora_rank R >= 1: 512 in
DeepSeek-V2/V3); rope: [T, P] (the rotated key's rope part, shared by every
head, rope_dim P >= 1: 64), latent's dtype and device; both any strides
(slices of one projection output [T, R + P] are the usual call). buffer:
[rows, R + P], any strides: the latent cache attention.mla_decode reads
(R = 512, P = 64: [rows, 576]). Layout tags: latent_rope:rows (latent and
rope with unit stride along their last dim) and buffer:rows (buffer with
unit stride along its last dim); rows that need them serve only calls
providing them, the reference serves any strides."""

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
2*Hk, D] float8_e4m3fn; k_scale, v_scale: the K and V scales.
{_SCALE}
{_SLOTS}""",
    ),
    OpContract(
        op=UPDATE_MLA_BUFFER,
        parameters=("latent", "rope", "loc", "buffer"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_MLA_DIMS,
        layouts=_MLA_LAYOUTS,
        check=f"{_HERE}.checks:check_update_mla_buffer",
        doc=f"""update_mla_buffer(latent, rope, loc, buffer) -> buffer, written in place

DeepSeek MLA's latent KV-cache write (SGLang's set_mla_kv_buffer): one row
per token, the latent first, then the rope part:
    buffer[loc[i], :R] = latent[i],  buffer[loc[i], R:] = rope[i]
{_MLA_SHAPES} buffer has latent's dtype.
{_SLOTS}""",
    ),
    OpContract(
        op=UPDATE_MLA_BUFFER_FP8,
        parameters=("latent", "rope", "loc", "buffer", "scale"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_MLA_DIMS,
        layouts=_MLA_LAYOUTS,
        check=f"{_HERE}.checks:check_update_mla_buffer_fp8",
        doc=f"""update_mla_buffer_fp8(latent, rope, loc, buffer, scale) -> buffer, written in place

The fp8 latent cache: update_mla_buffer's rows quantized with one scale s,
    buffer[loc[i]] = e4m3(clamp(concat(latent[i], rope[i]) * (1 / s), -448, 448))
with update_kv_buffer_fp8's fp32 math (IEEE reciprocal, one multiply per
element, round-to-nearest-even cast). latent and rope fp32/fp16/bf16 (the
dispatch dtype); buffer float8_e4m3fn (a cache for readers that dequantize:
attention.mla_decode reads a latent cache of q's dtype); scale: s.
{_SCALE}
{_MLA_SHAPES}
{_SLOTS}""",
    ),
)


def _reference_row(op, function, description):
    """The op's torch row. Not graph-safe: selecting the tokens with valid slots (padding and unchecked
    ids dropped) reads loc on the host."""
    return KernelSpec(name=f"torch/{function}", op=op, backend="torch", target=f"{_HERE}.reference:{function}",
                      dtypes=FLOAT_DTYPE_LABELS, golden=GoldenRecord.reference(), graph_safe=False,
                      description=description)


def _mla_row(op, function, capability, description):
    """A native MLA latent-cache write row. Golden: bitwise equal to the torch row on every case (the whole
    buffer compared, 2**31+ element offsets included) in the H200 parity run ATTENTION_RESULTS cites.
    Priority 10, above the torch row: perf/test_kvcache_bench.py::test_update_mla_buffer in the same run
    (bench_attention.json), bf16 / fp8 at 32768 tokens 29.2 / 27.0 us against torch's 241.0 / 402.7
    (2.59 / 2.10 TB/s), 1.6 / 1.8 us per call at one token in graph replay."""
    return KernelSpec(name=f"native/{function}", op=op, backend="native", target=f"{_HERE}.{function}:{function}",
                      dtypes=FLOAT_DTYPE_LABELS, libraries=(TRITON,), capability=capability, layout=_MLA_LAYOUTS,
                      golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline=f"torch/{function}",
                                          evidence=f"{ATTENTION_RESULTS}/parity_native_{function}.json"),
                      priority=10, description=description)


ROWS = (
    _reference_row(UPDATE_KV_BUFFER, "update_kv_buffer",
                   "PyTorch reference: index_copy_ of the tokens with valid slots (one host sync)"),
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
    _reference_row(UPDATE_KV_BUFFER_FP8, "update_kv_buffer_fp8",
                   "PyTorch reference: fp32 multiply by the k/v scale's reciprocal, clamp, e4m3 cast, byte "
                   "index_copy_"),
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
    _reference_row(UPDATE_MLA_BUFFER, "update_mla_buffer",
                   "PyTorch reference: latent | rope of the tokens with valid slots, index_copy_ (one host sync)"),
    _mla_row(UPDATE_MLA_BUFFER, "update_mla_buffer", TRITON_DEVICES,
                        "Triton: one program per token, latent and rope copied into its row, int64 offsets, no "
                        "host sync"),
    _reference_row(UPDATE_MLA_BUFFER_FP8, "update_mla_buffer_fp8",
                   "PyTorch reference: fp32 multiply by the scale's reciprocal, clamp, e4m3 cast, byte index_copy_"),
    # sm89+ only: the e4m3 cast (TRITON_FP8_DEVICES says why not the interpreter).
    _mla_row(UPDATE_MLA_BUFFER_FP8, "update_mla_buffer_fp8", TRITON_FP8_DEVICES,
                        "Triton: quantize latent | rope to e4m3 in registers and scatter, one program per token"),
)
