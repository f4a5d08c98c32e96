"""GPU benchmarks of embedding.rotary (NeoX, in place): every row, plus a torch eager peer.

    test_rotary[native/rotary-tokens=32768-q_heads=32-kv_heads=8-head_dim=128-bf16]
    test_rotary[flashinfer/rope_cos_sin_cache-tokens=16-...]   (the table row: our adapter, which also remaps
                                                               padding/out-of-range positions: 3 small ops)
    test_rotary[peer/flashinfer-tokens=16-...]                 (FlashInfer called directly, no remap)

q [T, Hq*128] and k [T, Hk*128] bf16 (Llama-3-8B 32/8, Qwen2.5-7B 28/4), an fp32 cos/sin cache of
8192 positions. Bytes = q and k read and written once + the cos/sin rows read. Checked against the
reference row first, at conformance's tolerance (the row called through its PlannedOp). Peers: torch eager (the reference's math without its host check) and
FlashInfer's apply_rope_with_cos_sin_cache_inplace (the same contract; perf/peers.py), when installed.
Skipped without CUDA: "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.peers import FLASHINFER, flashinfer_peer
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OP = "embedding.rotary"
PEER = "peer/torch.eager"
HEAD_DIM = 128
CASES = [(tokens, q, k) for q, k in ((32, 8), (28, 4)) for tokens in (1, 16, 64, 4096, 32768)]


def _peer(positions, q, k, head_dim, cache, is_neox):
    import torch

    half = cache.shape[1] // 2
    cos, sin = cache.index_select(0, positions).split(half, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    for tensor in (q, k):
        heads = tensor.view(tensor.shape[0], -1, head_dim)
        x1, x2 = heads[..., :half].float(), heads[..., half:].float()
        heads.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
    return q, k


@pytest.mark.parametrize(
    "arm,tokens,q_heads,k_heads",
    [
        pytest.param(arm, t, q, k, id=f"{arm}-tokens={t}-q_heads={q}-kv_heads={k}-head_dim={HEAD_DIM}-bf16")
        for arm in table_arms(OP) + [PEER, FLASHINFER]
        for t, q, k in CASES
    ],
)
def test_rotary(benchmark, gpu_session, arm, tokens, q_heads, k_heads):
    import torch

    from rapid_llm.kernels.ops.embedding.checks import check_rotary

    shape = {"num_tokens": tokens, "num_q_heads": q_heads, "num_kv_heads": k_heads, "head_dim": HEAD_DIM}
    generator = torch.Generator(device="cuda").manual_seed(tokens + q_heads)
    q = torch.randn((tokens, q_heads * HEAD_DIM), device="cuda", generator=generator).to(torch.bfloat16)
    k = torch.randn((tokens, k_heads * HEAD_DIM), device="cuda", generator=generator).to(torch.bfloat16)
    inverse = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM, 2, device="cuda", dtype=torch.float32) / HEAD_DIM)
    angles = torch.arange(8192, device="cuda", dtype=torch.float32)[:, None] * inverse[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)
    positions = torch.randint(0, 8192, (tokens,), device="cuda", generator=generator)
    if arm == PEER:
        checked = fn = _peer
        graph_safe = True
    elif arm == FLASHINFER:
        checked = fn = flashinfer_peer(OP, "bf16")
        graph_safe = True
    else:
        # The layout tags the op's check gives these inputs (FlashInfer's row: qk:rows16, cos_sin_cache:vector16).
        layout = check_rotary(positions, q, k, HEAD_DIM, cache, True)[1]
        checked, row = load_row(OP, arm, dtype="bf16", shape=shape, layout=layout)
        fn, graph_safe = checked.impl, row.graph_safe

    reference_name, reference = reference_row(OP)
    case = f"tokens={tokens}-q_heads={q_heads}-kv_heads={k_heads}-head_dim={HEAD_DIM}-bf16"
    expected = reference(positions, q.clone(), k.clone(), HEAD_DIM, cache, True)
    got = checked(positions, q.clone(), k.clone(), HEAD_DIM, cache, True)
    torch.cuda.synchronize()
    check = check_against_reference(
        OP, "bf16", tuple(got), tuple(expected), arm=arm, reference=reference_name, case=case
    )
    del got, expected

    bytes_moved = 2 * (q.numel() + k.numel()) * 2 + tokens * (HEAD_DIM * 4 + 8)
    benchmark.extra_info.update(
        op=OP,
        row=arm,
        case=case,
        tokens=tokens,
        dtype="bf16",
        shape=[tokens, q_heads, k_heads, HEAD_DIM],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="q and k read + written once, cos/sin rows and positions read",
    )
    # Repeated calls keep rotating q/k in place: values stay bounded (rotations preserve norms).
    gpu_timing.record_case(
        benchmark,
        gpu_session,
        lambda: fn(positions, q, k, HEAD_DIM, cache, True),
        bytes_moved=bytes_moved,
        graph_safe=graph_safe,
    )
