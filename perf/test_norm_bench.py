"""GPU benchmarks of norm.rms_norm: every row of the table, plus torch's own F.rms_norm and
FlashInfer (perf/peers.py, when installed) as peers.

    test_rms_norm[native/rms_norm-tokens=32768-hidden=4096-bf16]
    test_rms_norm[torch/rms_norm-tokens=64-heads=32-hidden=128-bf16]
    test_rms_norm[peer/torch.rms_norm-tokens=1-hidden=7168-bf16]
    test_rms_norm[flashinfer/rmsnorm-tokens=4096-hidden=4096-bf16]    (the table row: our adapter)
    test_rms_norm[peer/flashinfer-tokens=4096-hidden=4096-bf16]       (FlashInfer called directly)

Each case is checked against the reference row before it is timed (the row called through its
PlannedOp, so the op's argument check accepts the inputs; conformance's tolerance), then
timed with CUDA events (L2 flushed before every call), and for decode-sized
cases also by CUDA-graph replay; extra_info holds bytes moved, GB/s and the
percentage of the device-to-device copy bandwidth measured once per session
(perf/gpu_timing.py). Bytes = x read once + weight read once + out written once.

On a machine without CUDA every case is skipped with "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.peers import FLASHINFER, flashinfer_peer
from perf.gpu_cases import (
    bytes_per_element,
    check_against_reference,
    describe_check,
    hidden_shapes,
    load_row,
    reference_row,
    table_arms,
    torch_dtype,
)

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OP = "norm.rms_norm"
PEER = "peer/torch.rms_norm"
EPS = 1e-6
ARMS = table_arms(OP) + [PEER, FLASHINFER]
CASES = hidden_shapes()
# Tolerances of the check before timing: conformance.tolerances (perf/gpu_cases.check_against_reference).


def _peer_callable():
    import torch.nn.functional as F

    if not hasattr(F, "rms_norm"):
        pytest.skip("this torch has no torch.nn.functional.rms_norm")

    def peer(x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    return peer


def _inputs(case):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(case.tokens * 131 + case.hidden)
    dtype = torch_dtype(case.dtype)
    x = torch.randn(case.shape, device="cuda", dtype=torch.float32, generator=generator).to(dtype)
    # weight near 1 with spread, so a kernel that drops or misplaces it fails the check
    weight = 1.0 + 0.25 * torch.randn(case.hidden, device="cuda", dtype=torch.float32, generator=generator)
    return x, weight.to(dtype)


@pytest.mark.parametrize("arm,case", [pytest.param(arm, case, id=f"{arm}-{case.id}") for arm in ARMS for case in CASES])
def test_rms_norm(benchmark, gpu_session, arm, case):
    import torch

    from rapid_llm.kernels.ops.norm.checks import check_rms_norm

    shape = {"num_tokens": case.rows, "hidden": case.hidden}
    x, weight = _inputs(case)
    if arm == PEER:
        checked = fn = _peer_callable()
        graph_safe = True
    elif arm == FLASHINFER:
        checked = fn = flashinfer_peer(OP, case.dtype)
        graph_safe = True
    else:
        # The layout tags the op's check gives these inputs (FlashInfer's row needs x:rows_vector, weight:vector).
        checked, row = load_row(OP, arm, dtype=case.dtype, shape=shape, layout=check_rms_norm(x, weight, EPS)[1])
        fn, graph_safe = checked.impl, row.graph_safe

    reference_name, reference = reference_row(OP)
    expected = reference(x, weight, EPS)
    out = checked(x, weight, EPS)
    torch.cuda.synchronize()
    check = check_against_reference(OP, case.dtype, out, expected, arm=arm, reference=reference_name, case=case.id)
    del out, expected

    element = bytes_per_element(case.dtype)
    bytes_moved = case.elements * element * 2 + case.hidden * weight.element_size()
    benchmark.extra_info.update(
        op=OP,
        row=arm,
        case=case.id,
        **case.describe(),
        eps=EPS,
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="x read + weight read + out written, once each",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(x, weight, EPS), bytes_moved=bytes_moved, graph_safe=graph_safe
    )


# ---------------------------------------------------------------------------
# norm.fused_add_rms_norm: in place (residual += x; x = rms_norm(residual))
# ---------------------------------------------------------------------------

FUSED_OP = "norm.fused_add_rms_norm"
FUSED_PEER = "peer/torch.add_+rms_norm"
FUSED_ARMS = table_arms(FUSED_OP) + [FUSED_PEER, FLASHINFER]
FUSED_CASES = hidden_shapes(per_head=False)


def _fused_peer_callable():
    import torch.nn.functional as F

    if not hasattr(F, "rms_norm"):
        pytest.skip("this torch has no torch.nn.functional.rms_norm")

    def peer(x, residual, weight, eps):
        residual.add_(x)
        x.copy_(F.rms_norm(residual, (x.shape[-1],), weight, eps))
        return x, residual

    return peer


@pytest.mark.parametrize(
    "arm,case", [pytest.param(arm, case, id=f"{arm}-{case.id}") for arm in FUSED_ARMS for case in FUSED_CASES]
)
def test_fused_add_rms_norm(benchmark, gpu_session, arm, case):
    import torch

    from rapid_llm.kernels.ops.norm.checks import check_fused_add_rms_norm

    shape = {"num_tokens": case.rows, "hidden": case.hidden}
    x, weight = _inputs(case)
    residual = torch.randn_like(x, dtype=torch.float32).to(x.dtype)
    if arm == FUSED_PEER:
        checked = fn = _fused_peer_callable()
        graph_safe = True
    elif arm == FLASHINFER:
        checked = fn = flashinfer_peer(FUSED_OP, case.dtype)
        graph_safe = True
    else:
        checked, row = load_row(
            FUSED_OP, arm, dtype=case.dtype, shape=shape, layout=check_fused_add_rms_norm(x, residual, weight, EPS)[1]
        )
        fn, graph_safe = checked.impl, row.graph_safe

    reference_name, reference = reference_row(FUSED_OP)
    expected = reference(x.clone(), residual.clone(), weight, EPS)
    out = checked(x.clone(), residual.clone(), weight, EPS)
    torch.cuda.synchronize()
    check = check_against_reference(
        FUSED_OP, case.dtype, tuple(out), tuple(expected), arm=arm, reference=reference_name, case=case.id
    )
    del out, expected

    element = bytes_per_element(case.dtype)
    bytes_moved = case.elements * element * 4 + case.hidden * weight.element_size()
    benchmark.extra_info.update(
        op=FUSED_OP,
        row=arm,
        case=case.id,
        **case.describe(),
        eps=EPS,
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="x and residual read once and written once, weight read once",
    )
    # Repeated calls keep adding x into residual: values grow linearly, far from overflow in the
    # few hundred calls timed; x is renormalised every call.
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(x, residual, weight, EPS), bytes_moved=bytes_moved, graph_safe=graph_safe
    )
