"""GPU benchmarks of the GEMMs: every row of each op, at the presets' projection shapes.

gemm.mm (bf16, every row: cuBLAS, our tiled, split-K and one-token kernels; the torch reference checks
them): every projection of every preset (MM_SHAPES: qkv, o, gate_up, down, lm_head, MoE router gates, each
(N, K) once) at M = 1, 16 (decode), 128, 4096 (prefill); and the 8192^3 anchor. bytes = x + w + out (the weight read
once dominates at decode: pct_of_copy_bw is the decode kernels' figure of merit); FLOPs 2 M N K.

gemm.fp8_mm (fp8 with per-token and per-channel scales: cuBLAS's torch._scaled_mm, our tiled and split-K
kernels) at the 8192^3 anchor and decode (1, 16 tokens) on 8192^2.

The block-scaled fp8 GEMMs at DeepSeek-V3 shapes:

    test_fp8_block_mm[deep_gemm/fp8_gemm_nt-m=4096-n=2112-k=7168-fp8_e4m3]
    test_fp8_grouped_mm_contiguous[torch/fp8_grouped_mm_contiguous-experts=32-per_expert=16-n=4096-k=7168-fp8_e4m3]
    test_fp8_grouped_mm_masked[deep_gemm/m_grouped_masked-experts=32-max_m=128-expected_m=16-n=7168-k=2048-fp8_e4m3]

Shapes (DeepSeek-V3, hidden 7168, fp8 weights in 128x128 blocks):
  dense GEMMs (N, K): (2112, 7168) fused q_a + kv_a projection (1536 + 576), (24576, 1536) q_b
  projection (128 heads x 192), (7168, 16384) o_proj (128 heads x 128), (4096, 7168) shared expert
  gate_up (2 x 2048); M = 1, 64 (decode) and 4096, 16384 (prefill); and 7168 x 7168 at M = 1, 16, 64, 4096;
  routed experts, 256 over 8 GPUs = 32 local experts: gate_up (N 4096, K 7168) and down (N 7168,
  K 2048); contiguous (prefill, tokens sorted by expert, each expert padded to 128 rows) at ~16 and
  ~512 tokens per expert; masked (decode, DeepEP low-latency buffers) with M_max 128 / expected 16
  and M_max 512 / expected 256.

Inputs: activations quantized by quantization.per_token_group_fp8 (column-major TMA-aligned scales, the
engine's path), weights quantized per 128x128 block, seeded. Each arm is checked against the reference row
before timing (conformance's tolerance for the op, over the output elements the contract specifies:
padding rows and rows past masked_m are not), then timed with a preallocated out (as engines call it).
FLOPs count the specified rows only (2 * rows * N * K); extra_info has TFLOPs (event-timed) and
graph_TFLOPs, bytes = a + b + their scales read once + out written. DeepGEMM's JIT compile happens in the
correctness call, before any timing. Skipped without CUDA: "needs a CUDA device"; DeepGEMM rows need sm90
and the library (explain() says so in the skip).
"""

from __future__ import annotations

import math

import pytest

from perf import gpu_timing
from perf.gpu_cases import check_against_reference, describe_check, load_row, reference_row, table_arms
from rapid_llm.models import PRESETS

pytestmark = pytest.mark.skipif(not gpu_timing.cuda_available(), reason=gpu_timing.NEEDS_CUDA)

MM = "gemm.mm"


def _preset_projections() -> tuple[tuple[int, int, str], ...]:
    """(N, K, where) of every gemm.mm call of every preset in the activations' dtype (bf16 here), each shape
    once: the projections the tables must serve well (DeepSeek-V3's fp32 router gate is not a bf16 case)."""
    shapes = {}
    for name, preset in PRESETS.items():
        for use in preset.op_uses():
            if use.op == MM and use.dtype is None:
                dims = dict(use.dims)
                shapes.setdefault((dims["n"], dims["k"]), f"{name} {use.where}")
    return tuple((n, k, where) for (n, k), where in shapes.items())


MM_SHAPES = _preset_projections()
MM_TOKENS = (1, 16, 128, 4096)
MM_ANCHOR = (8192, 8192, 8192)
#: Decode shapes where the weight-only rows are compared with bf16 (the issue's 8192^2 anchor among them).
W8A16_MM = "gemm.w8a16_mm"
W8A16_CASES = tuple(
    (m, n, k, where) for n, k, where in (*MM_SHAPES[:4], (8192, 8192, "anchor 8192^2")) for m in (1, 16)
)
#: gemm.fp8_mm (per-token x per-channel fp8) beside torch._scaled_mm: the 8192^3 anchor and decode on 8192^2.
FP8_MM = "gemm.fp8_mm"
FP8_MM_CASES = (
    (8192, 8192, 8192, "anchor 8192^3"),
    (1, 8192, 8192, "anchor 8192^2"),
    (16, 8192, 8192, "anchor 8192^2"),
)
#: gemm.w4a16_mm (int4, group 128, both checkpoint packings): the 8192^2 anchor at decode and prefill
#: beside bf16 (test_mm has the same shapes), and Llama-3-8B's down projection at decode.
W4A16_MM = "gemm.w4a16_mm"
W4A16_CASES = (
    *((m, 8192, 8192, packing, "anchor 8192^2") for m in (1, 16, 4096) for packing in ("gptq", "awq")),
    *((m, 4096, 14336, "gptq", "llama-3-8b down_proj") for m in (1, 16)),
    # an AWQ checkpoint after ops/gemm/repack.awq_to_gptq_v2: the GPTQ kernels with zeros as stored
    *((m, 8192, 8192, "gptq_v2", "anchor 8192^2") for m in (1, 16)),
)
BLOCK_MM = "gemm.fp8_block_mm"
CONTIGUOUS = "gemm.fp8_grouped_mm_contiguous"
MASKED = "gemm.fp8_grouped_mm_masked"
MODEL = "deepseek-v3"
DENSE_SHAPES = (
    (2112, 7168, "q_a+kv_a proj"),
    (24576, 1536, "q_b proj"),
    (7168, 16384, "o_proj"),
    (4096, 7168, "shared expert gate_up"),
)
DENSE_TOKENS = (1, 64, 256, 1024, 4096, 16384)
#: Beside DENSE_SHAPES x DENSE_TOKENS: the square 7168 x 7168 (the DeepGEMM anchor at 4096 tokens) and the
#: decode buckets' 16 tokens, where the native split-K rows stream the weight.
DENSE_EXTRA = (
    (4096, 7168, 7168, "hidden x hidden (anchor)"),
    *((m, 7168, 7168, "hidden x hidden") for m in (1, 16, 64)),
    (16, 2112, 7168, "q_a+kv_a proj"),
)
EXPERTS = 32
EXPERT_SHAPES = ((4096, 7168, "expert gate_up"), (7168, 2048, "expert down"))
CONTIGUOUS_PER_EXPERT = (16, 512)
MASKED_BUFFERS = ((128, 16), (512, 256))  # (M_max, expected_m)
ALIGNMENT = 128


def _generator(seed):
    import torch

    return torch.Generator(device="cuda").manual_seed(seed)


def _activations(rows, k, seed, groups=None):
    """(q, scale) from the public quantizer: column-major TMA-aligned scales ([G, M, K] via one flat call)."""
    import torch

    from rapid_llm.kernels import per_token_group_fp8

    x = torch.randn((rows * (groups or 1), k), device="cuda", generator=_generator(seed)).bfloat16()
    q, scale = per_token_group_fp8(x, 128, True)
    if groups is None:
        return q, scale
    # Per-group scales in the TMA-aligned layout of each [M_max, K/128] group: [G, K/128, M_max padded].
    aligned = (rows + 3) // 4 * 4
    storage = torch.empty((groups, k // 128, aligned), dtype=torch.float32, device="cuda")
    grouped_scale = storage[:, :, :rows].transpose(1, 2)
    grouped_scale.copy_(scale.reshape(groups, rows, k // 128))
    return q.view(groups, rows, k), grouped_scale


def _weights(n, k, seed, groups=None):
    """(q [.., N, K] e4m3, scale [.., ceil(N/128), K/128] fp32) of N(0, 1/K) weights in 128x128 blocks."""
    import torch

    lead = () if groups is None else (groups,)
    rows = math.ceil(n / 128) * 128
    w = torch.zeros((*lead, rows, k), device="cuda")
    w[..., :n, :] = torch.randn((*lead, n, k), device="cuda", generator=_generator(seed)) / math.sqrt(k)
    blocks = w.unflatten(-1, (-1, 128)).unflatten(-3, (-1, 128))
    scale = blocks.abs().amax(dim=(-3, -1)).clamp_min(1e-4) / 448.0
    q = (blocks / scale[..., :, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.flatten(-2).flatten(-3, -2)[..., :n, :].contiguous(), scale


def channel_weights(n, k, seed):
    """(q [N, K] e4m3, scale [N, 1] fp32) of N(0, 1/K) weights with one scale per output channel."""
    import torch

    w = torch.randn((n, k), device="cuda", generator=_generator(seed)) / math.sqrt(k)
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-4) / 448.0
    return (w / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), scale


def _expert_counts(per_expert, seed):
    """Seeded tokens per expert around `per_expert` (0 .. 2x): a skewed routing, some experts idle at decode."""
    import torch

    counts = torch.randint(0, 2 * per_expert + 1, (EXPERTS,), generator=torch.Generator().manual_seed(seed))
    return [int(c) for c in counts]


def _check_and_time(benchmark, gpu_session, op, arm, planned, args, out, *, specified, flops, bytes_moved, info):
    import torch

    case = info["case"]
    reference_name, reference = reference_row(op)
    want = reference(*args)
    got = planned(*args, out)  # the PlannedOp: the op's check runs, then the row (JIT compile included)
    torch.cuda.synchronize()
    check = check_against_reference(
        op, "fp8_e4m3", got, want, arm=arm, reference=reference_name, case=case, args=args, specified=specified
    )
    del want
    benchmark.extra_info.update(
        op=op,
        row=arm,
        dtype="fp8_e4m3",
        model=MODEL,
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        flops=flops,
        flops_formula="2 * specified rows * N * K",
        bytes_formula="a + b (1 B/element) + fp32 scales read, bf16 out written",
        **info,
    )
    fn = planned.impl
    gpu_timing.record_case(
        benchmark, gpu_session, lambda: fn(*args, out), bytes_moved=bytes_moved, graph_safe=planned.row.graph_safe
    )
    extra = benchmark.extra_info
    extra["TFLOPs"] = flops / (extra["event_median_us"] * 1e-6) / 1e12
    extra["graph_TFLOPs"] = flops / (extra["graph_us"] * 1e-6) / 1e12 if extra.get("graph_us") else None


def _scale_bytes(*tensors):
    return sum(t.numel() * 4 for t in tensors)


# ---------------------------------------------------------------------------
# gemm.mm
# ---------------------------------------------------------------------------


def _mm_params():
    cases = [(m, n, k, where) for n, k, where in MM_SHAPES for m in MM_TOKENS]
    cases.append((*MM_ANCHOR, "anchor 8192^3"))
    cases += [(m, 8192, 8192, "anchor 8192^2") for m in (1, 16, 4096)]  # bf16 beside w8a16_mm and w4a16_mm
    return [
        pytest.param(arm, m, n, k, where, id=f"{arm}-m={m}-n={n}-k={k}-bf16")
        for arm in table_arms(MM)
        if not arm.startswith("torch/")  # the reference checks each arm; it is not ranked
        for m, n, k, where in cases
    ]


def _check_and_time_mm(
    benchmark,
    gpu_session,
    op,
    arm,
    args,
    layout,
    *,
    m,
    n,
    k,
    where,
    bytes_moved,
    bytes_formula,
    dtype="bf16",
    variant="",
):
    """gemm.mm / gemm.w8a16_mm / gemm.w4a16_mm / gemm.fp8_mm: the forced row checked against the reference row,
    then timed (planned.impl); variant (e.g. "-gptq-g128") extends the case's name."""
    import torch

    shape = {"num_tokens": m, "n": n, "k": k}
    planned, _ = load_row(op, arm, dtype=dtype, shape=shape, layout=layout)
    reference_name, reference = reference_row(op)
    want, got = reference(*args), planned(*args)
    torch.cuda.synchronize()
    case = f"m={m}-n={n}-k={k}{variant}"
    check = check_against_reference(op, dtype, got, want, arm=arm, reference=reference_name, case=case, args=args)
    del want, got
    flops = 2 * m * n * k
    benchmark.extra_info.update(
        op=op,
        row=arm,
        dtype=dtype,
        model=where.split()[0],
        correctness=describe_check(check, reference_name),
        max_abs_diff=check["max_abs_diff"],
        bitwise_equal=check["bitwise_equal"],
        flops=flops,
        flops_formula="2 * M * N * K",
        bytes_formula=bytes_formula,
        case=case,
        tokens=m,
        shape=[m, n, k],
        dims=shape,
        where=where,
        phase="decode" if m <= 16 else "prefill",
    )
    fn = planned.impl
    gpu_timing.record_case(benchmark, gpu_session, lambda: fn(*args), bytes_moved=bytes_moved, graph_safe=True)
    extra = benchmark.extra_info
    extra["TFLOPs"] = flops / (extra["event_median_us"] * 1e-6) / 1e12
    extra["graph_TFLOPs"] = flops / (extra["graph_us"] * 1e-6) / 1e12 if extra.get("graph_us") else None


@pytest.mark.parametrize("arm,m,n,k,where", _mm_params())
def test_mm(benchmark, gpu_session, arm, m, n, k, where):
    import torch

    x = torch.randn((m, k), device="cuda", generator=_generator(m + k)).bfloat16()
    w = (torch.randn((n, k), device="cuda", generator=_generator(n + k)) / math.sqrt(k)).bfloat16()
    _check_and_time_mm(
        benchmark,
        gpu_session,
        MM,
        arm,
        (x, w),
        frozenset({"x:rows", "w:rows", "bias:unit"}),  # what gemm.mm's check reports for these arguments
        m=m,
        n=n,
        k=k,
        where=where,
        bytes_moved=2 * (m * k + n * k + m * n),
        bytes_formula="x + w read, out written (bf16)",
    )


@pytest.mark.parametrize(
    "arm,m,n,k,where",
    [
        pytest.param(arm, m, n, k, where, id=f"{arm}-m={m}-n={n}-k={k}-bf16")
        for arm in table_arms(W8A16_MM)
        if not arm.startswith("torch/")
        for m, n, k, where in W8A16_CASES
    ],
)
def test_w8a16_mm(benchmark, gpu_session, arm, m, n, k, where):
    """gemm.w8a16_mm: int8 weights [N, K] with per-channel scales; bytes = x + w_q (1 B) + scales + out."""
    import torch

    x = torch.randn((m, k), device="cuda", generator=_generator(m + k)).bfloat16()
    w = torch.randn((n, k), device="cuda", generator=_generator(n + k)) / math.sqrt(k)
    scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127.0
    w_q = (w / scale).round().clamp(-127, 127).to(torch.int8)
    _check_and_time_mm(
        benchmark,
        gpu_session,
        W8A16_MM,
        arm,
        (x, w_q, scale),
        frozenset({"x:rows", "w:rows"}),
        m=m,
        n=n,
        k=k,
        where=where,
        bytes_moved=2 * m * k + n * k + 4 * n + 2 * m * n,
        bytes_formula="x read (bf16), w_q read (int8), fp32 scales read, out written (bf16)",
    )


@pytest.mark.parametrize(
    "arm,m,n,k,packing,where",
    [
        pytest.param(arm, m, n, k, packing, where, id=f"{arm}-m={m}-n={n}-k={k}-{packing}-g128-bf16")
        for arm in table_arms(W4A16_MM)
        if not arm.startswith("torch/")
        for m, n, k, packing, where in W4A16_CASES
    ],
)
def test_w4a16_mm(benchmark, gpu_session, arm, m, n, k, packing, where):
    """gemm.w4a16_mm: int4 weights of a GPTQ (v1, v2) or AWQ checkpoint, group 128, fp16 scales (as the
    checkpoints store them) with bf16 x; bytes = x + qweight (K N / 2) + qzeros (one int32 per 8 columns per
    group) + scales + out. Random words are valid int4 weights of either packing."""
    import torch

    group = 128
    generator = _generator(m + n + k)
    x = torch.randn((m, k), device="cuda", generator=generator).bfloat16()
    words = (k, n // 8) if packing == "awq" else (k // 8, n)
    qweight = torch.randint(-(2**31), 2**31 - 1, words, device="cuda", generator=generator, dtype=torch.int32)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // 8), device="cuda", generator=generator).int()
    # |W| ~ 16 * scale: scales ~ 1 / (8 sqrt(K)) keep outputs O(1)
    scales = (torch.rand((k // group, n), device="cuda", generator=generator) / (8 * math.sqrt(k))).half()
    _check_and_time_mm(
        benchmark,
        gpu_session,
        W4A16_MM,
        arm,
        (x, qweight, scales, qzeros, group, packing),
        # what gemm.w4a16_mm's check reports for these arguments
        frozenset({"x:rows", "w:gptq"}) if packing != "awq" else frozenset({"x:rows"}),
        m=m,
        n=n,
        k=k,
        where=where,
        bytes_moved=2 * m * k + n * k // 2 + (k // group) * (n // 8) * 4 + (k // group) * n * 2 + 2 * m * n,
        bytes_formula="x read (bf16), qweight read (4 bits a weight), qzeros read (an int32 per 8 columns per "
        "group), fp16 scales read, out written (bf16)",
        variant=f"-{packing}-g{group}",
    )


# ---------------------------------------------------------------------------
# gemm.fp8_mm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm,m,n,k,where",
    [
        pytest.param(arm, m, n, k, where, id=f"{arm}-m={m}-n={n}-k={k}-fp8_e4m3")
        for arm in table_arms(FP8_MM)
        if not arm.startswith("torch/")
        for m, n, k, where in FP8_MM_CASES
    ],
)
def test_fp8_mm(benchmark, gpu_session, arm, m, n, k, where):
    """gemm.fp8_mm: activations from quantization.per_token_fp8 (scales [M, 1]), weights quantized per output
    channel (scales [N, 1]); bytes = a + b (1 B/element) + fp32 scales + bf16 out."""
    import torch

    from rapid_llm.kernels import per_token_fp8

    a, a_scale = per_token_fp8(torch.randn((m, k), device="cuda", generator=_generator(m + k)).bfloat16())
    b, b_scale = channel_weights(n, k, seed=n + k)
    _check_and_time_mm(
        benchmark,
        gpu_session,
        FP8_MM,
        arm,
        (a, a_scale, b, b_scale),
        frozenset({"a:tma", "b:tma", "a:dense", "b:dense", "bias:unit"}),  # what gemm.fp8_mm's check reports
        m=m,
        n=n,
        k=k,
        where=where,
        bytes_moved=m * k + n * k + 4 * (m + n) + 2 * m * n,
        bytes_formula="a + b read (fp8), fp32 scales read, out written (bf16)",
        dtype="fp8_e4m3",
    )


# ---------------------------------------------------------------------------
# gemm.fp8_block_mm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm,m,n,k,where",
    [
        pytest.param(arm, m, n, k, where, id=f"{arm}-m={m}-n={n}-k={k}-fp8_e4m3")
        for arm in table_arms(BLOCK_MM)
        for m, n, k, where in (*((m, n, k, where) for n, k, where in DENSE_SHAPES for m in DENSE_TOKENS), *DENSE_EXTRA)
    ],
)
def test_fp8_block_mm(benchmark, gpu_session, arm, m, n, k, where):
    import torch

    a, a_scale = _activations(m, k, seed=m * 7 + k)
    b, b_scale = _weights(n, k, seed=n + k)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    planned, _ = load_row(
        BLOCK_MM,
        arm,
        dtype="fp8_e4m3",
        shape={"num_tokens": m, "n": n, "k": k},
        layout=frozenset({"a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense"}),
    )
    _check_and_time(
        benchmark,
        gpu_session,
        BLOCK_MM,
        arm,
        planned,
        (a, a_scale, b, b_scale),
        out,
        specified=None,
        flops=2 * m * n * k,
        bytes_moved=m * k + n * k + _scale_bytes(a_scale, b_scale) + m * n * 2,
        info={
            "case": f"m={m}-n={n}-k={k}",
            "tokens": m,
            "shape": [m, n, k],
            "dims": {"num_tokens": m, "n": n, "k": k},  # what perf.write_rankings buckets by
            "where": where,
            "phase": "decode" if m <= 64 else "prefill",
        },
    )


# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_contiguous
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm,per_expert,n,k,where",
    [
        pytest.param(
            arm, per_expert, n, k, where, id=f"{arm}-experts={EXPERTS}-per_expert={per_expert}-n={n}-k={k}-fp8_e4m3"
        )
        for arm in table_arms(CONTIGUOUS)
        for n, k, where in EXPERT_SHAPES
        for per_expert in CONTIGUOUS_PER_EXPERT
    ],
)
def test_fp8_grouped_mm_contiguous(benchmark, gpu_session, arm, per_expert, n, k, where):
    import torch

    counts = _expert_counts(per_expert, seed=per_expert)
    ids = []
    for expert, count in enumerate(counts):
        padded = math.ceil(count / ALIGNMENT) * ALIGNMENT
        ids += [expert] * count + [-1] * (padded - count)
    rows = len(ids)
    m_indices = torch.tensor(ids, dtype=torch.int32, device="cuda")
    a, a_scale = _activations(rows, k, seed=rows + k)
    b, b_scale = _weights(n, k, seed=n + k, groups=EXPERTS)
    out = torch.empty((rows, n), dtype=torch.bfloat16, device="cuda")
    planned, _ = load_row(
        CONTIGUOUS,
        arm,
        dtype="fp8_e4m3",
        shape={"num_tokens": rows, "n": n, "k": k, "num_groups": EXPERTS},
        layout=frozenset({"a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "m_indices:contiguous"}),
    )
    tokens = sum(counts)
    _check_and_time(
        benchmark,
        gpu_session,
        CONTIGUOUS,
        arm,
        planned,
        (a, a_scale, b, b_scale, m_indices),
        out,
        specified=(m_indices >= 0).unsqueeze(1).expand(rows, n),
        flops=2 * tokens * n * k,
        bytes_moved=rows * k + EXPERTS * n * k + _scale_bytes(a_scale, b_scale) + rows * 4 + rows * n * 2,
        info={
            "case": f"experts={EXPERTS}-per_expert={per_expert}-n={n}-k={k}",
            "tokens": tokens,
            "padded_rows": rows,
            "shape": [rows, n, k],
            "where": where,
            "phase": "decode" if per_expert <= 64 else "prefill",
        },
    )


# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_masked
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm,max_m,expected_m,n,k,where",
    [
        pytest.param(
            arm,
            max_m,
            expected_m,
            n,
            k,
            where,
            id=f"{arm}-experts={EXPERTS}-max_m={max_m}-expected_m={expected_m}-n={n}-k={k}-fp8_e4m3",
        )
        for arm in table_arms(MASKED)
        for n, k, where in EXPERT_SHAPES
        for max_m, expected_m in MASKED_BUFFERS
    ],
)
def test_fp8_grouped_mm_masked(benchmark, gpu_session, arm, max_m, expected_m, n, k, where):
    import torch

    counts = [min(count, max_m) for count in _expert_counts(expected_m, seed=max_m)]
    masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
    a, a_scale = _activations(max_m, k, seed=max_m + k, groups=EXPERTS)
    b, b_scale = _weights(n, k, seed=n + k, groups=EXPERTS)
    out = torch.empty((EXPERTS, max_m, n), dtype=torch.bfloat16, device="cuda")
    planned, _ = load_row(
        MASKED,
        arm,
        dtype="fp8_e4m3",
        shape={"num_groups": EXPERTS, "max_m": max_m, "n": n, "k": k},
        layout=frozenset({"a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "masked_m:contiguous"}),
    )
    rows = torch.arange(max_m, device="cuda")
    specified = (rows < masked_m.unsqueeze(1)).unsqueeze(2).expand(EXPERTS, max_m, n)
    tokens = sum(counts)
    _check_and_time(
        benchmark,
        gpu_session,
        MASKED,
        arm,
        planned,
        (a, a_scale, b, b_scale, masked_m, expected_m),
        out,
        specified=specified,
        flops=2 * tokens * n * k,
        bytes_moved=tokens * k + EXPERTS * n * k + _scale_bytes(a_scale, b_scale) + tokens * n * 2,
        info={
            "case": f"experts={EXPERTS}-max_m={max_m}-expected_m={expected_m}-n={n}-k={k}",
            "tokens": tokens,
            "shape": [EXPERTS, max_m, n, k],
            "where": where,
            "phase": "decode" if max_m <= 128 else "prefill",
        },
    )
