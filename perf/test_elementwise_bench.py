"""GPU benchmarks of elementwise.scale: every row of the table.

    test_scale[native/scale-tokens=32768-hidden=4096-bf16]

Arms: torch/scale, native/scale (Triton), aot/scale (rapid_llm._C, skipped
with the probe's reason when not built) and jit/scale (the same CUDA source
built on first use; skipped unless RAPID_LLM_JIT=1). A jit arm's first call
compiles or loads the extension: that call is the correctness check below,
so the build never lands in a timed region.

x is a [tokens, hidden] activation of a model preset (Llama-3-8B 4096,
DeepSeek-V3 7168; decode and prefill token counts). Each case must match
the reference row at conformance's tolerance for elementwise.scale, which is
exact (the product is computed in fp32 and rounded once, so only a double
rounding or a wrong factor can differ; the ulp distance is recorded too),
called through the row's PlannedOp (the op's check accepts the inputs), before it is
timed with CUDA events (L2 flushed before every call) and, when
decode-sized, by CUDA-graph replay. Bytes = x read once + out written once.

On a machine without CUDA every case is skipped with "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import (
    HIDDEN_PRESETS,
    bytes_per_element,
    check_against_reference,
    describe_check,
    hidden_shapes,
    load_row,
    reference_row,
    table_arms,
    torch_dtype,
    ulp_distance,
)

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OP = "elementwise.scale"
# Not a power of two: every product needs rounding, so a kernel that rounds
# twice (e.g. multiplies in the input dtype) shows up as a 1-ulp+ difference.
FACTOR = 0.7071067811865476
ARMS = table_arms(OP)
CASES = hidden_shapes([preset for preset in HIDDEN_PRESETS if preset[0] in (4096, 7168)], per_head=False)


@pytest.mark.parametrize("arm,case", [pytest.param(arm, case, id=f"{arm}-{case.id}") for arm in ARMS for case in CASES])
def test_scale(benchmark, gpu_session, arm, case):
    import torch

    checked, row = load_row(
        OP, arm, dtype=case.dtype, shape={"num_elements": case.elements}, layout=frozenset({"x:contiguous"})
    )
    fn = checked.impl
    generator = torch.Generator(device="cuda").manual_seed(case.tokens * 7 + case.hidden)
    x = torch.randn(case.shape, device="cuda", dtype=torch.float32, generator=generator).to(torch_dtype(case.dtype))

    reference_name, reference = reference_row(OP)
    expected = reference(x, FACTOR)
    out = checked(x, FACTOR)  # first call: a jit/ row builds (or loads) its library here, untimed
    torch.cuda.synchronize()
    check = check_against_reference(OP, case.dtype, out, expected, arm=arm, reference=reference_name, case=case.id)
    ulps = ulp_distance(out, expected)  # information (the tolerance above is exact)
    del out, expected

    bytes_moved = case.elements * bytes_per_element(case.dtype) * 2
    benchmark.extra_info.update(
        op=OP,
        row=arm,
        case=case.id,
        **case.describe(),
        factor=FACTOR,
        correctness=f"{describe_check(check, reference_name)}; max {ulps} ulp",
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        max_ulp=ulps,
        bytes_formula="x read + out written, once each",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(x, FACTOR), bytes_moved=bytes_moved, graph_safe=row.graph_safe
    )
