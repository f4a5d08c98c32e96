"""Row validation (dispatcher/spec.py): a malformed row must fail where it is written.

DESIGN §2: KernelSpec and its parts are frozen attrs classes whose validators
reject bad rows at construction with a message naming the row, so a typo in a
family's ``__init__`` fails at import instead of silently producing a row that
never (or always) matches. Torch-free.
"""

from __future__ import annotations

import copy
import pickle
import re

import pytest

from rapid_llm.kernels.dispatcher import (
    UNMEASURED,
    CapabilityRequirement,
    Device,
    GoldenRecord,
    KernelSpec,
    LibraryRequirement,
    ShapeConstraint,
)
from rapid_llm.kernels.dispatcher.spec import version_key

ROW = "native/under_test"
VERIFIED = GoldenRecord(verified=True, max_abs_diff=1e-3, baseline="torch/ref", evidence="perf/results/x.json")


def make(**fields) -> KernelSpec:
    """A valid non-reference row; `fields` break one thing at a time."""
    values = dict(
        name=ROW,
        op="test.op",
        backend="native",
        target="pkg.module:function",
        dtypes={"bf16"},
        golden=VERIFIED,
        priority=1,
    )
    values.update(fields)
    return KernelSpec(**values)


def make_reference(**fields) -> KernelSpec:
    values = dict(
        name="torch/ref",
        op="test.op",
        backend="torch",
        target="pkg.module:reference",
        dtypes={"bf16", "fp32"},
        golden=GoldenRecord.reference(),
    )
    values.update(fields)
    return KernelSpec(**values)


def test_a_valid_row_builds_and_normalises_containers():
    """Catches converters that stop normalising: lists must become tuples and sets frozensets,
    otherwise rows are unhashable and dispatch's memo (keyed on rows via the table) breaks."""
    row = make(
        dtypes=["bf16", "fp16"],
        layout=["x:rows"],
        shape=[ShapeConstraint("hidden", min=1)],
        capability=[CapabilityRequirement("cuda", min_sm=80)],
        libraries=[LibraryRequirement("triton", min_version="3.0")],
    )
    assert row.dtypes == frozenset({"bf16", "fp16"}) and isinstance(row.dtypes, frozenset)
    assert isinstance(row.layout, frozenset)
    assert isinstance(row.shape, tuple) and isinstance(row.capability, tuple) and isinstance(row.libraries, tuple)
    assert hash(row) == hash(
        make(
            dtypes={"fp16", "bf16"},
            layout={"x:rows"},
            shape=(ShapeConstraint("hidden", min=1),),
            capability=(CapabilityRequirement("cuda", min_sm=80),),
            libraries=(LibraryRequirement("triton", min_version="3.0"),),
        )
    )


def test_rows_are_frozen():
    """Catches a mutable row: tables are values and a row edited after build would change dispatch."""
    row = make()
    with pytest.raises(AttributeError):
        row.priority = 99


# ---------------------------------------------------------------------------
# Each bad row raises at construction, naming the row
# ---------------------------------------------------------------------------

BAD_ROWS = {
    "name prefix differs from backend": dict(name="flashinfer/under_test"),
    "name without a backend prefix": dict(name="under_test"),
    "unknown backend": dict(name="cutlass/under_test", backend="cutlass"),
    "unknown dtype": dict(dtypes={"bf16", "bf17"}),
    "empty dtypes": dict(dtypes=()),
    "target without a colon": dict(target="pkg.module.function"),
    "target with a non-identifier function": dict(target="pkg.module:not-a-name"),
    "available probe string malformed": dict(available="pkg.module"),
    "op without a family": dict(op="rms_norm"),
    "capability of the wrong type": dict(capability=("cuda",)),
    "shape constraint of the wrong type": dict(shape=({"dim": "hidden", "min": 1},)),
    "library of the wrong type": dict(libraries=("triton",)),
    "non-reference row claiming to be its own baseline": dict(golden=GoldenRecord.reference()),
}


@pytest.mark.parametrize("fields", list(BAD_ROWS.values()), ids=list(BAD_ROWS))
def test_bad_row_is_rejected_with_its_name(fields):
    """Catches a validator that accepts a malformed row, or whose error does not say which row."""
    name = fields.get("name", ROW)
    with pytest.raises(ValueError) as error:
        make(**fields)
    assert name in str(error.value)


BAD_REFERENCE_ROWS = {
    "reference row with a capability": dict(capability=(CapabilityRequirement("cuda", min_sm=80),)),
    "reference row with a library": dict(libraries=(LibraryRequirement("triton"),)),
    "reference row with a shape constraint": dict(shape=(ShapeConstraint("hidden", min=1),)),
    "reference row with a layout tag": dict(layout={"x:rows"}),
    "reference row with an unverified golden record": dict(golden=GoldenRecord.unverified()),
    "reference row with a measured golden record": dict(golden=VERIFIED),
}


@pytest.mark.parametrize("fields", list(BAD_REFERENCE_ROWS.values()), ids=list(BAD_REFERENCE_ROWS))
def test_reference_row_with_conditions_is_rejected(fields):
    """Catches a reference row that could miss: DESIGN §2 says it is eligible everywhere, the floor."""
    with pytest.raises(ValueError, match=re.escape("torch/ref")):
        make_reference(**fields)


def _construction_error(**fields) -> str:
    """The text of the error make(**fields) raises ('' if it does not raise: that fails the caller too)."""
    try:
        make(**fields)
    except Exception as error:  # any type: the tests below check the message names the row
        return f"{type(error).__name__}: {error}"
    return ""


def test_a_reference_row_may_carry_a_priority():
    """Catches over-strict validation: only conditions are banned on the reference row, not ranking."""
    assert make_reference(priority=-5).priority == -5


@pytest.mark.parametrize("priority", [1.5, "10", True, None], ids=["float", "str", "bool", "None"])
def test_non_int_priority_is_rejected_at_construction(priority):
    """Catches a priority that would crash ranking later (or rank True as 1) instead of failing at import."""
    with pytest.raises((TypeError, ValueError)):
        make(priority=priority)


@pytest.mark.parametrize("priority", [1.5, "10"], ids=["float", "str"])
def test_non_int_priority_error_names_the_row(priority):
    """Catches an error for a bad priority that does not say which row of a family is wrong."""
    assert ROW in _construction_error(priority=priority)


@pytest.mark.parametrize(
    "fields",
    [dict(golden=True), dict(libraries=LibraryRequirement("triton"))],
    ids=["golden-not-a-record", "library-not-in-a-tuple"],
)
def test_wrongly_typed_field_error_names_the_row(fields):
    """Catches a crash deep in validation that does not name the row for a wrongly typed field."""
    assert ROW in _construction_error(**fields)


# ---------------------------------------------------------------------------
# Parts of a row
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        dict(verified=True),
        dict(verified=True, max_abs_diff=1e-3, baseline="torch/ref"),
        dict(verified=True, baseline="torch/ref", evidence="perf/results/x.json"),
        dict(verified=True, max_abs_diff=1e-3, evidence="perf/results/x.json"),
    ],
    ids=["nothing", "no-evidence", "no-max-diff", "no-baseline"],
)
def test_verified_golden_without_evidence_is_rejected(fields):
    """Catches a hand-written 'verified' claim with nothing behind it (DESIGN §5: records are measured).

    The record is built before its row, so the error can only name what is missing."""
    with pytest.raises(ValueError, match="evidence"):
        GoldenRecord(**fields)


def test_unverified_golden_needs_no_evidence():
    """Catches over-strict golden validation that would force fake evidence on new rows."""
    assert GoldenRecord.unverified().verified is False
    assert make(golden=GoldenRecord(verified=False)).golden.verified is False


@pytest.mark.parametrize(
    "fields",
    [
        dict(device="tpu"),
        dict(device="cpu", min_sm=80),
        dict(device="cpu", max_sm=90),
        dict(device="cuda", triton_interpreter=True),
        dict(device="cpu", triton_interpreter=True, dtypes={"bf16"}),
        dict(device="cpu", triton_interpreter=True, dtypes=(), reason="why"),
        dict(device="cpu", triton_interpreter=True, dtypes={"bfloat16"}, reason="why"),
        dict(device="cpu", triton_interpreter=True, reason="why"),
    ],
    ids=[
        "unknown-device",
        "cpu-with-min-sm",
        "cpu-with-max-sm",
        "cuda-with-interpreter",
        "dtypes-without-reason",
        "empty-dtypes",
        "unknown-dtype-label",
        "reason-without-dtypes",
    ],
)
def test_bad_capability_is_rejected(fields):
    """Catches capability requirements that can never match (or mean nothing) being accepted."""
    with pytest.raises(ValueError):
        CapabilityRequirement(**fields)


def test_capability_accepts_exactly_its_devices():
    """Catches off-by-one SM bounds and the cpu interpreter opt-in being ignored."""
    ampere_to_ada = CapabilityRequirement("cuda", min_sm=80, max_sm=89)
    assert ampere_to_ada.accepts(Device("cuda", 80)) and ampere_to_ada.accepts(Device("cuda", 89))
    assert not ampere_to_ada.accepts(Device("cuda", 75)) and not ampere_to_ada.accepts(Device("cuda", 90))
    assert not ampere_to_ada.accepts(Device("cuda"))  # unknown SM cannot satisfy a bound
    assert not ampere_to_ada.accepts(Device("cpu"))
    interpreter = CapabilityRequirement("cpu", triton_interpreter=True)
    assert interpreter.accepts(Device("cpu", triton_interpreter=True))
    assert not interpreter.accepts(Device("cpu"))
    assert CapabilityRequirement("cpu").accepts(Device("cpu", triton_interpreter=True))


def test_capability_narrowed_to_dtypes_rejects_the_others_and_says_why():
    """Catches a capability's dtype narrowing being ignored (a bf16 query served where tl.dot on bf16 is
    wrong) or applied to every dtype, and a requirement text that hides which dtypes and why."""
    interpreter = CapabilityRequirement(
        "cpu", triton_interpreter=True, dtypes=["fp32", "fp16"], reason="tl.dot on bf16 is wrong there"
    )
    assert interpreter.dtypes == frozenset({"fp32", "fp16"})
    on_interpreter = Device("cpu", triton_interpreter=True)
    assert interpreter.accepts(on_interpreter, "fp16") and interpreter.accepts(on_interpreter, "fp32")
    assert not interpreter.accepts(on_interpreter, "bf16")
    assert not interpreter.accepts(Device("cpu"), "fp16"), "the dtypes narrow the device check, never widen it"
    assert interpreter.describe() == (
        "cpu via the Triton interpreter (RAPID_LLM_TRITON_INTERPRET=1) for fp32, "
        "fp16 only: tl.dot on bf16 is wrong there"
    )


def test_shape_constraint_that_constrains_nothing_is_rejected():
    """Catches a constraint with no bound, which would look like a condition but accept everything."""
    with pytest.raises(ValueError, match="hidden"):
        ShapeConstraint("hidden")


@pytest.mark.parametrize(
    "constraint, accepted, refused",
    [
        (ShapeConstraint("hidden", min=64), [64, 4096], [63, 0]),
        (ShapeConstraint("hidden", max=4096), [1, 4096], [4097]),
        (ShapeConstraint("hidden", multiple_of=16), [16, 4096], [8, 4095]),
        (ShapeConstraint("hidden", one_of=[64, 128]), [64, 128], [96, 256]),
        (ShapeConstraint("hidden", min=64, multiple_of=64), [64, 128], [32, 96]),
    ],
    ids=["min", "max", "multiple_of", "one_of", "combined"],
)
def test_shape_constraint_bounds(constraint, accepted, refused):
    """Catches inclusive/exclusive mix-ups in min/max and ignored multiple_of/one_of bounds."""
    for value in accepted:
        assert constraint.accepts(value), value
    for value in refused:
        assert not constraint.accepts(value), value
    assert not constraint.accepts(None), "a dim the call site did not give must not satisfy a constraint"


def test_unknown_library_is_rejected_when_the_table_is_built():
    """Catches a misspelled library name, which would make the row silently never match: the names are the
    product's own libraries and those the backend packages declare (dispatcher/libraries.py), checked when
    the table is built; a name that is not an identifier is refused at once."""
    from rapid_llm.kernels.dispatcher.table import TableError, validate_rows

    row = KernelSpec(
        name="native/typo",
        op="norm.rms_norm",
        backend="native",
        target="m:f",
        dtypes={"fp32"},
        libraries=(LibraryRequirement("flashinfr"),),
    )
    with pytest.raises(TableError, match="flashinfr"):
        validate_rows([row], {}, {})
    with pytest.raises(ValueError, match="identifier"):
        LibraryRequirement("flash-infer")


def test_every_backend_declares_the_library_its_rows_require():
    """Catches a backend package whose LIBRARY or REQUIREMENT names another library than the one it is listed
    for (its probe would check one library and its rows require another)."""
    from rapid_llm.kernels.backends import LIBRARY_PROBES
    from rapid_llm.kernels.dispatcher.libraries import known_libraries

    assert set(LIBRARY_PROBES) <= set(known_libraries())
    assert {"triton", "cuda_extension"} <= set(known_libraries())


# ---------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, release",
    [
        ("2.11.0+cu130", (2, 11)),
        ("0.1.15.post2", (0, 1, 15)),
        ("1.0rc1", (1,)),
        ("3.1.0.dev20240101", (3, 1)),
        ("3", (3,)),
    ],
    ids=["local-label", "post-release", "release-candidate", "dev", "major-only"],
)
def test_version_key_keeps_the_release_numbers(text, release):
    """Catches a parser that lets '+cu130', '.post2' or 'rc1' leak into (or crash) version comparison."""
    assert version_key(text) == release


TRITON_3 = LibraryRequirement("triton", min_version="3.0", below_version="4.0")


@pytest.mark.parametrize("installed", ["3.0", "3.0.0", "3.6.0+git1234", "3.99.1", "3.0.0rc1"])
def test_library_in_range_is_accepted(installed):
    """Catches range checks that refuse a supported version (local labels and pre-releases included:
    spec.version_key deliberately treats a pre-release as its release)."""
    ok, observed = TRITON_3.check(installed)
    assert ok and installed in observed


@pytest.mark.parametrize(
    "installed, word",
    [("2.3.1", "old"), ("2.99", "old"), ("4.0", "new"), ("4.0.0", "new"), ("4.1.0+cu130", "new"), ("4.0.0rc1", "new")],
)
def test_library_out_of_range_is_refused_saying_which_way(installed, word):
    """Catches an off-by-one at the bounds ([min, below) is half-open) and an observation that does
    not say the installed version and whether it is too old or too new."""
    ok, observed = TRITON_3.check(installed)
    assert not ok
    assert installed in observed and word in observed


def test_library_not_installed_is_refused():
    """Catches a missing library being treated as 'any version is fine'."""
    ok, observed = TRITON_3.check(None)
    assert not ok and "not installed" in observed
    assert LibraryRequirement("triton").check(None)[0] is False


def test_library_without_bounds_accepts_any_installed_version():
    """Catches an unbounded requirement that rejects versions it cannot parse."""
    assert LibraryRequirement("flashinfer").check("0.0.1")[0]
    assert LibraryRequirement("flashinfer").check("nightly")[0]


def test_trailing_zeros_do_not_change_a_version():
    """Catches range checks that depend on how many '.0' a version string carries."""
    assert LibraryRequirement("triton", min_version="3.0.0").check("3.0")[0]
    assert not LibraryRequirement("triton", below_version="3.0.0").check("3.0")[0]


# ---------------------------------------------------------------------------
# Priorities
# ---------------------------------------------------------------------------


def test_unmeasured_ranks_below_every_int_priority_including_negative():
    """Catches UNMEASURED being compared as 0 (it would beat negative priorities) or as a number at all."""
    rows = [
        make(name=f"native/p{index}", priority=priority) for index, priority in enumerate([UNMEASURED, -1000, 0, 7, -1])
    ]
    ranked = [row.priority for row in sorted(rows, key=KernelSpec.rank_key)]
    assert ranked == [7, 0, -1, -1000, UNMEASURED]


def test_unmeasured_is_the_default_priority_and_survives_copies():
    """Catches rows that default to a number (claiming a measurement) and UNMEASURED losing its
    identity through copy/pickle (ranking tests it with `is`)."""
    row = make(priority=UNMEASURED)
    assert KernelSpec(name=ROW, op="test.op", backend="native", target="m:f", dtypes={"bf16"}).priority is UNMEASURED
    assert copy.deepcopy(row).priority is UNMEASURED
    assert pickle.loads(pickle.dumps(row)).priority is UNMEASURED
    measured = make(name="native/measured", priority=-1)
    assert sorted([copy.deepcopy(row), measured], key=KernelSpec.rank_key)[0] is measured
