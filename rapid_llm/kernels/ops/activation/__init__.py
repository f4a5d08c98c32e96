"""activation family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
gated.py (the one native Triton kernel behind both gated activations);
FlashInfer's rows adapt in backends/flashinfer/activation.py.
"""

from ...backends import flashinfer as flashinfer_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, GoldenRecord, KernelSpec, ShapeConstraint
from ..common_rows import H200_PARITY, LIBRARY_PARITY, TRITON, TRITON_DEVICES

SILU_AND_MUL = "activation.silu_and_mul"
GELU_TANH_AND_MUL = "activation.gelu_tanh_and_mul"
_HERE = __name__

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
        (SILU_AND_MUL, "silu_and_mul(x, out=None) -> out[..., d] = silu(x[..., :d]) * x[..., d:], "
                       "silu(g) = g * sigmoid(g)"),
        (GELU_TANH_AND_MUL, "gelu_tanh_and_mul(x, out=None) -> out[..., d] = gelu_tanh(x[..., :d]) * x[..., d:], "
                            "gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))"),
    )
)

ROWS = (
    KernelSpec(
        name="torch/silu_and_mul",
        op=SILU_AND_MUL,
        backend="torch",
        target=f"{_HERE}.reference:silu_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        description="fp32 PyTorch reference",
    ),
    KernelSpec(
        name="native/silu_and_mul",
        op=SILU_AND_MUL,
        backend="native",
        target=f"{_HERE}.gated:silu_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/silu_and_mul over every case: 0.00098 (bf16, H200), 3.8e-6 (fp16/fp32,
        # CPU interpreter).
        golden=GoldenRecord(verified=True, max_abs_diff=0.0009765625, baseline="torch/silu_and_mul",
                            evidence=H200_PARITY),
        # 4.36 TB/s (103% of the 2 GiB copy) at 32768 x 14336 bf16 with the flat grid, above FlashInfer's
        # 4.14 in the same run (perf/results/h200/sweep_gated_2026-11-29.json); 3.8x torch eager, 10x the
        # reference; 1.3-1.5 us per call at 1-16 tokens in graph replay vs FlashInfer's 3.3
        # (perf/results/h200/bench_h200.json).
        priority=10,
        description="Triton: one program per (row, column block), fp32 math",
    ),
    KernelSpec(
        name="torch/gelu_tanh_and_mul",
        op=GELU_TANH_AND_MUL,
        backend="torch",
        target=f"{_HERE}.reference:gelu_tanh_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        golden=GoldenRecord.reference(),
        description="fp32 PyTorch reference",
    ),
    KernelSpec(
        name="native/gelu_tanh_and_mul",
        op=GELU_TANH_AND_MUL,
        backend="native",
        target=f"{_HERE}.gated:gelu_tanh_and_mul",
        dtypes=FLOAT_DTYPE_LABELS,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("x:rows", "out:rows"),
        # Largest |diff| vs torch/gelu_tanh_and_mul: 0.0625 in bf16 on the H200 (the int64-offset
        # case, one bf16 step at its largest outputs), 0.00012 on the CPU interpreter.
        golden=GoldenRecord(verified=True, max_abs_diff=0.0625, baseline="torch/gelu_tanh_and_mul",
                            evidence=H200_PARITY),
        # Same kernel as native/silu_and_mul, same numbers (perf/results/h200/bench_h200.json).
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
        KernelSpec(
            name=f"flashinfer/{impl}",
            op=op,
            backend="flashinfer",
            target=f"rapid_llm.kernels.backends.flashinfer.activation:{impl}",
            available="rapid_llm.kernels.backends.flashinfer:available",
            libraries=(flashinfer_backend.REQUIREMENT,),
            # FlashInfer's JIT refuses GPUs below sm75 (flashinfer/jit/core.py); tanh.approx.f32 needs sm75.
            capability=(CapabilityRequirement("cuda", min_sm=75),),
            dtypes=("fp16", "bf16"),
            shape=(ShapeConstraint("intermediate", multiple_of=8),),
            layout=("x:contiguous16", "out:contiguous16"),
            golden=GoldenRecord(verified=True, max_abs_diff=max_abs_diff, baseline=f"torch/{impl}",
                                evidence=LIBRARY_PARITY),
            # Below the native rows (10): slower at every size measured, bf16 intermediate 14336, 1/64/4096/32768
            # tokens: silu 6.8/8.2/94.2/681.6 us against 4.8/6.3/86.9/646.0, gelu_tanh 6.9/8.2/96.4/699.1
            # against 4.9/6.9/86.9/645.4; graph replay at 1 token 3.2-3.4 us against 1.4 us (common_rows.LIBRARY_BENCH).
            priority=5,
            # One launch, no host sync, no per-call host data.
            graph_safe=True,
            description=f"FlashInfer {impl}: one CTA per row, 16-byte vectors, fp32 math",
        )
        # max_abs_diff: the largest |diff| vs the torch row over its parity cases, bf16 and fp16, on the H200.
        for op, impl, max_abs_diff in ((SILU_AND_MUL, "silu_and_mul", 0.0009765625),
                                       (GELU_TANH_AND_MUL, "gelu_tanh_and_mul", 0.0625))
    ),
)
