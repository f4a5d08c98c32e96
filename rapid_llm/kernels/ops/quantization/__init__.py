"""quantization family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
fp8_quant.py (one native Triton kernel behind both ops). The native rows
need sm89+ (the hardware e4m3 cast); they are not offered under the CPU
interpreter, whose fp8 cast is wrong (common_rows.py).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ..common_rows import TRITON_FP8_DEVICES
from ..rows import SHARED_LAYOUT_TAGS, native_row, reference_row

PER_TOKEN_FP8 = "quantization.per_token_fp8"
PER_TOKEN_GROUP_FP8 = "quantization.per_token_group_fp8"
_HERE = __name__
_DIMS = (("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT))

LAYOUT_TAGS = {"x:rows": SHARED_LAYOUT_TAGS["x:rows"]}

CONTRACTS = (
    OpContract(
        op=PER_TOKEN_FP8,
        parameters=("x",),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("x:rows",),
        check=f"{_HERE}.checks:check_per_token_fp8",
        doc="""per_token_fp8(x) -> (q, scale)

x: [T, H] fp32/fp16/bf16, any token stride. scale[t] = max(max_h |x[t, h]|, 1e-10) / 448 (fp32,
shape [T, 1]); q = clamp(x * (1 / scale), -448, 448) as float8_e4m3fn, shape
[T, H]. 448 is e4m3's largest finite value; the 1e-10 floor keeps all-zero rows
finite. fp32 math; the division and the reciprocal are IEEE (correctly
rounded), then one multiply per element (as vLLM's inverted scales: an IEEE
divide per element costs half the bandwidth). That can differ from an exact
x / scale by one e4m3 step where a quotient falls next to a rounding
boundary. x must be finite: the scales and q of a group holding inf or NaN
are unspecified (the reference propagates them; kernels may differ). Dynamic
per-token activation quantization (vLLM/SGLang semantics).""",
    ),
    OpContract(
        op=PER_TOKEN_GROUP_FP8,
        parameters=("x", "group_size", "column_major_scales"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("x:rows",),
        check=f"{_HERE}.checks:check_per_token_group_fp8",
        doc="""per_token_group_fp8(x, group_size=128, column_major_scales=False) -> (q, scale)

x: [T, H] with H % group_size == 0. For each token and each group of
group_size consecutive columns: scale = max(absmax, 1e-10) / 448 (fp32) and
q = clamp(x * (1 / scale), -448, 448) as float8_e4m3fn (arithmetic as
per_token_fp8). scale: [T, H / group_size];
with column_major_scales=True it is stored column-major with the token dim
padded to a multiple of 4 (strides (1, ceil(T / 4) * 4)): the TMA-aligned
activation-scale layout DeepGEMM's block-scaled fp8 GEMMs read.""",
    ),
)

ROWS = (
    reference_row(
        PER_TOKEN_FP8,
        f"{_HERE}.reference:per_token_fp8",
        FLOAT_DTYPE_LABELS,
        description="PyTorch reference: fp32 absmax per row, reciprocal multiply, clamp, cast to e4m3",
    ),
    reference_row(
        PER_TOKEN_GROUP_FP8,
        f"{_HERE}.reference:per_token_group_fp8",
        FLOAT_DTYPE_LABELS,
        description="PyTorch reference: fp32 absmax per group, reciprocal multiply, clamp, cast to e4m3",
    ),
    native_row(
        "native/per_token_fp8",
        PER_TOKEN_FP8,
        f"{_HERE}.fp8_quant:per_token_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_fp8 (q and scales) on every case and dtype on the H200.
        parity=(0.0, "h200.core.parity"),
        # At copy bandwidth at prefill sizes, far above the reference at every size
        # (evidence h200.core.sweep.fp8_kv, h200.core.bench).
        priority=10,
        description="Triton: one row per program in registers (two passes past 16384 columns), RNE cast",
    ),
    native_row(
        "native/per_token_group_fp8",
        PER_TOKEN_GROUP_FP8,
        f"{_HERE}.fp8_quant:per_token_group_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_group_fp8 (q and scales, both scale layouts) on the H200.
        parity=(0.0, "h200.core.parity"),
        # Near copy bandwidth at prefill sizes, far above the reference at every size
        # (evidence h200.core.sweep.fp8_kv, h200.core.bench).
        priority=10,
        description="Triton: a tile of groups per program, scales stored through strides (row- or column-major)",
    ),
)
