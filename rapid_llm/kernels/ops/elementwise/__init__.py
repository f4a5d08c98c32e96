"""elementwise family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
scale.py (native Triton row), scale_cuda.py (the CUDA extension's rows).
"""

from ...dispatcher.contract import FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ..rows import extension_rows, native_row, reference_row

SCALE = "elementwise.scale"
_HERE = __name__

LAYOUT_TAGS = {"x:contiguous": "the main input is contiguous (row-major, no gaps)"}

CONTRACTS = (
    OpContract(
        op=SCALE,
        parameters=("x", "factor"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_elements", TOKEN_BUCKETS),),
        layouts=("x:contiguous",),
        check=f"{_HERE}.checks:check_scale",
        doc="""scale(x, factor) -> out = x * factor

x: any shape and strides, fp32/fp16/bf16, cpu or cuda. factor: Python real.
Returns a new contiguous tensor of x's shape and dtype. The product is
computed in fp32 and rounded once to x's dtype (torch's own rule for a
tensor times a Python scalar).""",
    ),
)

ROWS = (
    reference_row(SCALE, f"{_HERE}.reference:scale", FLOAT_DTYPE_LABELS, description="PyTorch reference: x * factor"),
    native_row(
        "native/scale",
        SCALE,
        f"{_HERE}.scale:scale",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:contiguous",),
        # bitwise equal to torch/scale on every conformance case (H200 and CPU interpreter).
        parity=(0.0, "h200.core.parity"),
        # Level with torch's mul at every size measured (evidence h200.core.bench): no better than the
        # reference, so the lowest measured priority, above the reference (UNMEASURED, the floor) and
        # below aot/jit (measured at or below its time).
        priority=0,
        description="Triton: flat 1-D blocks over a contiguous tensor",
    ),
    # The CUDA extension (csrc/elementwise/scale.cu): the same kernel built two ways. Both bitwise equal
    # to torch/scale on every conformance case (incl. 2**31+ elements) on the H200. At or below
    # native/scale's time in every case measured (evidence h200.extension.bench.scale), so ranked above
    # it; jit/scale measured level with aot/scale (within noise) in the same run.
    *extension_rows(
        SCALE,
        f"{_HERE}.scale_cuda:scale",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("x:contiguous",),
        parity=(0.0, "h200.core.parity"),
        priority=1,
        description="CUDA extension rapid_llm._C (RAPID_LLM_BUILD_EXT=1): 16-byte vector loads, int64 indices",
    ),
)
