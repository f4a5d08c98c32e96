"""Op contracts: the one signature every implementation of an op shares.

Torch-free. Each `OpContract` names the op's parameters (in order), the
dtypes it is defined for, the named shape dims a call site reports (and how
each is bucketed for plans), the layout tags that exist for it, and a
docstring with shapes and layouts. build_tables() checks every row against
its op's contract; conformance checks every target's Python signature against
`parameters`.

Bucket rules (DESIGN §4): an engine resolves a plan once per bucket.
``TOKEN_BUCKETS`` maps num_tokens to 0, 1, 2-16, 17-128, then powers of two
(129-256, 257-512, ...); `EXACT` keeps the value (hidden sizes, head dims).
Dispatch for a bucket sees the bucket's upper bound, so a shape constraint on
a bucketed dim should sit on a bucket edge.
"""

from __future__ import annotations


class ExactBucket:
    """The dim's value is its own bucket (hidden size, head_dim)."""

    __slots__ = ()

    def bucket(self, value: int) -> tuple[int, int]:
        return (value, value)

    def describe(self) -> str:
        return "exact"

    def __repr__(self) -> str:
        return "ExactBucket()"


class TokenBuckets:
    """0, 1, 2-16, 17-128, then one bucket per power of two (129-256, ...)."""

    __slots__ = ("first_edges",)

    def __init__(self, first_edges: tuple[int, ...] = (1, 16, 128)):
        self.first_edges = tuple(first_edges)

    def __repr__(self) -> str:
        return f"TokenBuckets({self.first_edges!r})"

    def bucket(self, value: int) -> tuple[int, int]:
        if value <= 0:
            return (0, 0)
        low = 1
        for edge in self.first_edges:
            if value <= edge:
                return (low, edge)
            low = edge + 1
        high = self.first_edges[-1]
        while high < value:
            high *= 2
        return (high // 2 + 1, high)

    def describe(self) -> str:
        return "1, 2-16, 17-128, then powers of two"

    def buckets_up_to(self, limit: int) -> list[tuple[int, int]]:
        """Every bucket that holds a value in [1, limit]."""
        result = []
        value = 1
        while value <= limit:
            low, high = self.bucket(value)
            result.append((low, high))
            value = high + 1
        return result


EXACT = ExactBucket()
TOKEN_BUCKETS = TokenBuckets()

#: Layout tags a row may require and a call site may provide.
LAYOUT_TAGS = {
    "x:contiguous": "the main input is contiguous (row-major, no gaps)",
    "x:rows": "the main input x of shape [..., n] views as [rows, n] without a copy: one row stride, unit stride along n",
    "residual:rows": "the residual of shape [..., n] views as [rows, n] without a copy (as x:rows)",
    "out:rows": "the caller's out= tensor, if any, views as [rows, n] without a copy (as x:rows)",
    "table:rows": "the embedding table [vocab, hidden] has unit stride along hidden (any row stride)",
    "qk:rows": "q [T, Hq*D] and k [T, Hk*D] each have unit stride along their last dim (any token stride)",
    "kv:rows": "kv [T, 2*Hk, D] views as [T, 2*Hk*D] without a copy (one token stride, heads packed)",
    "buffer:rows": "the KV buffer [rows, 2*Hk, D] views as [rows, 2*Hk*D] without a copy (as kv:rows)",
}

#: Every dtype a floating-point elementwise/norm op accepts.
FLOAT_DTYPES = frozenset({"fp32", "fp16", "bf16"})


class OpContract:
    """An op's one signature: parameters, dtypes, named dims with bucket rules, layout tags, doc.

    A plain immutable class rather than attrs: it sits on the import path of
    every process that builds the table (see the note in dispatcher/spec.py).
    """

    __slots__ = ("op", "parameters", "dtypes", "dims", "layouts", "doc")

    def __init__(self, *, op: str, parameters, dtypes, dims, layouts=(), doc: str = ""):
        for name, value in (("op", op), ("parameters", tuple(parameters)), ("dtypes", frozenset(dtypes)),
                            ("dims", tuple(dims)), ("layouts", frozenset(layouts)), ("doc", doc)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"OpContract is immutable (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"OpContract(op={self.op!r}, parameters={self.parameters!r}, dims={self.dim_names!r})"

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def bucket_key(self, shape) -> tuple[tuple[str, int, int], ...]:
        """(dim, low, high) for each dim of the contract present in `shape`."""
        key = []
        for name, rule in self.dims:
            value = shape.get(name)
            if value is not None:
                low, high = rule.bucket(value)
                key.append((name, low, high))
        return tuple(key)


CONTRACTS = {
    contract.op: contract
    for contract in (
        OpContract(
            op="elementwise.scale",
            parameters=("x", "factor"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_elements", TOKEN_BUCKETS),),
            layouts=("x:contiguous",),
            doc="""scale(x, factor) -> out = x * factor

x: any shape, fp32/fp16/bf16, cpu or cuda. factor: Python float.
Returns a new tensor of x's shape and dtype (contiguous). The product is
computed in fp32 and rounded once to x's dtype (torch's own rule for a
tensor times a Python scalar).""",
        ),
        OpContract(
            op="norm.rms_norm",
            parameters=("x", "weight", "eps"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
            layouts=("x:rows",),
            doc="""rms_norm(x, weight, eps) -> out = x / sqrt(mean(x**2, -1) + eps) * weight

x: [..., hidden] (num_tokens = product of the leading dims), fp32/fp16/bf16.
weight: [hidden], x's dtype or fp32. eps: float >= 0.
Accumulation and the weight product are in fp32, rounded once to x's dtype
(FlashInfer/vLLM semantics). Returns a new contiguous tensor of x's shape.""",
        ),
        OpContract(
            op="norm.fused_add_rms_norm",
            parameters=("x", "residual", "weight", "eps"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
            layouts=("x:rows", "residual:rows"),
            doc="""fused_add_rms_norm(x, residual, weight, eps) -> (x, residual), both updated in place:

    residual <- residual + x                  (fp32 add, rounded once to residual's dtype)
    x        <- rms_norm(residual, weight, eps)  (of the stored residual, fp32 math, one rounding)

The contract engines use between transformer sublayers (vLLM's and
FlashInfer's fused_add_rmsnorm): the result equals the unfused pair
`residual += x; x = rms_norm(residual)`. x, residual: [..., hidden], same
shape, dtype and device; weight: [hidden], x's dtype or fp32. Returns the
same two tensor objects.""",
        ),
        OpContract(
            op="activation.silu_and_mul",
            parameters=("x", "out"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("intermediate", EXACT)),
            layouts=("x:rows", "out:rows"),
            doc="silu_and_mul(x, out=None) -> out[..., d] = silu(x[..., :d]) * x[..., d:], silu(g) = g * sigmoid(g)\n\nx: [..., 2*d] holding gate | up along the last dim (num_tokens = product of\nthe leading dims, intermediate = d), fp32/fp16/bf16. out: optional\npreallocated [..., d] tensor of x's dtype and device, not overlapping x;\nreturned (a new contiguous tensor when None). Math in fp32, one rounding\n(the vLLM/FlashInfer/SGLang contract of the MLP activation).",
        ),
        OpContract(
            op="activation.gelu_tanh_and_mul",
            parameters=("x", "out"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("intermediate", EXACT)),
            layouts=("x:rows", "out:rows"),
            doc="gelu_tanh_and_mul(x, out=None) -> out[..., d] = gelu_tanh(x[..., :d]) * x[..., d:], gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))\n\nx: [..., 2*d] holding gate | up along the last dim (num_tokens = product of\nthe leading dims, intermediate = d), fp32/fp16/bf16. out: optional\npreallocated [..., d] tensor of x's dtype and device, not overlapping x;\nreturned (a new contiguous tensor when None). Math in fp32, one rounding\n(the vLLM/FlashInfer/SGLang contract of the MLP activation).",
        ),
        OpContract(
            op="embedding.vocab_embedding",
            parameters=("ids", "table", "vocab_start", "vocab_end"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
            layouts=("table:rows",),
            doc="""vocab_embedding(ids, table, vocab_start=0, vocab_end=None) -> out[..., hidden]

ids: int32/int64 [...] token ids (num_tokens = ids.numel()); table:
[rows, hidden] fp32/fp16/bf16 holding the rows of ids vocab_start ..
vocab_end - 1 (a vocab-parallel shard; vocab_end defaults to vocab_start +
rows and may not exceed it). out[i] = table[ids[i] - vocab_start] for ids in
[vocab_start, vocab_end), a zero row otherwise (the other shards' tokens:
an all-reduce over shards completes the embedding). Row offsets are int64
(vocab x hidden exceeds 2**31 elements for real models). Negative ids are
invalid: the reference row raises (it checks on the host, one sync); the
native row gives them zero rows like any id outside the shard (no sync).""",
        ),
        OpContract(
            op="kvcache.update_kv_buffer",
            parameters=("kv", "loc", "buffer"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("num_kv_heads", EXACT), ("head_dim", EXACT)),
            layouts=("kv:rows", "buffer:rows"),
            doc="""update_kv_buffer(kv, loc, buffer) -> buffer, written in place: buffer[loc[i]] = kv[i]

kv: [T, 2*Hk, D] (K heads then V heads of each token, SGLang's fused KV
layout); loc: int32/int64 [T] buffer row ids, in any order, without
repeats (a repeated id leaves one of its tokens, unspecified which);
buffer: [rows, 2*Hk, D], kv's dtype and device. Rows not named in loc are
untouched. Ids outside [0, rows) are invalid: the reference row raises (a
host check, one sync); the native row skips them (masked, no sync).""",
        ),
        OpContract(
            op="kvcache.update_kv_buffer_fp8",
            parameters=("kv", "loc", "buffer", "k_scale", "v_scale"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("num_kv_heads", EXACT), ("head_dim", EXACT)),
            layouts=("kv:rows", "buffer:rows"),
            doc="""update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale) -> buffer, written in place

The fp8 KV cache: buffer[loc[i], h] = e4m3(clamp(kv[i, h] * (1 / s), -448, 448))
with s = k_scale for the K heads (h < Hk) and v_scale for the V heads, fp32
math (IEEE reciprocal, one multiply per element), round-to-nearest-even cast. kv: [T, 2*Hk, D] fp32/fp16/bf16 (the
dispatch dtype); buffer: [rows, 2*Hk, D] float8_e4m3fn; k_scale, v_scale:
one-element fp32 tensors on kv's device (per-tensor dequant scales, as
vLLM's/SGLang's k_scale and v_scale: a reader computes q.float() * s). loc,
untouched rows and invalid ids as update_kv_buffer.""",
        ),
        OpContract(
            op="embedding.rotary",
            parameters=("positions", "q", "k", "head_dim", "cos_sin_cache", "is_neox"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("num_q_heads", EXACT), ("num_kv_heads", EXACT),
                  ("head_dim", EXACT)),
            layouts=("qk:rows",),
            doc="""rotary(positions, q, k, head_dim, cos_sin_cache, is_neox) -> (q, k), rotated in place

positions: int32/int64 [T]; q: [T, Hq*head_dim]; k: [T, Hk*head_dim] (q's
dtype); cos_sin_cache: [max_position, rotary_dim] = cos | sin halves (fp32 or
q's dtype), rotary_dim even and <= head_dim (partial rotary: the last
head_dim - rotary_dim dims of each head are left as they are). For each
head, with c, s = cache[pos] halves and the pairs (x1, x2):
    x1' = x1 c - x2 s,   x2' = x2 c + x1 s          (fp32 math, one rounding)
is_neox=True pairs dim i with i + rotary_dim/2 (NeoX / Llama half split);
False pairs 2i with 2i+1 (GPT-J interleaved). Positions outside
[0, max_position) are invalid: the reference row raises (a host check, one
sync); the native row leaves those tokens unrotated (no sync).""",
        ),
        OpContract(
            op="quantization.per_token_fp8",
            parameters=("x",),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
            layouts=("x:rows",),
            doc="""per_token_fp8(x) -> (q, scale)

x: [T, H] fp32/fp16/bf16. scale[t] = max(max_h |x[t, h]|, 1e-10) / 448 (fp32,
shape [T, 1]); q = clamp(x * (1 / scale), -448, 448) as float8_e4m3fn, shape
[T, H]. 448 is e4m3's largest finite value; the 1e-10 floor keeps all-zero rows
finite. fp32 math; the division and the reciprocal are IEEE (correctly
rounded), then one multiply per element (as vLLM's inverted scales: an IEEE
divide per element costs half the bandwidth). That can differ from an exact
x / scale by one e4m3 step where a quotient falls next to a rounding
boundary. x must be finite: the scales and q of a group holding inf or NaN
are unspecified (the reference propagates them; kernels may differ). Dynamic per-token activation quantization (vLLM/SGLang semantics).""",
        ),
        OpContract(
            op="quantization.per_token_group_fp8",
            parameters=("x", "group_size", "column_major_scales"),
            dtypes=FLOAT_DTYPES,
            dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
            layouts=("x:rows",),
            doc="""per_token_group_fp8(x, group_size=128, column_major_scales=False) -> (q, scale)

x: [T, H] with H % group_size == 0. For each token and each group of
group_size consecutive columns: scale = max(absmax, 1e-10) / 448 (fp32) and
q = clamp(x * (1 / scale), -448, 448) as float8_e4m3fn (arithmetic as
per_token_fp8). scale: [T, H / group_size];
with column_major_scales=True it is stored column-major with the token dim
padded to a multiple of 4 (strides (1, ceil(T / 4) * 4)): the TMA-aligned
activation-scale layout DeepGEMM's block-scaled fp8 GEMMs read.""",
        ),
    )
}
