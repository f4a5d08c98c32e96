"""moe family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
routing.py (native/topk_routing), align.py (native/align: the expert-sorted
layout), fused/ (moe.fused_moe's native pipelines, one module each: sorted.py
over the expert-sorted layout; slots.py over the token slots as they come;
each for float and fp8 block-scaled weights). DeepGEMM's composed row is in
rapid_llm/kernels/backends/deep_gemm/moe.py.

Words the contracts share:
  - a token's slots: the top_k (expert id, weight) pairs routing gave it;
    slot s = t * top_k + j is column j of token t in topk_ids [T, top_k];
  - local experts: the experts this process holds (expert parallelism);
    expert_start .. expert_start + num_local_experts - 1 of the global ids.
"""

from ...backends import deep_gemm as deep_gemm_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import UNMEASURED, ShapeConstraint
from ..common_rows import TRITON_DEVICES, TRITON_DOT_DEVICES, TRITON_FP8_DEVICES
from ..gemm import DEEP_GEMM_DEVICES
from ..rows import library_row, native_row, reference_row

TOPK_ROUTING = "moe.topk_routing"
ALIGN = "moe.align"
FUSED_MOE = "moe.fused_moe"
_HERE = __name__

#: The expert-id dtypes the layout ops read (what torch.topk returns, and what engines store).
ID_DTYPES = frozenset({"int32", "int64"})
#: fused_moe's dtype is its weights': float weights, or fp8 e4m3 with 128 x 128 block scales.
FUSED_DTYPES = FLOAT_DTYPE_LABELS | {"fp8_e4m3"}
#: The scale block of fp8 block-scaled weights (DeepSeek-V3's checkpoint recipe, as the gemm family's).
SCALE_BLOCK = 128
#: The decode-shaped pipeline's token range: it reads each slot's expert weights on its own (no sort), which
#: pays while a step's slots rarely share an expert. The edge of the 2-16 token bucket.
SLOTS_MAX_TOKENS = 16

#: fp8 weights' dims: whole 128 x 128 scale blocks (the op's check refuses others).
_FP8_DIMS = (
    ShapeConstraint("hidden", multiple_of=SCALE_BLOCK),
    ShapeConstraint("intermediate", multiple_of=SCALE_BLOCK),
)

#: The DeepGEMM masked row's token range: its buffer holds 128 rows per expert, at most one per token.
MASKED_MAX_TOKENS = 128

LAYOUT_TAGS = {
    "experts:tma": "w13 and w2 each have unit stride along their last dim, a 16-byte-aligned start and row "
    "stride, rows that do not overlap and experts packed without gaps: what DeepGEMM's TMA loads read",
    "expert_scales:dense": "w13_scale and w2_scale are each row-major or column-major per expert without gaps, "
    "experts packed without gaps (what DeepGEMM's sm90 kernels read)",
}

_VALUES = """checked (OpInputError) for CPU tensors always and on CUDA under
RAPID_LLM_CHECK_BOUNDS=1 (one device sync)"""

CONTRACTS = (
    OpContract(
        op=TOPK_ROUTING,
        parameters=(
            "logits",
            "top_k",
            "renormalize",
            "scoring",
            "correction_bias",
            "num_expert_groups",
            "topk_groups",
            "routed_scaling_factor",
        ),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_experts", EXACT), ("top_k", EXACT)),
        layouts=(),
        check=f"{_HERE}.checks:check_topk_routing",
        doc="""topk_routing(logits, top_k, renormalize=True, scoring="softmax", correction_bias=None,
             num_expert_groups=1, topk_groups=1, routed_scaling_factor=1.0) -> (weights, ids)

A router's choice of top_k experts per token: Mixtral and Qwen3-MoE (softmax,
renormalised), DeepSeek-V3 (sigmoid, correction bias, 8 groups of which 4
kept, renormalised, times 2.5).

logits: [T, E] float32, float16 or bfloat16 (T >= 0, E >= 1), any strides.
Per token, in fp32:
  score[e]  = softmax(logits)[e] (scoring="softmax") or sigmoid(logits[e])
              = 1 / (1 + exp(-logits[e])) (scoring="sigmoid");
  choice[e] = score[e] + correction_bias[e] (correction_bias: a float [E]
              tensor, any stride, on logits' device); without a correction
              bias (None) choice[e] = logits[e]: the order of the scores,
              free of their rounding;
  groups: the E experts split into num_expert_groups runs of E / groups
              (a divisor of E); a group's score is the largest choice in it
              without a correction bias (DeepSeek-V2), the sum of its two
              largest with one (DeepSeek-V3; groups of at least 2 experts);
              the topk_groups groups with the largest scores are kept
              (1 <= topk_groups <= num_expert_groups);
  ids       = the top_k kept experts with the largest choices, in descending
              order of choice (1 <= top_k <= the kept groups' experts);
  weights   = score[ids], divided by their sum when renormalize, times
              routed_scaling_factor (a Python number).
Ties (equal choices, equal group scores) go to the lower index, on every row.
A NaN choice ranks below every number.
Returns weights: [T, top_k] float32 and ids: [T, top_k] int32, new contiguous
tensors. Rows compute exp and sigmoid in fp32 to within a few ulp of each
other: experts whose choices differ by less than that may be ranked either
way, and weights agree to that precision.""",
    ),
    OpContract(
        op=ALIGN,
        parameters=("topk_ids", "num_experts", "block_size", "expert_start", "num_local_experts"),
        dtypes=ID_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("top_k", EXACT), ("num_experts", EXACT), ("block_size", EXACT)),
        layouts=(),
        check=f"{_HERE}.checks:check_align",
        doc=f"""align(topk_ids, num_experts, block_size, expert_start=0, num_local_experts=None)
    -> (sorted_ids, block_experts, padded_count, counts)

The expert-sorted layout the fused MoE kernels and DeepGEMM's m-grouped
contiguous GEMM read: the token slots grouped by local expert, each expert's
run padded to a multiple of block_size, so that every block of block_size
entries belongs to one expert. CUDA-graph safe: every output's size follows
from the arguments' shapes alone, and no value is read on the host.

topk_ids: [T, top_k] int32 or int64 (T >= 0, top_k >= 1), any strides;
num_experts: the global expert count E >= 1; block_size >= 1; the local
experts: expert_start >= 0 and num_local_experts (None: E - expert_start)
>= 1 with expert_start + num_local_experts <= E. With N = T * top_k slots,
L = num_local_experts and capacity = the least multiple of block_size >=
N + min(N, L) * (block_size - 1) (an upper bound of the padded total):
  counts: [L] int32, counts[e] = the slots whose id is expert_start + e;
  sorted_ids: [capacity] int32: local expert 0's slots in ascending slot
    order, then N up to the next multiple of block_size, then expert 1's
    (an expert without slots takes no entry), ...; every entry from the
    padded total on is N too;
  block_experts: [capacity / block_size] int32: the local expert of each
    block, -1 for the blocks from the padded total on;
  padded_count: [1] int32, the padded total sum_e round_up(counts[e], block_size).
Ids of other experts (another rank's) and -1 (an unused slot: what
comm.ep_dispatch gives for another rank's expert) are left out. Ids outside
[-1, E) are errors {_VALUES}; unchecked, every row leaves them out as it
does another rank's.""",
    ),
    OpContract(
        op=FUSED_MOE,
        parameters=(
            "x",
            "w13",
            "w2",
            "topk_weights",
            "topk_ids",
            "activation",
            "w13_scale",
            "w2_scale",
            "num_shared_experts",
            "out",
        ),
        dtypes=FUSED_DTYPES,
        dims=(
            ("num_tokens", TOKEN_BUCKETS),
            ("hidden", EXACT),
            ("intermediate", EXACT),
            ("num_experts", EXACT),
            ("top_k", EXACT),
        ),
        layouts=("experts:tma", "expert_scales:dense"),
        check=f"{_HERE}.checks:check_fused_moe",
        doc=f"""fused_moe(x, w13, w2, topk_weights, topk_ids, activation="silu", w13_scale=None, w2_scale=None,
          num_shared_experts=0, out=None) -> out [T, H]

The routed experts of an MoE layer (SwiGLU experts, the gate_up and down
projections as a checkpoint stores them), each token's experts' outputs
summed with its routing weights:
  out[t] = sum_j topk_weights[t, j] * expert(topk_ids[t, j], x[t])
           + sum over the shared experts s of expert(s, x[t])
  expert(e, x) = down_e(silu(gate_e(x)) * up_e(x)), silu(g) = g * sigmoid(g)

x: [T, H] (T >= 0) float32, float16 or bfloat16, any strides.
w13: [E + S, 2I, H]: expert e's gate_proj weight in rows 0..I-1 and its
up_proj weight in rows I..2I-1 ([out features, in features] as a linear
layer stores them), any strides. w2: [E + S, H, I], expert e's down_proj
weight, any strides. S = num_shared_experts >= 0: the last S experts are
shared experts, every token's with weight 1 (DeepSeek-V3's, stored beside
the routed ones); E >= 1 routed experts. The op's dtype is the weights':
  - float32, float16 or bfloat16 weights, of x's dtype, w13_scale and
    w2_scale None; numerics: h = x @ w13[e].T accumulated in fp32 and
    rounded to x's dtype, a = silu(h_gate) * h_up in fp32 rounded to x's
    dtype, y = a @ w2[e].T accumulated in fp32;
  - float8_e4m3fn weights with 128 x 128 block scales (DeepSeek-V3's
    checkpoints), x bfloat16, H % 128 == 0 and I % 128 == 0: w13_scale
    float32 [E + S, 2I / 128, H / 128], w2_scale float32 [E + S,
    ceil(H / 128), I / 128], any strides; numerics: x and a quantized as
    quantization.per_token_group_fp8(_, 128) quantizes them, h and y as
    gemm.fp8_block_mm computes them (its accuracy term), a = silu_and_mul(h).
    Each row quantizes a from its own h, so an element of a near an e4m3
    rounding midpoint may land one e4m3 unit from the reference's: rows
    agree per token, ||out[t] - ref[t]||_2 <= 2^-4 ||ref[t]||_2 (plus the
    bf16 rounding), each element within 2^-2 rms(ref[t]) of the reference.
topk_weights: [T, top_k] float32, x's dtype or another float dtype, any
strides; topk_ids: [T, top_k] int32 or int64, any strides, in [0, E) (what
moe.topk_routing returns) or -1 (an unused slot, which adds nothing: what
comm.ep_dispatch gives for another rank's expert, with weight 0). activation: "silu" (the one activation).
out = the weighted sum of each token's y in fp32, rounded once to x's dtype
(bfloat16 for fp8 weights); rows may round y to x's dtype before the sum.
out: None (a new contiguous tensor) or [T, H] of that dtype on x's device,
any strides, sharing no memory with an input; returned.
Ids outside [-1, E) are errors {_VALUES}; unchecked, every row skips such a
slot (it adds nothing). A token may name one expert twice: both slots count.""",
    ),
)

_SORTED_DESCRIPTION = (
    "Triton pipeline over the expert-sorted layout: native/align's kernel, gate_up GEMM with SiLU-and-mul in "
    "its epilogue, down GEMM times the routing weight, a per-token sum in slot order (tl.dot tiles)"
)
_SLOTS_DESCRIPTION = (
    "Triton decode pipeline over the token slots as they come (no sort): gate_up with SiLU-and-mul per slot, "
    "then down for every slot of a token, summed in slot order (CUDA-core dot products)"
)

ROWS = (
    reference_row(
        TOPK_ROUTING,
        f"{_HERE}.reference:topk_routing",
        FLOAT_DTYPE_LABELS,
        description="PyTorch reference: fp32 scores, groups masked, a stable descending sort",
    ),
    native_row(
        "native/topk_routing",
        TOPK_ROUTING,
        f"{_HERE}.routing:topk_routing",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_DEVICES,
        parity=(1.1920928955078125e-07, "h100.moe.parity.routing_align"),
        priority=10,
        description="Triton: one program per block of tokens, the experts of a token in registers, top_k argmax passes",
    ),
    reference_row(
        ALIGN,
        f"{_HERE}.reference:align",
        ID_DTYPES,
        description="PyTorch reference: per-expert counts by scatter_add, positions from a stable sort",
    ),
    native_row(
        "native/align",
        ALIGN,
        f"{_HERE}.align:align",
        dtypes=ID_DTYPES,
        capability=TRITON_DEVICES,
        parity=(0.0, "h100.moe.parity.routing_align"),
        priority=10,
        description="Triton: one program counts, pads and places every slot (block-wise ranks, no atomics)",
    ),
    reference_row(
        FUSED_MOE,
        f"{_HERE}.reference:fused_moe",
        FUSED_DTYPES,
        # it selects each expert's slots on the host (one sync per expert)
        graph_safe=False,
        description="PyTorch reference: a loop over the experts that have slots, fp32 products",
    ),
    native_row(
        "native/fused_moe",
        FUSED_MOE,
        f"{_HERE}.fused.sorted:fused_moe",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_DOT_DEVICES,
        parity=None,
        priority=10,
        description=_SORTED_DESCRIPTION,
    ),
    native_row(
        "native/fused_moe_fp8_block",
        FUSED_MOE,
        f"{_HERE}.fused.sorted:fused_moe_fp8_block",
        dtypes=frozenset({"fp8_e4m3"}),
        capability=TRITON_FP8_DEVICES,
        shape=_FP8_DIMS,
        parity=None,
        priority=10,
        description=_SORTED_DESCRIPTION + "; fp8: each K step's activation tile quantized per 1 x 128 group in "
        "registers, e4m3 tl.dot, scaled by the group and weight block scales",
    ),
    library_row(
        "deep_gemm/fused_moe_contiguous",
        FUSED_MOE,
        "rapid_llm.kernels.backends.deep_gemm.moe:fused_moe_contiguous",
        library=deep_gemm_backend.REQUIREMENT,
        capability=DEEP_GEMM_DEVICES,
        dtypes=frozenset({"fp8_e4m3"}),
        shape=_FP8_DIMS,
        layout=("experts:tma", "expert_scales:dense"),
        parity=(0.0390625, "h100.moe.parity.deep_gemm"),
        priority=UNMEASURED,
        # device ops of sizes fixed by the shapes; DeepGEMM compiles each shape on its first call (warm up)
        graph_safe=True,
        description="our per_token_group_fp8 and align, DeepGEMM's m-grouped contiguous GEMMs (gate_up, down), "
        "our silu_and_mul and quantizer between them, the weighted sum in torch",
    ),
    library_row(
        "deep_gemm/fused_moe_masked",
        FUSED_MOE,
        "rapid_llm.kernels.backends.deep_gemm.moe:fused_moe_masked",
        library=deep_gemm_backend.REQUIREMENT,
        capability=DEEP_GEMM_DEVICES,
        dtypes=frozenset({"fp8_e4m3"}),
        shape=(*_FP8_DIMS, ShapeConstraint("num_tokens", max=MASKED_MAX_TOKENS)),
        layout=("experts:tma", "expert_scales:dense"),
        parity=(0.0390625, "h100.moe.parity.deep_gemm"),
        priority=UNMEASURED,
        graph_safe=True,
        description="DeepGEMM's m-grouped masked GEMMs over a 128-row buffer per expert (decode), composed as "
        "deep_gemm/fused_moe_contiguous; a token's repeated expert folded into one row",
    ),
    native_row(
        "native/fused_moe_slots",
        FUSED_MOE,
        f"{_HERE}.fused.slots:fused_moe",
        dtypes=FLOAT_DTYPE_LABELS,
        capability=TRITON_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=SLOTS_MAX_TOKENS),),
        parity=None,
        priority=UNMEASURED,
        description=_SLOTS_DESCRIPTION,
    ),
    native_row(
        "native/fused_moe_slots_fp8_block",
        FUSED_MOE,
        f"{_HERE}.fused.slots:fused_moe_fp8_block",
        dtypes=frozenset({"fp8_e4m3"}),
        # the e4m3 rounding of the activations is the hardware cast (the interpreter's is wrong)
        capability=TRITON_FP8_DEVICES,
        shape=(*_FP8_DIMS, ShapeConstraint("num_tokens", max=SLOTS_MAX_TOKENS)),
        parity=None,
        priority=UNMEASURED,
        description=_SLOTS_DESCRIPTION + "; fp8: the activations quantized per 1 x 128 group in registers, the "
        "e4m3 weights widened to fp32, each group's products scaled by its and the weight block's scales",
    ),
)
