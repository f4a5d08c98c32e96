"""GPU benchmarks of embedding.vocab_embedding: every row, plus torch's F.embedding as the peer.

    test_vocab_embedding[native/vocab_embedding-tokens=32768-vocab=152064-hidden=4096-bf16]

Table: a model preset's vocab x hidden in bf16 (Qwen2.5-7B 152064 x 3584, Llama-3-8B 128256 x
4096, DeepSeek-V3 129280 x 7168, plus the ANCHORS.md shape 152064 x 4096); ids uniform over the
vocab. Bytes = the gathered rows read once + out written once (+ ids). Checked against the
reference row before timing at conformance's tolerance (exact), the row called through its PlannedOp. Skipped without CUDA: "needs a CUDA device".
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

OP = "embedding.vocab_embedding"
PEER = "peer/torch.F.embedding"
TABLES = ((152064, 4096), (128256, 4096), (152064, 3584), (129280, 7168))
TOKENS = (1, 16, 64, 4096, 32768)


@pytest.fixture(scope="module")
def tables():
    import torch

    made = {}
    for vocab, hidden in TABLES:
        generator = torch.Generator(device="cuda").manual_seed(vocab + hidden)
        made[(vocab, hidden)] = torch.randn((vocab, hidden), device="cuda", generator=generator).to(torch.bfloat16)
    return made


def _peer():
    import torch.nn.functional as F

    return lambda ids, table: F.embedding(ids, table)


@pytest.mark.parametrize(
    "arm,vocab,hidden,tokens",
    [
        pytest.param(arm, vocab, hidden, tokens, id=f"{arm}-tokens={tokens}-vocab={vocab}-hidden={hidden}-bf16")
        for arm in table_arms(OP) + [PEER]
        for vocab, hidden in TABLES
        for tokens in TOKENS
    ],
)
def test_vocab_embedding(benchmark, gpu_session, tables, arm, vocab, hidden, tokens):
    import torch

    if arm == PEER:
        checked = fn = _peer()
        graph_safe = True
    else:
        checked, row = load_row(
            OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden}, layout=frozenset({"table:rows"})
        )
        fn, graph_safe = checked.impl, row.graph_safe
    table = tables[(vocab, hidden)]
    ids = torch.randint(
        0, vocab, (tokens,), device="cuda", generator=torch.Generator(device="cuda").manual_seed(tokens)
    )

    reference_name, reference = reference_row(OP)
    case = f"tokens={tokens}-vocab={vocab}-hidden={hidden}-bf16"
    expected = reference(ids, table)
    got = checked(ids, table)
    torch.cuda.synchronize()
    check = check_against_reference(OP, "bf16", got, expected, arm=arm, reference=reference_name, case=case)
    del got, expected

    bytes_moved = tokens * hidden * bytes_per_element("bf16") * 2 + tokens * ids.element_size()
    benchmark.extra_info.update(
        op=OP,
        row=arm,
        case=case,
        tokens=tokens,
        hidden=hidden,
        dtype="bf16",
        shape=[vocab, hidden],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="gathered rows read + out written + ids read",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(ids, table), bytes_moved=bytes_moved, graph_safe=graph_safe
    )
