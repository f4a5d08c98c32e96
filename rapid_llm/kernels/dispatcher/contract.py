"""Op contracts: the one signature every implementation of an op shares (torch-free).

An `OpContract` names the op's parameters (in order), the dtypes it is
defined for, the named shape dims a call reports (and how each is bucketed
for plans), the layout tags that exist for it, the op's argument check, and
a docstring with shapes, layouts and semantics. Each family declares its
contracts beside its rows (`ops/<family>/__init__.py`); `build_tables()`
checks every row against its op's contract.

The argument check (`check="module:function"`, imported on first use) is the
op's one validation site. Called with the op's arguments it raises
`OpInputError` on bad input, else returns ``(anchor, layout, dims)``: the
tensor whose device and dtype drive dispatch, the layout tags the arguments
provide (a frozenset of tags from LAYOUT_TAGS) and the named dims as a tuple
of (name, int) pairs in contract order. Row targets are unchecked kernels:
the public op checks once and calls the planned target; a `PlannedOp`
called directly checks first.

Bucket rules (DESIGN §4): an engine resolves a plan once per bucket.
`TOKEN_BUCKETS` maps num_tokens to 0, 1, 2-16, 17-128, then powers of two
(129-256, 257-512, ...); `EXACT` keeps the value (hidden sizes, head dims).
Dispatch for a bucket sees the bucket's upper bound, so a shape constraint on
a bucketed dim must sit on a bucket edge (build_tables() enforces it).
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

#: The floating-point dtype labels every elementwise/norm/activation op accepts.
FLOAT_DTYPE_LABELS = frozenset({"fp32", "fp16", "bf16"})

#: Layout tags a row may require and a call site's check may provide.
LAYOUT_TAGS = {
    "x:contiguous": "the main input is contiguous (row-major, no gaps)",
    "x:rows": "the main input x of shape [..., n] views as [rows, n] without a copy: one row stride, unit stride along n",
    "residual:rows": "the residual of shape [..., n] views as [rows, n] without a copy (as x:rows)",
    "out:rows": "the caller's out= tensor, if any, views as [rows, n] without a copy (as x:rows)",
    "table:rows": "the embedding table [vocab, hidden] has unit stride along hidden (any row stride)",
    "qk:rows": "q [T, Hq*D], k [T, Hk*D] and cos_sin_cache [P, R] each have unit stride along their last dim "
               "(any token stride)",
    "kv:rows": "kv [T, 2*Hk, D] views as [T, 2*Hk*D] without a copy (one token stride, heads packed)",
    "buffer:rows": "a KV write's buffer views as [rows, row width] with unit stride along the row (any row "
                   "stride): [rows, 2*Hk, D] as [rows, 2*Hk*D] without a copy (as kv:rows), the MLA buffer "
                   "[rows, R + P] as it is",
    "latent_rope:rows": "latent [T, R] and rope [T, P] of an MLA cache write each have unit stride along their "
                        "last dim (any token stride)",
    # attention family
    "q:heads": "q [N, Hq, D] has unit stride along D, its other strides and its data pointer 16-byte aligned "
               "(what TMA-based library kernels load without a copy)",
    "kv:heads": "k and v of a ragged prefill [T, Hk, D] each as q:heads",
    "v:same_head_dim": "v's head_dim equals q's and k's (libraries compile a fixed set of (D, Dv) pairs)",
    "kv:paged": "the KV buffer [rows, 2*Hk, D] as q:heads (any 16-byte-aligned row stride)",
    "kv:q_dtype": "the decode KV buffer holds q's dtype (no scales)",
    "kv:fp8_e4m3": "the decode KV buffer is float8_e4m3fn with its per-tensor k_scale and v_scale",
    "latent:rows": "the MLA latent cache [rows, 576] as q:heads",
    "index:contiguous": "the index tensors (cu_seqlens, seq_lens, page_table) are contiguous",
    # gemm family
    "a:tma": "the fp8 operand a has unit stride along K, a 16-byte-aligned start and row stride, rows that do not "
             "overlap, and (3-D) groups packed without gaps: what DeepGEMM's TMA loads read",
    "b:tma": "the fp8 weight b has unit stride along K, a 16-byte-aligned start and row stride, rows that do not "
             "overlap, and (3-D) groups packed without gaps (as a:tma)",
    "out:tma": "the caller's out= (if any) has unit stride along N, a 16-byte-aligned start and row stride, rows that "
               "do not overlap, and (3-D) groups packed without gaps: what DeepGEMM's TMA stores write",
    "a_scale:aligned": "the activation scales start at a 16-byte-aligned address (DeepGEMM hands scales already in "
                       "its TMA-aligned layout to TMA as they are)",
    "b_scale:dense": "the weight scales are row-major or column-major without gaps (3-D: groups packed without gaps)",
    "m_indices:contiguous": "the per-row group ids m_indices are contiguous",
    "masked_m:contiguous": "the per-group row counts masked_m are contiguous",
    # FlashInfer rows of the norm, activation and embedding families
    "x:rows_vector": "x:rows, and x's data pointer and row stride are multiples of gcd(16, n * element size) "
                     "bytes (FlashInfer's norm vector width), with (rows - 1) * row stride + n <= 2**32 and "
                     "rows * n <= 2**32 (its element offsets are 32-bit)",
    "residual:rows_vector": "the residual meets x:rows_vector's conditions (as x)",
    "weight:vector": "the norm weight [n] has x's dtype, unit stride and a data pointer that is a multiple of "
                     "gcd(16, n * element size) bytes",
    "x:contiguous16": "x is contiguous (row-major, no gaps) with a data pointer that is a multiple of 16 bytes",
    "out:contiguous16": "the caller's out= tensor, if any, is contiguous with a data pointer that is a multiple "
                        "of 16 bytes (always provided when out is None)",
    "qk:rows16": "q and k have unit stride along their last dim and data pointers and token strides that are "
                 "multiples of 16 bytes",
    "cos_sin_cache:vector16": "cos_sin_cache [P, R] is fp32, contiguous, 16-byte aligned, R (rotary_dim) a multiple "
                              "of 16, and for GPT-J (is_neox=False) its storage extends >= 16 bytes past its last "
                              "row (FlashInfer's rope reads cos/sin as 8-float vectors, up to 4 floats past a row)",
}


class OpContract:
    """An op's one signature: parameters, dtypes, named dims with bucket rules, layout tags, check, doc.

    A plain immutable class rather than attrs: it sits on the import path of
    every process that builds the table (see the note in dispatcher/spec.py).
    `check` is "module:function" of the op's argument check (module docstring);
    None only in tables that tests build for the dispatcher alone.
    """

    __slots__ = ("op", "parameters", "dtypes", "dims", "layouts", "check", "doc")

    def __init__(self, *, op: str, parameters, dtypes, dims, layouts=(), check: str | None = None, doc: str = ""):
        for name, value in (("op", op), ("parameters", tuple(parameters)), ("dtypes", frozenset(dtypes)),
                            ("dims", tuple(dims)), ("layouts", frozenset(layouts)), ("check", check),
                            ("doc", doc)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"OpContract is immutable (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"OpContract(op={self.op!r}, parameters={self.parameters!r}, dims={self.dim_names!r})"

    @property
    def name(self) -> str:
        """The op's name within its family: 'rms_norm' for 'norm.rms_norm' (the public function's name)."""
        return self.op.partition(".")[2]

    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dims)

    def bucket_key(self, shape) -> tuple[tuple[str, int, int], ...]:
        """(dim, low, high) for each dim of the contract present in `shape` (a mapping)."""
        key = []
        for name, rule in self.dims:
            value = shape.get(name)
            if value is not None:
                low, high = rule.bucket(value)
                key.append((name, low, high))
        return tuple(key)


class OpInputError(ValueError):
    """Bad input to an op: names the op, the argument and what was expected (raised by the op's check)."""

    def __init__(self, op: str, argument: str, expected: str, got: str):
        self.op, self.argument, self.expected, self.got = op, argument, expected, got
        super().__init__(f"{op}: argument {argument!r}: expected {expected}, got {got}")
