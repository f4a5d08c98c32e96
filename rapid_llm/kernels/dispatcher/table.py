"""OpTable: the immutable op -> rows table, built once from an explicit family list.

`build_tables()` imports the families named in `FAMILIES` (each family's
``__init__`` holds its `CONTRACTS` and `ROWS` tuples: data only,
torch-free), validates the global invariants, and returns an `OpTable`.
Nothing registers itself by import side effect; tests build their own
tables with `OpTable.from_rows`.

Invariants (each violation raises TableError naming the row):
  - row names are unique;
  - every op has a contract and exactly one reference row; every contract has rows;
  - the reference row serves every dtype of the contract;
  - rows only use dtypes, dims and layout tags their contract declares;
  - constraints on bucketed dims sit on bucket edges (plans judge a bucket at
    its upper bound).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

from .contract import LAYOUT_TAGS, ExactBucket
from .spec import BACKEND_CLASSES, KernelSpec

#: The families of the default table, in one explicit tuple.
FAMILIES = ("elementwise", "norm", "activation", "embedding", "kvcache", "quantization", "attention", "gemm")


class TableError(ValueError):
    """A row or a set of rows breaks a table invariant."""


class OpTable:
    """op id -> rows (a read-only mapping of tuples), plus name -> row and the op contracts.

    Immutable after construction. Equality is identity: a table is a value
    built once, and dispatch's memo keys on it cheaply. (A plain class, not
    attrs: it is on the import path, see dispatcher/spec.py.)
    """

    __slots__ = ("rows_by_op", "rows_by_name", "contracts")

    def __init__(self, rows_by_op, contracts):
        frozen = MappingProxyType({op: tuple(rows) for op, rows in rows_by_op.items()})
        by_name = MappingProxyType({row.name: row for rows in frozen.values() for row in rows})
        object.__setattr__(self, "rows_by_op", frozen)
        object.__setattr__(self, "rows_by_name", by_name)
        object.__setattr__(self, "contracts", MappingProxyType(dict(contracts)))

    def __setattr__(self, name, value):
        raise AttributeError(f"OpTable is immutable (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"OpTable(ops={list(self.rows_by_op)}, rows={len(self.rows_by_name)})"

    @classmethod
    def from_rows(cls, rows, contracts=None) -> "OpTable":
        """Validate `rows` against `contracts` ({op: OpContract}; default: the default families') and
        build a table holding the contracts of the ops the rows serve."""
        if contracts is None:
            contracts = family_contracts()
        validate_rows(rows, contracts)
        served = {row.op for row in rows}
        contracts = {op: contract for op, contract in contracts.items() if op in served}
        by_op: dict[str, list[KernelSpec]] = {}
        for row in rows:
            by_op.setdefault(row.op, []).append(row)
        return cls(by_op, contracts)

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(self.rows_by_op)

    def rows(self, op: str) -> tuple[KernelSpec, ...]:
        try:
            return self.rows_by_op[op]
        except KeyError:
            raise KeyError(f"unknown op {op!r}; this table serves {sorted(self.rows_by_op)}") from None

    def reference(self, op: str) -> KernelSpec:
        return next(row for row in self.rows(op) if row.is_reference)

    def deniable_names(self) -> frozenset[str]:
        """Names a deny list may hold: every known backend (rows or not) and every row of this table."""
        return frozenset(BACKEND_CLASSES) | frozenset(self.rows_by_name)


def validate_rows(rows, contracts) -> None:
    seen: dict[str, KernelSpec] = {}
    references: dict[str, list[str]] = {}
    for row in rows:
        if not isinstance(row, KernelSpec):
            raise TableError(f"table rows must be KernelSpec, got {row!r}")
        if row.name in seen:
            raise TableError(f"duplicate row name {row.name!r} (ops {seen[row.name].op} and {row.op})")
        seen[row.name] = row
        contract = contracts.get(row.op)
        if contract is None:
            raise TableError(f"row {row.name!r}: op {row.op!r} has no contract (declare it in its family's CONTRACTS)")
        extra = row.dtypes - contract.dtypes
        if extra:
            raise TableError(
                f"row {row.name!r}: dtypes {sorted(extra)} are outside {row.op}'s contract {sorted(contract.dtypes)}"
            )
        for constraint in row.shape:
            if constraint.dim not in contract.dim_names:
                raise TableError(
                    f"row {row.name!r}: shape dim {constraint.dim!r} is not a dim of {row.op} {contract.dim_names}"
                )
            _check_bucket_edges(row, constraint, dict(contract.dims)[constraint.dim])
        for tag in row.layout:
            if tag not in LAYOUT_TAGS:
                raise TableError(f"row {row.name!r}: unknown layout tag {tag!r}; known: {sorted(LAYOUT_TAGS)}")
            if tag not in contract.layouts:
                raise TableError(
                    f"row {row.name!r}: layout tag {tag!r} is not declared by {row.op} {sorted(contract.layouts)}"
                )
        if row.is_reference:
            references.setdefault(row.op, []).append(row.name)
            if row.dtypes != contract.dtypes:
                raise TableError(
                    f"reference row {row.name!r} must serve every dtype of {row.op}: "
                    f"{sorted(contract.dtypes)}, serves {sorted(row.dtypes)}"
                )
    for op in {row.op for row in rows}:
        found = references.get(op, [])
        if len(found) != 1:
            raise TableError(f"op {op!r} must have exactly one reference (torch) row, has {found}")


def _check_bucket_edges(row, constraint, rule) -> None:
    """A plan judges a bucketed dim at the bucket's upper bound, so a constraint on it must hold
    for the whole bucket or for none of it: min at a bucket's low edge, max at a high edge,
    and no multiple_of / one_of."""
    if isinstance(rule, ExactBucket):
        return
    where = f"row {row.name!r}: constraint on bucketed dim {constraint.dim!r} ({rule.describe()})"
    if constraint.multiple_of is not None or constraint.one_of is not None:
        raise TableError(f"{where} cannot use multiple_of/one_of: a bucket mixes values that pass and fail")
    if constraint.min is not None and rule.bucket(constraint.min)[0] != constraint.min:
        raise TableError(f"{where}: min={constraint.min} is not the low edge of a bucket")
    if constraint.max is not None and rule.bucket(constraint.max)[1] != constraint.max:
        raise TableError(f"{where}: max={constraint.max} is not the high edge of a bucket")


def _family_modules(families):
    return [importlib.import_module(f"rapid_llm.kernels.ops.{family}") for family in families]


def family_contracts(families=FAMILIES) -> dict:
    """{op: OpContract} declared by the families; an op declared twice is a TableError."""
    contracts: dict = {}
    for module in _family_modules(families):
        for contract in module.CONTRACTS:
            if contract.op in contracts:
                raise TableError(f"op {contract.op!r} is declared by two contracts")
            if contract.op.partition(".")[0] != module.__name__.rsplit(".", 1)[1]:
                raise TableError(f"op {contract.op!r} is declared in family {module.__name__!r}: "
                                 "an op id starts with its family's name")
            contracts[contract.op] = contract
    return contracts


def build_tables(families=FAMILIES) -> OpTable:
    """Import each family's CONTRACTS and ROWS and build the validated table.

    Every contract must be served (a contract without rows is a TableError)
    and must name its argument check.
    """
    contracts = family_contracts(families)
    rows = [row for module in _family_modules(families) for row in module.ROWS]
    served = {row.op for row in rows}
    for op, contract in contracts.items():
        if op not in served:
            raise TableError(f"op {op!r} has a contract but no rows")
        if contract.check is None:
            raise TableError(f"op {op!r}: its contract names no argument check")
    return OpTable.from_rows(rows, contracts)


_DEFAULT: OpTable | None = None


def default_table() -> OpTable:
    """The process's table, built on first use and reused."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = build_tables()
    return _DEFAULT
