"""dispatch() unit tests on tables built from test rows (DESIGN §3). Torch-free.

Every test builds its own OpTable from rows written here, with test contracts
(conformance/_fake_targets.py), so expectations come from the rows, not from
the package's real table.
"""

from __future__ import annotations

import importlib
import json

import pytest

from rapid_llm.kernels.dispatcher import (
    UNMEASURED,
    CapabilityRequirement,
    Device,
    GoldenRecord,
    Libraries,
    LibraryRequirement,
    NoEligibleKernel,
    OpTable,
    ShapeConstraint,
    dispatch,
)

try:
    from conformance import _fake_targets as fake
except ImportError:  # conformance/ is on sys.path but not importable as a package
    import _fake_targets as fake

dispatch_module = importlib.import_module("rapid_llm.kernels.dispatcher.select")

OP = fake.OP
CANDIDATE = "native/candidate"
NEXT = "native/next"
REFERENCE = "torch/ref"


def table(*rows, with_reference=True) -> OpTable:
    rows = list(rows)
    if with_reference:
        rows.append(fake.reference_row())
    return OpTable.from_rows(rows, fake.CONTRACTS)


BASE_QUERY = dict(
    device=Device("cpu"), dtype="bf16", shape={"num_tokens": 8, "hidden": 128}, layout=frozenset(), libs=Libraries()
)


def query(table_, **overrides):
    values = dict(BASE_QUERY, table=table_)
    values.update(overrides)
    return dispatch(OP, **values)


def verdict(selection_or_explanation, row):
    explanation = getattr(selection_or_explanation, "explanation", selection_or_explanation)
    return explanation.verdict(row)


def failed(selection_or_explanation, row) -> dict:
    return {check.condition: check for check in verdict(selection_or_explanation, row).failures}


# ---------------------------------------------------------------------------
# Each kind of condition miss falls to the next row, and says required vs observed
# ---------------------------------------------------------------------------

# case id -> (condition fields of native/candidate, query that satisfies them, query that misses,
#             failed condition name, text the 'required' side shows, text the 'observed' side shows)
CONDITION_MISSES = {
    "library-absent": (
        dict(libraries=(LibraryRequirement("flashinfer", min_version="0.2"),)),
        dict(libs={"flashinfer": "0.2.5"}),
        dict(libs={}),
        "library flashinfer",
        "0.2",
        "not installed",
    ),
    "library-too-old": (
        dict(libraries=(LibraryRequirement("flashinfer", min_version="0.2"),)),
        dict(libs={"flashinfer": "0.2.0"}),
        dict(libs={"flashinfer": "0.1.9"}),
        "library flashinfer",
        "0.2",
        "0.1.9",
    ),
    "library-too-new": (
        dict(libraries=(LibraryRequirement("flashinfer", below_version="0.3"),)),
        dict(libs={"flashinfer": "0.2.9"}),
        dict(libs={"flashinfer": "0.3.1"}),
        "library flashinfer",
        "0.3",
        "0.3.1",
    ),
    "device-kind": (
        dict(capability=(CapabilityRequirement("cuda"),)),
        dict(device=Device("cuda", 90)),
        dict(device=Device("cpu")),
        "device",
        "cuda",
        "cpu",
    ),
    "min-sm": (
        dict(capability=(CapabilityRequirement("cuda", min_sm=80),)),
        dict(device=Device("cuda", 80)),
        dict(device=Device("cuda", 75)),
        "device",
        "80",
        "75",
    ),
    "max-sm": (
        dict(capability=(CapabilityRequirement("cuda", max_sm=89),)),
        dict(device=Device("cuda", 89)),
        dict(device=Device("cuda", 90)),
        "device",
        "89",
        "90",
    ),
    "cpu-triton-interpreter": (
        dict(capability=(CapabilityRequirement("cpu", triton_interpreter=True),)),
        dict(device=Device("cpu", triton_interpreter=True)),
        dict(device=Device("cpu")),
        "device",
        "interpreter",
        "cpu",
    ),
    # A capability narrowed to the dtypes whose results are right there (the interpreter's bf16 tl.dot):
    # the query's dtype decides, and explain() shows the reason and the dtype it observed.
    "interpreter-dtype": (
        dict(
            capability=(
                CapabilityRequirement("cuda", min_sm=80),
                CapabilityRequirement(
                    "cpu", triton_interpreter=True, dtypes={"fp32", "fp16"}, reason="tl.dot on bf16 is wrong there"
                ),
            )
        ),
        dict(device=Device("cpu", triton_interpreter=True), dtype="fp16"),
        dict(device=Device("cpu", triton_interpreter=True), dtype="bf16"),
        "device",
        "fp32, fp16 only: tl.dot on bf16 is wrong there",
        "cpu+triton-interpreter with bf16",
    ),
    "dtype": (dict(dtypes={"bf16"}), dict(dtype="bf16"), dict(dtype="fp16"), "dtype", "bf16", "fp16"),
    "shape-min": (
        dict(shape=(ShapeConstraint("hidden", min=64),)),
        dict(shape={"hidden": 64}),
        dict(shape={"hidden": 63}),
        "shape hidden",
        "64",
        "63",
    ),
    "shape-max": (
        dict(shape=(ShapeConstraint("hidden", max=4096),)),
        dict(shape={"hidden": 4096}),
        dict(shape={"hidden": 8192}),
        "shape hidden",
        "4096",
        "8192",
    ),
    "shape-multiple-of": (
        dict(shape=(ShapeConstraint("hidden", multiple_of=16),)),
        dict(shape={"hidden": 4096}),
        dict(shape={"hidden": 4100}),
        "shape hidden",
        "16",
        "4100",
    ),
    "shape-one-of": (
        dict(shape=(ShapeConstraint("hidden", one_of=(64, 128)),)),
        dict(shape={"hidden": 128}),
        dict(shape={"hidden": 96}),
        "shape hidden",
        "128",
        "96",
    ),
    "shape-dim-not-given": (
        dict(shape=(ShapeConstraint("hidden", min=1),)),
        dict(shape={"num_tokens": 8, "hidden": 8}),
        dict(shape={"num_tokens": 8}),
        "shape hidden",
        "1",
        "not given",
    ),
    "layout": (dict(layout={"x:rows"}), dict(layout={"x:rows"}), dict(layout=()), "layout x:rows", "", "{}"),
    "golden-unverified": (
        dict(golden=GoldenRecord.unverified()),
        dict(force=CANDIDATE),
        dict(),
        "golden",
        "verified",
        "unverified",
    ),
}


@pytest.mark.parametrize("case", list(CONDITION_MISSES.values()), ids=list(CONDITION_MISSES))
def test_condition_miss_falls_to_next_priority_row_and_explains(case):
    """Catches a condition that is ignored (the candidate wins anyway), one that can never hold (the
    candidate loses even when satisfied), and explanations without required vs observed."""
    conditions, satisfied, missed, condition, required, observed = case
    rows_table = table(fake.spec(CANDIDATE, priority=10, **conditions), fake.spec(NEXT, priority=5))

    assert query(rows_table, **satisfied).row.name == CANDIDATE

    selection = query(rows_table, **missed)
    assert selection.row.name == NEXT
    assert verdict(selection, CANDIDATE).status == "rejected"
    failures = failed(selection, CANDIDATE)
    assert list(failures) == [condition], "exactly the condition under test fails"
    assert required in failures[condition].required
    assert observed in failures[condition].observed
    assert f"✗ {CANDIDATE}" in selection.explain()
    assert condition in selection.explain()


def test_every_condition_of_every_row_is_evaluated():
    """Catches short-circuit evaluation: a row failing three conditions must list all three (and the
    conditions it passes), and so must the other rejected rows of the same query."""
    rows_table = table(
        fake.spec(
            CANDIDATE, priority=10, dtypes={"fp32"}, layout={"x:rows"}, libraries=(LibraryRequirement("flash_attn"),)
        ),
        fake.spec(
            NEXT,
            priority=5,
            capability=(CapabilityRequirement("cuda"),),
            shape=(ShapeConstraint("hidden", one_of=(64,)),),
        ),
    )
    selection = query(rows_table, dtype="bf16", layout=(), libs={})
    assert selection.row.name == REFERENCE
    assert set(failed(selection, CANDIDATE)) == {"dtype", "layout x:rows", "library flash_attn"}
    assert set(failed(selection, NEXT)) == {"device", "shape hidden"}
    passed = {check.condition for check in verdict(selection, CANDIDATE).checks if check.ok}
    assert {"deny", "golden"} <= passed, "conditions that hold are kept too (verbose explain)"
    text = selection.explain()
    for condition in ("dtype", "layout x:rows", "library flash_attn", "device", "shape hidden"):
        assert condition in text


# ---------------------------------------------------------------------------
# Ranking
# ---------------------------------------------------------------------------


def test_higher_priority_wins_regardless_of_table_order():
    """Catches ranking by table order or by name instead of priority."""
    rows_table = table(fake.spec("native/a_low", priority=1), fake.spec("native/z_high", priority=9))
    selection = query(rows_table)
    assert selection.row.name == "native/z_high"
    assert [row.name for row in selection.candidates] == ["native/z_high", "native/a_low", REFERENCE]


def test_priority_ties_break_native_then_external_then_reference_then_name():
    """Catches a tie-break that ignores the implementation class (aot/jit count as native) or the name."""
    rows_table = OpTable.from_rows(
        [
            fake.reference_row(priority=3),
            fake.spec("flashinfer/a_external", priority=3),
            fake.spec("native/b", priority=3),
            fake.spec("aot/z", priority=3),
            fake.spec("native/a", priority=3),
            fake.spec("jit/m", priority=3),
        ],
        fake.CONTRACTS,
    )
    expected = [
        "aot/z",
        "jit/m",
        "native/a",
        "native/b",  # native class, by name
        "flashinfer/a_external",  # external
        REFERENCE,
    ]  # reference
    assert [row.name for row in query(rows_table).candidates] == expected


def test_unmeasured_ranks_below_measured_even_negative_priorities():
    """Catches UNMEASURED being treated as priority 0 (it would beat a measured negative priority)."""
    rows_table = table(
        fake.spec("native/unmeasured", priority=UNMEASURED), fake.spec("flashinfer/negative", priority=-100)
    )
    selection = query(rows_table)
    assert [row.name for row in selection.candidates] == ["flashinfer/negative", "native/unmeasured", REFERENCE]
    assert "UNMEASURED" in verdict(selection, "native/unmeasured").note


def test_eligible_rows_ranked_below_are_shown_as_eligible():
    """Catches an explanation that hides eligible runners-up or marks them rejected."""
    selection = query(table(fake.spec("native/high", priority=9), fake.spec("native/low", priority=1)))
    assert verdict(selection, "native/high").status == "selected"
    assert verdict(selection, "native/low").status == "eligible"
    assert verdict(selection, REFERENCE).status == "eligible"


# ---------------------------------------------------------------------------
# No eligible kernel
# ---------------------------------------------------------------------------


def test_all_rows_missing_raises_no_eligible_kernel_naming_every_reason():
    """Catches dispatch returning None / a wrong row when nothing fits, and an error message that does
    not name the op, every row and every failed condition."""
    rows_table = table(
        fake.spec(CANDIDATE, priority=10, capability=(CapabilityRequirement("cuda", min_sm=90),), layout={"x:rows"}),
        fake.spec(NEXT, priority=5, libraries=(LibraryRequirement("deep_gemm"),)),
    )
    # fp8 is outside the contract, so even the reference row misses (on dtype).
    with pytest.raises(NoEligibleKernel) as error:
        query(rows_table, dtype="fp8_e4m3")
    assert isinstance(error.value, LookupError)
    message = str(error.value)
    assert OP in message and "fp8_e4m3" in message
    explanation = error.value.explanation
    expected_failures = {
        CANDIDATE: {"device", "layout x:rows", "dtype"},
        NEXT: {"library deep_gemm", "dtype"},
        REFERENCE: {"dtype"},
    }
    for row, conditions in expected_failures.items():
        assert row in message
        assert verdict(explanation, row).status == "rejected"
        assert set(failed(explanation, row)) == conditions
        for condition in conditions:
            assert condition in message
    assert explanation.selected is None


def test_unknown_op_raises():
    """Catches dispatch for an op the table lacks returning something (or a confusing error)."""
    with pytest.raises(KeyError, match="test.nope"):
        dispatch("test.nope", device="cpu", dtype="bf16", table=table())


# ---------------------------------------------------------------------------
# force= and deny=
# ---------------------------------------------------------------------------


def test_force_selects_a_lower_ranked_row():
    """Catches force= being ignored in favour of the best-ranked row."""
    rows_table = table(fake.spec("native/high", priority=9), fake.spec("native/low", priority=1))
    selection = query(rows_table, force="native/low")
    assert selection.row.name == "native/low"
    assert selection.candidates == (rows_table.rows_by_name["native/low"],)
    assert verdict(selection, "native/high").status == "eligible", "the better row is shown, not rejected"


def test_force_bypasses_the_golden_gate():
    """Catches force= not being able to run an unverified row (the only gate it may bypass)."""
    rows_table = table(fake.spec(CANDIDATE, priority=10, golden=GoldenRecord.unverified()))
    assert query(rows_table).row.name == REFERENCE
    forced = query(rows_table, force=CANDIDATE)
    assert forced.row.name == CANDIDATE
    golden = next(c for c in verdict(forced, CANDIDATE).checks if c.condition == "golden")
    assert golden.ok and "unverified" in golden.observed, "the bypass is visible in the explanation"


def test_force_does_not_bypass_other_conditions():
    """Catches force= running a row on a dtype it does not serve (a wrong answer or a kernel crash)."""
    rows_table = table(fake.spec(CANDIDATE, priority=10, dtypes={"fp32"}, golden=GoldenRecord.unverified()))
    with pytest.raises(NoEligibleKernel) as error:
        query(rows_table, dtype="bf16", force=CANDIDATE)
    assert CANDIDATE in str(error.value)
    assert set(failed(error.value.explanation, CANDIDATE)) == {"dtype"}
    assert verdict(error.value.explanation, REFERENCE).status == "eligible", "the tree shows what would run"


def test_force_of_unknown_row_raises_value_error_naming_valid_rows():
    """Catches a typo in force= silently falling back to normal dispatch."""
    rows_table = table(fake.spec(CANDIDATE, priority=10))
    with pytest.raises(ValueError) as error:
        query(rows_table, force="native/candidat")
    for row in (CANDIDATE, REFERENCE, "native/candidat"):
        assert row in str(error.value)


def test_force_of_a_row_of_another_op_raises():
    """Catches force= accepting a row that exists in the table but serves a different op."""
    rows_table = OpTable.from_rows(
        [fake.reference_row(), fake.reference_row(op=fake.OTHER_OP, name="torch/other")], fake.CONTRACTS
    )
    with pytest.raises(ValueError, match="torch/other"):
        query(rows_table, force="torch/other")


def test_deny_by_backend_skips_all_rows_of_that_backend():
    """Catches deny= by backend name being ignored or also hitting other backends of the same class."""
    rows_table = table(
        fake.spec("native/high", priority=9), fake.spec("native/mid", priority=8), fake.spec("aot/low", priority=1)
    )
    selection = query(rows_table, deny={"native"})
    assert selection.row.name == "aot/low"
    for row in ("native/high", "native/mid"):
        deny_check = failed(selection, row)["deny"]
        assert "native" in deny_check.observed


def test_deny_by_row_name_skips_only_that_row():
    """Catches deny= by row name being ignored or denying the row's whole backend."""
    rows_table = table(fake.spec("native/high", priority=9), fake.spec("native/mid", priority=8))
    selection = query(rows_table, deny={"native/high"})
    assert selection.row.name == "native/mid"
    assert "native/high" in failed(selection, "native/high")["deny"].observed


def test_deny_may_name_rows_of_other_ops_in_the_table():
    """Catches the deny check being per-op: RAPID_LLM_DENY is one list for every op of the table."""
    rows_table = OpTable.from_rows(
        [
            fake.reference_row(),
            fake.spec("native/high", priority=9),
            fake.reference_row(op=fake.OTHER_OP, name="torch/other"),
            fake.spec("native/other", op=fake.OTHER_OP, priority=9),
        ],
        fake.CONTRACTS,
    )
    assert query(rows_table, deny={"native/other"}).row.name == "native/high"


@pytest.mark.parametrize("deny", [{"nativ"}, {"native/nope"}], ids=["misspelled-backend", "unknown-row"])
def test_unknown_deny_names_raise(deny):
    """Catches a typo in deny= silently denying nothing."""
    rows_table = table(fake.spec("native/high", priority=9))
    with pytest.raises(ValueError) as error:
        query(rows_table, deny=deny)
    assert next(iter(deny)) in str(error.value)


def test_denying_a_known_backend_without_rows_is_accepted():
    """Catches RAPID_LLM_DENY=flashinfer failing on a table (or machine) that has no flashinfer rows:
    a deployment-wide deny list must not break as tables grow or shrink."""
    rows_table = table(fake.spec("native/high", priority=9))
    assert query(rows_table, deny={"flashinfer"}).row.name == "native/high"


# ---------------------------------------------------------------------------
# Purity and memoisation
# ---------------------------------------------------------------------------


def test_equal_queries_return_the_identical_memoised_selection():
    """Catches a memo that never hits (dispatch cost on every call) or argument normalisation that
    makes equal queries different keys (str vs Device, dict vs Libraries, list vs frozenset)."""
    rows_table = table(fake.spec(CANDIDATE, priority=10, layout={"x:rows"}))
    before = dispatch_module._dispatch.cache_info()
    first = query(rows_table, layout=frozenset({"x:rows"}), libs=Libraries({"triton": "3.1.0"}))
    after_first = dispatch_module._dispatch.cache_info()
    second = query(rows_table, device="cpu", layout=["x:rows"], libs={"triton": "3.1.0"})
    after_second = dispatch_module._dispatch.cache_info()
    assert second is first
    assert after_first.misses == before.misses + 1
    assert after_second.hits == after_first.hits + 1


def test_different_tables_do_not_share_memo_entries():
    """Catches a memo keyed without the table: a test table's answer leaking into another table."""
    first = query(table(fake.spec(CANDIDATE, priority=10)))
    second = query(table(fake.spec(NEXT, priority=10)))
    assert (first.row.name, second.row.name) == (CANDIDATE, NEXT)


def test_shape_as_dict_or_pairs_selects_the_same_row():
    """Catches shape= accepted in one form but ignored (or rejected) in the other."""
    rows_table = table(fake.spec(CANDIDATE, priority=10, shape=(ShapeConstraint("hidden", one_of=(128,)),)))
    for hidden, expected in ((128, CANDIDATE), (96, REFERENCE)):
        as_dict = query(rows_table, shape={"num_tokens": 8, "hidden": hidden})
        as_pairs = query(rows_table, shape=(("num_tokens", 8), ("hidden", hidden)))
        assert as_dict.row.name == as_pairs.row.name == expected
        assert as_dict.to_dict()["query"]["shape"] == as_pairs.to_dict()["query"]["shape"]


# ---------------------------------------------------------------------------
# Selection.load()
# ---------------------------------------------------------------------------

LOAD_FAILURES = {
    "target-module-missing": (dict(target=f"{fake.MISSING_MODULE}:fn"), fake.MISSING_MODULE),
    "target-function-missing": (dict(target=fake.target("no_such_function")), "no_such_function"),
    "probe-says-no": (dict(available=fake.target("probe_says_no")), fake.PROBE_REFUSAL),
    "probe-raises": (dict(available=fake.target("probe_raises")), fake.PROBE_EXPLOSION),
}


@pytest.mark.parametrize("fields, reason", list(LOAD_FAILURES.values()), ids=list(LOAD_FAILURES))
def test_load_failure_rejects_the_row_and_loads_the_next(fields, reason):
    """Catches a broken optional library crashing the engine at load() (DESIGN §3) instead of becoming
    that row's rejection reason while the next candidate loads."""
    rows_table = table(
        fake.spec(CANDIDATE, priority=10, **fields), fake.spec(NEXT, priority=5, target=fake.target("slow"))
    )
    selection = query(rows_table)
    assert selection.row.name == CANDIDATE, "dispatch itself imports nothing"

    loaded = selection.load()
    assert loaded.row.name == NEXT
    assert loaded.fn is fake.slow
    new = loaded.selection
    assert new.row.name == NEXT
    assert verdict(new, NEXT).status == "selected"
    assert verdict(new, CANDIDATE).status == "rejected"
    load_check = failed(new, CANDIDATE)["load"]
    assert reason in load_check.observed
    assert f"✗ {CANDIDATE}" in new.explain() and reason in new.explain()
    # The memoised selection is a value: loading must not rewrite it.
    assert verdict(selection, CANDIDATE).status == "selected"
    assert query(rows_table) is selection


def test_load_of_a_good_row_keeps_the_selection():
    """Catches load() picking another row (or a new selection) when the best candidate imports fine."""
    rows_table = table(fake.spec(CANDIDATE, priority=10, target=fake.target("fast"), available=fake.target("probe_ok")))
    selection = query(rows_table)
    loaded = selection.load()
    assert loaded.fn is fake.fast and loaded.row.name == CANDIDATE
    assert loaded.selection is selection


def test_every_candidate_failing_to_load_raises_no_eligible_kernel():
    """Catches load() returning None or crashing when no candidate imports; the error must carry
    every row's load reason."""
    rows_table = OpTable.from_rows(
        [
            fake.spec(CANDIDATE, priority=10, target=f"{fake.MISSING_MODULE}:fn"),
            fake.reference_row(available=fake.target("probe_says_no")),
        ],
        fake.CONTRACTS,
    )
    selection = query(rows_table)
    with pytest.raises(NoEligibleKernel) as error:
        selection.load()
    explanation = error.value.explanation
    assert explanation.selected is None
    assert fake.MISSING_MODULE in failed(explanation, CANDIDATE)["load"].observed
    assert fake.PROBE_REFUSAL in failed(explanation, REFERENCE)["load"].observed
    assert CANDIDATE in str(error.value) and REFERENCE in str(error.value)


def test_forced_row_that_fails_to_load_raises():
    """Catches a forced row silently replaced by another row when its target does not import."""
    rows_table = table(
        fake.spec(CANDIDATE, priority=1, target=f"{fake.MISSING_MODULE}:fn"), fake.spec(NEXT, priority=5)
    )
    selection = query(rows_table, force=CANDIDATE)
    with pytest.raises(NoEligibleKernel) as error:
        selection.load()
    assert CANDIDATE in str(error.value)
    assert fake.MISSING_MODULE in failed(error.value.explanation, CANDIDATE)["load"].observed


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def test_to_dict_is_json_with_the_stable_keys():
    """Catches a to_dict() that is not JSON-serialisable or drops the schema/query/selected/rows keys
    tools rely on."""
    rows_table = table(
        fake.spec(CANDIDATE, priority=10, dtypes={"fp32"}),
        fake.spec(NEXT, priority=5, target=f"{fake.MISSING_MODULE}:fn"),
    )
    selection = query(rows_table, libs={"triton": "3.1.0"})
    for current in (selection, selection.load().selection):
        data = json.loads(json.dumps(current.to_dict()))
        assert {"schema", "query", "selected", "rows"} <= set(data)
        assert data["selected"] == current.row.name
        assert sorted(entry["row"] for entry in data["rows"]) == sorted(row.name for row in rows_table.rows(OP))
        assert data["query"]["op"] == OP and data["query"]["dtype"] == "bf16"


def test_render_text_marks_selected_and_rejected_rows():
    """Catches a tree that does not show which row won (✓) and which were rejected (✗)."""
    rows_table = table(
        fake.spec(CANDIDATE, priority=10, dtypes={"fp32"}),
        fake.spec("native/runner_up", priority=1),
        fake.spec(NEXT, priority=5),
    )
    lines = query(rows_table).explain().splitlines()
    assert OP in lines[0]

    def line_of(row):
        return next(line for line in lines if f" {row} " in line or line.endswith(f" {row}"))

    assert "✓" in line_of(NEXT)
    assert "✗" in line_of(CANDIDATE) and "✓" not in line_of(CANDIDATE)
    assert "✓" not in line_of("native/runner_up") and "✗" not in line_of("native/runner_up")


def test_clear_memo_clears_every_cache_on_the_dispatch_path():
    """Catches a clear_memo() that leaves some layer warm (the loaded targets, the default planner's plans,
    the tensor conversions): a 'cold' benchmark or a test expecting re-dispatch would see stale results."""
    from rapid_llm.kernels.dispatcher import environment, plan

    select = dispatch_module
    select.dispatch(
        fake.OP, device="cpu", dtype="fp32", table=OpTable.from_rows([fake.reference_row()], fake.CONTRACTS)
    )
    select.resolve_target(fake.target("fast"), None)
    plan.default_planner()
    environment._DTYPE_LABELS["probe"] = "x"
    plan.clear_memo()
    assert not select._CALL_MEMO and select._dispatch.cache_info().currsize == 0
    assert select.resolve_target.cache_info().currsize == 0
    assert plan._DEFAULT_PLANNER is None and not environment._DTYPE_LABELS
