"""GPU benchmarks of norm.rms_norm: every row of the table, plus torch's own F.rms_norm and
FlashInfer (perf/peers.py, when installed) as peers.

    test_rms_norm[native/rms_norm-tokens=32768-hidden=4096-bf16]
    test_rms_norm[torch/rms_norm-tokens=64-heads=32-hidden=128-bf16]
    test_rms_norm[peer/torch.rms_norm-tokens=1-hidden=7168-bf16]

Each case is checked against the reference row before it is timed, then
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
from perf.gpu_cases import BYTES_PER_ELEMENT, hidden_cases, load_row, reference_row, table_arms, torch_dtype

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OP = "norm.rms_norm"
PEER = "peer/torch.rms_norm"
EPS = 1e-6
ARMS = table_arms(OP) + [PEER, FLASHINFER]
CASES = hidden_cases()

# Output is one rounding of an fp32 result; reduction order differs between
# rows, so a few-ulp difference is legitimate. bf16 (8 significant bits,
# ulp 2**-7 relative at most): 2e-2 is ~2.5 ulp. fp16 (11 bits): 2e-3 is
# ~2 ulp. fp32: summation order over up to 7168 terms.
TOLERANCES = {"bf16": (2e-2, 2e-2), "fp16": (2e-3, 2e-3), "fp32": (1e-5, 1e-5)}


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
    weight = (1.0 + 0.25 * torch.randn(case.hidden, device="cuda", dtype=torch.float32, generator=generator))
    return x, weight.to(dtype)


@pytest.mark.parametrize(
    "arm,case", [pytest.param(arm, case, id=f"{arm}-{case.id}") for arm in ARMS for case in CASES]
)
def test_rms_norm(benchmark, gpu_session, arm, case):
    import torch

    shape = {"num_tokens": case.rows, "hidden": case.hidden}
    if arm == PEER:
        fn, graph_safe = _peer_callable(), True
    elif arm == FLASHINFER:
        fn, graph_safe = flashinfer_peer(OP, case.dtype), True
    else:
        fn, row = load_row(OP, arm, dtype=case.dtype, shape=shape, layout=frozenset({"x:rows"}))
        graph_safe = row.graph_safe
    x, weight = _inputs(case)

    reference_name, reference = reference_row(OP)
    expected = reference(x, weight, EPS)
    out = fn(x, weight, EPS)
    torch.cuda.synchronize()
    atol, rtol = TOLERANCES[case.dtype]
    if arm != reference_name:
        torch.testing.assert_close(out, expected, atol=atol, rtol=rtol,
                                   msg=lambda m: f"{arm} disagrees with {reference_name} on {case.id}: {m}")
    max_abs_diff = (out.float() - expected.float()).abs().max().item()
    del out, expected

    element = BYTES_PER_ELEMENT[case.dtype]
    bytes_moved = case.elements * element * 2 + case.hidden * weight.element_size()
    benchmark.extra_info.update(
        op=OP, row=arm, case=case.id, **case.describe(), eps=EPS,
        correctness=f"vs {reference_name}: max_abs_diff={max_abs_diff:.3g} (atol={atol}, rtol={rtol})",
        max_abs_diff=max_abs_diff,
        bytes_formula="x read + weight read + out written, once each",
    )
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(x, weight, EPS), bytes_moved=bytes_moved,
                           graph_safe=graph_safe)


# ---------------------------------------------------------------------------
# norm.fused_add_rms_norm: in place (residual += x; x = rms_norm(residual))
# ---------------------------------------------------------------------------

FUSED_OP = "norm.fused_add_rms_norm"
FUSED_PEER = "peer/torch.add_+rms_norm"
FUSED_ARMS = table_arms(FUSED_OP) + [FUSED_PEER, FLASHINFER]
FUSED_CASES = hidden_cases(per_head=False)


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

    shape = {"num_tokens": case.rows, "hidden": case.hidden}
    if arm == FUSED_PEER:
        fn, graph_safe = _fused_peer_callable(), True
    elif arm == FLASHINFER:
        fn, graph_safe = flashinfer_peer(FUSED_OP, case.dtype), True
    else:
        fn, row = load_row(FUSED_OP, arm, dtype=case.dtype, shape=shape,
                           layout=frozenset({"x:rows", "residual:rows"}))
        graph_safe = row.graph_safe
    x, weight = _inputs(case)
    residual = torch.randn_like(x, dtype=torch.float32).to(x.dtype)

    reference_name, reference = reference_row(FUSED_OP)
    expected_x, expected_residual = reference(x.clone(), residual.clone(), weight, EPS)
    out_x, out_residual = fn(x.clone(), residual.clone(), weight, EPS)
    torch.cuda.synchronize()
    atol, rtol = TOLERANCES[case.dtype]
    if arm != reference_name:
        for name, got, want in (("x", out_x, expected_x), ("residual", out_residual, expected_residual)):
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol,
                                       msg=lambda m: f"{arm} {name} disagrees with {reference_name} on {case.id}: {m}")
    max_abs_diff = max((out_x.float() - expected_x.float()).abs().max().item(),
                       (out_residual.float() - expected_residual.float()).abs().max().item())
    del out_x, out_residual, expected_x, expected_residual

    element = BYTES_PER_ELEMENT[case.dtype]
    bytes_moved = case.elements * element * 4 + case.hidden * weight.element_size()
    benchmark.extra_info.update(
        op=FUSED_OP, row=arm, case=case.id, **case.describe(), eps=EPS,
        correctness=f"vs {reference_name}: max_abs_diff={max_abs_diff:.3g} (atol={atol}, rtol={rtol})",
        max_abs_diff=max_abs_diff,
        bytes_formula="x and residual read once and written once, weight read once",
    )
    # Repeated calls keep adding x into residual: values grow linearly, far from overflow in the
    # few hundred calls timed; x is renormalised every call.
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(x, residual, weight, EPS), bytes_moved=bytes_moved,
                           graph_safe=graph_safe)
