"""Measured rankings: a row's rank at a shape bucket on a GPU class comes from the run that measured it there.

Tables built here from their own rows and rankings (dispatch is pure: no GPU). Catches a measurement that does
not reorder the eligible rows at its bucket, one that leaks into another bucket, dtype or device class, an
explanation that does not say which measurement (or which default priority) decided, a ranking that names a
row the table lacks, and shipped rankings that no longer match the table.
"""

from __future__ import annotations

import json

import pytest

from rapid_llm.kernels.dispatcher import (
    EXACT,
    TOKEN_BUCKETS,
    CapabilityRequirement,
    GoldenRecord,
    KernelSpec,
    OpContract,
    OpTable,
    TableError,
    build_tables,
    dispatch,
)
from rapid_llm.kernels.dispatcher.rankings import Ranking, RankingStore, load_package_rankings, parse

OP = "demo.attend"
CONTRACT = OpContract(
    op=OP,
    parameters=("x",),
    dtypes={"bf16", "fp16"},
    dims=(("num_tokens", TOKEN_BUCKETS), ("max_seqlen", TOKEN_BUCKETS), ("head_dim", EXACT)),
)
_VERIFIED = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/attend", evidence="test")


def _row(name, priority):
    backend = name.partition("/")[0]
    if backend == "torch":
        return KernelSpec(
            name=name, op=OP, backend="torch", target="m:f", dtypes={"bf16", "fp16"}, golden=GoldenRecord.reference()
        )
    return KernelSpec(
        name=name,
        op=OP,
        backend=backend,
        target="m:f",
        dtypes={"bf16", "fp16"},
        capability=(CapabilityRequirement("cuda", min_sm=80),),
        golden=_VERIFIED,
        priority=priority,
    )


ROWS = [
    _row("torch/attend", 0),
    _row("native/attend", 15),
    _row("flash_attn/attend", 20),
    _row("flashinfer/attend", 10),
]
#: 16 x 1024 tokens: num_tokens 8193-16384, max_seqlen 513-1024, head_dim 128.
SHORT = {"num_tokens": 16384, "max_seqlen": 1024, "head_dim": 128}
LONG = {"num_tokens": 16384, "max_seqlen": 4096, "head_dim": 128}


def _ranking(shape, order, dtype="bf16", device_class="cuda:sm90"):
    return Ranking(
        op=OP,
        dtype=dtype,
        device_class=device_class,
        bucket=CONTRACT.bucket_key(shape),
        order=order,
        device="NVIDIA H200",
        evidence="h200.demo.bench",
    )


def _table(*rankings):
    return OpTable.from_rows(ROWS, {OP: CONTRACT}, RankingStore(rankings))


def _select(table, shape, dtype="bf16", device="cuda:sm90"):
    return dispatch(OP, device=device, dtype=dtype, shape=shape, table=table)


def test_a_measured_bucket_ranks_by_the_measurement():
    table = _table(_ranking(SHORT, [("native/attend", 286.0), ("flash_attn/attend", 322.0)]))
    selection = _select(table, SHORT)
    assert selection.row.name == "native/attend"
    # measured rows first, fastest first; then the unmeasured eligible rows by default priority
    assert [row.name for row in selection.candidates] == [
        "native/attend",
        "flash_attn/attend",
        "flashinfer/attend",
        "torch/attend",
    ]
    text = selection.explain()
    assert "measured on NVIDIA H200 at this bucket: 286.0 us vs 322.0 us for flash_attn/attend" in text
    assert "evidence h200.demo.bench" in text
    assert "not among the rows measured at this bucket" in text  # flashinfer/attend's note


def test_the_measurement_does_not_leak_into_other_buckets_dtypes_or_devices():
    table = _table(_ranking(SHORT, [("native/attend", 286.0), ("flash_attn/attend", 322.0)]))
    long = _select(table, LONG)
    assert long.row.name == "flash_attn/attend"  # same num_tokens bucket, other max_seqlen: default priority
    assert "this bucket not measured on cuda:sm90" in long.explain()
    assert _select(table, SHORT, dtype="fp16").row.name == "flash_attn/attend"
    other = _select(table, SHORT, device="cuda:sm80")
    assert other.row.name == "flash_attn/attend"
    assert "not measured" not in other.explain()  # nothing was measured on sm80 at all: nothing to say


def test_any_shape_in_the_bucket_takes_the_bucket_ranking():
    table = _table(_ranking(SHORT, [("native/attend", 286.0), ("flash_attn/attend", 322.0)]))
    assert _select(table, {"num_tokens": 9000, "max_seqlen": 600, "head_dim": 128}).row.name == "native/attend"
    assert _select(table, {"num_tokens": 9000, "max_seqlen": 600, "head_dim": 64}).row.name == "flash_attn/attend"


def test_a_measured_row_that_is_not_eligible_is_skipped():
    table = _table(_ranking(SHORT, [("native/attend", 286.0), ("flash_attn/attend", 322.0)]))
    selection = dispatch(OP, device="cuda:sm90", dtype="bf16", shape=SHORT, table=table, deny={"native"})
    assert selection.row.name == "flash_attn/attend"


def test_a_ranking_naming_an_unknown_row_is_rejected_when_the_table_is_built():
    with pytest.raises(TableError, match="native/gone"):
        _table(_ranking(SHORT, [("native/gone", 1.0), ("flash_attn/attend", 2.0)]))


def test_a_malformed_rankings_file_names_the_file():
    with pytest.raises(ValueError, match="demo.json"):
        parse(
            {"schema": 1, "device_class": "cuda:sm90", "device": "H200", "evidence": "x", "entries": [{"op": OP}]},
            "demo.json",
        )
    with pytest.raises(ValueError, match="schema"):
        parse({"schema": 99}, "demo.json")


def test_shipped_rankings_name_rows_of_the_table_and_parse(tmp_path):
    """The package data loads into the default table (build_tables validates every ranked row), and a
    round trip through the file format keeps every entry."""
    store = load_package_rankings()
    table = build_tables()
    assert table.rankings is not None
    for ranking in store:
        assert ranking.op in table.contracts
        assert {name for name, _ in ranking.order} <= {row.name for row in table.rows(ranking.op)}
        assert [us for _, us in ranking.order] == sorted(us for _, us in ranking.order), "fastest first"
    document = {
        "schema": 1,
        "device_class": "cuda:sm90",
        "device": "NVIDIA H200",
        "evidence": "e",
        "entries": [
            {
                "op": OP,
                "dtype": "bf16",
                "bucket": [list(item) for item in CONTRACT.bucket_key(SHORT)],
                "ranking": [["native/attend", 1.0], ["flash_attn/attend", 2.0]],
            }
        ],
    }
    (tmp_path / "cuda_sm90.json").write_text(json.dumps(document))
    loaded = load_package_rankings(str(tmp_path))
    assert len(loaded) == 1
    assert loaded.lookup("cuda:sm90", OP, "bf16", CONTRACT.bucket_key(SHORT)).order[0] == ("native/attend", 1.0)


def test_a_row_the_run_did_not_time_keeps_its_default_place():
    """Catches a partial measurement (a library absent from the run) lifting the measured rows above a row it
    never timed: flash_attn/attend (priority 20) stays first; the two timed rows trade their slots."""
    table = _table(_ranking(SHORT, [("flashinfer/attend", 100.0), ("native/attend", 200.0)]))
    selection = _select(table, SHORT)
    assert [row.name for row in selection.candidates] == [
        "flash_attn/attend",
        "flashinfer/attend",
        "native/attend",
        "torch/attend",
    ]
    assert "not among the rows measured at this bucket" in selection.explain()


def test_the_writer_ranks_by_graph_replay_where_the_report_has_it():
    """Catches rankings written from eager event times at decode sizes, where the host's enqueue (a Gluon
    launch, say) hides the kernel: the row faster in CUDA-graph replay, as engines run decode, ranks first."""
    from perf.write_rankings import rankings_of

    def record(row, us, graph_us):
        return {"row": row, "op": OP, "dims": SHORT, "dtype": "bf16", "case": "c", "us": us, "graph_us": graph_us}

    report = {
        "sm": 90,
        "device": "NVIDIA H200",
        "cases": [record("native/attend", 130.0, 14.0), record("flash_attn/attend", 50.0, 44.0)],
    }
    _, _, entries = rankings_of(report, "h200.demo.bench", _table())
    assert [name for name, _ in entries[0]["ranking"]] == ["native/attend", "flash_attn/attend"]
    assert entries[0]["ranking"][0][1] == 14.0


def test_the_writer_merges_rows_that_never_serve_the_same_call():
    """Catches a bucket left unranked because its shapes timed disjoint rows (bf16 and fp8 KV caches share a
    decode bucket: the KV dtype is a layout tag), and rows of overlapping groups ranked on unequal shapes."""
    from perf.write_rankings import _bucket_means

    disjoint = {"bf16": {"native/a": 2.0, "lib/a": 9.0}, "fp8": {"native/b": 1.0, "aot/b": 0.5}}
    assert _bucket_means(disjoint) == {"native/a": 2.0, "lib/a": 9.0, "native/b": 1.0, "aot/b": 0.5}
    overlapping = {"short": {"native/a": 2.0, "lib/a": 9.0}, "long": {"native/a": 4.0, "native/b": 1.0}}
    assert _bucket_means(overlapping) == {"native/a": 3.0}


def test_a_rerun_that_left_a_row_out_keeps_the_earlier_bucket():
    """Catches a later report that timed fewer rows (a rerun of one kernel beside its peers) dropping a row the
    earlier report ranked at that bucket: its bucket replaces the earlier one only when it timed every row."""
    from perf.write_rankings import _replaces

    earlier = {"ranking": [["native/splitk", 14.0], ["lib/a", 15.0], ["native/tiled", 32.0]]}
    assert not _replaces(earlier, {"ranking": [["lib/a", 15.5], ["native/tiled", 31.0]]})
    assert _replaces(
        earlier, {"ranking": [["lib/a", 15.5], ["native/new", 20.0], ["native/splitk", 14.2], ["native/tiled", 31.0]]}
    )
    assert _replaces(None, {"ranking": [["lib/a", 1.0]]})
