"""The public attention ops as a new user calls them, checked against torch's SDPA by hand.

Small random tensors through `rapid_llm.kernels.prefill` and `decode` in bf16
and fp16 (the README's test command runs this under the CPU interpreter,
RAPID_LLM_TRITON_INTERPRET=1). Whatever row serves must return the right
numbers: Triton's interpreter computes `tl.dot` on bf16 operands wrongly, so
a native attention row selected for bf16 there returns garbage (|out| ~ 1e8
and beyond) without an error. The rows' device condition keeps them out for
bf16 on the interpreter (common_rows.TRITON_DOT_DEVICES), and explain() says
why. The expected values come from torch.nn.functional.scaled_dot_product_attention
in fp32, not from the library's reference row, so a wrong reference fails here too.

Failures caught: a row selected where its result is known wrong (garbage,
no error), the dtype narrowing of a capability being lost from a row or from
dispatch, and an explain() that does not say why the native row is not used.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rapid_llm.kernels as kernels
from rapid_llm.kernels.dispatcher import Planner

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: bf16/fp16 inputs, fp32 softmax: a few units in the last place of the output dtype, far below garbage.
ATOL = {"bf16": 3e-2, "fp16": 4e-3}
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32
PREFILL_LENGTHS = (5, 9)
DECODE_LENGTHS = (7, 12)
PAGE_SIZE = 4


def _sdpa(q, k, v, causal: bool) -> torch.Tensor:
    """q [Lq, Hq, D], k/v [Lk, Hk, D] -> [Lq, Hq, D] in fp32 (GQA by repeating KV heads; causal bottom-right)."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (t.float().transpose(0, 1) for t in (q, k, v))
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    mask = None
    if causal:
        lq, lk = q.shape[1], k.shape[1]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(0, 1)


def _prefill_inputs(dtype):
    generator = torch.Generator().manual_seed(7)
    total = sum(PREFILL_LENGTHS)
    q, k, v = (
        torch.randn(total, heads, HEAD_DIM, generator=generator).to(dtype) for heads in (HEADS, KV_HEADS, KV_HEADS)
    )
    cu_seqlens = torch.tensor([0, *torch.tensor(PREFILL_LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    return (q, k, v, cu_seqlens, max(PREFILL_LENGTHS), HEAD_DIM**-0.5, True)


def _decode_inputs(dtype):
    """A paged buffer [pages * PAGE_SIZE, 2 * Hk, D] (K heads, then V heads) with pages out of order."""
    generator = torch.Generator().manual_seed(11)
    max_pages = -(-max(DECODE_LENGTHS) // PAGE_SIZE)
    pages = torch.randperm(len(DECODE_LENGTHS) * max_pages, generator=generator)
    page_table = pages.reshape(len(DECODE_LENGTHS), max_pages).to(torch.int32)
    kv_buffer = torch.randn(pages.numel() * PAGE_SIZE, 2 * KV_HEADS, HEAD_DIM, generator=generator).to(dtype)
    q = torch.randn(len(DECODE_LENGTHS), HEADS, HEAD_DIM, generator=generator).to(dtype)
    seq_lens = torch.tensor(DECODE_LENGTHS, dtype=torch.int32)
    return (q, kv_buffer, page_table, seq_lens, PAGE_SIZE, HEAD_DIM**-0.5)


def _decode_fp8_inputs(dtype):
    """The decode inputs with the buffer in fp8 e4m3 and unit scales (native/decode_fp8 on the interpreter: its
    products are fp16 for a bf16 q, so it serves bf16 there)."""
    q, kv_buffer, page_table, seq_lens, page_size, sm_scale = _decode_inputs(dtype)
    scale = torch.ones(1, dtype=torch.float32)
    return (q, kv_buffer.float().to(torch.float8_e4m3fn), page_table, seq_lens, page_size, sm_scale, scale, scale)


def _decode_fp8_expected(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale):
    return _decode_expected(q, kv_buffer.float(), page_table, seq_lens, page_size, sm_scale)


def _prefill_expected(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal):
    bounds = cu_seqlens.tolist()
    return torch.cat([_sdpa(q[a:b], k[a:b], v[a:b], causal) for a, b in zip(bounds, bounds[1:])])


def _decode_expected(q, kv_buffer, page_table, seq_lens, page_size, sm_scale):
    outs = []
    for sequence, length in enumerate(seq_lens.tolist()):
        positions = torch.arange(length)
        rows = page_table[sequence].long()[positions // page_size] * page_size + positions % page_size
        kv = kv_buffer[rows]
        outs.append(_sdpa(q[sequence : sequence + 1], kv[:, :KV_HEADS], kv[:, KV_HEADS:], causal=False))
    return torch.cat(outs)


CALLS = {
    "attention.prefill": (kernels.prefill, _prefill_inputs, _prefill_expected),
    "attention.decode": (kernels.decode, _decode_inputs, _decode_expected),
}
#: Calls whose native row serves bf16 on the interpreter too (no bf16 tl.dot): checked for numbers only.
MORE_CALLS = {"attention.decode-fp8_kv": ("attention.decode", kernels.decode, _decode_fp8_inputs, _decode_fp8_expected)}
SDPA_CASES = {**{op: (op, *call) for op, call in CALLS.items()}, **MORE_CALLS}


def _planned(op, args, dtype):
    """The plan the public op's call resolves to (the same check, the same dispatch), for its explain()."""
    planner = Planner()
    _, layout, dims = planner.check_for(op)(*args)
    return planner.plan(op, dtype=dtype, shape=dict(dims), layout=layout)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", sorted(SDPA_CASES))
def test_public_attention_matches_sdpa(case, dtype, env):
    """Catches a row that is selected where it computes garbage: the public op's output against SDPA."""
    if env.device.kind != "cpu":
        pytest.skip("the CPU (interpreter) smoke test: the GPU's parity run covers CUDA")
    op, function, make, expected_of = SDPA_CASES[case]
    args = make(DTYPES[dtype])
    out = function(*args)
    expected = expected_of(*args)
    served = _planned(op, args, dtype).row.name
    assert out.dtype == DTYPES[dtype] and out.shape == expected.shape
    diff = (out.float() - expected).abs().max().item()
    assert diff <= ATOL[dtype], (
        f"{op} in {dtype} on {env.device} (row {served}): max |out - SDPA| = {diff:g}, tolerance {ATOL[dtype]}"
    )


@pytest.mark.parametrize("op", sorted(CALLS))
def test_explain_says_why_native_rows_skip_bf16_on_the_interpreter(op, env):
    """Catches a native attention row eligible for bf16 on the interpreter, or rejected without the reason."""
    if not env.device.triton_interpreter or "triton" not in env.libs.as_dict():
        pytest.skip("needs the CPU interpreter (RAPID_LLM_TRITON_INTERPRET=1) with triton present")
    _, make, _ = CALLS[op]
    fp16 = _planned(op, make(torch.float16), "fp16")
    assert fp16.row.backend == "native", f"a native row serves fp16 on the interpreter:\n{fp16.explain()}"
    bf16 = _planned(op, make(torch.bfloat16), "bf16")
    assert bf16.row.is_reference, f"{op} in bf16 on the interpreter must fall to the reference:\n{bf16.explain()}"
    native = bf16.selection.explanation.verdict(fp16.row.name)
    assert native.status == "rejected"
    reasons = {check.condition: check for check in native.failures}
    assert set(reasons) == {"device"}, f"only the device condition rejects {fp16.row.name}:\n{bf16.explain()}"
    device = reasons["device"]
    assert "tl.dot on bf16" in device.required and "bf16" in device.observed, device.render()
    assert "tl.dot on bf16" in bf16.explain()
