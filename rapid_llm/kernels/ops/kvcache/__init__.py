"""kvcache family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
update_kv_buffer.py, update_kv_buffer_fp8.py, update_mla_buffer.py and
update_mla_buffer_fp8.py (native Triton rows), update_kv_buffer_cuda.py (the
CUDA extension's rows).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ..common_rows import TRITON_FP8_DEVICES
from ..rows import extension_rows, native_row, reference_row

UPDATE_KV_BUFFER = "kvcache.update_kv_buffer"
UPDATE_KV_BUFFER_FP8 = "kvcache.update_kv_buffer_fp8"
UPDATE_MLA_BUFFER = "kvcache.update_mla_buffer"
UPDATE_MLA_BUFFER_FP8 = "kvcache.update_mla_buffer_fp8"
_HERE = __name__

LAYOUT_TAGS = {
    "kv:rows": "kv [T, 2*Hk, D] views as [T, 2*Hk*D] without a copy (one token stride, heads packed)",
    "buffer:rows": "a KV write's buffer views as [rows, row width] with unit stride along the row (any row "
    "stride): [rows, 2*Hk, D] as [rows, 2*Hk*D] without a copy (as kv:rows), the MLA buffer "
    "[rows, R + P] as it is",
    "latent_rope:rows": "latent [T, R] and rope [T, P] of an MLA cache write each have unit stride along their "
    "last dim (any token stride)",
}
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


# The torch rows are not graph-safe: selecting the tokens with valid slots (padding and unchecked ids
# dropped) reads loc on the host.
ROWS = (
    reference_row(
        UPDATE_KV_BUFFER,
        f"{_HERE}.reference:update_kv_buffer",
        FLOAT_DTYPE_LABELS,
        graph_safe=False,
        description="PyTorch reference: index_copy_ of the tokens with valid slots (one host sync)",
    ),
    native_row(
        "native/update_kv_buffer",
        UPDATE_KV_BUFFER,
        f"{_HERE}.update_kv_buffer:update_kv_buffer",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("kv:rows", "buffer:rows"),
        # Bitwise equal to torch/update_kv_buffer on every case, the whole buffer compared.
        parity=(0.0, "h200.core.parity"),
        # Near copy bandwidth at prefill sizes, several times torch's index_copy_, and graph-safe
        # (evidence h200.core.bench, h200.core.sweep.kv_write).
        priority=10,
        description="Triton: one program per (token, block of the row), int64 offsets, no host sync",
    ),
    # The CUDA extension (csrc/kvcache/update_kv_buffer.cu), built ahead of time or on first use: the
    # CUDA counterpart of native/update_kv_buffer. Slower than native at every size measured, so ranked
    # below it (priority 5; evidence h200.extension.bench.kv_write). Bitwise equal to torch/update_kv_buffer
    # on every case (strided loc, padding slots, 2**31+ elements included), both builds.
    *extension_rows(
        UPDATE_KV_BUFFER,
        f"{_HERE}.update_kv_buffer_cuda:update_kv_buffer",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("kv:rows", "buffer:rows"),
        parity=(0.0, "h200.core.parity"),
        priority=5,
        description="CUDA extension rapid_llm._C: one block per token, 16-byte vectors, int64 offsets",
    ),
    reference_row(
        UPDATE_KV_BUFFER_FP8,
        f"{_HERE}.reference:update_kv_buffer_fp8",
        FLOAT_DTYPE_LABELS,
        graph_safe=False,
        description="PyTorch reference: fp32 multiply by the k/v scale's reciprocal, clamp, e4m3 cast, "
        "byte index_copy_",
    ),
    native_row(
        "native/update_kv_buffer_fp8",
        UPDATE_KV_BUFFER_FP8,
        f"{_HERE}.update_kv_buffer_fp8:update_kv_buffer_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_FP8_DEVICES,
        layout=("kv:rows", "buffer:rows"),
        # Bitwise equal to torch/update_kv_buffer_fp8 (the whole buffer) on every case on the H200.
        parity=(0.0, "h200.core.parity"),
        # Near copy bandwidth at prefill sizes, far above the reference, and graph-safe (evidence h200.core.bench).
        priority=10,
        description="Triton: quantize to e4m3 in registers and scatter, one program per (token, row block)",
    ),
    # The MLA latent-cache writes. Native rows: bitwise equal to the torch row on every case (the whole
    # buffer compared, 2**31+ element offsets included) in the H200 parity run their evidence names;
    # priority 10, above the torch row: several times faster than it at prefill sizes, bf16 and fp8, and
    # graph-safe (evidence h200.attention.bench).
    reference_row(
        UPDATE_MLA_BUFFER,
        f"{_HERE}.reference:update_mla_buffer",
        FLOAT_DTYPE_LABELS,
        graph_safe=False,
        description="PyTorch reference: latent | rope of the tokens with valid slots, index_copy_ (one host sync)",
    ),
    native_row(
        "native/update_mla_buffer",
        UPDATE_MLA_BUFFER,
        f"{_HERE}.update_mla_buffer:update_mla_buffer",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=_MLA_LAYOUTS,
        parity=(0.0, "h200.attention.parity.native_update_mla_buffer"),
        priority=10,
        description="Triton: one program per token, latent and rope copied into its row, int64 offsets, no host sync",
    ),
    reference_row(
        UPDATE_MLA_BUFFER_FP8,
        f"{_HERE}.reference:update_mla_buffer_fp8",
        FLOAT_DTYPE_LABELS,
        graph_safe=False,
        description="PyTorch reference: fp32 multiply by the scale's reciprocal, clamp, e4m3 cast, byte index_copy_",
    ),
    native_row(
        "native/update_mla_buffer_fp8",
        UPDATE_MLA_BUFFER_FP8,
        f"{_HERE}.update_mla_buffer_fp8:update_mla_buffer_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        # sm89+ only: the e4m3 cast (TRITON_FP8_DEVICES says why not the interpreter).
        capability=TRITON_FP8_DEVICES,
        layout=_MLA_LAYOUTS,
        parity=(0.0, "h200.attention.parity.native_update_mla_buffer_fp8"),
        priority=10,
        description="Triton: quantize latent | rope to e4m3 in registers and scatter, one program per token",
    ),
)
