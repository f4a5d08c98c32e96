"""The `rapid-llm` CLI: each command's text and --json forms, run in-process.

Catches: a command crashing on this machine, --json output that is not
JSON or lacks its documented keys, --device/--lib not reaching dispatch
(describing another machine must change the verdicts), plan dropping the
ops a preset needs that the table does not serve, and bad arguments
surfacing as tracebacks instead of messages.
"""

from __future__ import annotations

import json

import pytest

from rapid_llm.cli import main
from rapid_llm.kernels.dispatcher import build_tables
from rapid_llm.models import PRESETS

TABLE = build_tables()


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def run_json(capsys, *argv):
    code, out = run(capsys, *argv, "--json")
    return code, json.loads(out)


def test_doctor_reports_device_libraries_and_ops(capsys):
    code, doc = run_json(capsys, "doctor")
    assert code == 0
    assert doc["schema"] == 1
    assert set(doc["libraries"]) >= {"triton", "flashinfer", "flash_attn", "flash_mla", "deep_gemm", "deep_ep"}
    assert doc["ops"] == {op: [row.name for row in TABLE.rows(op)] for op in TABLE.ops}
    assert isinstance(doc["extension_built"], bool)
    code, text = run(capsys, "doctor")
    assert code == 0 and "device" in text and "libraries" in text


def test_matrix_for_a_described_sm90_machine_selects_the_best_eligible_row(capsys):
    code, doc = run_json(capsys, "matrix", "--device", "cuda:sm90", "--lib", "triton=3.6.0")
    assert code == 0 and doc["device"] == "cuda:sm90" and doc["libs"]["triton"] == "3.6.0"
    entries = doc["entries"]
    for op in TABLE.ops:
        for dtype in TABLE.contracts[op].dtypes:
            selected = [e["row"] for e in entries if e["op"] == op and e["dtype"] == dtype
                        and e["status"] == "selected"]
            assert len(selected) == 1, f"{op}/{dtype}: exactly one selected row expected, got {selected}"
            verified = [r for r in TABLE.rows(op) if r.golden.verified and not r.is_reference]
            if verified:
                assert selected[0] != TABLE.reference(op).name, (
                    f"{op}/{dtype}: a verified non-reference row exists on sm90 with triton, yet the reference won")


def test_matrix_without_triton_rejects_native_rows_with_the_library_reason(capsys):
    code, doc = run_json(capsys, "matrix", "--device", "cuda:sm90", "--no-local-libs")
    assert code == 0
    natives = [e for e in doc["entries"] if e["row"].startswith("native/")]
    assert natives and all(e["status"] == "rejected" for e in natives)
    assert all(any("library triton" in r and "not installed" in r for r in e["reasons"]) for e in natives)


def test_explain_prints_the_tree_and_json_names_every_row(capsys):
    code, text = run(capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "num_tokens=64,hidden=4096",
                     "--device", "cuda:sm80", "--lib", "triton=3.6.0")
    assert code == 0
    assert text.splitlines()[0].startswith("norm.rms_norm  dtype=bf16 device=cuda:sm80")
    assert "✓" in text
    code, doc = run_json(capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--shape",
                         "num_tokens=64,hidden=4096", "--device", "cuda:sm80", "--lib", "triton=3.6.0")
    assert {row["row"] for row in doc["rows"]} == {row.name for row in TABLE.rows("norm.rms_norm")}
    assert doc["selected"] in {row.name for row in TABLE.rows("norm.rms_norm")}
    assert doc["query"]["shape"] == {"num_tokens": 64, "hidden": 4096}


def test_explain_on_an_old_gpu_rejects_native_rows_for_the_device(capsys):
    code, doc = run_json(capsys, "explain", "norm.rms_norm", "--dtype", "fp16", "--device", "cuda:sm75",
                         "--lib", "triton=3.6.0")
    native = next(row for row in doc["rows"] if row["row"] == "native/rms_norm")
    assert native["status"] == "rejected"
    assert any(c["condition"] == "device" and not c["ok"] and c["observed"] == "cuda:sm75" for c in native["checks"])


def test_explain_with_an_unservable_dtype_exits_nonzero_with_every_reason(capsys):
    code, text = run(capsys, "explain", "norm.rms_norm", "--dtype", "int8", "--device", "cuda:sm90")
    assert code == 2
    assert "no eligible kernel" in text
    assert text.count("dtype: requires") == len(TABLE.rows("norm.rms_norm"))


def test_explain_rejects_unknown_ops_and_bad_shapes_with_a_message():
    with pytest.raises(SystemExit, match="unknown op"):
        main(["explain", "norm.nope", "--dtype", "bf16"])
    with pytest.raises(SystemExit, match="--shape expects"):
        main(["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "hidden:4096"])
    with pytest.raises(SystemExit, match="cannot parse device"):
        main(["explain", "norm.rms_norm", "--dtype", "bf16", "--device", "tpu"])
    with pytest.raises(SystemExit, match="not a row"):
        main(["explain", "norm.rms_norm", "--dtype", "bf16", "--force", "native/nope"])


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_plan_covers_every_op_of_the_preset(capsys, model):
    code, doc = run_json(capsys, "plan", "--model", model, "--device", "cuda:sm90", "--lib", "triton=3.6.0")
    assert code == 0 and doc["model"] == model
    needed = {use.op for use in PRESETS[model].op_uses()}
    planned = {p["op"] for p in doc["plans"]}
    missing = {n["op"] for n in doc["not_served_yet"]}
    assert planned | missing == needed, "plan must account for every op the preset needs"
    assert planned == needed & set(TABLE.ops)
    for entry in doc["plans"]:
        low, high = entry["tokens"]
        assert 1 <= low <= high <= 32768 and entry["selected"]
    # Buckets tile 1..32768 without gaps for each (op, where).
    for use in PRESETS[model].op_uses():
        if use.op in TABLE.ops:
            spans = [p["tokens"] for p in doc["plans"] if p["op"] == use.op and p["where"] == use.where]
            assert spans[0][0] == 1 and spans[-1][1] == 32768
            assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:]))


def test_plan_text_lists_unserved_ops(capsys):
    code, text = run(capsys, "plan", "--model", "deepseek-v3", "--device", "cuda:sm90")
    assert code == 0
    assert "not served yet" in text and "attention.mla_decode" in text


def test_plan_rejects_an_unknown_model():
    with pytest.raises(SystemExit, match="unknown model preset"):
        main(["plan", "--model", "gpt-5"])
