"""Planner / PlannedOp unit tests (DESIGN §4) on tables built from test rows. Torch-free.

Bucket expectations follow the rule in DESIGN §4 / ops/interfaces.py:
num_tokens buckets 1, 2-16, 17-128, then powers of two (129-256, ...); exact
dims (hidden) are their own bucket.
"""

from __future__ import annotations

import pytest

from rapid_llm.kernels.dispatcher import (
    Device,
    Environment,
    Libraries,
    LibraryRequirement,
    NoEligibleKernel,
    OpTable,
    PlannedOp,
    Planner,
    ShapeConstraint,
)

try:
    from conformance import _fake_targets as fake
except ImportError:  # conformance/ is on sys.path but not importable as a package
    import _fake_targets as fake

OP = fake.OP
CPU = Environment(device=Device("cpu"), libs=Libraries({"flashinfer": "0.2.5"}))


def table(*rows) -> OpTable:
    return OpTable.from_rows([*rows, fake.reference_row()], fake.CONTRACTS)


def simple_table() -> OpTable:
    return table(
        fake.spec("native/fast", priority=10, target=fake.target("fast")),
        fake.spec("native/slow", priority=1, target=fake.target("slow")),
    )


def plan(planner, **shape):
    return planner.plan(OP, dtype="bf16", shape=shape or {"num_tokens": 8, "hidden": 128})


# ---------------------------------------------------------------------------
# Plan cache
# ---------------------------------------------------------------------------


def test_plans_are_cached_per_token_bucket():
    """Catches a plan per call (dispatch on the hot path) and buckets that merge different sizes:
    3 and 9 share the 2-16 bucket; 17 (17-128) and 200 (129-256) each get their own plan."""
    planner = Planner(CPU, simple_table())
    three, nine = plan(planner, num_tokens=3, hidden=128), plan(planner, num_tokens=9, hidden=128)
    seventeen, two_hundred = plan(planner, num_tokens=17, hidden=128), plan(planner, num_tokens=200, hidden=128)
    assert three is nine
    assert len({id(three), id(seventeen), id(two_hundred)}) == 3
    assert planner.cached_plans == 3
    assert plan(planner, num_tokens=16, hidden=128) is three and planner.cached_plans == 3


def test_exact_dims_get_separate_plans():
    """Catches an exact dim (hidden) being bucketed: hidden sizes select different kernels."""
    planner = Planner(CPU, simple_table())
    small, large = plan(planner, num_tokens=8, hidden=128), plan(planner, num_tokens=8, hidden=256)
    assert small is not large
    assert plan(planner, num_tokens=8, hidden=128) is small
    assert planner.cached_plans == 2


def test_plans_differ_by_dtype_and_layout():
    """Catches a plan cache keyed only on shape: a bf16 plan reused for fp32, or a plan that needs a
    layout reused for a call site that does not provide it."""
    rows_table = table(fake.spec("native/rows_only", priority=10, layout={"x:rows"}, dtypes={"bf16"}))
    planner = Planner(CPU, rows_table)
    shape = {"num_tokens": 8, "hidden": 128}
    with_rows = planner.plan(OP, dtype="bf16", shape=shape, layout={"x:rows"})
    without = planner.plan(OP, dtype="bf16", shape=shape)
    fp32 = planner.plan(OP, dtype="fp32", shape=shape, layout={"x:rows"})
    assert with_rows.row.name == "native/rows_only"
    assert without.row.name == fake.reference_row().name
    assert fp32.row.name == fake.reference_row().name


def test_a_constraint_on_a_bucket_edge_holds_for_the_whole_bucket():
    """Catches plans dispatched with the caller's exact value instead of the bucket's upper bound
    (DESIGN §4): two shapes of one bucket must never get different kernels."""
    rows_table = table(fake.spec("native/small_batches", priority=10, shape=(ShapeConstraint("num_tokens", max=16),)))
    planner = Planner(CPU, rows_table)
    assert plan(planner, num_tokens=2, hidden=128).row.name == "native/small_batches"
    assert plan(planner, num_tokens=16, hidden=128).row.name == "native/small_batches"
    assert plan(planner, num_tokens=17, hidden=128).row.name == fake.reference_row().name


def test_a_bound_inside_a_bucket_is_rejected_when_the_table_is_built():
    """Catches a plan cached for a bucket that mixes values a row serves and values it does not:
    with max=8, a plan made for 3 tokens would run the row for 12 tokens (same 2-16 bucket)."""
    from rapid_llm.kernels.dispatcher import TableError

    with pytest.raises(TableError, match="native/up_to_8"):
        table(fake.spec("native/up_to_8", priority=10, shape=(ShapeConstraint("num_tokens", max=8),)))
    with pytest.raises(TableError, match="multiple_of"):
        table(fake.spec("native/even", priority=10, shape=(ShapeConstraint("num_tokens", multiple_of=2),)))


def test_a_bound_on_a_bucket_edge_serves_the_whole_bucket_and_no_more():
    """Catches a plan judged at the first caller's exact value instead of the bucket."""
    rows_table = table(fake.spec("native/up_to_16", priority=10, shape=(ShapeConstraint("num_tokens", max=16),)))
    planner = Planner(CPU, rows_table)
    first = plan(planner, num_tokens=3, hidden=128)
    assert first.row.name == "native/up_to_16"
    assert plan(planner, num_tokens=16, hidden=128) is first
    assert plan(planner, num_tokens=17, hidden=128).row.name == fake.reference_row().name


# ---------------------------------------------------------------------------
# The PlannedOp
# ---------------------------------------------------------------------------


def test_planned_op_calls_the_target_with_the_same_args():
    """Catches a planned op that drops, reorders or copies arguments, or swallows the result."""
    planned = plan(Planner(CPU, simple_table()))
    x, weight = object(), object()
    name, args, kwargs = planned(x, weight, eps=1e-5)
    assert name == "fast"
    assert args[0] is x and args[1] is weight and len(args) == 2
    assert kwargs == {"eps": 1e-5}


def test_planned_op_carries_its_selection():
    """Catches a plan that cannot say which row it runs or why."""
    planned = plan(Planner(CPU, simple_table()))
    assert isinstance(planned, PlannedOp)
    assert planned.row.name == "native/fast"
    assert planned.selection.row is planned.row
    assert planned.selection.op == OP
    text = planned.explain()
    assert "native/fast" in text and "✓" in text and "native/slow" in text


# ---------------------------------------------------------------------------
# graph_safe_only
# ---------------------------------------------------------------------------


def graph_table():
    return table(
        fake.spec("native/syncs", priority=10, graph_safe=False, target=fake.target("fast")),
        fake.spec("native/capturable", priority=5, target=fake.target("slow")),
    )


def test_graph_safe_only_planner_redispatches_to_the_best_graph_safe_row():
    """Catches a CUDA-graph plan that captures a syncing kernel, or that fails instead of falling back
    to the best capturable row."""
    planned = plan(Planner(CPU, graph_table(), graph_safe_only=True))
    assert planned.row.name == "native/capturable"
    assert planned()[0] == "slow"
    skipped = planned.selection.explanation.verdict("native/syncs")
    assert skipped.status == "rejected"
    assert [check.condition for check in skipped.failures] == ["graph_safe"]


def test_graph_safe_only_per_plan_is_a_separate_cache_entry():
    """Catches the graph-safe plan and the normal plan of one bucket sharing a cache slot."""
    planner = Planner(CPU, graph_table())
    shape = {"num_tokens": 8, "hidden": 128}
    normal = planner.plan(OP, dtype="bf16", shape=shape)
    capture = planner.plan(OP, dtype="bf16", shape=shape, graph_safe_only=True)
    assert (normal.row.name, capture.row.name) == ("native/syncs", "native/capturable")
    assert planner.plan(OP, dtype="bf16", shape=shape) is normal


# ---------------------------------------------------------------------------
# The environment's deny / force through the planner
# ---------------------------------------------------------------------------


def test_environment_force_and_deny_reach_dispatch():
    """Catches a planner that ignores RAPID_LLM_FORCE / RAPID_LLM_DENY from its Environment."""
    forced = Planner(Environment(device=Device("cpu"), force={OP: "native/slow"}), simple_table())
    assert plan(forced).row.name == "native/slow"
    denied = Planner(Environment(device=Device("cpu"), deny={"native/fast"}), simple_table())
    assert plan(denied).row.name == "native/slow"


def test_environment_libraries_reach_dispatch():
    """Catches a planner that dispatches without the environment's installed libraries."""
    rows_table = table(fake.spec("flashinfer/norm", priority=10, libraries=(LibraryRequirement("flashinfer"),)))
    assert plan(Planner(CPU, rows_table)).row.name == "flashinfer/norm"
    assert plan(Planner(Environment(device=Device("cpu")), rows_table)).row.name == fake.reference_row().name


@pytest.mark.parametrize(
    "env, named",
    [
        (Environment(device=Device("cpu"), deny={"native/nope"}), "native/nope"),
        (Environment(device=Device("cpu"), deny={"nativ"}), "nativ"),
        (Environment(device=Device("cpu"), force={OP: "native/nope"}), "native/nope"),
        (Environment(device=Device("cpu"), force={"test.nope": "native/fast"}), "test.nope"),
    ],
    ids=["deny-unknown-row", "deny-unknown-backend", "force-unknown-row", "force-unknown-op"],
)
def test_planner_rejects_environment_names_the_table_lacks(env, named):
    """Catches a typo in RAPID_LLM_DENY / RAPID_LLM_FORCE surviving until the first call (or forever)."""
    with pytest.raises(ValueError, match=named):
        Planner(env, simple_table())


# ---------------------------------------------------------------------------
# Bad plan requests
# ---------------------------------------------------------------------------


def test_unknown_shape_dims_raise_naming_the_op():
    """Catches a misspelled dim (silently 'not given') producing a plan for the wrong shape."""
    planner = Planner(CPU, simple_table())
    with pytest.raises(ValueError, match=OP) as error:
        plan(planner, num_tokens=8, hiden=128)
    assert "hiden" in str(error.value)


def test_unknown_shape_dims_raise_even_when_the_bucket_is_cached():
    """Catches validation that depends on the cache state (a typo passes after the first call)."""
    planner = Planner(CPU, simple_table())
    plan(planner, num_tokens=8, hidden=128)
    try:
        plan(planner, num_tokens=8, hidden=128, hiden=128)
    except ValueError as error:
        assert OP in str(error)
    else:
        raise AssertionError("a misspelled dim was accepted on a cache hit")


def test_unknown_op_raises():
    """Catches plan() for an op the table lacks returning something."""
    with pytest.raises(KeyError, match="test.nope"):
        Planner(CPU, simple_table()).plan("test.nope", dtype="bf16", shape={})


# ---------------------------------------------------------------------------
# Load failures through the planner
# ---------------------------------------------------------------------------


def test_plan_falls_back_when_the_best_row_fails_to_load():
    """Catches an engine crash when the best row's library is broken (DESIGN §3): the plan must run
    the next row and its explanation must show why the best row was dropped."""
    rows_table = table(
        fake.spec("native/broken", priority=10, target=f"{fake.MISSING_MODULE}:fn"),
        fake.spec("native/slow", priority=5, target=fake.target("slow")),
    )
    planned = plan(Planner(CPU, rows_table))
    assert planned.row.name == "native/slow"
    assert planned()[0] == "slow"
    broken = planned.selection.explanation.verdict("native/broken")
    assert broken.status == "rejected"
    assert [check.condition for check in broken.failures] == ["load"]
    assert fake.MISSING_MODULE in planned.explain()


def test_plan_raises_when_no_row_loads():
    """Catches a plan that returns a callable bound to nothing when every candidate fails to load."""
    rows_table = OpTable.from_rows(
        [
            fake.spec("native/broken", priority=10, available=fake.target("probe_raises")),
            fake.reference_row(target=f"{fake.MISSING_MODULE}:reference"),
        ],
        fake.CONTRACTS,
    )
    planner = Planner(CPU, rows_table)
    with pytest.raises(NoEligibleKernel) as error:
        plan(planner)
    assert fake.PROBE_EXPLOSION in str(error.value) and fake.MISSING_MODULE in str(error.value)
    assert planner.cached_plans == 0, "a failed plan must not be cached"


def test_a_plan_miss_says_the_bucket_was_judged_at_its_upper_bound():
    """Catches 'forced row ... num_tokens:16' for a 2-token call without saying why 16: a plan judges a
    bucketed dim at its bucket's top, and the error must say so."""
    row = fake.spec("native/small", priority=10, shape=(ShapeConstraint("num_tokens", max=1),))
    planner = Planner(Environment(device=Device("cpu"), force={OP: "native/small"}), table(row))
    with pytest.raises(NoEligibleKernel) as error:
        plan(planner, num_tokens=2, hidden=128)
    message = str(error.value).splitlines()[0]
    assert "num_tokens=2 is in bucket 2-16, judged as 16" in message, message


def test_planned_op_without_a_contract_check_calls_its_target_untouched():
    """Catches a PlannedOp inventing a check where the contract declares none (test tables)."""
    planned = plan(Planner(CPU, simple_table()))
    assert planned("a", "b", 1e-6)[0] == "fast"


class _Place:
    """A torch-free stand-in for a tensor's device (what PlannedOp.confirm reads: its type)."""

    type = "cpu"


class _Anchor:
    device = _Place()
    dtype = "torch.bfloat16"


def test_a_call_without_the_rows_layout_is_refused_with_the_tables_description_of_the_tag():
    """Catches a PlannedOp run on arguments without a layout its row needs, and an error that names the
    tag without what it means (the description is the table's: the family that declares the tag)."""
    from rapid_llm.kernels.dispatcher import OpInputError

    rows_table = OpTable.from_rows(
        [fake.spec("native/rows_only", priority=10, layout={"x:rows"}), fake.reference_row()],
        fake.CONTRACTS,
        layout_tags={"x:rows": "x views as [rows, n] in this test"},
    )
    planned = Planner(CPU, rows_table).plan(OP, dtype="bf16", shape={"num_tokens": 8, "hidden": 128}, layout={"x:rows"})
    planned.confirm(_Anchor(), frozenset({"x:rows"}), (("num_tokens", 8), ("hidden", 128)))
    with pytest.raises(OpInputError) as error:
        planned.confirm(_Anchor(), frozenset(), (("num_tokens", 8), ("hidden", 128)))
    assert "x:rows (x views as [rows, n] in this test)" in str(error.value)
    assert "native/rows_only" in str(error.value)


def _contract(**tags):
    """test.op's contract with these layouts= and promises=."""
    from rapid_llm.kernels.dispatcher import OpContract

    base = fake.CONTRACTS[OP]
    return OpContract(op=OP, parameters=base.parameters, dtypes=base.dtypes, dims=base.dims, **tags)


def _promise_table() -> OpTable:
    """test.op with the promise x:finite, a fast row that needs it and a slower one that does not."""
    contract = _contract(layouts=("x:rows",), promises=("x:finite",))
    return OpTable.from_rows(
        [
            fake.spec("native/needs_finite", priority=10, layout={"x:rows", "x:finite"}, target=fake.target("fast")),
            fake.spec("native/any_values", priority=5, target=fake.target("slow")),
            fake.reference_row(),
        ],
        {**fake.CONTRACTS, OP: contract},
        layout_tags={"x:rows": "x views as [rows, n]", "x:finite": "the caller promises x holds no NaN or inf"},
    )


def test_a_row_needing_a_promise_serves_only_callers_that_made_it():
    """Catches a promise treated as derivable (selected for a call that did not promise) or, once promised
    at planning time, demanded again from every call's check, which can never derive it."""
    planner = Planner(CPU, _promise_table())
    shape = {"num_tokens": 8, "hidden": 128}
    checked = planner.plan(OP, dtype="bf16", shape=shape, layout={"x:rows"})
    assert checked.row.name == "native/any_values"
    promised = planner.plan(OP, dtype="bf16", shape=shape, layout={"x:rows", "x:finite"})
    assert promised.row.name == "native/needs_finite"
    # the check derives x:rows, never x:finite: the promise made when planning stands
    promised.confirm(_Anchor(), frozenset({"x:rows"}), (("num_tokens", 8), ("hidden", 128)))


def test_a_tag_cannot_be_both_checked_and_promised():
    """Catches a contract whose check could contradict a caller's promise of the same tag."""
    with pytest.raises(ValueError, match="x:rows"):
        _contract(layouts=("x:rows",), promises=("x:rows",))
