"""Parity cases of the moe family: inputs, the layout tags they provide, float64 oracles, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
The oracles are written apart from the references (Python loops over tokens and slots, float64 math where
the contract's arithmetic is not itself fixed-precision), so a broken reference cannot hide.
"""

from __future__ import annotations

import math

import torch

from conformance.cases.case import Case
from rapid_llm.kernels.ops.moe import ALIGN, FUSED_MOE, TOPK_ROUTING
from rapid_llm.kernels.ops.moe.checks import check_fused_moe
from rapid_llm.kernels.ops.moe.reference import expert_float, expert_slots
from rapid_llm.kernels.ops.quantization.reference import per_token_group_fp8

_FLOATS = frozenset({"fp32", "fp16", "bf16"})
_IDS = frozenset({"int32", "int64"})
_FP8 = torch.float8_e4m3fn


def _normal(shape, generator, scale=1.0):
    return torch.randn(shape, generator=generator, dtype=torch.float32) * scale


def _strided(tensor, how: str | None):
    """The same values as a view with other strides: "rows" (rows of a wider buffer), "transposed" (the
    last two dims stored the other way round), "every_other" (1-D, every other element)."""
    if how is None:
        return tensor
    if how == "rows":
        wide = torch.full((*tensor.shape[:-1], tensor.shape[-1] + 5), -77, dtype=tensor.dtype, device=tensor.device)
        wide[..., : tensor.shape[-1]] = tensor
        return wide[..., : tensor.shape[-1]]
    if how == "transposed":
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "every_other":
        wide = torch.full((2 * tensor.shape[0],), -77, dtype=tensor.dtype, device=tensor.device)
        wide[::2] = tensor
        return wide[::2]
    raise ValueError(how)


# ---------------------------------------------------------------------------
# moe.topk_routing
# ---------------------------------------------------------------------------


def _routing_case(
    tokens,
    experts,
    top_k,
    *,
    renormalize=True,
    scoring="softmax",
    bias=False,
    groups=1,
    kept=1,
    scaling=1.0,
    integer_logits=False,
    logits_view=None,
    bias_view=None,
):
    def make(dtype, device, generator):
        logits = _normal((tokens, experts), generator, 2.0)
        if integer_logits:  # many exact ties: the contract's tie rule decides them
            logits = logits.round().clamp(-2, 2)
        logits = _strided(logits.to(dtype).to(device), logits_view)
        correction = None
        if bias:
            correction = _normal((experts,), generator, 0.1)
            if integer_logits:
                correction = torch.zeros(experts)  # equal biases keep the ties exact
            correction = _strided(correction.to(device), bias_view)
        args = (logits, top_k, renormalize, scoring, correction, groups, kept, scaling)
        return args, {"num_tokens": tokens, "num_experts": experts, "top_k": top_k}, frozenset()

    return make


def _routing_oracle(logits, top_k, renormalize, scoring, correction_bias, num_expert_groups, topk_groups, scaling):
    """Per token: float64 scores and choices, groups and experts ranked by Python's sort on (value, index)."""
    values = logits.double().cpu()
    tokens, experts = values.shape
    per_group = experts // num_expert_groups
    bias = None if correction_bias is None else correction_bias.double().cpu()
    weights = torch.zeros((tokens, top_k), dtype=torch.float64)
    ids = torch.zeros((tokens, top_k), dtype=torch.int32)
    for t in range(tokens):
        row = values[t]
        scores = torch.softmax(row, 0) if scoring == "softmax" else 1.0 / (1.0 + torch.exp(-row))
        choices = [float(v) for v in (row if bias is None else scores + bias)]
        choices = [-math.inf if math.isnan(c) else c for c in choices]

        def group_score(g):
            members = sorted(choices[g * per_group : (g + 1) * per_group], reverse=True)
            return members[0] if bias is None else members[0] + members[1]

        groups = sorted(range(num_expert_groups), key=lambda g: (-group_score(g), g))[:topk_groups]
        candidates = [e for g in groups for e in range(g * per_group, (g + 1) * per_group)]
        chosen = sorted(candidates, key=lambda e: (-choices[e], e))[:top_k]
        picked = scores[chosen]
        if renormalize:
            picked = picked / picked.sum()
        weights[t] = picked * scaling
        ids[t] = torch.tensor(chosen, dtype=torch.int32)
    return weights.float().to(logits.device), ids.to(logits.device)


ROUTING_CASES = (
    Case("mixtral_8_top2", _routing_case(7, 8, 2)),
    Case("qwen3_128_top8", _routing_case(64, 128, 8)),
    Case("qwen3_not_renormalized", _routing_case(16, 128, 8, renormalize=False)),
    Case(
        "deepseek_v3_grouped_sigmoid_bias",
        _routing_case(33, 256, 8, scoring="sigmoid", bias=True, groups=8, kept=4, scaling=2.5),
    ),
    Case("grouped_softmax_without_bias", _routing_case(9, 64, 6, groups=8, kept=3)),
    Case("sigmoid_without_groups", _routing_case(5, 16, 4, scoring="sigmoid", renormalize=False)),
    Case("one_token", _routing_case(1, 128, 8)),
    # a prefill's tokens, in one dtype (the interpreter takes tens of seconds per call at this size)
    Case(
        "prefill_4096_tokens_grouped",
        _routing_case(4096, 256, 8, scoring="sigmoid", bias=True, groups=8, kept=4),
        dtypes=frozenset({"fp32"}),
    ),
    Case("no_tokens", _routing_case(0, 64, 4)),
    Case("every_expert", _routing_case(3, 6, 6)),
    Case("one_expert", _routing_case(4, 1, 1)),
    Case("exact_ties", _routing_case(12, 32, 5, integer_logits=True)),
    Case(
        "exact_ties_grouped_bias",
        _routing_case(6, 64, 8, scoring="sigmoid", bias=True, groups=8, kept=4, integer_logits=True),
    ),
    Case("strided_logits_rows", _routing_case(10, 128, 8, logits_view="rows")),
    Case(
        "column_major_logits_strided_bias",
        _routing_case(
            11,
            256,
            8,
            scoring="sigmoid",
            bias=True,
            groups=8,
            kept=4,
            logits_view="transposed",
            bias_view="every_other",
        ),
    ),
)


# ---------------------------------------------------------------------------
# moe.align
# ---------------------------------------------------------------------------


def _unused_slots(ids):
    """Every third slot -1 and token 1 naming no expert: what comm.ep_dispatch gives a rank for the slots of
    other ranks' experts (every row must leave them out)."""
    ids = ids.clone()
    ids.view(-1)[::3] = -1
    if ids.shape[0] > 1:
        ids[1] = -1
    return ids


def _align_case(tokens, top_k, experts, block_size, *, start=0, local=None, ids=None, view=None):
    def make(dtype, device, generator):
        if ids == "one_expert":
            values = torch.full((tokens, top_k), experts // 2, dtype=torch.int64)
        elif ids == "few_experts":  # most experts get no slot
            values = torch.randint(0, 3, (tokens, top_k), generator=generator) * (experts // 3)
        else:
            values = torch.randint(0, experts, (tokens, top_k), generator=generator)
        if ids == "unused_slots":
            values = _unused_slots(values)
        topk_ids = _strided(values.to(dtype).to(device), view)
        args = (topk_ids, experts, block_size, start, local)
        dims = {"num_tokens": tokens, "top_k": top_k, "num_experts": experts, "block_size": block_size}
        return args, dims, frozenset()

    return make


def _align_oracle(topk_ids, num_experts, block_size, expert_start, num_local_experts):
    """Python lists: each local expert's slots in order, padded with N, then the tail."""
    local = num_experts - expert_start if num_local_experts is None else num_local_experts
    flat = topk_ids.cpu().reshape(-1).tolist()
    slots = len(flat)
    runs = [[s for s, e in enumerate(flat) if e - expert_start == x] for x in range(local)]
    sorted_ids, block_experts = [], []
    for expert, run in enumerate(runs):
        padded = -(-len(run) // block_size) * block_size
        sorted_ids += run + [slots] * (padded - len(run))
        block_experts += [expert] * (padded // block_size)
    total = len(sorted_ids)
    capacity = -(-(slots + min(slots, local) * (block_size - 1)) // block_size) * block_size
    sorted_ids += [slots] * (capacity - total)
    block_experts += [-1] * (capacity // block_size - len(block_experts))
    device = topk_ids.device
    return (
        torch.tensor(sorted_ids, dtype=torch.int32, device=device),
        torch.tensor(block_experts, dtype=torch.int32, device=device),
        torch.tensor([total], dtype=torch.int32, device=device),
        torch.tensor([len(run) for run in runs], dtype=torch.int32, device=device),
    )


ALIGN_CASES = (
    Case("decode_one_token", _align_case(1, 8, 128, 16), dtypes=_IDS),
    Case("mixtral_7_tokens", _align_case(7, 2, 8, 64), dtypes=_IDS),
    Case("qwen3_64_tokens", _align_case(64, 8, 128, 16), dtypes=_IDS),
    Case("several_chunks", _align_case(700, 3, 16, 32), dtypes=_IDS),
    Case("prefill_4096_tokens", _align_case(4096, 8, 128, 64), dtypes=frozenset({"int32"})),
    Case("most_experts_empty", _align_case(5, 2, 64, 16, ids="few_experts"), dtypes=_IDS),
    Case("every_slot_one_expert", _align_case(40, 4, 8, 16, ids="one_expert"), dtypes=_IDS),
    Case("local_range_of_another_rank", _align_case(30, 8, 128, 16, start=32, local=64), dtypes=_IDS),
    Case("unused_slots_minus_one", _align_case(24, 4, 16, 16, ids="unused_slots"), dtypes=_IDS),
    Case("block_size_1", _align_case(9, 2, 8, 1), dtypes=_IDS),
    Case("block_size_7", _align_case(9, 2, 8, 7), dtypes=_IDS),
    Case("no_tokens", _align_case(0, 8, 16, 16), dtypes=_IDS),
    Case("column_major_ids", _align_case(20, 4, 32, 16, view="transposed"), dtypes=_IDS),
    Case("strided_ids_rows", _align_case(20, 4, 32, 16, view="rows"), dtypes=_IDS),
)


# ---------------------------------------------------------------------------
# moe.fused_moe
# ---------------------------------------------------------------------------


def _block_scales(generator, experts, rows, columns):
    """fp32 [experts, ceil(rows / 128), columns / 128] scales around 1 / 64 (e4m3 weights up to 448)."""
    blocks = (experts, -(-rows // 128), columns // 128)
    return (torch.rand(blocks, generator=generator) + 0.5) / 64


def _expert_weights(shape, touched, device, generator, scale, dtype):
    """[E, R, C] expert weights of `dtype` on `device`: N(0, scale) (fp8: clamped to e4m3's +-448) for the experts
    in `touched`, drawn on the device by a generator seeded from `generator`; 0 for the others."""
    weights = torch.zeros(shape, dtype=dtype, device=device)
    draw = torch.Generator(device=device).manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    for expert in touched:
        values = torch.randn(shape[1:], generator=draw, device=device) * scale
        weights[expert] = (values.clamp(-448, 448) if dtype == _FP8 else values).to(dtype)
    return weights


def _fused_case(
    tokens,
    hidden,
    intermediate,
    experts,
    top_k,
    *,
    shared=0,
    ids=None,
    x_view=None,
    weight_view=None,
    routing_view=None,
    with_out=False,
):
    def make(dtype, device, generator):
        total = experts + shared
        x = _normal((tokens, hidden), generator)
        logits = _normal((tokens, experts), generator)
        weights, chosen = torch.topk(torch.softmax(logits, -1), top_k, dim=-1)
        if ids == "one_expert":
            chosen = torch.full_like(chosen, experts // 2)
        elif ids == "repeated":  # a token naming one expert twice: both slots count
            chosen[:, 1] = chosen[:, 0]
        elif ids == "unused_slots":
            chosen = _unused_slots(chosen)
        # only the experts a slot names (and the shared ones) are drawn: the presets' full weights would take
        # minutes to draw on the host; the rest stay 0 (a row reading an expert no slot names is off by O(1))
        touched = sorted({int(e) for e in chosen.flatten() if e >= 0} | set(range(experts, total)))
        if dtype == _FP8:
            w13 = _expert_weights((total, 2 * intermediate, hidden), touched, device, generator, 64.0, _FP8)
            w2 = _expert_weights((total, hidden, intermediate), touched, device, generator, 64.0, _FP8)
            w13_scale = _block_scales(generator, total, 2 * intermediate, hidden) / math.sqrt(hidden)
            w2_scale = _block_scales(generator, total, hidden, intermediate) / math.sqrt(intermediate)
            x_dtype = torch.bfloat16
        else:
            w13 = _expert_weights((total, 2 * intermediate, hidden), touched, device, generator, hidden**-0.5, dtype)
            w2 = _expert_weights((total, hidden, intermediate), touched, device, generator, intermediate**-0.5, dtype)
            w13_scale = w2_scale = None
            x_dtype = dtype
        x = _strided(x.to(x_dtype).to(device), x_view)
        w13 = _strided(w13, weight_view)
        w2 = _strided(w2, weight_view)
        if w13_scale is not None:  # rows of a wider buffer: a transposed [E, 2, 1] would still be contiguous
            w13_scale = _strided(w13_scale.to(device), weight_view and "rows")
            w2_scale = _strided(w2_scale.to(device), weight_view and "rows")
        topk_weights = _strided(weights.to(device), routing_view)
        topk_ids = _strided(chosen.to(torch.int32).to(device), routing_view)
        out = None
        if with_out:
            out = torch.full((tokens, hidden + 3), float("nan"), dtype=x_dtype, device=device)[:, :hidden]
        args = (x, w13, w2, topk_weights, topk_ids, "silu", w13_scale, w2_scale, shared, out)
        # the layout tags the op's check derives (DeepGEMM's row needs experts:tma, expert_scales:dense)
        layout = check_fused_moe(*args)[1]
        dims = {
            "num_tokens": tokens,
            "hidden": hidden,
            "intermediate": intermediate,
            "num_experts": experts,
            "top_k": top_k,
        }
        return args, dims, layout

    return make


def _silu64(gate):
    return gate / (1.0 + torch.exp(-gate))


def _fused_oracle(x, w13, w2, topk_weights, topk_ids, activation, w13_scale, w2_scale, num_shared_experts, out):
    """Slot by slot in float64: h and a rounded to x's dtype where the contract rounds them; fp8 weights
    dequantized per 128 x 128 block, x and a quantized by the contract's per-token-group arithmetic."""
    tokens, hidden = x.shape
    total, intermediate = w13.shape[0], w13.shape[1] // 2
    experts = total - num_shared_experts
    fp8 = w13.dtype == _FP8

    def weight64(weight, scale, e):
        values = weight[e].double()
        if scale is None:
            return values
        blocks = scale[e].double().repeat_interleave(128, 0)[: values.shape[0]].repeat_interleave(128, 1)
        return values * blocks

    def quantized64(rows):
        q, scale = per_token_group_fp8(rows, 128)
        return q.double() * scale.double().repeat_interleave(128, 1)

    result = torch.zeros((tokens, hidden), dtype=torch.float64, device=x.device)
    for t in range(tokens):
        slots = [(int(topk_ids[t, j]), float(topk_weights[t, j])) for j in range(topk_ids.shape[1])]
        slots = [(e, w) for e, w in slots if 0 <= e < experts]
        slots += [(experts + s, 1.0) for s in range(num_shared_experts)]
        for expert, weight in slots:
            row = quantized64(x[t : t + 1]) if fp8 else x[t : t + 1].double()
            h = (row @ weight64(w13, w13_scale, expert).T).to(x.dtype).double()
            a = (_silu64(h[:, :intermediate]) * h[:, intermediate:]).to(x.dtype)
            a64 = quantized64(a) if fp8 else a.double()
            result[t] += weight * (a64 @ weight64(w2, w2_scale, expert).T)[0]
    return result.to(x.dtype)


_F8_CASE = frozenset({"fp8_e4m3"})

FUSED_CASES = (
    Case("one_token", _fused_case(1, 256, 96, 16, 4)),
    Case("mixtral_like_7_tokens_tails", _fused_case(7, 160, 72, 8, 2)),
    Case("sixteen_tokens", _fused_case(16, 128, 64, 32, 4)),
    Case("sixty_four_tokens", _fused_case(64, 96, 48, 16, 4)),
    Case("prefill_4096_tokens", _fused_case(4096, 64, 32, 8, 2), dtypes=frozenset({"fp32", "bf16"})),
    Case("shared_expert", _fused_case(9, 128, 64, 8, 2, shared=1)),
    Case("every_slot_one_expert", _fused_case(20, 64, 32, 8, 2, ids="one_expert")),
    Case("expert_named_twice", _fused_case(6, 64, 32, 8, 3, ids="repeated")),
    Case("unused_slots_minus_one", _fused_case(9, 128, 64, 8, 4, ids="unused_slots")),
    Case("no_tokens", _fused_case(0, 64, 32, 4, 2)),
    Case("strided_x_and_routing", _fused_case(5, 128, 64, 8, 2, x_view="rows", routing_view="transposed")),
    Case("column_major_weights_caller_out", _fused_case(6, 96, 40, 8, 2, weight_view="transposed", with_out=True)),
    # the presets' dims (GPU: gigabytes of weights): Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V3 (fp8, shared)
    Case("qwen3_30b_a3b_64_tokens", _fused_case(64, 2048, 768, 128, 8), gpu_only=True, dtypes=frozenset({"bf16"})),
    Case("mixtral_8x7b_7_tokens", _fused_case(7, 4096, 14336, 8, 2), gpu_only=True, dtypes=frozenset({"bf16"})),
    Case("deepseek_v3_7_tokens", _fused_case(7, 7168, 2048, 256, 8, shared=1), gpu_only=True, dtypes=_F8_CASE),
    Case("fp8_block_weights", _fused_case(5, 256, 128, 8, 2, shared=1), dtypes=_F8_CASE),
    Case("fp8_unused_slots", _fused_case(6, 256, 128, 8, 4, ids="unused_slots"), dtypes=_F8_CASE),
    Case(
        "fp8_strided",
        _fused_case(3, 256, 128, 4, 2, x_view="rows", weight_view="transposed", routing_view="rows", with_out=True),
        dtypes=_F8_CASE,
    ),
)


#: unit roundoff of the dtype a row may round each expert's y to before the weighted sum
_Y_ROUNDOFF = {torch.float32: 0.0, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def fused_moe_y_rounding_bound(x, w13, w2, topk_weights, topk_ids, activation, w13_scale, w2_scale, shared, out):
    """float64 [T, H]: sum over a token's slots of |w_j| * u * |y_j|, u the unit roundoff of x's dtype.

    The contract lets rows round each expert's y to x's dtype before the weighted sum; each such rounding
    moves y_j by at most u |y_j|, and where a token's slots cancel that is larger than rtol * |out|. y_j is
    computed here in fp32 from the float weights (fp8 weights: their noise tolerance covers it; 0 here)."""
    tokens, hidden = x.shape
    bound = torch.zeros((tokens, hidden), dtype=torch.float64, device=x.device)
    roundoff = _Y_ROUNDOFF.get(x.dtype, 0.0)
    if w13.dtype == torch.float8_e4m3fn or roundoff == 0.0 or tokens == 0:
        return bound
    for expert, rows, slot_weights in expert_slots(topk_ids, topk_weights, w13.shape[0], shared):
        y = expert_float(x[rows], w13, w2, expert).double().abs()
        bound.index_add_(0, rows, y * slot_weights.double().abs()[:, None])
    return roundoff * bound


ACCUMULATION_BOUNDS = {FUSED_MOE: fused_moe_y_rounding_bound}


CASES = {TOPK_ROUTING: ROUTING_CASES, ALIGN: ALIGN_CASES, FUSED_MOE: FUSED_CASES}
ORACLES = {TOPK_ROUTING: _routing_oracle, ALIGN: _align_oracle, FUSED_MOE: _fused_oracle}
TOLERANCES = {
    # moe.topk_routing: (weights, ids). ids exact: every row ranks the same fp32 choices with the same tie
    # rule (the cases' choices are apart by far more than the few ulp exp and sigmoid implementations
    # differ by, or exactly tied). weights: fp32 softmax or sigmoid and one division, a few fp32 ulp
    # between rows and from the float64 oracle; 1e-6 absolute (weights are at most routed_scaling_factor
    # = 2.5: ~20 ulp there) catches a weight taken from the biased choice (off by the bias, ~0.1), a missed
    # renormalisation or scaling (O(1)).
    **{(TOPK_ROUTING, dtype): ((1e-6, 1e-6), (0, 0)) for dtype in ("fp32", "fp16", "bf16")},
    # moe.align: integers, exact.
    **{(ALIGN, dtype): ((0, 0), (0, 0), (0, 0), (0, 0)) for dtype in ("int32", "int64")},
    # moe.fused_moe: out = sum_j w_j y_j, |out| = O(1) in these cases (unit-variance x, weights scaled by
    # 1 / sqrt(fan-in)). Rows differ from the reference and the oracle in the order of fp32 sums (2**-24
    # sqrt(K) relative: ~2**-19 at K = 256) and, through that, in where the rounding of h and a to the
    # dtype lands: a flipped rounding of one a_i moves y by one unit of the dtype times |a_i w2[n, i]|
    # (~1 / sqrt(I) of |y|), rare at these sizes. rtol two units of the dtype (the reference's one rounding
    # and the compared row's), atol 2**-12 (2**-18 for fp32) for those flips and for outputs near 0, plus
    # ACCUMULATION_BOUNDS' term for rows that round each y_j before the sum (where slots cancel, |out| << |y_j|:
    # the H100 parity run saw 0.0029 at |ref| 0.0029 on prefill_4096_tokens/bf16, past 2**-9 + 2**-6 |ref|). What it
    # catches: a slot's weight dropped or applied twice (O(1)), a missing shared expert (O(1)), the gate and
    # up halves swapped (silu(up) * gate: O(1)), h kept unrounded in a low-precision dtype is within it
    # (allowed: rows may keep more precision than the contract's rounding points demand).
    (FUSED_MOE, "fp32"): (2.0**-18, 2.0**-22),
    (FUSED_MOE, "fp16"): (2.0**-12, 2.0**-9),
    (FUSED_MOE, "bf16"): (2.0**-9, 2.0**-6),
    # fp8 weights: bf16 out (two units: 2**-6) elementwise, plus the noise term below.
    (FUSED_MOE, "fp8_e4m3"): (2.0**-6, 2.0**-6),
}
NOISE_TOLERANCES = {
    # moe.fused_moe with fp8 weights (the contract's fp8 numerics): each row quantizes the intermediate
    # a = silu(g) * u from its own h, and h differs between rows by a bf16 rounding (fp8 MMA accumulation
    # order), so an element of a near an e4m3 rounding midpoint lands one e4m3 unit (at most 2**-3 of |a_i|)
    # away, and a group whose amax moves is re-gridded whole. These moves have independent signs: y = q(a) w2^T
    # takes them as a random walk, ||dy|| / ||y|| ~ ||da|| / ||a||, at most 2**-3 / sqrt(6) ~ 0.05 for a wholly
    # re-gridded a (uniform one-unit differences) and sqrt(f) of that when a fraction f of elements moves (a
    # few % here: ~0.01). No elementwise bound separates that from an error (a per-element worst case over
    # I = 2048 terms exceeds |y|), so the check is per token: relative L2 2**-4 (above the wholly re-gridded
    # case), and elementwise 2**-2 of the token's rms (6 sigma of the per-element noise of a wholly
    # re-gridded a). Simulated (conformance/test_moe_fp8_noise.py, I = 2048, top-8): every element of h one
    # bf16 unit off gives relative L2 <= 0.032 and elements <= 0.10 rms. What it catches: a dropped slot of
    # weight w_j moves out[t] by w_j ||y_j|| (relative 0.12-0.24 for the slots carrying >= 10% of a token's
    # weight there; a slot under ~5% is within the noise); swapped gate/up halves, a wrong scale block and a
    # missed shared expert are O(1).
    (FUSED_MOE, "fp8_e4m3"): (2.0**-4, 2.0**-2)
}
