"""Invariants of the package's real table, and build-time rejection of bad tables (DESIGN §2).

The real-table tests are parametrised over the rows build_tables() returns, so
a new family or row is covered without editing this file.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import types

import pytest

from rapid_llm.kernels.dispatcher import FAMILIES, OpTable, ShapeConstraint, TableError, build_tables, probe_environment
from rapid_llm.kernels.dispatcher.contract import OpContract
from rapid_llm.kernels.dispatcher.table import family_contracts, family_layout_tags

try:
    from conformance import _fake_targets as fake
except ImportError:  # conformance/ is on sys.path but not importable as a package
    import _fake_targets as fake

TABLE = build_tables()
CONTRACTS = TABLE.contracts
ROWS = sorted(TABLE.rows_by_name.values(), key=lambda row: row.name)
ROW_IDS = [row.name for row in ROWS]


@functools.cache
def _libraries_here():
    """Installed optional libraries as this process sees them (this ci/ cell's RAPID_LLM_HIDE_LIBS applied)."""
    return probe_environment(environ=dict(os.environ)).libs


@functools.cache
def _hidden_here():
    return probe_environment(environ=dict(os.environ)).hidden_libs


def _import(path: str):
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def _skip_unless_libraries_present(row):
    libs = _libraries_here()
    for requirement in row.libraries:
        ok, observed = requirement.check(libs.get(requirement.name))
        if not ok:
            hidden = " (hidden by RAPID_LLM_HIDE_LIBS)" if requirement.name in _hidden_here() else ""
            pytest.skip(
                f"{row.name} needs {requirement.describe()}; here: {observed}{hidden}, "
                "so its target cannot be imported in this environment"
            )
    if row.libraries and row.available:
        # Installed in range but not loadable here (a build for another torch or CUDA, no GPU libraries):
        # the row is rejected with the probe's reason, which is the contract for a broken library.
        ok, reason = _import(row.available)()
        if not ok:
            pytest.skip(f"{row.name}: its library is installed but does not load here: {reason}")


# ---------------------------------------------------------------------------
# The real table
# ---------------------------------------------------------------------------


def test_every_family_is_in_the_table():
    """Catches a family named in FAMILIES whose rows never reach the table (e.g. an empty ROWS)."""
    families_present = {op.partition(".")[0] for op in TABLE.ops}
    assert set(FAMILIES) <= families_present, sorted(set(FAMILIES) - families_present)


def test_every_contract_of_a_listed_family_has_rows():
    """Catches an op declared in a family's CONTRACTS but served by no row."""
    expected = set(family_contracts())
    assert expected <= set(TABLE.ops), sorted(expected - set(TABLE.ops))


@pytest.mark.parametrize("op", sorted(TABLE.ops))
def test_contract_check_imports_with_the_contract_parameters(op):
    """Catches a contract whose argument check is missing, mistyped, or takes other parameters than the op
    (a PlannedOp called directly would fail on the check instead of checking)."""
    contract = CONTRACTS[op]
    check = _import(contract.check)
    assert list(inspect.signature(check).parameters) == list(contract.parameters)


@pytest.mark.parametrize("op", sorted(TABLE.ops))
def test_every_op_has_a_public_function_named_like_it(op):
    """Catches an op served by the table but missing from the public API (or exported under another name,
    or with parameters in another order than its contract)."""
    import rapid_llm.kernels as kernels

    contract = CONTRACTS[op]
    function = getattr(kernels, contract.name)
    assert list(inspect.signature(function).parameters) == list(contract.parameters)
    assert contract.name in kernels.__all__


def test_row_names_are_unique():
    """Catches two rows sharing a name (force=/deny= and explain() would be ambiguous)."""
    names = [row.name for rows in TABLE.rows_by_op.values() for row in rows]
    assert len(names) == len(set(names))
    assert len(TABLE.rows_by_name) == len(names)


@pytest.mark.parametrize("op", sorted(TABLE.ops))
def test_exactly_one_reference_row_serving_every_contract_dtype(op):
    """Catches an op without its floor (or with two), or a reference row that misses a dtype the op
    supports — dispatch could then fail on a supported query."""
    references = [row for row in TABLE.rows(op) if row.backend == "torch"]
    assert len(references) == 1, [row.name for row in references]
    reference = references[0]
    assert reference.dtypes == CONTRACTS[op].dtypes
    assert not (reference.capability or reference.libraries or reference.shape or reference.layout)
    assert reference.golden.verified


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_name_prefix_is_the_backend(row):
    """Catches rows whose name lies about their backend (deny by backend would miss them)."""
    assert row.name.partition("/")[0] == row.backend


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_target_imports_to_a_callable_with_the_contract_parameters(row):
    """Catches a target path typo (found only on the first call on some machine) and a target whose
    signature drifted from the op contract (call sites pass arguments positionally)."""
    _skip_unless_libraries_present(row)
    target = _import(row.target)
    assert callable(target), row.target
    parameters = list(inspect.signature(target).parameters)
    expected = list(CONTRACTS[row.op].parameters)
    assert parameters[: len(expected)] == expected, f"{row.name}: {parameters} vs contract {expected}"


def test_available_probes_import_to_callables():
    """Catches an availability probe path that does not resolve (load() would reject the row forever)."""
    with_probe = [row for row in ROWS if row.available]
    if not with_probe:
        pytest.skip("no row of the real table declares an `available` probe yet")
    libs = _libraries_here()
    checked = 0
    for row in with_probe:
        if all(requirement.check(libs.get(requirement.name))[0] for requirement in row.libraries):
            assert callable(_import(row.available)), f"{row.name}: {row.available}"
            checked += 1
    if not checked:
        pytest.skip("every row with an `available` probe needs a library missing here")


def test_real_rows_are_checked_at_all():
    """Catches the parametrised tests above silently running over an empty table."""
    assert ROWS and all(TABLE.rows(op) for op in TABLE.ops)


# ---------------------------------------------------------------------------
# Build-time rejection
# ---------------------------------------------------------------------------


def _build(*rows):
    return OpTable.from_rows(list(rows), fake.CONTRACTS)


def test_a_valid_test_table_builds():
    """Catches the rejection tests below passing only because every table is rejected."""
    table = _build(
        fake.reference_row(), fake.spec("native/ok", layout={"x:rows"}, shape=(ShapeConstraint("hidden", min=1),))
    )
    assert {row.name for row in table.rows(fake.OP)} == {"torch/ref", "native/ok"}


BAD_TABLES = {
    "duplicate-name": (
        lambda: [fake.reference_row(), fake.spec("native/twice"), fake.spec("native/twice", priority=3)],
        ["native/twice"],
    ),
    "duplicate-name-across-ops": (
        lambda: [
            fake.reference_row(),
            fake.reference_row(op=fake.OTHER_OP, name="torch/other"),
            fake.spec("native/twice"),
            fake.spec("native/twice", op=fake.OTHER_OP),
        ],
        ["native/twice"],
    ),
    "two-reference-rows": (
        lambda: [fake.reference_row(), fake.reference_row(name="torch/ref_again")],
        [fake.OP, "torch/ref", "torch/ref_again"],
    ),
    "missing-reference-row": (lambda: [fake.spec("native/alone")], [fake.OP]),
    "dtype-outside-contract": (
        lambda: [fake.reference_row(), fake.spec("native/fp8", dtypes={"bf16", "fp8_e4m3"})],
        ["native/fp8", "fp8_e4m3"],
    ),
    "reference-missing-a-contract-dtype": (
        lambda: [fake.reference_row(dtypes={"bf16", "fp32"})],
        ["torch/ref", "fp16"],
    ),
    "unknown-layout-tag": (
        lambda: [fake.reference_row(), fake.spec("native/paged", layout={"kv:pagd"})],
        ["native/paged", "kv:pagd"],
    ),
    "layout-tag-of-another-op": (
        lambda: [fake.reference_row(), fake.spec("native/contig", layout={"x:contiguous"})],
        ["native/contig", "x:contiguous"],
    ),
    "shape-dim-not-in-contract": (
        lambda: [fake.reference_row(), fake.spec("native/heads", shape=(ShapeConstraint("head_dim", one_of=(64,)),))],
        ["native/heads", "head_dim"],
    ),
    "op-without-contract": (
        lambda: [fake.reference_row(), fake.spec("native/stray", op="test.unknown")],
        ["native/stray", "test.unknown"],
    ),
}


@pytest.mark.parametrize("rows, named", list(BAD_TABLES.values()), ids=list(BAD_TABLES))
def test_bad_table_is_rejected_at_build_naming_the_row(rows, named):
    """Catches a table invariant that is not enforced at build, or an error that does not say which
    row (or op) breaks it."""
    with pytest.raises(TableError) as error:
        _build(*rows())
    for text in named:
        assert text in str(error.value), f"{text!r} not in {error.value}"


def test_unknown_layout_tag_is_rejected_even_if_the_contract_declares_it():
    """Catches a misspelled tag that a (test or new) contract also misspells: the row would match only
    call sites that make the same typo. Tags must come from the table's layout tags (the families' LAYOUT_TAGS)."""
    contract = fake.CONTRACTS[fake.OP]
    misspelled = OpContract(
        op=contract.op,
        parameters=contract.parameters,
        dtypes=contract.dtypes,
        dims=contract.dims,
        layouts={"x:rows", "x:rowz"},
    )
    with pytest.raises(TableError) as error:
        OpTable.from_rows([fake.reference_row(), fake.spec("native/typo", layout={"x:rowz"})], {fake.OP: misspelled})
    assert "native/typo" in str(error.value) and "x:rowz" in str(error.value)


def test_a_test_table_checks_rows_against_its_own_layout_tags_and_carries_them():
    """Catches from_rows ignoring its layout_tags (checking a fixed list instead), and a table that
    loses them (a plan describes a tag a call lacks with the table's description)."""
    rows = [fake.reference_row(), fake.spec("native/rows", layout={"x:rows"})]
    table = OpTable.from_rows(rows, fake.CONTRACTS, layout_tags={"x:rows": "a test's own description"})
    assert dict(table.layout_tags) == {"x:rows": "a test's own description"}
    with pytest.raises(TableError) as error:
        OpTable.from_rows(rows, fake.CONTRACTS, layout_tags={"x:other": "not the row's tag"})
    assert "native/rows" in str(error.value) and "x:rows" in str(error.value)


def test_the_default_layout_tags_are_the_families_merged():
    """Catches a test table built without layout_tags knowing other tags than the real table, and the
    real table dropping a family's tags."""
    assert dict(TABLE.layout_tags) == family_layout_tags()
    assert dict(_build(fake.reference_row()).layout_tags) == dict(TABLE.layout_tags)
    named = set().union(*(contract.tags for contract in CONTRACTS.values()))
    assert named == set(TABLE.layout_tags)


def _install_family(monkeypatch, family: str, layouts, layout_tags) -> None:
    """A family module `family` (one op, '<family>.op', whose contract names `layouts`, and its reference
    row), importable where build_tables() looks for families; LAYOUT_TAGS left out when None."""
    module = types.ModuleType(f"rapid_llm.kernels.ops.{family}")
    base = fake.CONTRACTS[fake.OP]
    op = f"{family}.op"
    module.CONTRACTS = (
        OpContract(
            op=op,
            parameters=base.parameters,
            dtypes=base.dtypes,
            dims=base.dims,
            layouts=layouts,
            check=fake.target("reference"),
        ),
    )
    module.ROWS = (fake.reference_row(op=op, name=f"torch/{family}"),)
    if layout_tags is not None:
        module.LAYOUT_TAGS = layout_tags
    monkeypatch.setitem(sys.modules, module.__name__, module)


def test_families_sharing_a_tag_merge_when_they_describe_it_alike(monkeypatch):
    """Catches the merge rejecting a tag two families use (x:rows is norm's, activation's and
    quantization's), or a merged table missing one family's tags."""
    _install_family(monkeypatch, "fam_a", {"x:rows"}, {"x:rows": "rows"})
    _install_family(monkeypatch, "fam_b", {"x:rows", "y:rows"}, {"x:rows": "rows", "y:rows": "y rows"})
    assert family_layout_tags(("fam_a", "fam_b")) == {"x:rows": "rows", "y:rows": "y rows"}


BAD_FAMILY_TAGS = {
    # one tag, two meanings: a call site's check provides one of them, rows of the other family trust it
    "two-descriptions": ({"x:rows": "unit stride along n"}, {"x:rows": "contiguous"}, ["x:rows", "fam_a", "fam_b"]),
    "contract-names-an-undeclared-tag": ({"x:rows": "rows"}, {}, ["fam_b", "x:rows"]),
    "declared-tag-no-contract-names": ({"x:rows": "rows", "x:stale": "gone"}, {"x:rows": "rows"}, ["fam_a", "x:stale"]),
    "no-layout-tags": ({"x:rows": "rows"}, None, ["fam_b", "LAYOUT_TAGS"]),
}


@pytest.mark.parametrize("tags_a, tags_b, named", list(BAD_FAMILY_TAGS.values()), ids=list(BAD_FAMILY_TAGS))
def test_bad_family_layout_tags_are_rejected_naming_the_family(monkeypatch, tags_a, tags_b, named):
    """Catches the merge letting one family redefine another's tag, a contract naming a tag no
    description explains, a stale declaration, or a family without LAYOUT_TAGS passing silently."""
    _install_family(monkeypatch, "fam_a", {"x:rows"}, tags_a)
    _install_family(monkeypatch, "fam_b", {"x:rows"}, tags_b)
    with pytest.raises(TableError) as error:
        build_tables(("fam_a", "fam_b"))
    for text in named:
        assert text in str(error.value), f"{text!r} not in {error.value}"


def test_table_error_is_a_value_error():
    """Catches TableError leaving the ValueError family that callers catch for bad configuration."""
    assert issubclass(TableError, ValueError)


def test_table_is_immutable():
    """Catches a table that can be edited after build (tables are values; dispatch memoises on them)."""
    table = _build(fake.reference_row())
    with pytest.raises(TypeError):
        table.rows_by_op[fake.OP] = ()
    with pytest.raises(TypeError):
        table.rows_by_name["torch/x"] = None
    assert isinstance(table.rows(fake.OP), tuple)
    with pytest.raises(AttributeError):
        table.contracts = {}


def test_rows_match_their_contracts_op():
    """Catches a row filed under the wrong op in rows_by_op."""
    for op, rows in TABLE.rows_by_op.items():
        for row in rows:
            assert row.op == op
