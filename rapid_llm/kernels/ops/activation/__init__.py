"""activation family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
gated.py (the one native Triton kernel behind both gated activations);
FlashInfer's rows adapt in backends/flashinfer/activation.py.
"""

from ...backends import flashinfer as flashinfer_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, ShapeConstraint
from ..rows import SHARED_LAYOUT_TAGS, library_row, native_row, reference_row

SILU_AND_MUL = "activation.silu_and_mul"
GELU_TANH_AND_MUL = "activation.gelu_tanh_and_mul"
_HERE = __name__

LAYOUT_TAGS = {
    "x:rows": SHARED_LAYOUT_TAGS["x:rows"],
    "out:rows": "the caller's out= tensor, if any, views as [rows, n] without a copy (as x:rows)",
    # FlashInfer's rows
    "x:contiguous16": "x is contiguous (row-major, no gaps) with a data pointer that is a multiple of 16 bytes",
    "out:contiguous16": "the caller's out= tensor, if any, is contiguous with a data pointer that is a multiple "
    "of 16 bytes (always provided when out is None)",
}

_GATED_LAYOUT = """x: [..., 2*d] holding gate | up along the last dim (num_tokens = product of
the leading dims, intermediate = d), fp32/fp16/bf16. out: optional
preallocated [..., d] tensor of x's dtype and device, not overlapping x;
returned (a new contiguous tensor when None). Math in fp32, one rounding
(the vLLM/FlashInfer/SGLang contract of the MLP activation)."""

CONTRACTS = tuple(
    OpContract(
        op=op,
        parameters=("x", "out"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("intermediate", EXACT)),
        layouts=("x:rows", "out:rows", "x:contiguous16", "out:contiguous16"),
        check=f"{_HERE}.checks:check_{op.partition('.')[2]}",
        doc=f"{formula}\n\n{_GATED_LAYOUT}",
    )
    for op, formula in (
        (
            SILU_AND_MUL,
            "silu_and_mul(x, out=None) -> out[..., d] = silu(x[..., :d]) * x[..., d:], silu(g) = g * sigmoid(g)",
        ),
        (
            GELU_TANH_AND_MUL,
            "gelu_tanh_and_mul(x, out=None) -> out[..., d] = gelu_tanh(x[..., :d]) * x[..., d:], "
            "gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))",
        ),
    )
)

ROWS = (
    reference_row(
        SILU_AND_MUL, f"{_HERE}.reference:silu_and_mul", FLOAT_DTYPE_LABELS, description="fp32 PyTorch reference"
    ),
    native_row(
        "native/silu_and_mul",
        SILU_AND_MUL,
        f"{_HERE}.gated:silu_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/silu_and_mul over every case: 0.00098 (bf16, H200), 3.8e-6 (fp16/fp32,
        # CPU interpreter).
        parity=(0.0009765625, "h200.core.parity"),
        # Above FlashInfer (5): at copy bandwidth at prefill sizes, ahead of it there and at decode sizes in
        # graph replay (evidence h200.core.sweep.gated, h200.core.bench).
        priority=10,
        description="Triton: one program per (row, column block), fp32 math",
    ),
    reference_row(
        GELU_TANH_AND_MUL,
        f"{_HERE}.reference:gelu_tanh_and_mul",
        FLOAT_DTYPE_LABELS,
        description="fp32 PyTorch reference",
    ),
    native_row(
        "native/gelu_tanh_and_mul",
        GELU_TANH_AND_MUL,
        f"{_HERE}.gated:gelu_tanh_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/gelu_tanh_and_mul: 0.0625 in bf16 on the H200 (the int64-offset
        # case, one bf16 step at its largest outputs), 0.00012 on the CPU interpreter.
        parity=(0.0625, "h200.core.parity"),
        # Same kernel as native/silu_and_mul, same ranking (evidence h200.core.bench).
        priority=10,
        description="Triton: one program per (row, column block), fp32 math",
    ),
    *(
        # FlashInfer 0.6.0 (backends/flashinfer/activation.py). act_and_mul_kernel
        # (include/flashinfer/activation.cuh, instantiated by flashinfer/jit/activation.py) takes fp16/bf16,
        # ignores strides (row r of x at r * 2d, of out at r * d) and moves 16-byte vectors, including the up
        # half at x + r * 2d + d: x and out must be contiguous and 16-byte aligned (x:contiguous16,
        # out:contiguous16) and d * 2 bytes a multiple of 16, i.e. intermediate a multiple of 8 (FlashInfer's
        # own check, 2d * 2 % 16 == 0, admits d = 4 (mod 8), whose up-half loads are misaligned, and d < 8,
        # for which it launches 0-thread blocks). Math in fp32, one rounding: silu is g / (1 + __expf(-g))
        # (a few fp32 ulp from ours); gelu_tanh is the same formula as ours but through tanh.approx.f32
        # (MUFU.TANH, relative error ~1.1e-5 measured by NVIDIA's forums), so for gates below about -2
        # (fp16) / -3 (bf16) the cancellation in 1 + tanh makes it several output ulps from ours while the
        # absolute difference stays below ~1e-5 * |gate * up| (well inside the parity tolerance).
        library_row(
            f"flashinfer/{impl}",
            op,
            f"rapid_llm.kernels.backends.flashinfer.activation:{impl}",
            library=flashinfer_backend.REQUIREMENT,
            # FlashInfer's JIT refuses GPUs below sm75 (flashinfer/jit/core.py); tanh.approx.f32 needs sm75.
            capability=(CapabilityRequirement("cuda", min_sm=75),),
            dtypes=("fp16", "bf16"),
            shape=(ShapeConstraint("intermediate", multiple_of=8),),
            layout=("x:contiguous16", "out:contiguous16"),
            parity=(max_abs_diff, "h200.libraries.parity"),
            # Below the native rows (10): slower at every size measured, eager and in graph replay
            # (evidence h200.libraries.bench).
            priority=5,
            # One launch, no host sync, no per-call host data.
            graph_safe=True,
            description=f"FlashInfer {impl}: one CTA per row, 16-byte vectors, fp32 math",
        )
        # max_abs_diff: the largest |diff| vs the torch row over its parity cases, bf16 and fp16, on the H200.
        for op, impl, max_abs_diff in (
            (SILU_AND_MUL, "silu_and_mul", 0.0009765625),
            (GELU_TANH_AND_MUL, "gelu_tanh_and_mul", 0.0625),
        )
    ),
)
