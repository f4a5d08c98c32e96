"""attention family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (the torch rows), tiles.py (shared Triton
helpers), gluon_tiles.py (shared Gluon helpers), splits.py (split-K host rules), and one folder per op
with several native kernels, one module per kernel (each its own row below) and launch.py (their launch
policies): prefill/ (triton.py, triton_tma.py, gluon.py), decode/ (triton.py, cuda.py), mla_decode/
(triton.py, triton_tma.py, gluon.py, gluon_pingpong.py); merge_states.py (attention.merge_states's kernel). The external libraries' adapters live in
rapid_llm/kernels/backends/<library>/attention.py.

Shared conventions of every attention op:
  - softmax(q . k * sm_scale) over the keys a query may see, fp32 accumulation,
    output rounded once to q's dtype; lse (when returned) is the natural-log
    log-sum-exp of the scaled logits, fp32;
  - GQA: query head h reads KV head h // (Hq / Hk);
  - the KV cache is the buffer kvcache.update_kv_buffer writes: [rows, 2*Hk, D]
    (K heads, then V heads, of each token slot); a paged view of it has pages of
    `page_size` consecutive rows: the token at position p of sequence b lives in
    row page_table[b, p // page_size] * page_size + p % page_size;
  - non-finite values (every row): a NaN in a query's q or in a K row it attends makes its output and
    lse NaN; a NaN in an attended V element makes that output element NaN. Another sequence's tokens,
    positions past a sequence's length and cache rows no sequence uses (an engine's padding slot) never
    affect a query, whatever they hold. A non-finite K/V of a later token of the same sequence (masked
    by causality), of an earlier one outside a query's window, or of a position a tree mask hides, may
    reach that sequence's other queries (tile products compute 0 * NaN there); it never leaves the
    sequence. The ragged prefill library rows (FA3, FlashInfer) load K/V tiles past a sequence's end,
    so a non-finite value reaches the neighbouring sequences there (and FA3's lse is not NaN for a NaN
    query or key): they need the call site's promise qkv:finite, which no check
    derives, so a checked call never selects them;
  - the optional features (window_left and logits_soft_cap on every op; sinks; decode's return_lse and
    num_q_tokens; mla_decode's num_q_tokens; prefill_paged's tree mask): a row that does not implement one
    requires the tag the check derives when it is off (FEATURE_OFF_TAGS: window:none, softcap:none, ...),
    so a call using it is served by the rows that do;
  - index tensors (cu_seqlens, seq_lens, page_table) are int32, on q's device.
    Their values are checked (OpInputError) for CPU tensors always and on CUDA
    under RAPID_LLM_CHECK_BOUNDS=1 (one device sync); unchecked otherwise, when a
    value outside the contract gives an unspecified result (a library row may
    read out of bounds).
"""

from ...dispatcher.contract import EXACT, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, KernelSpec, LibraryRequirement, ShapeConstraint
from ...backends.flash_attn import REQUIREMENT as FLASH_ATTN
from ...backends.flash_mla import REQUIREMENT as FLASH_MLA
from ...backends.flashinfer import REQUIREMENT as FLASHINFER
from ..common_rows import TRITON, TRITON_DOT_DEVICES, TRITON_FP8_DEVICES, TRITON_FP8_READ_DEVICES
from ..rows import extension_rows, library_row, native_row, reference_row

#: The external-library rows' parity run on the H200 (their golden records).
LIBRARY_PARITY = "h200.libraries.parity"

PREFILL = "attention.prefill"
PREFILL_PAGED = "attention.prefill_paged"
DECODE = "attention.decode"
MLA_DECODE = "attention.mla_decode"
MLA_PREFILL = "attention.mla_prefill"
MERGE_STATES = "attention.merge_states"
_HERE = __name__
_BACKENDS = "rapid_llm.kernels.backends"

ATTENTION_DTYPES = frozenset({"fp32", "fp16", "bf16"})
#: The width of one MLA latent cache row: kv_lora_rank 512 (also the value) + 64 rope dims (DeepSeek-V2/V3).
MLA_LATENT_DIM = 576
MLA_VALUE_DIM = 512
MLA_ROPE_DIM = MLA_LATENT_DIM - MLA_VALUE_DIM

#: The optional features every attention op takes (appended to its parameters, off by default).
_FEATURES = """window_left: int >= -1 (default -1: no window). A query at position i
attends only keys at positions j >= i - window_left (with causality, the
window_left + 1 positions i - window_left .. i), FlashInfer's and FA3's
left-inclusive sliding window; decode's query sits at position
seq_lens[b] - 1. logits_soft_cap: float >= 0 (default 0.0: none). With c > 0
every scaled logit s = q . k * sm_scale becomes c * tanh(s / c) before the
softmax (Gemma 2's capping); lse is of the capped logits."""
#: Attention sinks (prefill, prefill_paged, decode; not the MLA ops).
_SINKS = """sinks: None, or a float32 tensor [Hq] on q's device, any stride: a learned
logit per query head that joins every softmax of that head without a value
(gpt-oss): out[t, h] = sum_j e^(s_j) v_j / (e^(sinks[h]) + sum_j e^(s_j)),
lse = log(e^(sinks[h]) + sum_j e^(s_j)); a query attending no key gets 0."""

#: Empty requests of the decode ops (an engine's padded batch).
_EMPTY = """An empty sequence (seq_lens[b] == 0: a padding request of a batch captured at
a fixed size) reads no page and gets out 0 and lse -inf in its n rows (with
sinks: lse = the sink logit), on every row; no call-site special case."""

#: prefill_paged's custom (tree) mask, FlashInfer's packed_custom_mask.
_TREE_MASK = """custom_mask, mask_indptr: None (default), or a bit-packed boolean mask per
sequence (speculative decoding's draft tree; FlashInfer's packed_custom_mask
and its mask_indptr): custom_mask uint8 [bytes], mask_indptr int32 [B + 1],
both on q's device, any stride. Sequence b's mask is an [n_b, seq_lens[b]]
boolean matrix M_b, row-major, whose element e = i * seq_lens[b] + j is bit
e % 8 (little-endian) of byte mask_indptr[b] + e // 8: query i attends KV
position j iff M_b[i, j]. It replaces the causal mask (causal is ignored); the
window still applies. A query attending no position gets out 0 and lse -inf
(with sinks: the sink's logit). Packing one sequence's bool matrix m:
bits = m.flatten() padded with False to a multiple of 8, then
(bits.view(-1, 8) * (1 << torch.arange(8))).sum(-1).to(torch.uint8), as
FlashInfer's segment_packbits(..., bitorder="little") gives."""

_VALUES = """Index values (checked on CPU tensors, and on CUDA under RAPID_LLM_CHECK_BOUNDS=1;
unspecified output otherwise)"""

#: {tag: what a call site providing it guarantees}: the tags checks.py provides (merged by build_tables()).
LAYOUT_TAGS = {
    "q:heads": "q [N, Hq, D] has unit stride along D, its other strides and its data pointer 16-byte aligned "
    "(what TMA-based library kernels load without a copy)",
    "kv:heads": "k and v of a ragged prefill [T, Hk, D] each as q:heads",
    "v:same_head_dim": "v's head_dim equals q's and k's (libraries compile a fixed set of (D, Dv) pairs)",
    "kv:paged": "the KV buffer [rows, 2*Hk, D] as q:heads (any 16-byte-aligned row stride)",
    "kv:q_dtype": "the decode KV buffer holds q's dtype (no scales)",
    "kv:fp8_e4m3": "the decode KV buffer is float8_e4m3fn with its per-tensor k_scale and v_scale",
    "latent:rows": "the MLA latent cache [rows, 576] as q:heads",
    "index:contiguous": "the index tensors (cu_seqlens, seq_lens, page_table) are contiguous",
    "q:tma": "q [N, H, D] reads as the 2D TMA array tokens x (h * stride_h + d): q:heads, and heads and tokens "
    "that do not overlap",
    "kv:tma": "k and v of a ragged prefill each as q:tma",
    "latent:tma": "the MLA latent cache [rows, 576] has rows, unit column stride, a 16-byte aligned base and row "
    "stride, and rows that do not overlap (a 2D TMA array)",
    "scale:positive": "sm_scale > 0 (kernels that take the row maximum on the raw logits, then scale)",
    "window:none": "window_left == -1: no sliding window (what rows without window masking serve)",
    "softcap:none": "logits_soft_cap == 0: no tanh soft cap of the logits (what rows without capping serve)",
    "sinks:none": "sinks is None: no per-head sink logit in the softmax (what rows without sinks serve)",
    "mask:none": "prefill_paged's custom_mask is None: the causal (or no) mask, no tree mask (what rows without "
    "custom masks serve)",
    "lse:none": "decode's return_lse is False: no log-sum-exp output (what decode rows without it serve)",
    "q:one_token": "decode's or mla_decode's num_q_tokens is 1: one query token per sequence (what rows without "
    "multi-token decode serve)",
    "latent:q_dtype": "the MLA latent cache holds q's dtype (no scale)",
    "latent:fp8_e4m3": "the MLA latent cache is float8_e4m3fn with its per-tensor latent_scale",
    # a promise (dispatcher/contract.py): stated by the call site when it plans, never derived by a check
    "qkv:finite": "the call site promises q, k and v hold no NaN or inf: kernels that multiply whole K/V tiles "
    "across sequence boundaries (0 * NaN) would carry a non-finite value into another sequence",
}
#: The promise the ragged prefill library rows need (FA3 and FlashInfer load K/V tiles past a sequence's end).
FINITE = "qkv:finite"

_RAGGED_PARAMETERS = ("q", "k", "v", "cu_seqlens", "max_seqlen", "sm_scale", "causal", "return_lse")
#: The optional features' parameters: every op's, then the sinks of the non-MLA ops.
_FEATURE_PARAMETERS = ("window_left", "logits_soft_cap")
_SINK_PARAMETERS = (*_FEATURE_PARAMETERS, "sinks")
#: {feature: the tag its check derives when it is off (a contract's layouts list its features'), which a row that
#: does not implement it requires}
FEATURE_OFF_TAGS = {
    "window": "window:none",
    "softcap": "softcap:none",
    "sinks": "sinks:none",
    "lse": "lse:none",
    "tokens": "q:one_token",
    "mask": "mask:none",
}
#: {op: its optional features (FEATURE_OFF_TAGS's names)}
OP_FEATURES = {
    PREFILL: ("window", "softcap", "sinks"),
    PREFILL_PAGED: ("window", "softcap", "sinks", "mask"),
    DECODE: ("window", "softcap", "sinks", "lse", "tokens"),
    MLA_PREFILL: ("window", "softcap"),
    MLA_DECODE: ("window", "softcap", "tokens"),
    MERGE_STATES: (),
}


def _features_off(op: str, implemented=()) -> tuple[str, ...]:
    """The tags a row of `op` requires for the op's features (FEATURE_OFF_TAGS's names) it does not implement."""
    return tuple(FEATURE_OFF_TAGS[feature] for feature in OP_FEATURES[op] if feature not in implemented)


CONTRACTS = (
    OpContract(
        op=PREFILL,
        parameters=(*_RAGGED_PARAMETERS, *_SINK_PARAMETERS),
        dtypes=ATTENTION_DTYPES,
        # max_seqlen: 4 x 4096 and 16 x 1024 are one num_tokens bucket, yet their fastest rows differ
        dims=(
            ("num_tokens", TOKEN_BUCKETS),
            ("max_seqlen", TOKEN_BUCKETS),
            ("num_q_heads", EXACT),
            ("num_kv_heads", EXACT),
            ("head_dim", EXACT),
            ("head_dim_v", EXACT),
        ),
        layouts=(
            "q:heads",
            "kv:heads",
            "v:same_head_dim",
            "index:contiguous",
            "q:tma",
            "kv:tma",
            "scale:positive",
            *_features_off(PREFILL),
        ),
        promises=(FINITE,),
        check=f"{_HERE}.checks:check_prefill",
        doc=f"""prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False,
        window_left=-1, logits_soft_cap=0.0, sinks=None, return_lse=False, num_q_tokens=1)
    -> out, or (out, lse), or (out, lse) with return_lse

Ragged (packed, unpadded) self-attention of a batch of B sequences:
q: [T, Hq, D]; k: [T, Hk, D]; v: [T, Hk, Dv]; one dtype (fp32/fp16/bf16), one
device; Hq % Hk == 0; any strides. cu_seqlens: int32 [B + 1], sequence b owns
tokens cu_seqlens[b] .. cu_seqlens[b+1]-1. max_seqlen: int >= the longest
sequence (a host-side bound for the launch). sm_scale: finite float. Query i
of a sequence attends key j of the same sequence when j <= i (causal) or
always (causal=False):
    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // (Hq/Hk)] * sm_scale) v[j, h // (Hq/Hk)]
out: new [T, Hq, Dv] tensor of q's dtype; lse: [T, Hq] fp32, natural log.
{_FEATURES}
{_SINKS}
{_VALUES}: cu_seqlens[0] == 0, non-decreasing, cu_seqlens[B] == T, every
length <= max_seqlen.""",
    ),
    OpContract(
        op=MLA_PREFILL,
        parameters=(*_RAGGED_PARAMETERS, *_FEATURE_PARAMETERS),
        dtypes=ATTENTION_DTYPES,
        # max_seqlen: 4 x 4096 and 16 x 1024 are one num_tokens bucket, yet their fastest rows differ
        dims=(
            ("num_tokens", TOKEN_BUCKETS),
            ("max_seqlen", TOKEN_BUCKETS),
            ("num_q_heads", EXACT),
            ("num_kv_heads", EXACT),
            ("head_dim", EXACT),
            ("head_dim_v", EXACT),
        ),
        layouts=(
            "q:heads",
            "kv:heads",
            "v:same_head_dim",
            "index:contiguous",
            "q:tma",
            "kv:tma",
            "scale:positive",
            *_features_off(MLA_PREFILL),
        ),
        promises=(FINITE,),
        check=f"{_HERE}.checks:check_mla_prefill",
        doc="""mla_prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False,
            window_left=-1, logits_soft_cap=0.0)

DeepSeek MLA prefill in its non-absorbed form (the latent expanded to per-head
K and V): exactly attention.prefill's semantics with q, k: [T, H, 192]
(128 nope + 64 rope dims) and v: [T, H, 128], Hq == Hk. out: [T, H, 128];
lse: [T, H] fp32, natural log.""",
    ),
    OpContract(
        op=PREFILL_PAGED,
        parameters=(
            "q",
            "kv_buffer",
            "page_table",
            "cu_seqlens_q",
            "seq_lens",
            "max_seqlen_q",
            "page_size",
            "sm_scale",
            "causal",
            "return_lse",
            *_SINK_PARAMETERS,
            "custom_mask",
            "mask_indptr",
        ),
        dtypes=ATTENTION_DTYPES,
        dims=(
            ("num_tokens", TOKEN_BUCKETS),
            ("num_q_heads", EXACT),
            ("num_kv_heads", EXACT),
            ("head_dim", EXACT),
            ("page_size", EXACT),
        ),
        layouts=("q:heads", "kv:paged", "index:contiguous", *_features_off(PREFILL_PAGED)),
        check=f"{_HERE}.checks:check_prefill_paged",
        doc=f"""prefill_paged(q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size,
              sm_scale, causal=True, return_lse=False, window_left=-1, logits_soft_cap=0.0, sinks=None,
              custom_mask=None, mask_indptr=None)
    -> out, or (out, lse)

Chunked prefill / prefix caching: the new tokens' queries against each
sequence's whole paged KV (its history and the new tokens themselves, whose
K/V the caller has already written with kvcache.update_kv_buffer).
q: [T, Hq, D], any strides; sequence b owns queries cu_seqlens_q[b] ..
cu_seqlens_q[b+1]-1 (int32 [B + 1]). kv_buffer: [rows, 2*Hk, D], q's dtype
(K heads then V heads), rows a multiple of page_size. page_table: int32
[B, max_pages]; seq_lens: int32 [B], the KV length of sequence b including
its new tokens. The n_b = q-length new tokens are the last n_b positions: query
i sits at position seq_lens[b] - n_b + i and attends KV positions <= that
(causal) or all seq_lens[b] positions (causal=False). out: new [T, Hq, D]
of q's dtype; lse: [T, Hq] fp32, natural log.
{_FEATURES}
{_SINKS}
{_TREE_MASK}
{_VALUES}: cu_seqlens_q as in attention.prefill (lengths <= max_seqlen_q);
n_b <= seq_lens[b] <= max_pages * page_size; mask_indptr[0] >= 0,
mask_indptr[b+1] - mask_indptr[b] >= ceil(n_b * seq_lens[b] / 8),
mask_indptr[B] <= custom_mask's length; the page ids a sequence uses
(its first ceil(seq_lens[b] / page_size) entries) < rows / page_size; other
entries of page_table are not read.""",
    ),
    OpContract(
        op=DECODE,
        parameters=(
            "q",
            "kv_buffer",
            "page_table",
            "seq_lens",
            "page_size",
            "sm_scale",
            "k_scale",
            "v_scale",
            *_SINK_PARAMETERS,
            "return_lse",
            "num_q_tokens",
        ),
        dtypes=ATTENTION_DTYPES,
        # num_tokens: one query token per sequence, so the batch size (bucketed like every token count)
        dims=(
            ("num_tokens", TOKEN_BUCKETS),
            ("num_q_heads", EXACT),
            ("num_kv_heads", EXACT),
            ("head_dim", EXACT),
            ("page_size", EXACT),
        ),
        layouts=("q:heads", "kv:paged", "index:contiguous", "kv:q_dtype", "kv:fp8_e4m3", *_features_off(DECODE)),
        check=f"{_HERE}.checks:check_decode",
        doc=f"""decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale=None, v_scale=None,
       window_left=-1, logits_soft_cap=0.0, sinks=None, return_lse=False, num_q_tokens=1)
    -> out, or (out, lse)

One query token per sequence against its paged KV (page_size >= 1; 1 is
token-granular). q: [B, Hq, D], any strides; kv_buffer: [rows, 2*Hk, D] of q's
dtype (layout tag kv:q_dtype), or float8_e4m3fn (kv:fp8_e4m3: the buffer
kvcache.update_kv_buffer_fp8 writes) with k_scale and v_scale its one-element
fp32 per-tensor scales on q's device (K = k_buffer.float() * k_scale, V
likewise; positive and finite, checked like the index values); the scales must
be None for a buffer of q's dtype. rows a multiple of page_size; page_table:
int32 [B, max_pages]; seq_lens: int32 [B]. Query b attends KV positions
0 .. seq_lens[b]-1 (its own K/V already written). out: new [B, Hq, D] of q's
dtype; lse (return_lse): new [B, Hq] fp32, natural log (merge a cached
prefix's part with a fresh part by attention.merge_states).
num_q_tokens n in 1..8 (speculative decoding's verification step, MTP): q is
[B * n, Hq, D], row b * n + t the t-th of sequence b's last n tokens (position
seq_lens[b] - n + t, K/V already written); it attends positions <= its own
(and its window); out and lse have q's B * n rows.
{_EMPTY}
{_FEATURES}
{_SINKS}
{_VALUES}: seq_lens[b] == 0 or n <= seq_lens[b] <= max_pages * page_size; the
page ids a sequence uses < rows / page_size; other entries of page_table are
not read.""",
    ),
    OpContract(
        op=MLA_DECODE,
        parameters=(
            "q",
            "latent_cache",
            "page_table",
            "seq_lens",
            "page_size",
            "sm_scale",
            *_FEATURE_PARAMETERS,
            "num_q_tokens",
            "latent_scale",
        ),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("head_dim", EXACT), ("page_size", EXACT)),
        layouts=(
            "q:heads",
            "latent:rows",
            "index:contiguous",
            "latent:tma",
            "latent:q_dtype",
            "latent:fp8_e4m3",
            *_features_off(MLA_DECODE),
        ),
        check=f"{_HERE}.checks:check_mla_decode",
        doc=f"""mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale, window_left=-1,
           logits_soft_cap=0.0, num_q_tokens=1, latent_scale=None) -> out

DeepSeek MLA decode in absorbed form: every query head attends the one shared
latent cache. q: [B, Hq, 576] (512 latent dims, then 64 rope dims), any
strides; latent_cache: [rows, 576] of q's dtype (layout tag latent:q_dtype;
one latent + rope row per token slot; rows a multiple of page_size), or
float8_e4m3fn (latent:fp8_e4m3: the cache kvcache.update_mla_buffer_fp8
writes) with latent_scale its one-element fp32 per-tensor scale on q's device
(c = cache.float() * latent_scale; positive and finite, checked like the
index values; None for a cache of q's dtype); paged as in attention.decode;
page_table: int32 [B, max_pages]; seq_lens: int32 [B].
    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512]
over the token rows c[j] of positions 0 .. seq_lens[b]-1. out: new
[B, Hq, 512] of q's dtype.
num_q_tokens n in 1..8 (DeepSeek-V3's MTP, speculative decoding): as in
attention.decode, q is [B * n, Hq, 576], row b * n + t at position
seq_lens[b] - n + t, attending positions <= its own; out [B * n, Hq, 512].
{_EMPTY}
{_FEATURES}
{_VALUES}: as attention.decode.""",
    ),
    OpContract(
        op=MERGE_STATES,
        parameters=("v_a", "s_a", "v_b", "s_b"),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_heads", EXACT), ("head_dim", EXACT)),
        check=f"{_HERE}.checks:check_merge_states",
        doc="""merge_states(v_a, s_a, v_b, s_b) -> (v, s)

Two attention results over disjoint key sets of the same queries (a cached
prefix and the fresh tokens: cascade attention, split prefill) merged into the
result over their union. v_a, v_b: [N, H, D] of one float dtype, any strides;
s_a, s_b: fp32 [N, H], their natural-log log-sum-exps (what return_lse gives).
    s = log(e^s_a + e^s_b),  v = v_a e^(s_a - s) + v_b e^(s_b - s)   (fp32)
v: new [N, H, D] of v_a's dtype; s: new [N, H] fp32. Both parts empty
(s_a = s_b = -inf): v = 0, s = -inf. A NaN in a part's s makes its token's v
and s NaN.""",
    ),
)

# ---------------------------------------------------------------------------
# Rows. Library rows need CUDA sm90 (the Hopper builds this project tests: FA3 and FlashMLA are
# sm90 kernels; FlashInfer's JIT targets the device it runs on, tested on sm90 only).
# ---------------------------------------------------------------------------

_SM90 = (CapabilityRequirement("cuda", min_sm=90, max_sm=90),)
#: FlashInfer compiles one module per (dtype, head dim, kernel) on first use (minutes on the H200): its rows
#: claim bf16, the dtype measured on the H200; fp16 calls are served by the next row.
_FLASHINFER_DTYPES = frozenset({"bf16"})


def _reference(op: str, function: str) -> KernelSpec:
    # Loops over sequences with host-known bounds only (no sync), so a graph can capture it.
    return reference_row(
        op,
        f"{_HERE}.reference:{function}",
        ATTENTION_DTYPES,
        description="fp32 PyTorch reference: per-sequence masked softmax over gathered keys",
    )


def _library_row(
    name,
    op,
    library,
    function,
    *,
    dtypes,
    layout,
    shape=(),
    graph_safe,
    max_abs_diff,
    priority,
    description,
    step=None,
    step_graph_safe=False,
):
    """A row served by an external library's adapter (backends/<library>/attention.py), sm90 (the Hopper builds
    this project tests). An empty batch is the reference row's (no library launch is tested with zero work).
    max_abs_diff: over the library rows' parity run on the H200 (LIBRARY_PARITY). step: the adapter's per-step
    preparation (a function name in the same module); step_graph_safe: capturable through it (KernelSpec)."""
    adapter = f"{_BACKENDS}.{name.partition('/')[0]}.attention"
    return library_row(
        name,
        op,
        f"{adapter}:{function}",
        library=library,
        capability=_SM90,
        dtypes=dtypes,
        shape=(ShapeConstraint("num_tokens", min=1), *shape),
        layout=(*layout, *_features_off(op)),
        parity=(max_abs_diff, LIBRARY_PARITY),
        priority=priority,
        graph_safe=graph_safe,
        description=description,
        step=f"{adapter}:{step}" if step else None,
        step_graph_safe=step_graph_safe,
    )


_RAGGED = ("q:heads", "kv:heads", "index:contiguous")
_PAGED = ("q:heads", "kv:paged", "index:contiguous")
_LATENT = ("q:heads", "latent:rows", "index:contiguous", "latent:q_dtype")
_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(64, 128, 256))

#: Head dims the native kernels take: a power of two, or the sum of two with the smaller >= 16 (two
#: tensor-core products per tile: 192 = 128 + 64); value dims (and prefill_paged's, which reads V
#: with the same width) a power of two.
_NATIVE_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(32, 48, 64, 80, 96, 128, 160, 192, 256))
_NATIVE_POW2_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(32, 64, 128, 256))
_NATIVE_VALUE_DIMS = ShapeConstraint("head_dim_v", one_of=(32, 64, 128, 256))


#: Gluon kernels: sm90 only (wgmma is sm90a, not sm100), with the triton whose Gluon API they were written
#: and verified against (Gluon's API changes between releases).
_GLUON = LibraryRequirement("triton", min_version="3.6", below_version="3.7")
#: Triton TMA kernels: sm90+ and a triton with host tensor descriptors.
_TRITON_TMA = LibraryRequirement("triton", min_version="3.4")
_SM90_PLUS = (CapabilityRequirement("cuda", min_sm=90),)
_HALF_DTYPES = frozenset({"fp16", "bf16"})


def _native_row(
    name,
    target,
    op,
    *,
    shape=(),
    layout=(),
    capability=TRITON_DOT_DEVICES,
    libraries=(TRITON,),
    dtypes=ATTENTION_DTYPES,
    parity=None,
    priority,
    description,
    step=None,
    features=(),
):
    """A native kernel's row (target "<module>:<function>" under this package, e.g. "prefill.gluon:prefill_gluon");
    features: the optional features (FEATURE_OFF_TAGS's names) its kernel implements.
    Every tensor is read through its strides; no host sync and no per-call host data (split counts come from
    host-known sizes): capturable in a CUDA graph. The kernels multiply tiles with tl.dot: TRITON_DOT_DEVICES."""
    return native_row(
        name,
        op,
        f"{_HERE}.{target}",
        dtypes=dtypes,
        libraries=libraries,
        capability=capability,
        shape=shape,
        layout=(*layout, *_features_off(op, features)),
        parity=parity,
        priority=priority,
        description=description,
        step=f"{_HERE}.{step}" if step else None,
    )


#: The prefill kernels' tile math: a head dim is D_A + D_B (tiles.split_head_dim).
_PREFILL_SHAPES = (_NATIVE_HEAD_DIMS, _NATIVE_VALUE_DIMS)
#: Pages of whole 64-position tiles: a tile of a split is 64 contiguous cache rows (one TMA box).
_WHOLE_TILE_PAGES = ShapeConstraint("page_size", multiple_of=64)

# Priorities rank rows that serve the same call; the measured ones come from the H200 runs cited as
# evidence h200.attention.bench and h200.libraries.bench (bf16). Within one op's native kernels the
# more specialised kernel ranks first where its conditions hold (Gluon > TMA > pointer loads).
ROWS = (
    _reference(PREFILL, "prefill"),
    _reference(MLA_PREFILL, "mla_prefill"),
    _reference(PREFILL_PAGED, "prefill_paged"),
    _reference(DECODE, "decode"),
    _reference(MLA_DECODE, "mla_decode"),
    reference_row(
        MERGE_STATES,
        f"{_HERE}.reference:merge_states",
        ATTENTION_DTYPES,
        description="fp32 PyTorch: each part weighed by exp(s_part - logaddexp(s_a, s_b))",
    ),
    native_row(
        "native/merge_states",
        MERGE_STATES,
        f"{_HERE}.merge_states:merge_states",
        dtypes=ATTENTION_DTYPES,
        parity=(0.015625, "h100.attention.parity.prefill_paged_merge"),
        priority=10,
        description="Triton: one program per (token, head), both parts' rows in registers, one exp each",
    ),
    # attention.prefill: FA3 (20) ranks above ours at the long sequences, ours between FA3 and FlashInfer.
    _native_row(
        "native/prefill",
        "prefill.triton:prefill",
        PREFILL,
        shape=_PREFILL_SHAPES,
        parity=(0.015625, "h200.attention.parity.native_prefill"),
        priority=13,
        description="Triton FlashAttention-2-style tiles by pointer loads: BLOCK_M queries x "
        "BLOCK_N keys, online exp2 softmax; any strides, fp32",
        features=("window", "softcap", "sinks"),
    ),
    _native_row(
        "native/prefill_tma",
        "prefill.triton_tma:prefill_tma",
        PREFILL,
        shape=_PREFILL_SHAPES,
        layout=("q:tma", "kv:tma"),
        capability=_SM90_PLUS,
        libraries=(_TRITON_TMA,),
        dtypes=_HALF_DTYPES,
        parity=(0.015625, "h200.attention.parity.native_prefill_tma"),
        priority=14,
        description="Triton prefill tiles with TMA loads of the unmasked tiles (sm90+)",
    ),
    _native_row(
        "native/prefill_gluon",
        "prefill.gluon:prefill_gluon",
        PREFILL,
        shape=(ShapeConstraint("head_dim", one_of=(128,)), ShapeConstraint("head_dim_v", one_of=(128,))),
        layout=("q:tma", "kv:tma", "scale:positive"),
        capability=_SM90,
        libraries=(_GLUON,),
        dtypes=_HALF_DTYPES,
        parity=(0.015625, "h200.attention.parity.native_prefill_gluon"),
        priority=15,
        description="Gluon warp-specialized persistent prefill, head dim 128: a TMA producer warpgroup, two "
        "consumer warpgroups (sm90)",
    ),
    _native_row(
        "native/mla_prefill",
        "prefill.triton:mla_prefill",
        MLA_PREFILL,
        parity=(0.015625, "h200.attention.parity.native_mla_prefill"),
        priority=13,
        description="Triton prefill tiles by pointer loads, q/k head_dim 192 as 128 + 64 (two products a tile)",
        features=("window", "softcap"),
    ),
    _native_row(
        "native/mla_prefill_tma",
        "prefill.triton_tma:mla_prefill_tma",
        MLA_PREFILL,
        layout=("q:tma", "kv:tma"),
        capability=_SM90_PLUS,
        libraries=(_TRITON_TMA,),
        dtypes=_HALF_DTYPES,
        parity=(0.015625, "h200.attention.parity.native_mla_prefill_tma"),
        priority=15,
        description="Triton prefill tiles with TMA loads, q/k head_dim 192 as 128 + 64 (sm90+)",
    ),
    _native_row(
        "native/prefill_paged",
        "prefill.triton:prefill_paged",
        PREFILL_PAGED,
        shape=(_NATIVE_POW2_HEAD_DIMS,),
        parity=(0.015625, "h100.attention.parity.prefill_paged_merge"),
        priority=20,
        description="Triton prefill tiles reading K/V through the page table, bottom-right causal or a "
        "bit-packed tree mask",
        features=("window", "softcap", "sinks", "mask"),
    ),
    # attention.decode
    _native_row(
        "native/decode",
        "decode.triton:decode",
        DECODE,
        shape=(_NATIVE_HEAD_DIMS,),
        layout=("kv:q_dtype",),
        parity=(0.015625, "h200.attention.parity.native_decode"),
        priority=30,
        description="Triton paged decode: a KV head's query heads in one tile, split-K with an lse merge",
        step="decode.triton:prepare_decode",
        features=("window", "softcap", "sinks", "lse", "tokens"),
    ),
    _native_row(
        "native/decode_fp8",
        "decode.triton:decode_fp8",
        DECODE,
        shape=(_NATIVE_HEAD_DIMS,),
        layout=("kv:fp8_e4m3",),
        capability=TRITON_FP8_READ_DEVICES,
        parity=(0.0078125, "h100.attention.parity.native_decode_fp8"),
        priority=10,
        description="Triton paged decode over an fp8-e4m3 KV buffer: fp16 products (inline-PTX e4m3 "
        "conversion), scales folded into the softmax",
        step="decode.triton:prepare_decode_fp8",
        features=("window", "softcap", "sinks", "lse", "tokens"),
    ),
    # CUDA sm89+ (the e4m3 -> f16x2 conversion); page sizes: powers of two up to 1024
    *extension_rows(
        DECODE,
        f"{_HERE}.decode.cuda:decode_fp8",
        dtypes=_HALF_DTYPES,
        capability=TRITON_FP8_DEVICES,
        shape=(
            ShapeConstraint("head_dim", one_of=(128,)),
            ShapeConstraint("page_size", one_of=tuple(2**i for i in range(11))),
        ),
        layout=("kv:fp8_e4m3", "kv:paged", *_features_off(DECODE)),
        parity={
            "aot": (0.0078125, "h200.attention.parity.aot_decode_fp8"),
            "jit": (0.0078125, "h200.attention.parity.jit_decode_fp8"),
        },
        priority=20,
        description="CUDA extension: paged fp8-KV decode with mma.sync, K/V chunks through a cp.async "
        "ring per warp, the value operand built by byte permutes",
    ),
    # attention.mla_decode: below 64 query heads the Gluon kernel ranks above FlashMLA (20); at 64 and more
    # FlashMLA ranks above the ping-pong kernel.
    _native_row(
        "native/mla_decode",
        "mla_decode.triton:mla_decode",
        MLA_DECODE,
        layout=("latent:q_dtype",),
        parity=(0.015625, "h200.attention.parity.native_mla_decode"),
        priority=10,
        description="Triton MLA decode by pointer loads: BLOCK_H (token, head) rows share each latent tile, "
        "split-K with an lse merge; any page size, fp32",
        features=("window", "softcap", "tokens"),
    ),
    _native_row(
        "native/mla_decode_fp8",
        "mla_decode.triton:mla_decode_fp8",
        MLA_DECODE,
        layout=("latent:fp8_e4m3",),
        capability=TRITON_FP8_READ_DEVICES,
        parity=(0.015625, "h100.attention.parity.mla_decode_fp8"),
        priority=10,
        description="Triton MLA decode over an fp8-e4m3 latent cache: fp16 products (inline-PTX e4m3 "
        "conversion), the scale folded into the softmax and the output",
        features=("window", "softcap", "tokens"),
    ),
    _native_row(
        "native/mla_decode_tma",
        "mla_decode.triton_tma:mla_decode_tma",
        MLA_DECODE,
        shape=(_WHOLE_TILE_PAGES,),
        layout=("latent:tma", "latent:q_dtype"),
        capability=_SM90_PLUS,
        libraries=(_TRITON_TMA,),
        dtypes=_HALF_DTYPES,
        parity=(0.015625, "h200.attention.parity.native_mla_decode_tma"),
        priority=12,
        description="Triton MLA decode with TMA loads of whole latent tiles (sm90+)",
    ),
    _native_row(
        "native/mla_decode_gluon",
        "mla_decode.gluon:mla_decode_gluon",
        MLA_DECODE,
        shape=(_WHOLE_TILE_PAGES, ShapeConstraint("num_q_heads", max=63)),
        layout=("latent:tma", "latent:q_dtype"),
        capability=_SM90,
        libraries=(_GLUON,),
        dtypes=_HALF_DTYPES,
        parity=(0.015625, "h200.attention.parity.native_mla_decode_gluon"),
        priority=25,
        description="Gluon MLA decode for Hq < 64: a TMA ring, the tile's positions as the warpgroup "
        "product rows (sm90)",
    ),
    _native_row(
        "native/mla_decode_gluon_pingpong",
        "mla_decode.gluon_pingpong:mla_decode_gluon_pingpong",
        MLA_DECODE,
        shape=(_WHOLE_TILE_PAGES, ShapeConstraint("num_q_heads", min=64)),
        layout=("latent:tma", "latent:q_dtype"),
        capability=_SM90,
        libraries=(_GLUON,),
        dtypes=_HALF_DTYPES,
        parity=(0.0078125, "h200.attention.parity.native_mla_decode_gluon_pingpong"),
        priority=15,
        description="Gluon MLA decode for Hq >= 64: two warp-specialised warpgroups on alternate tiles (sm90)",
    ),
    _library_row(
        "flash_attn/varlen_fwd",
        PREFILL,
        FLASH_ATTN,
        "prefill",
        dtypes={"bf16"},
        layout=(*_RAGGED, "v:same_head_dim", FINITE),
        shape=(ShapeConstraint("head_dim", one_of=(64, 96, 128, 192, 256)),),
        graph_safe=True,
        max_abs_diff=0.015625,
        priority=20,
        description="FlashAttention-3 varlen forward (bf16 build)",
    ),
    _library_row(
        "flash_attn/varlen_fwd_mla",
        MLA_PREFILL,
        FLASH_ATTN,
        "mla_prefill",
        dtypes={"bf16"},
        layout=(*_RAGGED, FINITE),
        graph_safe=True,
        max_abs_diff=0.015625,
        priority=20,
        description="FlashAttention-3 varlen forward, head dims 192/128",
    ),
    _library_row(
        "flashinfer/ragged_prefill",
        PREFILL,
        FLASHINFER,
        "prefill",
        dtypes=_FLASHINFER_DTYPES,
        layout=(*_RAGGED, "v:same_head_dim", FINITE),
        shape=(_HEAD_DIMS,),
        graph_safe=False,
        max_abs_diff=0.015625,
        priority=10,
        description="FlashInfer BatchPrefillWithRaggedKVCacheWrapper (plan per call: host sync)",
    ),
    _library_row(
        "flashinfer/ragged_prefill_mla",
        MLA_PREFILL,
        FLASHINFER,
        "mla_prefill",
        dtypes=_FLASHINFER_DTYPES,
        layout=(*_RAGGED, FINITE),
        graph_safe=False,
        max_abs_diff=0.015625,
        priority=10,
        description="FlashInfer ragged prefill with head dims 192/128 (plan per call: host sync)",
    ),
    _library_row(
        "flashinfer/paged_prefill",
        PREFILL_PAGED,
        FLASHINFER,
        "prefill_paged",
        dtypes=_FLASHINFER_DTYPES,
        layout=_PAGED,
        shape=(_HEAD_DIMS,),
        graph_safe=False,
        max_abs_diff=0.0078125,
        priority=10,
        description="FlashInfer BatchPrefillWithPagedKVCacheWrapper (plan per call: host sync)",
        step="step_prefill_paged",
        step_graph_safe=True,
    ),
    _library_row(
        "flashinfer/paged_decode",
        DECODE,
        FLASHINFER,
        "decode",
        dtypes=_FLASHINFER_DTYPES,
        layout=(*_PAGED, "kv:q_dtype"),
        shape=(_HEAD_DIMS,),
        graph_safe=False,
        max_abs_diff=0.00390625,
        priority=10,
        description="FlashInfer BatchDecodeWithPagedKVCacheWrapper, CUDA cores (plan per call: host sync)",
        step="step_decode",
        step_graph_safe=True,
    ),
    _library_row(
        "flashinfer/mla_decode",
        MLA_DECODE,
        FLASHINFER,
        "mla_decode",
        dtypes=_FLASHINFER_DTYPES,
        layout=_LATENT,
        graph_safe=False,
        max_abs_diff=0.015625,
        priority=10,
        description="FlashInfer BatchMLAPagedAttentionWrapper (plan per call: host sync)",
        step="step_mla_decode",
        step_graph_safe=True,
    ),
    # graph_safe: the split schedule is computed on the device in the call; captured and replayed equal to
    # the eager call on the H200 (evidence h200.libraries.probe).
    _library_row(
        "flash_mla/dense_decode",
        MLA_DECODE,
        FLASH_MLA,
        "mla_decode",
        dtypes={"bf16"},
        layout=_LATENT,
        shape=(ShapeConstraint("page_size", one_of=(64,)),),
        graph_safe=True,
        max_abs_diff=0.015625,
        priority=20,
        description="FlashMLA dense decode (legacy kernel, block size 64)",
        step="step_mla_decode",
    ),
)
