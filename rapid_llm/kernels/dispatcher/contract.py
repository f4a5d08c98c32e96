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
provide (a frozenset of the layout tags its family declares: the family's
LAYOUT_TAGS, merged into OpTable.layout_tags) and the named dims as a tuple
of (name, int) pairs in contract order.

Promises (`promises=`) are layout tags no check can derive, because they are
about tensor values (e.g. `qkv:finite`: q, k and v hold no NaN or inf) and
reading values costs a pass over the data and a host sync. A call site states
a promise when it plans (`Planner.plan(..., layout=checked | {"qkv:finite"})`);
the public op and every checked call provide only what the check derives, so a
row that needs a promise serves only callers that made it. Row targets are unchecked kernels:
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


class OpContract:
    """An op's one signature: parameters, dtypes, named dims with bucket rules, layout tags, check, doc.

    A plain immutable class rather than attrs: it sits on the import path of
    every process that builds the table (see the note in dispatcher/spec.py).
    `check` is "module:function" of the op's argument check (module docstring);
    None only in tables that tests build for the dispatcher alone.
    """

    __slots__ = (
        "op",
        "parameters",
        "dtypes",
        "dims",
        "layouts",
        "promises",
        "tags",
        "check",
        "doc",
        "dim_names",
        "dim_rules",
    )

    def __init__(
        self, *, op: str, parameters, dtypes, dims, layouts=(), promises=(), check: str | None = None, doc: str = ""
    ):
        for name, value in (
            ("op", op),
            ("parameters", tuple(parameters)),
            ("dtypes", frozenset(dtypes)),
            ("dims", tuple(dims)),
            ("layouts", frozenset(layouts)),
            ("promises", frozenset(promises)),
            ("check", check),
            ("doc", doc),
        ):
            object.__setattr__(self, name, value)
        if self.layouts & self.promises:
            raise ValueError(f"{op}: tags {sorted(self.layouts & self.promises)} are both checked and promised")
        # every tag a row of this op may require: what a check derives and what a call site may promise
        object.__setattr__(self, "tags", self.layouts | self.promises)
        # (name, ...) and {name: bucket rule}: computed once, read by every plan and by the table's checks
        object.__setattr__(self, "dim_names", tuple(name for name, _ in self.dims))
        object.__setattr__(self, "dim_rules", dict(self.dims))

    def __setattr__(self, name, value):
        raise AttributeError(f"OpContract is immutable (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"OpContract(op={self.op!r}, parameters={self.parameters!r}, dims={self.dim_names!r})"

    @property
    def name(self) -> str:
        """The op's name within its family: 'rms_norm' for 'norm.rms_norm' (the public function's name)."""
        return self.op.partition(".")[2]

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
