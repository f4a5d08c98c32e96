"""norm family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
rms_norm.py and fused_add_rms_norm.py (native Triton rows); FlashInfer's rows
adapt in backends/flashinfer/norm.py.
"""

from ...backends import flashinfer as flashinfer_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, ShapeConstraint
from ..rows import SHARED_LAYOUT_TAGS, library_row, native_row, reference_row

RMS_NORM = "norm.rms_norm"
FUSED_ADD_RMS_NORM = "norm.fused_add_rms_norm"
_HERE = __name__

LAYOUT_TAGS = {
    "x:rows": SHARED_LAYOUT_TAGS["x:rows"],
    "residual:rows": "the residual of shape [..., n] views as [rows, n] without a copy (as x:rows)",
    # FlashInfer's rows
    "x:rows_vector": "x:rows, and x's data pointer and row stride are multiples of gcd(16, n * element size) "
    "bytes (FlashInfer's norm vector width), with (rows - 1) * row stride + n <= 2**32 and "
    "rows * n <= 2**32 (its element offsets are 32-bit)",
    "residual:rows_vector": "the residual meets x:rows_vector's conditions (as x)",
    "weight:vector": "the norm weight [n] has x's dtype, unit stride and a data pointer that is a multiple of "
    "gcd(16, n * element size) bytes",
}

CONTRACTS = (
    OpContract(
        op=RMS_NORM,
        parameters=("x", "weight", "eps"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
        layouts=("x:rows", "x:rows_vector", "weight:vector"),
        check=f"{_HERE}.checks:check_rms_norm",
        doc="""rms_norm(x, weight, eps) -> out = x / sqrt(mean(x**2, -1) + eps) * weight

x: [..., hidden] (num_tokens = product of the leading dims), fp32/fp16/bf16.
weight: [hidden], x's dtype or fp32, any stride. eps: float >= 0.
Accumulation and the weight product are in fp32, rounded once to x's dtype
(FlashInfer/vLLM semantics). Returns a new contiguous tensor of x's shape.""",
    ),
    OpContract(
        op=FUSED_ADD_RMS_NORM,
        parameters=("x", "residual", "weight", "eps"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
        layouts=("x:rows", "residual:rows", "x:rows_vector", "residual:rows_vector", "weight:vector"),
        check=f"{_HERE}.checks:check_fused_add_rms_norm",
        doc="""fused_add_rms_norm(x, residual, weight, eps) -> (x, residual), both updated in place:

    residual <- residual + x                  (fp32 add, rounded once to residual's dtype)
    x        <- rms_norm(residual, weight, eps)  (of the stored residual, fp32 math, one rounding)

The contract engines use between transformer sublayers (vLLM's and
FlashInfer's fused_add_rmsnorm): the result equals the unfused pair
`residual += x; x = rms_norm(residual)`. x, residual: [..., hidden], same
shape, dtype and device, not sharing memory (both are written); weight:
[hidden], x's dtype or fp32, any stride, not sharing memory with either.
Returns the same two tensor objects.

One row differs by rounding: flashinfer/fused_add_rmsnorm normalises the
fp32 sum, not the rounded stored residual (about one step of x's dtype per
element at most; its row gives the bound). The stored residual is the same
in every row.""",
    ),
)

ROWS = (
    reference_row(RMS_NORM, f"{_HERE}.reference:rms_norm", FLOAT_DTYPE_LABELS, description="fp32 PyTorch reference"),
    native_row(
        "native/rms_norm",
        RMS_NORM,
        f"{_HERE}.rms_norm:rms_norm",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:rows",),
        # Largest |diff| vs torch/rms_norm over every conformance case: 0.03125 in bf16 in the cited
        # H200 run; 0.0625 (one bf16 step at the int64-offset case's outputs of ~30) in an earlier run
        # of the same kernel, so the record keeps 0.0625. 0.00098 in fp16 on the CPU interpreter.
        parity=(0.0625, "h200.core.parity"),
        # Faster than torch's F.rms_norm at prefill and decode sizes (evidence h200.core.bench).
        priority=10,
        description="Triton: one pass per row tile, fp32 accumulation",
    ),
    reference_row(
        FUSED_ADD_RMS_NORM,
        f"{_HERE}.reference:fused_add_rms_norm",
        FLOAT_DTYPE_LABELS,
        description="fp32 PyTorch reference (unfused add, then rms_norm of the stored residual)",
    ),
    native_row(
        "native/fused_add_rms_norm",
        FUSED_ADD_RMS_NORM,
        f"{_HERE}.fused_add_rms_norm:fused_add_rms_norm",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:rows", "residual:rows"),
        # Largest |diff| vs torch/fused_add_rms_norm over both written tensors and every case:
        # 0.03125 in bf16 in the cited H200 run, 0.00098 in fp16 on the CPU interpreter.
        parity=(0.03125, "h200.core.parity"),
        # Near copy bandwidth at prefill sizes, faster than torch's eager add_ + F.rms_norm
        # (evidence h200.core.bench).
        priority=10,
        description="Triton: add, store residual, normalise, one pass per row tile",
    ),
    # FlashInfer 0.6.0 (backends/flashinfer/norm.py). Its kernels (include/flashinfer/norm.cuh) take fp16/bf16
    # (csrc/norm.cu dispatches FP16 types only), read the weight with unit stride in x's dtype, load rows as
    # aligned vectors of gcd(16, hidden * element size) bytes and index them with 32-bit offsets: the tags
    # x:rows_vector / residual:rows_vector / weight:vector say exactly that (norm/checks.py). An fp32 or
    # strided weight goes to another row rather than being converted (converting would round the weight to
    # x's dtype before the product: a second rounding the contract does not have).
    library_row(
        "flashinfer/rmsnorm",
        RMS_NORM,
        "rapid_llm.kernels.backends.flashinfer.norm:rms_norm",
        library=flashinfer_backend.REQUIREMENT,
        # FlashInfer's JIT refuses GPUs below sm75 (flashinfer/jit/core.py check_cuda_arch).
        capability=(CapabilityRequirement("cuda", min_sm=75),),
        dtypes=("fp16", "bf16"),
        layout=("x:rows_vector", "weight:vector"),
        # Largest |diff| vs torch/rms_norm over its parity cases, bf16 and fp16, on the H200.
        parity=(0.03125, "h200.libraries.parity"),
        # Below native/rms_norm (10): slower at every size measured eagerly, equal in graph replay
        # (evidence h200.libraries.bench).
        priority=5,
        # One launch, no host sync, no per-call host data (the output is allocated like the native row's).
        graph_safe=True,
        description="FlashInfer rmsnorm: one CTA per row, fp32 sum of squares, one rounding",
    ),
    library_row(
        "flashinfer/fused_add_rmsnorm",
        FUSED_ADD_RMS_NORM,
        "rapid_llm.kernels.backends.flashinfer.norm:fused_add_rms_norm",
        library=flashinfer_backend.REQUIREMENT,
        # The kernel keeps the row's fp32 sums in dynamic shared memory, (32 + hidden) * 4 bytes: hidden <=
        # 25312 fits the smallest opt-in limit of sm80+ GPUs (99 KiB on sm86/sm89/sm120; 163 KiB on sm80,
        # 227 KiB on sm90). sm75's 64 KiB would cap hidden at 16352, so sm75 is left to the other rows.
        capability=(CapabilityRequirement("cuda", min_sm=80),),
        dtypes=("fp16", "bf16"),
        shape=(ShapeConstraint("hidden", max=25312),),
        layout=("x:rows_vector", "residual:rows_vector", "weight:vector"),
        # FusedAddRMSNormKernel stores residual = (T)(x + residual) but normalises the unrounded fp32 sum
        # (norm.cuh: x_vec keeps the float), where the contract normalises the stored residual. Per element,
        # round(s_i) = s_i (1 + d_i) with |d_i| <= 2**-(p+1) (p = 7 bf16, 10 fp16 mantissa bits): the
        # element's own term moves the unrounded output by less than one ulp of it, and the rms moves by
        # the square-weighted mean of the d_i, which is ~0 for real rows (independent signs; equal d_i for a
        # constant row cancel exactly) and at most another 2**-(p+1) for contrived ones. So the outputs
        # are one step of x's dtype apart at most for real data, two in the contrived worst case; the
        # stored residual is the same one rounding in every row. The parity cases measure it.
        parity=(0.125, "h200.libraries.parity"),
        # Below native/fused_add_rms_norm (10): even with it at prefill sizes, slower at decode sizes
        # (evidence h200.libraries.bench).
        priority=5,
        graph_safe=True,
        description="FlashInfer fused_add_rmsnorm: add, store residual, normalise the fp32 sum; one CTA per row",
    ),
)
