"""embedding family: op contracts, layout tags and rows (data only, torch-free).

Token embeddings and the rotary position embedding (a positional embedding
applied to q and k) live here. Files: checks.py (the ops' argument checks),
reference.py (torch rows), vocab_embedding.py and rotary.py (native Triton rows);
FlashInfer's rotary row adapts in backends/flashinfer/rotary.py.
"""

from ...backends import flashinfer as flashinfer_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, ShapeConstraint
from ..rows import library_row, native_row, reference_row

VOCAB_EMBEDDING = "embedding.vocab_embedding"
ROTARY = "embedding.rotary"
_HERE = __name__

LAYOUT_TAGS = {
    "table:rows": "the embedding table [vocab, hidden] has unit stride along hidden (any row stride)",
    "qk:rows": "q [T, Hq*D], k [T, Hk*D] and cos_sin_cache [P, R] each have unit stride along their last dim "
    "(any token stride)",
    # FlashInfer's rotary row
    "qk:rows16": "q and k have unit stride along their last dim and data pointers and token strides that are "
    "multiples of 16 bytes",
    "cos_sin_cache:vector16": "cos_sin_cache [P, R] is fp32, contiguous, 16-byte aligned, R (rotary_dim) a multiple "
    "of 16, and for GPT-J (is_neox=False) its storage extends >= 16 bytes past its last "
    "row (FlashInfer's rope reads cos/sin as 8-float vectors, up to 4 floats past a row)",
}

CONTRACTS = (
    OpContract(
        op=VOCAB_EMBEDDING,
        parameters=("ids", "table", "vocab_start", "vocab_end"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
        layouts=("table:rows",),
        check=f"{_HERE}.checks:check_vocab_embedding",
        doc="""vocab_embedding(ids, table, vocab_start=0, vocab_end=None) -> out[..., hidden]

ids: int32/int64 [...] token ids, any strides (num_tokens = ids.numel());
table: [rows, hidden] fp32/fp16/bf16 holding the rows of ids vocab_start ..
vocab_end - 1 (a vocab-parallel shard; vocab_end defaults to vocab_start +
rows and may not exceed it; rows may be 0). out[i] = table[ids[i] -
vocab_start] for ids in [vocab_start, vocab_end), a zero row for every
other id: the other shards' tokens (an all-reduce over shards completes the
embedding) and negative ids, which are padding. Every row gives the same
zero rows; no id is an error. Row offsets are int64 (vocab x hidden exceeds
2**31 elements for real models). Returns a new contiguous tensor.""",
    ),
    OpContract(
        op=ROTARY,
        parameters=("positions", "q", "k", "head_dim", "cos_sin_cache", "is_neox"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT), ("head_dim", EXACT)),
        layouts=("qk:rows", "qk:rows16", "cos_sin_cache:vector16"),
        check=f"{_HERE}.checks:check_rotary",
        doc="""rotary(positions, q, k, head_dim, cos_sin_cache, is_neox) -> (q, k), rotated in place

positions: int32/int64 [T], any stride; q: [T, Hq*head_dim]; k: [T,
Hk*head_dim] (q's dtype, not sharing memory with q: views of one fused qkv
tensor are fine); cos_sin_cache: [max_position, rotary_dim] = cos | sin
halves (fp32 or q's dtype), rotary_dim even and <= head_dim (partial
rotary: the last head_dim - rotary_dim dims of each head are left as they
are). For each head, with c, s = cache[pos] halves and the pairs (x1, x2):
    x1' = x1 c - x2 s,   x2' = x2 c + x1 s          (fp32 math, one rounding)
is_neox=True pairs dim i with i + rotary_dim/2 (NeoX / Llama half split);
False pairs 2i with 2i+1 (GPT-J interleaved).
Negative positions are padding: those tokens are left unrotated by every
row. Positions >= max_position are an error, reported (OpInputError) for
CPU tensors and, on CUDA, under RAPID_LLM_CHECK_BOUNDS=1 (a device sync);
unchecked otherwise, when every row leaves those tokens unrotated.""",
    ),
)

ROWS = (
    reference_row(
        VOCAB_EMBEDDING,
        f"{_HERE}.reference:vocab_embedding",
        FLOAT_DTYPE_LABELS,
        description="PyTorch reference: masked index_select (no host sync)",
    ),
    native_row(
        "native/vocab_embedding",
        VOCAB_EMBEDDING,
        f"{_HERE}.vocab_embedding:vocab_embedding",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("table:rows",),
        # Bitwise equal to torch/vocab_embedding on every case (H200 and CPU interpreter).
        parity=(0.0, "h200.core.parity"),
        # Near copy bandwidth at prefill sizes, at or above torch's F.embedding (evidence h200.core.bench).
        priority=10,
        description="Triton: one program per (token, column block), int64 row offsets, no host sync",
    ),
    reference_row(
        ROTARY,
        f"{_HERE}.reference:rotary",
        FLOAT_DTYPE_LABELS,
        description="fp32 PyTorch reference (NeoX and GPT-J), masked positions (no host sync)",
    ),
    native_row(
        "native/rotary",
        ROTARY,
        f"{_HERE}.rotary:rotary",
        dtypes=FLOAT_DTYPE_LABELS,
        layout=("qk:rows",),
        # Largest |diff| vs torch/rotary: 0.015625 in bf16 on the H200 (one bf16 step).
        parity=(0.015625, "h200.core.parity"),
        # Above FlashInfer (5) and far above torch eager at every size measured
        # (evidence h200.core.sweep.rotary_fp8, h200.core.bench).
        priority=10,
        description="Triton: one program per (token, block of q or k heads), no host sync",
    ),
    # FlashInfer 0.6.0's apply_rope_with_cos_sin_cache_inplace (backends/flashinfer/rotary.py). Its kernels
    # (include/flashinfer/pos_enc.cuh, BatchQKApplyRotaryPosIdsCosSinCache*Kernel for head_dim 64/128/256/512;
    # other head dims go to the RopeQuantize path, not adapted here) take fp16/bf16 q/k with unit-stride
    # heads, an fp32 contiguous cache (csrc/rope.cu CHECK_INPUT; rope.py raises for other dtypes) read as
    # 8-float vectors, and index it with pos * rotary_dim unchecked: every token is rotated, padding and
    # out-of-range positions included. The adapter maps those positions to an identity row (cos 1, sin 0)
    # it keeps outside the cache, so they are left as they are, as in every row (adapter docstring).
    # A thread rotates 8 consecutive dims with 8-float cos/sin vectors, so rotary_dim/2 must be a multiple of 8
    # (NeoX halves; cos_sin_cache:vector16).
    library_row(
        "flashinfer/rope_cos_sin_cache",
        ROTARY,
        "rapid_llm.kernels.backends.flashinfer.rotary:rotary",
        library=flashinfer_backend.REQUIREMENT,
        # FlashInfer's JIT refuses GPUs below sm75 (flashinfer/jit/core.py check_cuda_arch).
        capability=(CapabilityRequirement("cuda", min_sm=75),),
        dtypes=("fp16", "bf16"),
        # 512 would need rotary_dim a multiple of 32 (16-float vectors): left to the other rows.
        shape=(ShapeConstraint("head_dim", one_of=(64, 128, 256)),),
        layout=("qk:rows16", "cos_sin_cache:vector16"),
        # Largest |diff| vs torch/rotary over its parity cases, bf16 and fp16, on the H200.
        parity=(0.015625, "h200.libraries.parity"),
        # Below native/rotary (10): slower at every size measured (evidence h200.libraries.bench).
        priority=5,
        # No host sync, no per-call host data: the position remap is 2-3 small device ops, the identity
        # row a buffer built once per (device, rotary_dim, cache address mod row size).
        graph_safe=True,
        description="FlashInfer rope with cos/sin cache: in place, padding/out-of-range positions to an identity row",
    ),
)
