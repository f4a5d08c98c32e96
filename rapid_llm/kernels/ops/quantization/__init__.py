"""quantization family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
fp8_quant.py (one native Triton kernel behind the two plain quantizers),
fused_fp8.py (the fused epilogues: rms_norm / fused_add_rms_norm /
silu_and_mul followed by fp8 quantization, no round trip through memory). The native rows
need sm89+ (the hardware e4m3 cast); they are not offered under the CPU
interpreter, whose fp8 cast is wrong (common_rows.py).
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import ShapeConstraint
from ..common_rows import TRITON_FP8_DEVICES
from ..rows import SHARED_LAYOUT_TAGS, native_row, reference_row

PER_TOKEN_FP8 = "quantization.per_token_fp8"
PER_TOKEN_GROUP_FP8 = "quantization.per_token_group_fp8"
RMS_NORM_GROUP_FP8 = "quantization.rms_norm_per_token_group_fp8"
FUSED_ADD_RMS_NORM_GROUP_FP8 = "quantization.fused_add_rms_norm_per_token_group_fp8"
RMS_NORM_STATIC_FP8 = "quantization.rms_norm_static_fp8"
FUSED_ADD_RMS_NORM_STATIC_FP8 = "quantization.fused_add_rms_norm_static_fp8"
SILU_AND_MUL_GROUP_FP8 = "quantization.silu_and_mul_per_token_group_fp8"
_HERE = __name__
_DIMS = (("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT))
#: The fused group ops also bucket on the group width: their native rows hold a whole group in registers.
_GROUP_DIMS = (*_DIMS, ("group_size", EXACT))
#: The widest group the fused native rows hold in registers (fused_fp8.MAX_TILE).
_MAX_FUSED_GROUP = 16384

LAYOUT_TAGS = {
    "x:rows": SHARED_LAYOUT_TAGS["x:rows"],
    "residual:rows": "the residual of shape [..., n] views as [rows, n] without a copy (as x:rows)",
}

_GROUP_SCALES = """For each token and each group of group_size consecutive columns of y:
scale = max(absmax(y), 1e-10) / 448 (fp32) and q = clamp(y * (1 / scale),
-448, 448) as float8_e4m3fn: per_token_group_fp8's arithmetic exactly
(IEEE division and reciprocal once per group, one multiply per element).
scale: [T, H / group_size] fp32, row-major, or with column_major_scales=True
column-major with the token dim padded to a multiple of 4 (strides
(1, ceil(T / 4) * 4): DeepGEMM's TMA-aligned layout), as per_token_group_fp8."""

_ROUNDED_Y = """y is rounded to x's dtype before it is quantized, as the norm op stores it:
the fused op equals the two ops one after the other (the rounding of the
unfused pipeline's intermediate tensor is kept; only its memory round trip
goes). group_size: a positive divisor of H. q: [T, H] e4m3, contiguous."""

_STATIC_ARITHMETIC = """scale: a one-element fp32 tensor on x's device (any shape of one element,
any stride), read on the device (no host sync; CUDA-graph safe). Per-tensor
static quantization: q = clamp(y * (1 / scale), -448, 448) as
float8_e4m3fn, with y rounded to x's dtype first (as rms_norm stores it).
The reciprocal 1 / scale is one IEEE fp32 division, computed once; each
element costs one multiply, as vLLM's rms_norm_static_fp8_quant (scale_inv
= 1.0f / *scale, then scaled_fp8_conversion<true>) and FlashInfer's
rmsnorm_quant / fused_add_rmsnorm_quant (1.0f / scale[0], then a multiply)
compute it. That can differ from an exact y / scale by one e4m3 step where
a quotient falls next to a rounding boundary. scale must be positive and
finite (not checked: reading it would sync with the device). Returns q only:
[T, H] e4m3, contiguous."""

_FUSED_ADD = """residual <- residual + x (fp32 add, rounded once to residual's dtype, in place),
then y = rms_norm(residual, weight, eps) of the stored residual, exactly as
norm.fused_add_rms_norm defines them; x is read, not written (the
normalised activations go out as q only). x, residual: [T, H], same shape,
dtype and device, not sharing memory; weight: not sharing memory with either."""

_NORM_INPUTS = """x: [T, H] fp32/fp16/bf16, any token stride (unit column stride for the
native rows). weight: [H], x's dtype or fp32, any stride. eps: float >= 0.
y = x / sqrt(mean(x**2, -1) + eps) * weight in fp32, as norm.rms_norm."""

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
    OpContract(
        op=RMS_NORM_GROUP_FP8,
        parameters=("x", "weight", "eps", "group_size", "column_major_scales"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_GROUP_DIMS,
        layouts=("x:rows",),
        check=f"{_HERE}.checks:check_rms_norm_per_token_group_fp8",
        doc=f"""rms_norm_per_token_group_fp8(x, weight, eps=1e-6, group_size=128, column_major_scales=False)
    -> (q, scale) = per_token_group_fp8(rms_norm(x, weight, eps), group_size, column_major_scales)

{_NORM_INPUTS}
{_ROUNDED_Y}
{_GROUP_SCALES}""",
    ),
    OpContract(
        op=FUSED_ADD_RMS_NORM_GROUP_FP8,
        parameters=("x", "residual", "weight", "eps", "group_size", "column_major_scales"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_GROUP_DIMS,
        layouts=("x:rows", "residual:rows"),
        check=f"{_HERE}.checks:check_fused_add_rms_norm_per_token_group_fp8",
        doc=f"""fused_add_rms_norm_per_token_group_fp8(x, residual, weight, eps=1e-6, group_size=128,
    column_major_scales=False) -> (q, scale), residual updated in place:

{_FUSED_ADD}
{_NORM_INPUTS}
{_ROUNDED_Y}
{_GROUP_SCALES}""",
    ),
    OpContract(
        op=RMS_NORM_STATIC_FP8,
        parameters=("x", "weight", "scale", "eps"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("x:rows",),
        check=f"{_HERE}.checks:check_rms_norm_static_fp8",
        doc=f"""rms_norm_static_fp8(x, weight, scale, eps=1e-6) -> q

{_NORM_INPUTS}
{_STATIC_ARITHMETIC}""",
    ),
    OpContract(
        op=FUSED_ADD_RMS_NORM_STATIC_FP8,
        parameters=("x", "residual", "weight", "scale", "eps"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=("x:rows", "residual:rows"),
        check=f"{_HERE}.checks:check_fused_add_rms_norm_static_fp8",
        doc=f"""fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps=1e-6) -> q, residual updated in place:

{_FUSED_ADD}
{_NORM_INPUTS}
{_STATIC_ARITHMETIC}""",
    ),
    OpContract(
        op=SILU_AND_MUL_GROUP_FP8,
        parameters=("x", "group_size", "column_major_scales"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("intermediate", EXACT), ("group_size", EXACT)),
        layouts=("x:rows",),
        check=f"{_HERE}.checks:check_silu_and_mul_per_token_group_fp8",
        doc=f"""silu_and_mul_per_token_group_fp8(x, group_size=128, column_major_scales=False)
    -> (q, scale) = per_token_group_fp8(silu_and_mul(x), group_size, column_major_scales)

x: [T, 2*d] fp32/fp16/bf16 holding gate | up (any token stride; unit column
stride for the native row); y = silu(x[:, :d]) * x[:, d:] in fp32 (silu(g) =
g * sigmoid(g)), rounded to x's dtype as activation.silu_and_mul stores it,
so the fused op equals the two ops one after the other. group_size: a
positive divisor of d. q: [T, d] e4m3, contiguous (H below is d).
{_GROUP_SCALES}""",
    ),
)

#: The fused epilogues' (largest |diff| from their torch rows over every parity case on the H200, evidence):
#: q within one e4m3 step (32 at magnitudes 256..448) where the fp32 value falls next to a rounding
#: boundary, as the contracts allow; scales to fp32 rounding.
_FUSED_PARITY = {
    RMS_NORM_GROUP_FP8: (32.0, "h200.quantization.parity.rerun"),
    FUSED_ADD_RMS_NORM_GROUP_FP8: (3.725290298461914e-09, "h200.quantization.parity.rerun"),
    RMS_NORM_STATIC_FP8: (0.0, "h200.quantization.parity.rerun"),
    FUSED_ADD_RMS_NORM_STATIC_FP8: (0.0, "h200.quantization.parity.rerun"),
    SILU_AND_MUL_GROUP_FP8: (1.1175870895385742e-08, "h200.quantization.parity.rerun"),
}

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
        parity=(0.0, "h200.quantization.parity.rerun"),
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
        parity=(0.0, "h200.quantization.parity.rerun"),
        # Near copy bandwidth at prefill sizes, far above the reference at every size
        # (evidence h200.core.sweep.fp8_kv, h200.core.bench).
        priority=10,
        description="Triton: a tile of groups per program, scales stored through strides (row- or column-major)",
    ),
    # No FlashInfer rows for the static forms: FlashInfer 0.6.0's RMSNormQuantKernel and
    # FusedAddRMSNormQuantKernel (include/flashinfer/norm.cuh) quantize the fp32 product x * rms_rcp * weight
    # without rounding it to x's dtype (the contract keeps the unfused pipeline's rounding), the fused-add
    # one normalises the unrounded fp32 sum rather than the stored residual: a different function of the
    # inputs (q one e4m3 step apart where y sits near a rounding boundary of x's dtype and of e4m3).
    # The fused epilogues (fused_fp8.py): one program per token row (norm ops) or per tile of groups
    # (silu), the intermediate rounded to x's dtype in registers, never stored. GPU-only like the rows above
    # (the interpreter's e4m3 cast is wrong; test_fp8_interpreter.py still runs their indexing on the CPU).
    *(
        reference_row(op, f"{_HERE}.reference:{op.partition('.')[2]}", FLOAT_DTYPE_LABELS, description=description)
        for op, description in (
            (RMS_NORM_GROUP_FP8, "PyTorch reference: torch/rms_norm, then torch/per_token_group_fp8"),
            (
                FUSED_ADD_RMS_NORM_GROUP_FP8,
                "PyTorch reference: torch/fused_add_rms_norm, then torch/per_token_group_fp8",
            ),
            (RMS_NORM_STATIC_FP8, "PyTorch reference: torch/rms_norm, then one reciprocal multiply, clamp, e4m3"),
            (FUSED_ADD_RMS_NORM_STATIC_FP8, "PyTorch reference: torch/fused_add_rms_norm, then the static quantizer"),
            (SILU_AND_MUL_GROUP_FP8, "PyTorch reference: torch/silu_and_mul, then torch/per_token_group_fp8"),
        )
    ),
    *(
        native_row(
            f"native/{op.partition('.')[2]}",
            op,
            f"{_HERE}.fused_fp8:{op.partition('.')[2]}",
            dtypes=FLOAT_DTYPE_LABELS,
            capability=TRITON_FP8_DEVICES,
            shape=shape,
            layout=layout,
            parity=_FUSED_PARITY[op],
            # Above the reference: faster than the two ops one after the other at every measured size
            # (h200.quantization.bench.fused).
            priority=10,
            description=description,
        )
        for op, shape, layout, description in (
            (
                RMS_NORM_GROUP_FP8,
                (ShapeConstraint("group_size", max=_MAX_FUSED_GROUP),),
                ("x:rows",),
                "Triton: one row per program, rms in registers, group scales, e4m3 store (two passes past 16384)",
            ),
            (
                FUSED_ADD_RMS_NORM_GROUP_FP8,
                (ShapeConstraint("group_size", max=_MAX_FUSED_GROUP),),
                ("x:rows", "residual:rows"),
                "Triton: one row per program: add, store residual, rms, group scales, e4m3 store",
            ),
            (RMS_NORM_STATIC_FP8, (), ("x:rows",), "Triton: one row per program, rms, reciprocal multiply, e4m3 store"),
            (
                FUSED_ADD_RMS_NORM_STATIC_FP8,
                (),
                ("x:rows", "residual:rows"),
                "Triton: one row per program: add, store residual, rms, reciprocal multiply, e4m3 store",
            ),
            (
                SILU_AND_MUL_GROUP_FP8,
                (ShapeConstraint("group_size", max=_MAX_FUSED_GROUP),),
                ("x:rows",),
                "Triton: a tile of groups per program: silu(gate) * up, rounded, group scales, e4m3 store",
            ),
        )
    ),
)
