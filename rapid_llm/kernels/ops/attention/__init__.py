"""attention family: op contracts and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
prefill.py (native ragged and paged prefill), prefill_tma.py (the ragged
prefill with TMA tile loads, sm90+), prefill_gluon.py (a warp-specialized Gluon
prefill for head dim 128, sm90: serves those calls), decode.py (native paged decode,
bf16/fp16/fp32 and fp8 KV, and the split-K merge), mla_decode.py (native MLA
decode), mla_decode_tma.py (its TMA tile loads, sm90+), mla_decode_gluon.py (its Gluon kernel for
few query heads, sm90), mla_decode_gluon_pingpong.py (its warp-specialised Gluon kernel for 64+ heads, sm90: serves
those calls) and mla_decode_gluon_wide.py (the earlier 64+ heads Gluon kernel, opt-in). The external libraries' adapters live in
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
  - index tensors (cu_seqlens, seq_lens, page_table) are int32, on q's device.
    Their values are checked (OpInputError) for CPU tensors always and on CUDA
    under RAPID_LLM_CHECK_BOUNDS=1 (one device sync); unchecked otherwise, when a
    value outside the contract gives an unspecified result (a library row may
    read out of bounds).
"""

from ...dispatcher.contract import EXACT, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, GoldenRecord, KernelSpec, ShapeConstraint
from ...backends.flash_attn import REQUIREMENT as FLASH_ATTN
from ...backends.flash_mla import REQUIREMENT as FLASH_MLA
from ...backends.flashinfer import REQUIREMENT as FLASHINFER
from ..common_rows import LIBRARY_PARITY
from ..common_rows import ATTENTION_RESULTS, TRITON, TRITON_DEVICES, TRITON_FP8_DEVICES, TRITON_FP8_READ_DEVICES

PREFILL = "attention.prefill"
PREFILL_PAGED = "attention.prefill_paged"
DECODE = "attention.decode"
MLA_DECODE = "attention.mla_decode"
MLA_PREFILL = "attention.mla_prefill"
_HERE = __name__
_BACKENDS = "rapid_llm.kernels.backends"

ATTENTION_DTYPES = frozenset({"fp32", "fp16", "bf16"})
#: The width of one MLA latent cache row: kv_lora_rank 512 (also the value) + 64 rope dims (DeepSeek-V2/V3).
MLA_LATENT_DIM = 576
MLA_VALUE_DIM = 512

_VALUES = """Index values (checked on CPU tensors, and on CUDA under RAPID_LLM_CHECK_BOUNDS=1;
unspecified output otherwise)"""

CONTRACTS = (
    OpContract(
        op=PREFILL,
        parameters=("q", "k", "v", "cu_seqlens", "max_seqlen", "sm_scale", "causal", "return_lse"),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT),
              ("head_dim", EXACT), ("head_dim_v", EXACT)),
        layouts=("q:heads", "kv:heads", "v:same_head_dim", "index:contiguous"),
        check=f"{_HERE}.checks:check_prefill",
        doc=f"""prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False)
    -> out, or (out, lse) with return_lse

Ragged (packed, unpadded) self-attention of a batch of B sequences:
q: [T, Hq, D]; k: [T, Hk, D]; v: [T, Hk, Dv]; one dtype (fp32/fp16/bf16), one
device; Hq % Hk == 0; any strides. cu_seqlens: int32 [B + 1], sequence b owns
tokens cu_seqlens[b] .. cu_seqlens[b+1]-1. max_seqlen: int >= the longest
sequence (a host-side bound for the launch). sm_scale: finite float. Query i
of a sequence attends key j of the same sequence when j <= i (causal) or
always (causal=False):
    out[t, h] = sum_j softmax_j(q[t, h] . k[j, h // (Hq/Hk)] * sm_scale) v[j, h // (Hq/Hk)]
out: new [T, Hq, Dv] tensor of q's dtype; lse: [T, Hq] fp32, natural log.
{_VALUES}: cu_seqlens[0] == 0, non-decreasing, cu_seqlens[B] == T, every
length <= max_seqlen.""",
    ),
    OpContract(
        op=MLA_PREFILL,
        parameters=("q", "k", "v", "cu_seqlens", "max_seqlen", "sm_scale", "causal", "return_lse"),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT),
              ("head_dim", EXACT), ("head_dim_v", EXACT)),
        layouts=("q:heads", "kv:heads", "v:same_head_dim", "index:contiguous"),
        check=f"{_HERE}.checks:check_mla_prefill",
        doc="""mla_prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, causal=True, return_lse=False)

DeepSeek MLA prefill in its non-absorbed form (the latent expanded to per-head
K and V): exactly attention.prefill's semantics with q, k: [T, H, 192]
(128 nope + 64 rope dims) and v: [T, H, 128], Hq == Hk. out: [T, H, 128];
lse: [T, H] fp32, natural log.""",
    ),
    OpContract(
        op=PREFILL_PAGED,
        parameters=("q", "kv_buffer", "page_table", "cu_seqlens_q", "seq_lens", "max_seqlen_q", "page_size",
                    "sm_scale", "causal", "return_lse"),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT),
              ("head_dim", EXACT), ("page_size", EXACT)),
        layouts=("q:heads", "kv:paged", "index:contiguous"),
        check=f"{_HERE}.checks:check_prefill_paged",
        doc=f"""prefill_paged(q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size,
              sm_scale, causal=True, return_lse=False) -> out, or (out, lse)

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
{_VALUES}: cu_seqlens_q as in attention.prefill (lengths <= max_seqlen_q);
n_b <= seq_lens[b] <= max_pages * page_size; the page ids a sequence uses
(its first ceil(seq_lens[b] / page_size) entries) < rows / page_size; other
entries of page_table are not read.""",
    ),
    OpContract(
        op=DECODE,
        parameters=("q", "kv_buffer", "page_table", "seq_lens", "page_size", "sm_scale", "k_scale", "v_scale"),
        dtypes=ATTENTION_DTYPES,
        # num_tokens: one query token per sequence, so the batch size (bucketed like every token count)
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT), ("head_dim", EXACT),
              ("page_size", EXACT)),
        layouts=("q:heads", "kv:paged", "index:contiguous", "kv:q_dtype", "kv:fp8_e4m3"),
        check=f"{_HERE}.checks:check_decode",
        doc=f"""decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale=None, v_scale=None) -> out

One query token per sequence against its paged KV (page_size >= 1; 1 is
token-granular). q: [B, Hq, D], any strides; kv_buffer: [rows, 2*Hk, D] of q's
dtype (layout tag kv:q_dtype), or float8_e4m3fn (kv:fp8_e4m3: the buffer
kvcache.update_kv_buffer_fp8 writes) with k_scale and v_scale its one-element
fp32 per-tensor scales on q's device (K = k_buffer.float() * k_scale, V
likewise; positive and finite, checked like the index values); the scales must
be None for a buffer of q's dtype. rows a multiple of page_size; page_table:
int32 [B, max_pages]; seq_lens: int32 [B]. Query b attends KV positions
0 .. seq_lens[b]-1 (its own K/V already written). out: new [B, Hq, D] of q's
dtype.
{_VALUES}: 1 <= seq_lens[b] <= max_pages * page_size; the page ids a sequence
uses < rows / page_size; other entries of page_table are not read.""",
    ),
    OpContract(
        op=MLA_DECODE,
        parameters=("q", "latent_cache", "page_table", "seq_lens", "page_size", "sm_scale"),
        dtypes=ATTENTION_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("head_dim", EXACT), ("page_size", EXACT)),
        layouts=("q:heads", "latent:rows", "index:contiguous"),
        check=f"{_HERE}.checks:check_mla_decode",
        doc=f"""mla_decode(q, latent_cache, page_table, seq_lens, page_size, sm_scale) -> out

DeepSeek MLA decode in absorbed form: every query head attends the one shared
latent cache. q: [B, Hq, 576] (512 latent dims, then 64 rope dims), any
strides; latent_cache: [rows, 576] of q's dtype (one latent + rope row per
token slot; rows a multiple of page_size), paged as in attention.decode;
page_table: int32 [B, max_pages]; seq_lens: int32 [B].
    out[b, h] = sum_j softmax_j(q[b, h] . c[j] * sm_scale) c[j, :512]
over the token rows c[j] of positions 0 .. seq_lens[b]-1. out: new
[B, Hq, 512] of q's dtype.
{_VALUES}: as attention.decode.""",
    ),
)

# ---------------------------------------------------------------------------
# Rows. Library rows need CUDA sm90 (the Hopper builds this project tests: FA3 and FlashMLA are
# sm90 kernels; FlashInfer's JIT targets the device it runs on, tested on sm90 only).
# ---------------------------------------------------------------------------

_SM90 = (CapabilityRequirement("cuda", min_sm=90, max_sm=90),)
#: FlashInfer compiles one module per (dtype, head dim, kernel) on first use (its rows' first calls took
#: 15-207 s on the H200, perf/results/h200/libraries_2026-12-01/library_probe.json): its rows
#: claim bf16, the dtype measured on the H200; fp16 calls are served by the next row.
_FLASHINFER_DTYPES = frozenset({"bf16"})


def _reference(op: str, function: str) -> KernelSpec:
    return KernelSpec(
        name=f"torch/{function}",
        op=op,
        backend="torch",
        target=f"{_HERE}.reference:{function}",
        dtypes=ATTENTION_DTYPES,
        golden=GoldenRecord.reference(),
        # Loops over sequences with host-known bounds only (no sync), so a graph can capture it.
        description="fp32 PyTorch reference: per-sequence masked softmax over gathered keys",
    )


def _library_row(name, op, library, function, *, dtypes, layout, shape=(), graph_safe, max_abs_diff, priority,
                 description):
    """A row served by an external library's adapter (backends/<library>/attention.py).

    max_abs_diff: the largest |diff| against the op's torch row over its parity cases on the H200
    (LIBRARY_PARITY, the golden record); priority: from common_rows.LIBRARY_BENCH (the comments at ROWS)."""
    backend, _, _ = name.partition("/")
    package = f"{_BACKENDS}.{backend}"
    return KernelSpec(
        name=name,
        op=op,
        backend=backend,
        target=f"{package}.attention:{function}",
        available=f"{package}:available",
        libraries=(library,),
        capability=_SM90,
        dtypes=dtypes,
        # An empty batch is the reference row's (no library launch is tested with zero work).
        shape=(ShapeConstraint("num_tokens", min=1), *shape),
        layout=layout,
        golden=GoldenRecord(verified=True, max_abs_diff=max_abs_diff, baseline=f"torch/{function}",
                            evidence=LIBRARY_PARITY),
        priority=priority,
        graph_safe=graph_safe,
        description=description,
    )


_RAGGED = ("q:heads", "kv:heads", "index:contiguous")
_PAGED = ("q:heads", "kv:paged", "index:contiguous")
_LATENT = ("q:heads", "latent:rows", "index:contiguous")
_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(64, 128, 256))

#: Head dims the native kernels take: a power of two, or the sum of two with the smaller >= 16 (two
#: tensor-core products per tile: 192 = 128 + 64); value dims (and prefill_paged's, which reads V
#: with the same width) a power of two.
_NATIVE_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(32, 48, 64, 80, 96, 128, 160, 192, 256))
_NATIVE_POW2_HEAD_DIMS = ShapeConstraint("head_dim", one_of=(32, 64, 128, 256))
_NATIVE_VALUE_DIMS = ShapeConstraint("head_dim_v", one_of=(32, 64, 128, 256))


#: sm90 (where mla_decode's Gluon kernel runs; wgmma is sm90a-only) or the CPU interpreter (parity of the entry).
_SM90_OR_INTERPRETER = (CapabilityRequirement("cuda", min_sm=90, max_sm=90),
                        CapabilityRequirement("cpu", triton_interpreter=True))


def _native_row(name, op, module, function, *, shape=(), layout=(), capability=TRITON_DEVICES, max_abs_diff,
                priority, description):
    """A native Triton row (ops/attention/<module>.py). Every tensor is read through its strides, so it
    needs no layout tag but the dtype ones; no host sync and no per-call host data (split counts come from
    host-known sizes): capturable in a CUDA graph (measured: conformance/test_attention_native.py on the
    H200). max_abs_diff: the largest |diff| against the torch row over every parity case in fp32, fp16 and
    bf16 on the H200 (the row's own parity run in ATTENTION_RESULTS); priority: from common_rows.ATTENTION_BENCH (the
    comments at ROWS)."""
    return KernelSpec(
        name=name,
        op=op,
        backend="native",
        target=f"{_HERE}.{module}:{function}",
        libraries=(TRITON,),
        capability=capability,
        dtypes=ATTENTION_DTYPES,
        shape=shape,
        layout=layout,
        golden=GoldenRecord(verified=True, max_abs_diff=max_abs_diff, baseline=f"torch/{function}",
                            evidence=f"{ATTENTION_RESULTS}/parity_{name.replace('/', '_')}.json"),
        priority=priority,
        graph_safe=True,
        description=description,
    )


def _extension_decode_row(backend: str, function: str) -> KernelSpec:
    """aot/decode_fp8 or jit/decode_fp8: attention.decode over an fp8-e4m3 buffer on the CUDA extension."""
    return KernelSpec(
        name=f"{backend}/decode_fp8",
        op=DECODE,
        backend=backend,
        target=f"{_HERE}.decode_cuda:{function}",
        available=f"rapid_llm.kernels.{backend}:available",
        capability=TRITON_FP8_DEVICES,  # CUDA sm89+: the e4m3 -> f16x2 conversion
        dtypes={"fp16", "bf16"},
        shape=(ShapeConstraint("head_dim", one_of=(128,)),
               ShapeConstraint("page_size", one_of=tuple(2 ** i for i in range(11)))),  # powers of two to 1024
        layout=("kv:fp8_e4m3", "kv:paged"),
        golden=GoldenRecord(verified=True, max_abs_diff=0.0078125, baseline="torch/decode",
                            evidence=f"{ATTENTION_RESULTS}/parity_{backend}_decode_fp8.json"),
        priority=20,
        graph_safe=True,
        description=("CUDA extension: paged fp8-KV decode with mma.sync, K/V chunks through a cp.async ring per "
                     "warp, the value operand built by byte permutes" +
                     ("" if backend == "aot" else " (built on first use, RAPID_LLM_JIT=1)")),
    )


# Priorities (common_rows.LIBRARY_BENCH, bf16, one run; the reference rows are the floor, not timed):
#   prefill, GQA 32/8 d128 causal: FA3 825.7 us at 4 x 4096 tokens and 322.6 us at 16 x 1024, FlashInfer
#     1652.1 / 1044.5 us (plan() in every call); mla_prefill 4 x 4096, 16 heads 192/128: FA3 512.5, FlashInfer
#     980.4 us. So FA3 20, FlashInfer 10.
#   mla_decode, page 64: FlashMLA 144.0 / 130.2 us at B=64 L=4096 with 128 / 16 heads, 72.7 / 64.0 us at
#     B=1 L=32768 with 16 / 128 heads; FlashInfer 906-910 us at B=64 and 358-906 us at B=1. FlashMLA 20.
#   decode and prefill_paged: FlashInfer is the only library row (786.2 us at B=64 L=4096 GQA 32/8 page 16,
#     779.0 us for 4 chunks of 512 after 4096): 10.
# The native rows (common_rows.ATTENTION_BENCH: one run beside the library rows, bf16; variants/call15):
#   decode GQA 32/8 d128 page 16 (its own run, variants/call16): native 254.3 / 80.4 / 50.9 / 49.1 us at B=64
#     L=4096 / B=8 L=8192 / B=1 L=32768 / B=1 L=1024 by events (244.3 / 68.8 / 39.4 / 10.0 in graph replay),
#     against the FlashInfer row's 822.5 / 508.6 / 452.6 / 418.2 (and FlashInfer planned once per step, a peer:
#     390.0 / 105.8 / 60.7 / 15.1): native 30. fp8 buffer (the decode run of variants/call34): the
#     extension rows aot/decode_fp8 and jit/decode_fp8 152.8 / 55.6 / 37.3 and 149.8 / 56.1 / 37.8 us by
#     events at B=64 L=4096 / B=8 L=8192 / B=1 L=32768 (137.5 / 41.9 / 28.4 and 135.9 / 41.3 / 28.0 in graph
#     replay), native/decode_fp8 178.3 / 57.6 / 66.8 (169.3 / 50.8 / 30.2): the extension rows 20, where
#     their build loads, native/decode_fp8 10.
#   prefill (its own run, variants/call31): native 864.3 / 290.3 us at 4 x 4096 / 16 x 1024 causal (sm90's
#     Gluon kernel for head dim 128, two consumer warpgroups, 128-key tiles, the output through TMA; the TMA
#     kernel took 1136.8 / 379.5 in call15), FA3 841.1 / 322.1, the FlashInfer row 2288.7 / 1120.1: native 15,
#     between them (FA3 ahead at the long sequences, native at the short ones). mla_prefill: native 748.2, FA3 529.4,
#     FlashInfer 1611.3: 15.
#   prefill_paged: native 523.2 us, the FlashInfer row 1383.8: native 20.
#   mla_decode page 64 (graph replay, CUDA events in brackets): Hq=128 B=64 L=4096 native 167.8 (174.2) us (the
#     wide Gluon kernel), FlashMLA 142.8 (146.8), the FlashInfer row 910.6 by events: native/mla_decode 15,
#     below FlashMLA (the compute-bound case; 170.9-176.7 against 132.2-141.7 in variants/call12-call14).
#     Hq < 64 on sm90 runs the Gluon kernel: 82.7 us at B=64 Hq=16, 14.2 at B=1 L=32768, 79.4 at B=8
#     L=32768, against FlashMLA's 111.6 / 66.2 / 106.1, and 106-114 against 110-111 at Hq=32 B=64
#     (variants/call7, call9): native/mla_decode_few_heads 25, above FlashMLA, for Hq <= 63 on sm90 (a
#     shape constraint: one priority per row cannot follow the head count). At Hq=128 only B=1 L=32768 is
#     faster natively (36.2 against 54.7), too narrow a case for a row of its own.
ROWS = (
    _reference(PREFILL, "prefill"),
    _reference(MLA_PREFILL, "mla_prefill"),
    _reference(PREFILL_PAGED, "prefill_paged"),
    _reference(DECODE, "decode"),
    _reference(MLA_DECODE, "mla_decode"),
    _native_row("native/prefill", PREFILL, "prefill", "prefill", shape=(_NATIVE_HEAD_DIMS, _NATIVE_VALUE_DIMS),
                max_abs_diff=0.015625, priority=15,
                description="Triton FlashAttention-2-style tiles: BLOCK_M queries x BLOCK_N keys, online exp2 softmax; "
                            "on sm90 TMA tile loads when the strides allow (prefill_tma.py), and for head dim 128 a "
                            "warp-specialized persistent Gluon kernel (prefill_gluon.py)"),
    _native_row("native/mla_prefill", MLA_PREFILL, "prefill", "mla_prefill", max_abs_diff=0.015625, priority=15,
                description="Triton prefill tiles with q/k head_dim 192 as 128 + 64 (two products per tile), TMA "
                            "loads on sm90"),
    _native_row("native/prefill_paged", PREFILL_PAGED, "prefill", "prefill_paged", shape=(_NATIVE_POW2_HEAD_DIMS,),
                max_abs_diff=0.015625, priority=20,
                description="Triton prefill tiles reading K/V through the page table, bottom-right causal"),
    _native_row("native/decode", DECODE, "decode", "decode", shape=(_NATIVE_HEAD_DIMS,), layout=("kv:q_dtype",),
                max_abs_diff=0.015625, priority=30,
                description="Triton paged decode: a KV head's query heads in one tile, split-K with an lse merge"),
    _native_row("native/decode_fp8", DECODE, "decode", "decode", shape=(_NATIVE_HEAD_DIMS,),
                layout=("kv:fp8_e4m3",), capability=TRITON_FP8_READ_DEVICES, max_abs_diff=0.0078125, priority=10,
                description="Triton paged decode over an fp8-e4m3 KV buffer: fp16 products (inline-PTX e4m3 "
                            "conversion), scales folded into the softmax"),
    # The CUDA extension's fp8-KV decode (csrc/attention/decode_fp8.cu: mma.sync, K/V chunks copied by
    # cp.async into a ring per warp, the value operand built by byte permutes), built ahead of time or on
    # first use. Parity on the H200 (variants/call34): both builds within 0.0078125 of the reference.
    *(_extension_decode_row(backend, function) for backend, function in (("aot", "decode_aot"),
                                                                         ("jit", "decode_jit"))),
    _native_row("native/mla_decode", MLA_DECODE, "mla_decode", "mla_decode", max_abs_diff=0.015625, priority=15,
                description="Triton MLA decode: BLOCK_H heads share each latent tile, split-K with an lse merge; "
                            "on sm90 for pages that hold whole tiles, Hq < 64: a Gluon kernel with a TMA ring and "
                            "positions as the warpgroup product rows (mla_decode_gluon.py), Hq >= 64: a warp-specialised "
                            "Gluon kernel of 64 heads whose two warpgroups take alternate tiles "
                            "(mla_decode_gluon_pingpong.py)"),
    # The same kernel entry as native/mla_decode, ranked above FlashMLA where its Gluon kernel serves: fewer
    # than 64 query heads (one GPU of TP >= 2 for DeepSeek's 128) on sm90 (the comments above).
    _native_row("native/mla_decode_few_heads", MLA_DECODE, "mla_decode", "mla_decode",
                shape=(ShapeConstraint("num_q_heads", max=63),), capability=_SM90_OR_INTERPRETER,
                max_abs_diff=0.015625, priority=25,
                description="native/mla_decode for Hq < 64 on sm90, ranked by its Gluon kernel (mla_decode_gluon.py: "
                            "a TMA ring, positions as the warpgroup product rows)"),
    _library_row("flash_attn/varlen_fwd", PREFILL, FLASH_ATTN, "prefill", dtypes={"bf16"},
                 layout=(*_RAGGED, "v:same_head_dim"),
                 shape=(ShapeConstraint("head_dim", one_of=(64, 96, 128, 192, 256)),),
                 graph_safe=True, max_abs_diff=0.015625, priority=20,
                 description="FlashAttention-3 varlen forward (bf16 build)"),
    _library_row("flash_attn/varlen_fwd_mla", MLA_PREFILL, FLASH_ATTN, "mla_prefill", dtypes={"bf16"},
                 layout=_RAGGED, graph_safe=True, max_abs_diff=0.015625, priority=20,
                 description="FlashAttention-3 varlen forward, head dims 192/128"),
    _library_row("flashinfer/ragged_prefill", PREFILL, FLASHINFER, "prefill", dtypes=_FLASHINFER_DTYPES,
                 layout=(*_RAGGED, "v:same_head_dim"), shape=(_HEAD_DIMS,), graph_safe=False,
                 max_abs_diff=0.015625, priority=10,
                 description="FlashInfer BatchPrefillWithRaggedKVCacheWrapper (plan per call: host sync)"),
    _library_row("flashinfer/ragged_prefill_mla", MLA_PREFILL, FLASHINFER, "mla_prefill", dtypes=_FLASHINFER_DTYPES,
                 layout=_RAGGED, graph_safe=False, max_abs_diff=0.015625, priority=10,
                 description="FlashInfer ragged prefill with head dims 192/128 (plan per call: host sync)"),
    _library_row("flashinfer/paged_prefill", PREFILL_PAGED, FLASHINFER, "prefill_paged", dtypes=_FLASHINFER_DTYPES,
                 layout=_PAGED, shape=(_HEAD_DIMS,), graph_safe=False, max_abs_diff=0.0078125, priority=10,
                 description="FlashInfer BatchPrefillWithPagedKVCacheWrapper (plan per call: host sync)"),
    _library_row("flashinfer/paged_decode", DECODE, FLASHINFER, "decode", dtypes=_FLASHINFER_DTYPES,
                 layout=(*_PAGED, "kv:q_dtype"),
                 shape=(_HEAD_DIMS,), graph_safe=False, max_abs_diff=0.00390625, priority=10,
                 description="FlashInfer BatchDecodeWithPagedKVCacheWrapper, CUDA cores (plan per call: host sync)"),
    _library_row("flashinfer/mla_decode", MLA_DECODE, FLASHINFER, "mla_decode", dtypes=_FLASHINFER_DTYPES,
                 layout=_LATENT,
                 graph_safe=False, max_abs_diff=0.015625, priority=10,
                 description="FlashInfer BatchMLAPagedAttentionWrapper (plan per call: host sync)"),
    # graph_safe: the split schedule is computed on the device in the call; captured and replayed equal to
    # the eager call on the H200 (perf/results/h200/libraries_2026-12-01/library_probe.json).
    _library_row("flash_mla/dense_decode", MLA_DECODE, FLASH_MLA, "mla_decode", dtypes={"bf16"}, layout=_LATENT,
                 shape=(ShapeConstraint("page_size", one_of=(64,)),), graph_safe=True, max_abs_diff=0.015625,
                 priority=20, description="FlashMLA dense decode (legacy kernel, block size 64)"),
)
