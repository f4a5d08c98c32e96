"""quantization family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
fp8_quant.py (one native Triton kernel behind both ops). The native rows
need sm89+ (the hardware e4m3 cast); they are not offered under the CPU
interpreter, whose fp8 cast is wrong (common_rows.py).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import H200_PARITY, TRITON, TRITON_FP8_DEVICES

PER_TOKEN_FP8 = "quantization.per_token_fp8"
PER_TOKEN_GROUP_FP8 = "quantization.per_token_group_fp8"
_HERE = __name__
_DIMS = (("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT))

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
    KernelSpec(
        name="torch/per_token_fp8",
        op=PER_TOKEN_FP8,
        backend="torch",
        target=f"{_HERE}.reference:per_token_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        description="PyTorch reference: fp32 absmax per row, reciprocal multiply, clamp, cast to e4m3",
    ),
    KernelSpec(
        name="torch/per_token_group_fp8",
        op=PER_TOKEN_GROUP_FP8,
        backend="torch",
        target=f"{_HERE}.reference:per_token_group_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        description="PyTorch reference: fp32 absmax per group, reciprocal multiply, clamp, cast to e4m3",
    ),
    KernelSpec(
        name="native/per_token_fp8",
        op=PER_TOKEN_FP8,
        backend="native",
        target=f"{_HERE}.fp8_quant:per_token_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_fp8 (q and scales) on every case and dtype on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/per_token_fp8",
                            evidence=H200_PARITY),
        # 4.13-4.28 TB/s (98-101% of copy) at 32768 tokens x 4096/7168 bf16, 16x the reference; 1.8-2.0
        # us per call at 64 tokens in graph replay vs 23-30 us (perf/results/h200/
        # sweep_fp8_kv_2026-11-29.json, bench_h200.json).
        priority=10,
        description="Triton: one row per program in registers (two passes past 16384 columns), RNE cast",
    ),
    KernelSpec(
        name="native/per_token_group_fp8",
        op=PER_TOKEN_GROUP_FP8,
        backend="native",
        target=f"{_HERE}.fp8_quant:per_token_group_fp8",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_FP8_DEVICES,
        layout=("x:rows",),
        # Bitwise equal to torch/per_token_group_fp8 (q and scales, both scale layouts) on the H200.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/per_token_group_fp8",
                            evidence=H200_PARITY),
        # 3.70-3.83 TB/s (88-91% of copy) at 32768 tokens x 4096/7168 bf16, groups of 128, column-major
        # scales, 16x the reference; 1.8-2.2 us per call at 64 tokens in graph replay vs 18-20 us
        # (perf/results/h200/sweep_fp8_kv_2026-11-29.json, bench_h200.json).
        priority=10,
        description="Triton: a tile of groups per program, scales stored through strides (row- or column-major)",
    ),
)
