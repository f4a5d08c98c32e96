"""OpTable: the immutable op -> rows table, built once from an explicit family list.

`build_tables()` imports the families named in `FAMILIES` (each family's
``__init__`` holds its `CONTRACTS` and `ROWS` tuples and its `LAYOUT_TAGS`
dict, {tag: what a call site providing it guarantees}: data only,
torch-free), merges the families' layout tags, validates the global
invariants, and returns an `OpTable`. Nothing registers itself by import
side effect; tests build their own tables with `OpTable.from_rows`.

Invariants (each violation raises TableError naming the row):
  - row names are unique;
  - every op has a contract and exactly one reference row; every contract has rows;
  - the reference row serves every dtype of the contract;
  - rows only use dtypes, dims and layout tags their contract declares, and known layout tags;
  - a family declares every layout tag its contracts name and no other, and a tag two families
    declare has one description (the merge names both families otherwise);
  - constraints on bucketed dims sit on bucket edges (plans judge a bucket at
    its upper bound).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType

from .contract import ExactBucket
from .rankings import EMPTY as NO_RANKINGS
from .libraries import known_libraries
from .rankings import RankingStore, load_package_rankings
from .spec import BACKEND_CLASSES, KernelSpec

#: The families of the default table, in one explicit tuple.
FAMILIES = (
    "elementwise",
    "norm",
    "activation",
    "embedding",
    "kvcache",
    "quantization",
    "attention",
    "gemm",
    "moe",
    "comm",
)


class TableError(ValueError):
    """A row or a set of rows breaks a table invariant."""


class OpTable:
    """op id -> rows (a read-only mapping of tuples), plus name -> row, the op contracts and the measured
    rankings (dispatcher/rankings.py: which rows were fastest at a shape bucket on a GPU class).

    Immutable after construction. Equality is identity: a table is a value
    built once, and dispatch's memo keys on it cheaply. (A plain class, not
    attrs: it is on the import path, see dispatcher/spec.py.)
    """

    __slots__ = ("rows_by_op", "rows_by_name", "contracts", "rankings", "layout_tags")

    def __init__(self, rows_by_op, contracts, rankings: RankingStore = NO_RANKINGS, layout_tags=None):
        frozen = MappingProxyType({op: tuple(rows) for op, rows in rows_by_op.items()})
        by_name = MappingProxyType({row.name: row for rows in frozen.values() for row in rows})
        object.__setattr__(self, "rows_by_op", frozen)
        object.__setattr__(self, "rows_by_name", by_name)
        object.__setattr__(self, "contracts", MappingProxyType(dict(contracts)))
        object.__setattr__(self, "rankings", rankings)
        # {tag: description}: the known layout tags (error messages describe a tag a call lacks).
        object.__setattr__(self, "layout_tags", MappingProxyType(dict(layout_tags or {})))

    def __setattr__(self, name, value):
        raise AttributeError(f"OpTable is immutable (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"OpTable(ops={list(self.rows_by_op)}, rows={len(self.rows_by_name)})"

    @classmethod
    def from_rows(cls, rows, contracts=None, rankings: RankingStore = NO_RANKINGS, layout_tags=None) -> "OpTable":
        """Validate `rows` against `contracts` ({op: OpContract}; default: the default families') and
        `layout_tags` ({tag: description}; default: the default families' merged tags), and build a
        table holding the contracts of the ops the rows serve, the layout tags, and `rankings`
        (checked: every ranked row exists and serves the ranking's op)."""
        if contracts is None:
            contracts = family_contracts()
        if layout_tags is None:
            layout_tags = family_layout_tags()
        validate_rows(rows, contracts, layout_tags)
        served = {row.op for row in rows}
        contracts = {op: contract for op, contract in contracts.items() if op in served}
        by_op: dict[str, list[KernelSpec]] = {}
        for row in rows:
            by_op.setdefault(row.op, []).append(row)
        names = {row.name: row for row in rows}
        for ranking in rankings:
            for name, _ in ranking.order:
                if name not in names or names[name].op != ranking.op:
                    raise TableError(
                        f"measured ranking of {ranking.op} at {ranking.bucket} on {ranking.device_class} "
                        f"names {name!r}, which is not a row of {ranking.op} (re-run perf/write_rankings.py)"
                    )
        return cls(by_op, contracts, rankings, layout_tags)

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


def validate_rows(rows, contracts, layout_tags) -> None:
    seen: dict[str, KernelSpec] = {}
    references: dict[str, list[str]] = {}
    known = known_libraries()
    for row in rows:
        if not isinstance(row, KernelSpec):
            raise TableError(f"table rows must be KernelSpec, got {row!r}")
        for library in row.libraries:
            if library.name not in known:
                raise TableError(
                    f"row {row.name!r}: unknown library {library.name!r}; known: {sorted(known)} "
                    "(a backend package declares its LIBRARY)"
                )
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
            _check_bucket_edges(row, constraint, contract.dim_rules[constraint.dim])
        for tag in row.layout:
            if tag not in layout_tags:
                raise TableError(f"row {row.name!r}: unknown layout tag {tag!r}; known: {sorted(layout_tags)}")
            if tag not in contract.tags:
                raise TableError(
                    f"row {row.name!r}: layout tag {tag!r} is not declared by {row.op} {sorted(contract.tags)}"
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


def family_contracts(families=FAMILIES, modules=None) -> dict:
    """{op: OpContract} declared by the families; an op declared twice is a TableError."""
    contracts: dict = {}
    for module in modules or _family_modules(families):
        for contract in module.CONTRACTS:
            if contract.op in contracts:
                raise TableError(f"op {contract.op!r} is declared by two contracts")
            if contract.op.partition(".")[0] != module.__name__.rsplit(".", 1)[1]:
                raise TableError(
                    f"op {contract.op!r} is declared in family {module.__name__!r}: "
                    "an op id starts with its family's name"
                )
            contracts[contract.op] = contract
    return contracts


def family_layout_tags(families=FAMILIES, modules=None) -> dict:
    """{tag: description} merged from the families' LAYOUT_TAGS.

    Each family declares exactly the tags its contracts name (a tag its
    contracts name but it does not declare, or one it declares but no
    contract names, is a TableError), so rows (which may use only their
    contract's tags) use only tags their own family declares. A tag several
    families use is declared by each, with one description: two
    descriptions of one tag are a TableError naming both families.
    """
    declared: dict[str, tuple[str, str]] = {}
    for module in modules or _family_modules(families):
        family = module.__name__.rsplit(".", 1)[1]
        tags = getattr(module, "LAYOUT_TAGS", None)
        if not isinstance(tags, dict):
            raise TableError(
                f"family {family!r} declares no LAYOUT_TAGS ({{tag: description}} beside its CONTRACTS and ROWS)"
            )
        named = set().union(*(contract.tags for contract in module.CONTRACTS))
        if named - tags.keys():
            raise TableError(
                f"family {family!r}: its contracts name layout tags {sorted(named - tags.keys())} "
                "that its LAYOUT_TAGS does not declare"
            )
        if tags.keys() - named:
            raise TableError(
                f"family {family!r} declares layout tags {sorted(tags.keys() - named)} that none of its contracts names"
            )
        for tag, description in tags.items():
            first_family, first_description = declared.setdefault(tag, (family, description))
            if first_description != description:
                raise TableError(
                    f"layout tag {tag!r} is declared by families {first_family!r} and {family!r} "
                    f"with different descriptions: {first_description!r} vs {description!r}"
                )
    return {tag: description for tag, (_, description) in declared.items()}


def build_tables(families=FAMILIES) -> OpTable:
    """Import each family's CONTRACTS, ROWS and LAYOUT_TAGS, and the package's measured rankings, and
    build the validated table.

    Every contract must be served (a contract without rows is a TableError)
    and must name its argument check.
    """
    modules = _family_modules(families)
    contracts = family_contracts(families, modules)
    layout_tags = family_layout_tags(families, modules)
    rows = [row for module in modules for row in module.ROWS]
    served = {row.op for row in rows}
    for op, contract in contracts.items():
        if op not in served:
            raise TableError(f"op {op!r} has a contract but no rows")
        if contract.check is None:
            raise TableError(f"op {op!r}: its contract names no argument check")
    return OpTable.from_rows(rows, contracts, load_package_rankings(), layout_tags)


_DEFAULT: OpTable | None = None


def default_table() -> OpTable:
    """The process's table, built on first use and reused."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = build_tables()
    return _DEFAULT
