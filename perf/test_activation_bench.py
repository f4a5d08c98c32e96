"""GPU benchmarks of the gated activations: every row of activation.silu_and_mul and
activation.gelu_tanh_and_mul, plus torch eager (F.silu / F.gelu on the gate half times the up half)
and FlashInfer (perf/peers.py, when installed) as peers.

    test_gated[native/silu_and_mul-tokens=32768-d=14336-bf16]
    test_gated[flashinfer/silu_and_mul-tokens=32768-d=14336-bf16]   (the table row: our adapter)
    test_gated[peer/flashinfer-tokens=32768-d=14336-bf16]           (FlashInfer called directly)

x: [tokens, 2*d] with d the model preset's MLP intermediate size (Llama-3-8B / Mixtral 14336,
Qwen2.5-7B 18944, DeepSeek-V3 18432, Qwen3-30B-A3B expert 768). Bytes = x read once + out
written once. Checked against the reference row before timing (conformance's tolerance; the row
called through its PlannedOp, so the op's check accepts the inputs); timing as in perf/gpu_timing.py.
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
    load_row,
    reference_row,
    table_arms,
    torch_dtype,
)

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OPS = ("activation.silu_and_mul", "activation.gelu_tanh_and_mul")
PEER = "peer/torch.eager"
INTERMEDIATES = (14336, 18944, 768)
TOKENS = (1, 16, 64, 512, 4096, 16384, 32768)


def _cases():
    for d in INTERMEDIATES:
        for tokens in TOKENS:
            if d == 18944 and tokens == 32768:
                continue  # 2.5 GB per tensor; 16384 tokens already shows the prefill behaviour
            yield tokens, d, "bf16"
    yield 4096, 14336, "fp16"
    yield 4096, 14336, "fp32"


def _peer(op):
    import torch
    import torch.nn.functional as F

    activation = F.silu if op.endswith("silu_and_mul") else (lambda g: F.gelu(g, approximate="tanh"))

    def peer(x, out=None):
        d = x.shape[-1] // 2
        return torch.mul(activation(x[..., :d]), x[..., d:], out=out)

    return peer


@pytest.mark.parametrize(
    "op,arm,tokens,d,dtype",
    [
        pytest.param(op, arm, tokens, d, dtype, id=f"{arm}-tokens={tokens}-d={d}-{dtype}")
        for op in OPS
        for arm in table_arms(op) + [PEER, FLASHINFER]
        for tokens, d, dtype in _cases()
    ],
)
def test_gated(benchmark, gpu_session, op, arm, tokens, d, dtype):
    import torch

    from rapid_llm.kernels.ops.activation.checks import check_silu_and_mul

    generator = torch.Generator(device="cuda").manual_seed(tokens * 7 + d)
    x = torch.randn((tokens, 2 * d), device="cuda", dtype=torch.float32, generator=generator).to(torch_dtype(dtype))
    out = torch.empty((tokens, d), device="cuda", dtype=x.dtype)
    if arm == PEER:
        checked = fn = _peer(op)
        graph_safe = True
    elif arm == FLASHINFER:
        checked = fn = flashinfer_peer(op, dtype)
        graph_safe = True
    else:
        # The layout tags the op's check gives these inputs (both gated ops share the check; FlashInfer's
        # rows need x:contiguous16 and out:contiguous16).
        checked, row = load_row(
            op, arm, dtype=dtype, shape={"num_tokens": tokens, "intermediate": d}, layout=check_silu_and_mul(x, out)[1]
        )
        fn, graph_safe = checked.impl, row.graph_safe

    reference_name, reference = reference_row(op)
    expected = reference(x)
    got = checked(x, out)
    torch.cuda.synchronize()
    case = f"tokens={tokens}-d={d}-{dtype}"
    if arm == PEER:
        # The eager peer rounds the activation before the product (bf16 twice): a different function at
        # one rounding more, not held to the contract's tolerance; its difference is recorded.
        max_abs_diff = (got.float() - expected.float()).abs().max().item()
        correctness = f"vs {reference_name}: max_abs_diff={max_abs_diff:.3g} (not held to a tolerance: rounds twice)"
    else:
        check = check_against_reference(op, dtype, got, expected, arm=arm, reference=reference_name, case=case)
        max_abs_diff, correctness = check["max_abs_diff"], describe_check(check, reference_name)
    del expected

    bytes_moved = tokens * 3 * d * bytes_per_element(dtype)
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        tokens=tokens,
        intermediate=d,
        dtype=dtype,
        shape=[tokens, 2 * d],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=correctness,
        max_abs_diff=max_abs_diff,
        bytes_formula="x [tokens, 2d] read once + out [tokens, d] written once",
    )
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(x, out), bytes_moved=bytes_moved, graph_safe=graph_safe)
