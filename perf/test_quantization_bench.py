"""GPU benchmarks of the fp8 activation quantization ops: every row of the table.

    test_per_token_group_fp8[native/per_token_group_fp8-tokens=32768-hidden=7168-bf16]
    test_per_token_fp8[torch/per_token_fp8-tokens=64-hidden=4096-bf16]

x: [tokens, hidden] bf16 with hidden from the model presets (Llama-3-8B 4096, DeepSeek-V3 7168: the
input of a block-scaled fp8 GEMM), groups of 128 with column-major TMA-aligned scales (DeepGEMM's
activation format) and per-token scales. Bytes = x read once + q (one byte per element) and the
fp32 scales written once. Each arm is checked against the reference row before timing, called
through its PlannedOp, at conformance's tolerances (q: one e4m3 step; scales: one fp32 ulp) with the
scales' strides equal; whether q and the scales are bitwise equal (the contract's arithmetic is
exact to reproduce) is recorded as `bitwise_equal`. The reference row is the torch
eager peer; FlashInfer has no kernel with this contract. Skipped without CUDA: "needs a CUDA device";
the native rows need sm89+ (explain() says so in the skip).

test_fused_quantization times the fused epilogues (rms_norm / fused_add_rms_norm / silu_and_mul, then
group or static fp8) at decode and prefill token counts, hidden 4096 and 7168, each beside the unfused
pipeline of our own rows (arm `pipeline/<norm row>+<quant row>`); bytes are the fused op's, so the
fused row's pct_of_copy_bw is its bandwidth and the pipeline's time is directly comparable.
"""

from __future__ import annotations

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

GROUP_OP = "quantization.per_token_group_fp8"
TOKEN_OP = "quantization.per_token_fp8"
GROUP_SIZE = 128
CASES = [(tokens, hidden) for hidden in (4096, 7168) for tokens in (1, 16, 64, 512, 4096, 16384, 32768)]


def _inputs(tokens, hidden):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(tokens * 3 + hidden)
    return (torch.randn((tokens, hidden), device="cuda", generator=generator) * 4).bfloat16()


def _check_and_time(benchmark, gpu_session, op, arm, planned, x, args, groups_per_token):
    import torch

    tokens, hidden = x.shape
    case = f"tokens={tokens}-hidden={hidden}-bf16"
    reference_name, reference = reference_row(op)
    want_q, want_scale = reference(x, *args)
    got_q, got_scale = planned(x, *args)
    torch.cuda.synchronize()
    # The scales' layout is part of the contract (column-major TMA-aligned for the group op).
    assert got_scale.stride() == want_scale.stride(), (
        f"{arm}: scale strides {got_scale.stride()}, {reference_name} {want_scale.stride()}"
    )
    check = check_against_reference(
        op, "bf16", (got_q, got_scale), (want_q, want_scale), arm=arm, reference=reference_name, case=case
    )
    del got_q, got_scale, want_q, want_scale
    bytes_moved = x.numel() * (2 + 1) + tokens * groups_per_token * 4
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        tokens=tokens,
        hidden=hidden,
        dtype="bf16",
        shape=[tokens, hidden],
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="x read (2 B/element) + q written (1 B/element) + fp32 scales written",
    )
    fn = planned.impl
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(x, *args), bytes_moved=bytes_moved, graph_safe=planned.row.graph_safe
    )


@pytest.mark.parametrize(
    "arm,tokens,hidden",
    [
        pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
        for arm in table_arms(GROUP_OP)
        for tokens, hidden in CASES
    ],
)
def test_per_token_group_fp8(benchmark, gpu_session, arm, tokens, hidden):
    planned, _ = load_row(
        GROUP_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden}, layout=frozenset({"x:rows"})
    )
    _check_and_time(
        benchmark,
        gpu_session,
        GROUP_OP,
        arm,
        planned,
        _inputs(tokens, hidden),
        (GROUP_SIZE, True),
        hidden // GROUP_SIZE,
    )


@pytest.mark.parametrize(
    "arm,tokens,hidden",
    [
        pytest.param(arm, tokens, hidden, id=f"{arm}-tokens={tokens}-hidden={hidden}-bf16")
        for arm in table_arms(TOKEN_OP)
        for tokens, hidden in CASES
    ],
)
def test_per_token_fp8(benchmark, gpu_session, arm, tokens, hidden):
    planned, _ = load_row(
        TOKEN_OP, arm, dtype="bf16", shape={"num_tokens": tokens, "hidden": hidden}, layout=frozenset({"x:rows"})
    )
    _check_and_time(benchmark, gpu_session, TOKEN_OP, arm, planned, _inputs(tokens, hidden), (), 1)


# ---------------------------------------------------------------------------
# The fused epilogues (quantization/fused_fp8.py): every row of each fused op, beside the unfused pipeline of
# our own rows (the two ops one after the other, each its native row: what the fused op replaces).
#
#     test_fused_quantization[quantization.rms_norm_per_token_group_fp8-native/rms_norm_per_token_group_fp8-tokens=4096-hidden=7168-bf16]
#     test_fused_quantization[quantization.rms_norm_per_token_group_fp8-pipeline/native/rms_norm+native/per_token_group_fp8-tokens=1-hidden=4096-bf16]
#
# Bytes are the fused op's (inputs read once, outputs written once): the pipeline arm moves more (its
# intermediate goes out and back), so its pct_of_copy_bw reads as "the fused op's bytes per its time".
# The static forms have no native static quantizer to pair with: their pipeline's second step is the torch
# reference's reciprocal multiply (eager, a few kernels).
# ---------------------------------------------------------------------------

FUSED_TOKENS = (1, 16, 64, 512, 4096, 16384, 32768)
FUSED_HIDDEN = (4096, 7168)
STATIC_SCALE = 0.02

#: op -> the unfused pipeline's (op, row) pairs: the norm or activation, then the quantizer (None: the
#: torch reciprocal multiply of the static forms).
FUSED_OPS = {
    "quantization.rms_norm_per_token_group_fp8": (
        ("norm.rms_norm", "native/rms_norm"),
        (GROUP_OP, "native/per_token_group_fp8"),
    ),
    "quantization.fused_add_rms_norm_per_token_group_fp8": (
        ("norm.fused_add_rms_norm", "native/fused_add_rms_norm"),
        (GROUP_OP, "native/per_token_group_fp8"),
    ),
    "quantization.rms_norm_static_fp8": (("norm.rms_norm", "native/rms_norm"), None),
    "quantization.fused_add_rms_norm_static_fp8": (("norm.fused_add_rms_norm", "native/fused_add_rms_norm"), None),
    "quantization.silu_and_mul_per_token_group_fp8": (
        ("activation.silu_and_mul", "native/silu_and_mul"),
        (GROUP_OP, "native/per_token_group_fp8"),
    ),
}


def _pipeline_arm(op) -> str:
    first, second = FUSED_OPS[op]
    return f"pipeline/{first[1]}+" + (second[1] if second else "torch.static_fp8")


def _fused_args(op, tokens, hidden):
    """The op's arguments (bf16, hidden 4096/7168; silu: x [T, 2 * hidden]) and its contract dims."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(tokens * 7 + hidden)
    name = op.partition(".")[2]
    width = 2 * hidden if name.startswith("silu") else hidden
    x = (torch.randn((tokens, width), device="cuda", generator=generator) * 4).bfloat16()
    if name.startswith("silu"):
        return (x, GROUP_SIZE, True), {"num_tokens": tokens, "intermediate": hidden, "group_size": GROUP_SIZE}
    # weight near 1 with spread, so a kernel that drops or misplaces it fails the check
    weight = (1.0 + 0.25 * torch.randn(hidden, device="cuda", generator=generator)).bfloat16()
    residual = torch.randn((tokens, hidden), device="cuda", generator=generator).bfloat16()
    scale = torch.full((1,), STATIC_SCALE, device="cuda")
    fused_add = name.startswith("fused_add")
    head = (x, residual, weight) if fused_add else (x, weight)
    dims = {"num_tokens": tokens, "hidden": hidden}
    if "static" in name:
        return (*head, scale, 1e-6), dims
    return (*head, 1e-6, GROUP_SIZE, True), {**dims, "group_size": GROUP_SIZE}


def _fused_bytes(op, tokens, hidden) -> int:
    """Inputs read once, outputs written once (bf16 x; e4m3 q; fp32 group scales; residual read + written)."""
    name = op.partition(".")[2]
    if name.startswith("silu"):
        return tokens * hidden * (2 * 2 + 1) + tokens * (hidden // GROUP_SIZE) * 4
    moved = tokens * hidden * (2 + 1) + hidden * 2
    if name.startswith("fused_add"):
        moved += tokens * hidden * 2 * 2
    if "static" not in name:
        moved += tokens * (hidden // GROUP_SIZE) * 4
    return moved


def _pipeline_callable(op, args, dims):
    """The unfused pipeline of our rows, each loaded as dispatch would plan it (unchecked kernels timed)."""
    from rapid_llm.kernels.ops.quantization.reference import static_fp8

    (first_op, first_row), second = FUSED_OPS[op]
    first_dims = dict(dims)
    first_dims.pop("group_size", None)
    first_layout = frozenset({"x:rows", "residual:rows", "out:rows"}) & _contract_tags(first_op)
    first, _ = load_row(first_op, first_row, dtype="bf16", shape=first_dims, layout=first_layout)
    first_fn = first.impl
    if second is not None:
        width = dims.get("hidden", dims.get("intermediate"))
        quant, _ = load_row(
            second[0], second[1], dtype="bf16", shape={"num_tokens": dims["num_tokens"], "hidden": width},
            layout=frozenset({"x:rows"}),
        )  # fmt: skip
        quant_fn = quant.impl
    name = op.partition(".")[2]
    if name.startswith("silu"):
        x, group_size, column_major = args
        return lambda: quant_fn(first_fn(x), group_size, column_major)
    if name.startswith("fused_add"):
        x, residual, weight, *rest = args
        # The unfused fused_add_rms_norm writes its output over its x: a copy made once keeps the caller's x
        # (later timed calls normalise the previous output again: the values differ, the work does not).
        scratch = x.clone()

        def normalise():
            return first_fn(scratch, residual, weight, rest[-1] if "static" in name else rest[0])[0]

    else:
        x, weight, *rest = args

        def normalise():
            return first_fn(x, weight, rest[-1] if "static" in name else rest[0])

    if "static" in name:
        return lambda: static_fp8(normalise(), rest[0])
    return lambda: quant_fn(normalise(), *rest[1:])


def _contract_tags(op) -> frozenset:
    from rapid_llm.kernels.dispatcher import default_table

    return frozenset(default_table().contracts[op].tags)


@pytest.mark.parametrize(
    "op,arm,tokens,hidden",
    [
        pytest.param(op, arm, tokens, hidden, id=f"{op}-{arm}-tokens={tokens}-hidden={hidden}-bf16")
        for op in FUSED_OPS
        for arm in [*table_arms(op), _pipeline_arm(op)]
        for hidden in FUSED_HIDDEN
        for tokens in FUSED_TOKENS
    ],
)
def test_fused_quantization(benchmark, gpu_session, op, arm, tokens, hidden):
    import torch

    args, dims = _fused_args(op, tokens, hidden)
    case = f"tokens={tokens}-hidden={hidden}-bf16"
    reference_name, reference = reference_row(op)
    # Fresh residual copies: the fused-add ops write it; each call of the check gets the same input.
    fresh = lambda: tuple(a.clone() if isinstance(a, torch.Tensor) and a.dim() == 2 else a for a in args)
    want = reference(*fresh())
    if arm.startswith("pipeline/"):
        fn = _pipeline_callable(op, fresh(), dims)
        got, graph_safe = fn(), True
        checked = fn
    else:
        planned, row = load_row(op, arm, dtype="bf16", shape=dims, layout=_contract_tags(op))
        got, graph_safe = planned(*fresh()), row.graph_safe
        impl = planned.impl
        checked = lambda: impl(*args)
    torch.cuda.synchronize()
    check = check_against_reference(op, "bf16", got, want, arm=arm, reference=reference_name, case=case)
    del got, want
    benchmark.extra_info.update(
        op=op,
        row=arm,
        case=case,
        tokens=tokens,
        hidden=hidden,
        dtype="bf16",
        dims=dims,
        phase="decode" if tokens <= 64 else "prefill",
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        bytes_formula="the fused op's: x (and residual, read + written) read once, weight, q (1 B/element) "
        "and fp32 group scales written once",
    )
    gpu_timing.record_case(
        benchmark, gpu_session, checked, bytes_moved=_fused_bytes(op, tokens, hidden), graph_safe=graph_safe
    )
