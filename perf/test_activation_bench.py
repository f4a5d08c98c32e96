"""GPU benchmarks of the gated activations: every row of activation.silu_and_mul and
activation.gelu_tanh_and_mul, plus torch eager (F.silu / F.gelu on the gate half times the up half)
and FlashInfer (perf/peers.py, when installed) as peers.

    test_gated[native/silu_and_mul-tokens=32768-d=14336-bf16]

x: [tokens, 2*d] with d the model preset's MLP intermediate size (Llama-3-8B / Mixtral 14336,
Qwen2.5-7B 18944, DeepSeek-V3 18432, Qwen3-30B-A3B expert 768). Bytes = x read once + out
written once. Checked against the reference row before timing; timing as in perf/gpu_timing.py.
On a machine without CUDA every case is skipped with "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.peers import FLASHINFER, flashinfer_peer
from perf.gpu_cases import BYTES_PER_ELEMENT, load_row, reference_row, table_arms, torch_dtype

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OPS = ("activation.silu_and_mul", "activation.gelu_tanh_and_mul")
PEER = "peer/torch.eager"
INTERMEDIATES = (14336, 18944, 768)
TOKENS = (1, 16, 64, 512, 4096, 16384, 32768)
TOLERANCES = {"bf16": (2e-2, 2e-2), "fp16": (2e-3, 2e-3), "fp32": (1e-5, 1e-5)}


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


@pytest.mark.parametrize("op,arm,tokens,d,dtype", [
    pytest.param(op, arm, tokens, d, dtype, id=f"{arm}-tokens={tokens}-d={d}-{dtype}")
    for op in OPS for arm in table_arms(op) + [PEER, FLASHINFER] for tokens, d, dtype in _cases()
])
def test_gated(benchmark, gpu_session, op, arm, tokens, d, dtype):
    import torch

    if arm == PEER:
        fn, graph_safe = _peer(op), True
    elif arm == FLASHINFER:
        fn, graph_safe = flashinfer_peer(op, dtype), True
    else:
        fn, row = load_row(op, arm, dtype=dtype, shape={"num_tokens": tokens, "intermediate": d},
                           layout=frozenset({"x:rows", "out:rows"}))
        graph_safe = row.graph_safe
    generator = torch.Generator(device="cuda").manual_seed(tokens * 7 + d)
    x = torch.randn((tokens, 2 * d), device="cuda", dtype=torch.float32, generator=generator).to(torch_dtype(dtype))
    out = torch.empty((tokens, d), device="cuda", dtype=x.dtype)

    reference_name, reference = reference_row(op)
    expected = reference(x)
    got = fn(x, out)
    torch.cuda.synchronize()
    atol, rtol = TOLERANCES[dtype]
    # The eager peer rounds the activation before the product (bf16 twice): not held to our tolerance.
    if arm not in (reference_name, PEER):
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol,
                                   msg=lambda m: f"{arm} disagrees with {reference_name}: {m}")
    max_abs_diff = (got.float() - expected.float()).abs().max().item()
    del expected

    bytes_moved = tokens * 3 * d * BYTES_PER_ELEMENT[dtype]
    benchmark.extra_info.update(
        op=op, row=arm, case=f"tokens={tokens}-d={d}-{dtype}", tokens=tokens, intermediate=d, dtype=dtype,
        shape=[tokens, 2 * d], phase="decode" if tokens <= 64 else "prefill",
        correctness=f"vs {reference_name}: max_abs_diff={max_abs_diff:.3g}", max_abs_diff=max_abs_diff,
        bytes_formula="x [tokens, 2d] read once + out [tokens, d] written once",
    )
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(x, out), bytes_moved=bytes_moved,
                           graph_safe=graph_safe)
