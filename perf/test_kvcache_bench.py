"""GPU benchmarks of kvcache.update_kv_buffer (every row, plus torch's index_copy_ as the peer), of
kvcache.update_kv_buffer_fp8 (every row; its reference is the torch eager peer), and of the MLA
latent-cache writes kvcache.update_mla_buffer and kvcache.update_mla_buffer_fp8 (every row).

    test_update_kv_buffer[native/update_kv_buffer-tokens=32768-kv_heads=8-head_dim=128-bf16]

kv [T, 2*Hk, 128] scattered to T random distinct rows of a buffer of 4*T (at least 65536) rows:
the ANCHORS.md shape is T=32768, Hk=8 (Llama-3-8B). Bytes = kv read once + the same bytes
written into the buffer + loc. Checked against the reference row before timing at conformance's
tolerance (bf16: exact; e4m3: one e4m3 step, bitwise equality recorded), the row called through its
PlannedOp.
The MLA writes: DeepSeek-V3's latent 512 + rope 64 per token (rows of 576), T = 1, 64, 4096,
32768 tokens into random distinct rows of a [max(4*T, 65536), 576] cache; latent contiguous, rope
the last 64 columns of the [T, 576] projection output (SGLang's k_pe: a row stride of 576); bf16
in, bf16 or e4m3 out. Bytes = latent + rope read, the row written (2 or 1 B per element) + loc.
Skipped without CUDA: "needs a CUDA device".
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import (
    bytes_per_element,
    check_against_reference,
    describe_check,
    load_row,
    reference_row,
    table_arms,
)

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

OP = "kvcache.update_kv_buffer"
PEER = "peer/torch.index_copy_"
HEAD_DIM = 128
CASES = [(tokens, kv_heads) for kv_heads in (8, 4) for tokens in (1, 16, 64, 4096, 32768)]


def _peer(kv, loc, buffer):
    return buffer.index_copy_(0, loc.long(), kv)


@pytest.mark.parametrize(
    "arm,tokens,kv_heads",
    [
        pytest.param(arm, tokens, kv_heads, id=f"{arm}-tokens={tokens}-kv_heads={kv_heads}-head_dim={HEAD_DIM}-bf16")
        for arm in table_arms(OP) + [PEER]
        for tokens, kv_heads in CASES
    ],
)
def test_update_kv_buffer(benchmark, gpu_session, arm, tokens, kv_heads):
    import torch

    shape = {"num_tokens": tokens, "num_kv_heads": kv_heads, "head_dim": HEAD_DIM}
    if arm == PEER:
        checked = fn = _peer
        graph_safe = True
    else:
        checked, row = load_row(OP, arm, dtype="bf16", shape=shape, layout=frozenset({"kv:rows", "buffer:rows"}))
        fn, graph_safe = checked.impl, row.graph_safe
    generator = torch.Generator(device="cuda").manual_seed(tokens + kv_heads)
    rows = max(4 * tokens, 65536)
    kv = torch.randn((tokens, 2 * kv_heads, HEAD_DIM), device="cuda", generator=generator).to(torch.bfloat16)
    buffer = torch.randn((rows, 2 * kv_heads, HEAD_DIM), device="cuda", generator=generator).to(torch.bfloat16)
    loc = torch.randperm(rows, device="cuda", generator=generator)[:tokens].to(torch.int32)

    reference_name, reference = reference_row(OP)
    case = f"tokens={tokens}-kv_heads={kv_heads}-head_dim={HEAD_DIM}-bf16"
    expected = reference(kv, loc, buffer.clone())
    got = checked(kv, loc, buffer.clone())
    torch.cuda.synchronize()
    check = check_against_reference(OP, "bf16", got, expected, arm=arm, reference=reference_name, case=case)
    del got, expected

    bytes_moved = 2 * kv.numel() * bytes_per_element("bf16") + tokens * loc.element_size()
    benchmark.extra_info.update(
        op=OP,
        row=arm,
        case=case,
        tokens=tokens,
        dtype="bf16",
        shape=[tokens, 2 * kv_heads, HEAD_DIM],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="kv read + the same bytes written + loc read",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(kv, loc, buffer), bytes_moved=bytes_moved, graph_safe=graph_safe
    )


# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer_fp8: the same scatter into an e4m3 buffer, per-tensor K and V scales
# ---------------------------------------------------------------------------

FP8_OP = "kvcache.update_kv_buffer_fp8"


@pytest.mark.parametrize(
    "arm,tokens,kv_heads",
    [
        pytest.param(arm, tokens, kv_heads, id=f"{arm}-tokens={tokens}-kv_heads={kv_heads}-head_dim={HEAD_DIM}-bf16")
        for arm in table_arms(FP8_OP)
        for tokens, kv_heads in CASES
    ],
)
def test_update_kv_buffer_fp8(benchmark, gpu_session, arm, tokens, kv_heads):
    import torch

    shape = {"num_tokens": tokens, "num_kv_heads": kv_heads, "head_dim": HEAD_DIM}
    checked, row = load_row(FP8_OP, arm, dtype="bf16", shape=shape, layout=frozenset({"kv:rows", "buffer:rows"}))
    fn = checked.impl
    generator = torch.Generator(device="cuda").manual_seed(tokens + kv_heads)
    rows = max(4 * tokens, 65536)
    kv = torch.randn((tokens, 2 * kv_heads, HEAD_DIM), device="cuda", generator=generator).to(torch.bfloat16)
    buffer = torch.zeros((rows, 2 * kv_heads, HEAD_DIM), device="cuda").to(torch.float8_e4m3fn)
    loc = torch.randperm(rows, device="cuda", generator=generator)[:tokens].to(torch.int32)
    scales = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")

    reference_name, reference = reference_row(FP8_OP)
    case = f"tokens={tokens}-kv_heads={kv_heads}-head_dim={HEAD_DIM}-bf16"
    expected = reference(kv, loc, buffer.clone(), *scales)
    got = checked(kv, loc, buffer.clone(), *scales)
    torch.cuda.synchronize()
    check = check_against_reference(FP8_OP, "bf16", got, expected, arm=arm, reference=reference_name, case=case)
    del got, expected

    bytes_moved = kv.numel() * (bytes_per_element("bf16") + 1) + tokens * loc.element_size()
    benchmark.extra_info.update(
        op=FP8_OP,
        row=arm,
        case=case,
        tokens=tokens,
        dtype="bf16",
        shape=[tokens, 2 * kv_heads, HEAD_DIM],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="kv read (2 B) + e4m3 written (1 B) + loc read",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(kv, loc, buffer, *scales), bytes_moved=bytes_moved, graph_safe=row.graph_safe
    )


# ---------------------------------------------------------------------------
# kvcache.update_mla_buffer(_fp8): DeepSeek-V3's latent cache rows (512 + 64), bf16 or e4m3
# ---------------------------------------------------------------------------

MLA_OP = "kvcache.update_mla_buffer"
MLA_FP8_OP = "kvcache.update_mla_buffer_fp8"
KV_LORA_RANK, ROPE_DIM = 512, 64
MLA_TOKENS = (1, 64, 4096, 32768)


@pytest.mark.parametrize(
    "op,arm,tokens",
    [
        pytest.param(op, arm, tokens, id=f"{arm}-tokens={tokens}-kv_lora_rank={KV_LORA_RANK}-rope_dim={ROPE_DIM}-bf16")
        for op in (MLA_OP, MLA_FP8_OP)
        for arm in table_arms(op)
        for tokens in MLA_TOKENS
    ],
)
def test_update_mla_buffer(benchmark, gpu_session, op, arm, tokens):
    import torch

    fp8 = op == MLA_FP8_OP
    shape = {"num_tokens": tokens, "kv_lora_rank": KV_LORA_RANK, "rope_dim": ROPE_DIM}
    checked, row = load_row(op, arm, dtype="bf16", shape=shape, layout=frozenset({"latent_rope:rows", "buffer:rows"}))
    fn = checked.impl
    generator = torch.Generator(device="cuda").manual_seed(tokens)
    rows, width = max(4 * tokens, 65536), KV_LORA_RANK + ROPE_DIM
    latent = torch.randn((tokens, KV_LORA_RANK), device="cuda", generator=generator).to(torch.bfloat16)
    projection = torch.randn((tokens, width), device="cuda", generator=generator).to(torch.bfloat16)
    rope = projection[:, KV_LORA_RANK:]
    buffer = torch.randn((rows, width), device="cuda", generator=generator).to(
        torch.float8_e4m3fn if fp8 else torch.bfloat16
    )
    loc = torch.randperm(rows, device="cuda", generator=generator)[:tokens].to(torch.int32)
    scale = (torch.tensor([0.02], device="cuda"),) if fp8 else ()

    reference_name, reference = reference_row(op)
    case = f"tokens={tokens}-kv_lora_rank={KV_LORA_RANK}-rope_dim={ROPE_DIM}-bf16"
    expected = reference(latent, rope, loc, buffer.clone(), *scale)
    got = checked(latent, rope, loc, buffer.clone(), *scale)
    torch.cuda.synchronize()
    check = check_against_reference(op, "bf16", got, expected, arm=arm, reference=reference_name, case=case)
    del got, expected

    written_bytes = 1 if fp8 else bytes_per_element("bf16")
    bytes_moved = tokens * width * (bytes_per_element("bf16") + written_bytes) + tokens * loc.element_size()
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        tokens=tokens,
        dtype="bf16",
        shape=[tokens, width],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula=f"latent + rope read (2 B) + the row written ({written_bytes} B) + loc read",
    )
    gpu_timing.record_case(
        benchmark,
        gpu_session,
        lambda: fn(latent, rope, loc, buffer, *scale),
        bytes_moved=bytes_moved,
        graph_safe=row.graph_safe,
    )
