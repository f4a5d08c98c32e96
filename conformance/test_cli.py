"""The `rapid-llm` CLI: each command's text and --json forms, run in-process (and in subprocesses where
the RAPID_LLM_* variables or a real pipe matter).

Catches: a command crashing on this machine, --json output that is not
JSON or lacks its documented keys, --device/--lib not reaching dispatch
(describing another machine must change the verdicts), plan dropping an
op use of a preset or the work the table does not serve, or merging token
buckets in --json and --verbose (conformance/test_cli_plan.py: the presets and
the default text),
and every error path that is not one stderr line with the right exit status
(0 ok; 1 explain found no eligible row or doctor found problems; 2 a bad
argument or RAPID_LLM_* value; 141 stdout closed early): tracebacks,
argparse's usage text, nonsense accepted with exit 0.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from rapid_llm.cli import main
from rapid_llm.kernels.dispatcher import TOKEN_BUCKETS, build_tables
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
    assert doc["schema"] == 2
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
            selected = [
                e["row"] for e in entries if e["op"] == op and e["dtype"] == dtype and e["status"] == "selected"
            ]
            assert len(selected) == 1, f"{op}/{dtype}: exactly one selected row expected, got {selected}"
            # Rows this machine runs whatever the shape: verified, the dtype served, no shape condition (the
            # matrix is shape-blind: those show "if shape fits"), every library they need described (triton).
            runnable = [
                r
                for r in TABLE.rows(op)
                if r.golden.verified
                and not r.is_reference
                and not r.shape
                and dtype in r.dtypes
                and {lib.name for lib in r.libraries} <= {"triton"}
            ]
            if runnable:
                assert selected[0] != TABLE.reference(op).name, (
                    f"{op}/{dtype}: a verified non-reference row runs on sm90 with triton, yet the reference won"
                )


def test_matrix_without_triton_rejects_native_rows_with_the_library_reason(capsys):
    code, doc = run_json(capsys, "matrix", "--device", "cuda:sm90", "--no-local-libs")
    assert code == 0
    natives = [e for e in doc["entries"] if e["row"].startswith("native/")]
    assert natives and all(e["status"] == "rejected" for e in natives)
    assert all(any("library triton" in r and "not installed" in r for r in e["reasons"]) for e in natives)


def test_explain_prints_the_tree_and_json_names_every_row(capsys):
    code, text = run(
        capsys,
        "explain",
        "norm.rms_norm",
        "--dtype",
        "bf16",
        "--shape",
        "num_tokens=64,hidden=4096",
        "--device",
        "cuda:sm80",
        "--lib",
        "triton=3.6.0",
    )
    assert code == 0
    assert text.splitlines()[0].startswith("norm.rms_norm  dtype=bf16 device=cuda:sm80")
    assert "✓" in text
    code, doc = run_json(
        capsys,
        "explain",
        "norm.rms_norm",
        "--dtype",
        "bf16",
        "--shape",
        "num_tokens=64,hidden=4096",
        "--device",
        "cuda:sm80",
        "--lib",
        "triton=3.6.0",
    )
    assert {row["row"] for row in doc["rows"]} == {row.name for row in TABLE.rows("norm.rms_norm")}
    assert doc["selected"] in {row.name for row in TABLE.rows("norm.rms_norm")}
    assert doc["query"]["shape"] == {"num_tokens": 64, "hidden": 4096}


def test_explain_on_an_old_gpu_rejects_native_rows_for_the_device(capsys):
    code, doc = run_json(
        capsys, "explain", "norm.rms_norm", "--dtype", "fp16", "--device", "cuda:sm75", "--lib", "triton=3.6.0"
    )
    native = next(row for row in doc["rows"] if row["row"] == "native/rms_norm")
    assert native["status"] == "rejected"
    assert any(c["condition"] == "device" and not c["ok"] and c["observed"] == "cuda:sm75" for c in native["checks"])


def test_explain_with_no_eligible_row_exits_1_with_every_reason(capsys):
    """Catches: a miss reported as success, or as a traceback, or without each row's reason.

    Exit 1 (not 2): no eligible row is an answer about the machine, not a usage error.
    """
    code, text = run(
        capsys,
        "explain",
        "norm.rms_norm",
        "--dtype",
        "bf16",
        "--shape",
        "num_tokens=64,hidden=4096",
        "--device",
        "cuda:sm75",
        "--no-local-libs",
        "--lib",
        "triton=3.6.0",
        "--deny",
        "torch/rms_norm",
    )
    assert code == 1
    assert text.splitlines()[-1] == "norm.rms_norm: no eligible kernel"
    assert "deny: requires not denied" in text and "device: requires cuda sm>=80" in text


def test_explain_with_an_ineligible_forced_row_ends_with_one_clean_line(capsys):
    """Catches: a forced row that cannot run surfacing as a traceback or a multi-line dump after the tree."""
    code, text = run(
        capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--device", "cuda:sm75", "--force", "native/rms_norm"
    )
    assert code == 1
    assert text.splitlines()[-1] == "norm.rms_norm: forced row 'native/rms_norm' is not eligible"
    assert "Traceback" not in text
    code, doc = run_json(
        capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--device", "cuda:sm75", "--force", "native/rms_norm"
    )
    assert code == 1 and doc["error"] == "norm.rms_norm: forced row 'native/rms_norm' is not eligible"
    assert doc["selected"] is None


def usage_error(capsys, *argv) -> str:
    """Run a command that must fail as a usage error: exit 2, nothing on stdout, one stderr line; return it."""
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 2, f"{argv}: exit {code}, expected 2"
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rapid-llm: "), f"{argv}: stderr {captured.err!r}"
    return lines[0]


def test_explain_rejects_unknown_ops_and_bad_shapes_with_a_message(capsys):
    """Catches: unknown ops, malformed shapes, bad devices and unknown forced rows surfacing as tracebacks."""
    assert "unknown op 'norm.nope'; ops: " in usage_error(capsys, "explain", "norm.nope", "--dtype", "bf16")
    assert "--shape expects" in usage_error(
        capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "hidden:4096"
    )
    assert "cannot parse device 'tpu'" in usage_error(
        capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--device", "tpu"
    )
    assert "not a row" in usage_error(capsys, "explain", "norm.rms_norm", "--dtype", "bf16", "--force", "native/nope")


_DIMS = "dims: num_tokens, hidden"
_FLOATS = "dtypes: bf16, fp16, fp32"


@pytest.mark.parametrize(
    "argv, expected",
    [
        # Each was accepted with exit 0 (or reported as something else) before it was checked.
        (
            ["plan", "--dtype", "bfloat16"],
            f"--dtype 'bfloat16' is not a dtype of the table's ops; {_FLOATS}, fp8_e4m3, int32, int64 (did you mean bf16?)",
        ),
        (["plan", "--max-tokens", "0"], "--max-tokens 0: must be >= 1"),
        (["plan", "--model", "gpt-5"], "unknown model preset 'gpt-5'; presets: ['deepseek-v3', 'llama-3-8b'"),
        (["matrix", "--op", "nosuch.op"], "--op 'nosuch.op': no such op; ops: elementwise.scale, norm.rms_norm"),
        (["matrix", "--dtype", "bf32"], f"--dtype 'bf32' is not a dtype of the selected ops; {_FLOATS}"),
        (
            ["matrix", "--op", "norm.rms_norm", "--shape", "intermediate=8"],
            f"--shape: 'intermediate' is not a dim of any selected op; {_DIMS}",
        ),
        (["explain", "norm.rms_norm", "--dtype", "int8"], f"--dtype 'int8' is not a dtype of norm.rms_norm; {_FLOATS}"),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "foo=3"],
            f"--shape: 'foo' is not a dim of norm.rms_norm; {_DIMS}",
        ),
        (["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "=5"], "--shape expects name=int"),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "num_tokens=-5"],
            "--shape num_tokens=-5: every dim must be >= 1",
        ),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "hidden=0"],
            "--shape hidden=0: every dim must be >= 1",
        ),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--shape", "hidden=8,hidden=16"],
            "--shape gives 'hidden' twice",
        ),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--layout", "x:cols"],
            "--layout: norm.rms_norm has no layout tag 'x:cols'; tags: weight:vector, x:rows, x:rows_vector, or 'none'",
        ),
        (
            ["explain", "norm.rms_norm", "--dtype", "bf16", "--deny", "flashinfr"],
            "--deny 'flashinfr' is neither a backend nor a row; backends: aot, cublas, deep_ep",
        ),
        (["matrix", "--lib", "triton=abc"], "--lib triton=abc: the version must start with a number"),
        (["matrix", "--lib", "tritonn=3.6.0"], "--lib: unknown library 'tritonn'; known: "),
        (["matrix", "--lib", "triton"], "--lib expects NAME=VERSION, got 'triton'"),
        (
            ["matrix", "--device", "cuda:sm900"],
            "--device 'cuda:sm900': sm900 is not a CUDA compute capability; "
            "expected cpu, cpu+triton-interpreter or cuda:smNN with NN in 30..129",
        ),
        (["matrix", "--device", "cuda"], "--device 'cuda': give the GPU's SM version"),
        (["matrix", "--device", "cuda:0"], "--device: cannot parse device 'cuda:0'"),
        # argparse's own errors, one line instead of usage text plus a line.
        (
            ["explain", "norm.rms_norm"],
            "the following arguments are required: --dtype (see `rapid-llm explain --help`)",
        ),
        (["plan", "--max-tokens", "many"], "argument --max-tokens: invalid int value: 'many'"),
        (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    ],
)
def test_nonsense_arguments_are_one_line_usage_errors_naming_the_valid_choices(capsys, argv, expected):
    """Catches: a nonsense argument accepted with exit 0 (a typo matches no row, so the report looks plausible),
    or rejected with a traceback or argparse's multi-line usage text, or without naming what is valid."""
    line = usage_error(capsys, *argv)
    assert expected in line, f"{argv}: {line!r}"


def test_described_devices_in_the_sm_range_are_accepted(capsys):
    """Catches: the SM range check rejecting real GPUs at its edges (sm30 .. sm120 and room past it)."""
    for device in ("cuda:sm30", "cuda:90", "cuda:sm120", "cuda:sm129", "cpu", "cpu+triton-interpreter"):
        code, doc = run_json(capsys, "matrix", "--op", "norm.rms_norm", "--device", device)
        assert code == 0, device


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_plan_json_covers_every_op_use_in_every_token_bucket(capsys, model):
    """Catches: plan dropping an op use of the preset, and --json merging token buckets (it listed 1-32768 as
    one entry): each (op, where) must tile the buckets, merging neighbours only where the use's dims fall
    in one dispatch bucket, and each entry must be judged at its use's dims for the bucket's largest count."""
    code, doc = run_json(capsys, "plan", "--model", model, "--device", "cuda:sm90", "--lib", "triton=3.6.0")
    assert code == 0 and doc["model"] == model
    uses = PRESETS[model].op_uses()
    assert {(p["op"], p["where"]) for p in doc["plans"]} == {(use.op, use.where) for use in uses}
    buckets = TOKEN_BUCKETS.buckets_up_to(32768)
    for use in uses:
        contract = TABLE.contracts[use.op]
        entries = [p for p in doc["plans"] if p["op"] == use.op and p["where"] == use.where]
        assert entries[0]["tokens"][0] == 1 and entries[-1]["tokens"][1] == 32768
        for entry in entries:
            assert entry["selected"] and entry["reason"]
            low, high = entry["tokens"]
            inside = [top for bottom, top in buckets if low <= bottom and top <= high]
            keys = {contract.bucket_key(use.shape(top)) for top in inside}
            assert len(keys) == 1, f"{use.op} ({use.where}) {entry['tokens']}: merged buckets of different plans"
            expected = {name: top for name, _, top in keys.pop()}
            assert entry["explanation"]["query"]["shape"] == expected
        assert all(a["tokens"][1] + 1 == b["tokens"][0] for a, b in itertools.pairwise(entries)), "gaps or overlaps"


def test_plan_verbose_lists_every_bucket_and_never_cuts_the_where_column(capsys):
    """Catches: plan --verbose cutting "where" at 36 characters with no mark, and printing fewer lines than op
    uses x buckets (--max-tokens 100 reaches the buckets 1, 2-16 and 17-128)."""
    argv = ("plan", "--model", "llama-3-8b", "--device", "cuda:sm90", "--max-tokens", "100", "--verbose")
    code, text = run(capsys, *argv)
    assert code == 0
    served = PRESETS["llama-3-8b"].op_uses()
    longest = max((use.where for use in served), key=len)
    assert len(longest) > 36, "the test needs a where entry longer than the old cut"
    lines = text.splitlines()
    for use in served:
        rows = [line for line in lines if line.startswith(use.op + " ") and f" {use.where} " in line]
        assert len(rows) == 3, f"{use.op} ({use.where}): {rows}"
        tokens = [line[line.index(use.where) + len(use.where) :].split()[0] for line in rows]
        assert tokens == ["1", "2-16", "17-128"]


def test_plan_text_names_the_work_not_served_yet(capsys):
    """Catches: the plan's closing list of work the table does not serve going missing."""
    code, text = run(capsys, "plan", "--model", "deepseek-v3", "--device", "cuda:sm90")
    assert code == 0
    assert "not served by rapid_llm yet" in text and "lm_head" in text
    assert any(line.startswith("attention.mla_decode ") for line in text.splitlines())


def test_plan_with_an_ineligible_forced_row_says_so_in_why():
    """Catches: plan showing "-" with no reason, or a traceback, when a forced row cannot run on the device."""
    result = subprocess.run(
        [sys.executable, "-m", "rapid_llm.cli", "plan", "--device", "cuda:sm75", "--max-tokens", "1"],
        env=_cli_env(RAPID_LLM_FORCE="norm.rms_norm=native/rms_norm"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == ""
    rms = [line for line in result.stdout.splitlines() if line.startswith("norm.rms_norm ")]
    assert rms and all("✗ forced row 'native/rms_norm' is not eligible" in line for line in rms)


# ---------------------------------------------------------------------------
# Subprocess tests: RAPID_LLM_* variables are read once per process, and a closed pipe needs a real one.
# ---------------------------------------------------------------------------


def _cli_env(**variables) -> dict:
    """os.environ without any RAPID_LLM_* variable, plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAPID_LLM_")}
    env.update(variables)
    return env


def _run_cli_processes(cases):
    """Run `python -m rapid_llm.cli` once per (argv, variables) case, concurrently; [(returncode, out, err)]."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "rapid_llm.cli", *argv],
            env=_cli_env(**variables),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv, variables in cases
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        results.append((process.returncode, out, err))
    return results


# --device cpu spares each process the torch import (~2 s); the probe reads the variables either way.
# doctor takes no --device.
_COMMANDS = [
    ["doctor"],
    ["plan", "--device", "cpu"],
    ["matrix", "--device", "cpu"],
    ["explain", "norm.rms_norm", "--dtype", "bf16", "--device", "cpu"],
]


def test_bad_environment_variables_stop_every_command_with_one_line(monkeypatch, capsys):
    """Catches: a malformed RAPID_LLM_* value giving a Python traceback from doctor, plan and matrix (explain
    alone printed a line), and unknown RAPID_LLM_DENY / RAPID_LLM_FORCE names giving a dispatch traceback (or
    being silently ignored). Each must be one stderr line naming the variable and what it accepts, exit 2.

    Every command with every value runs in-process (the probe's process cache swapped for an empty one, so
    the variables are read afresh); one case runs as a real process, `rapid-llm plan` probing this machine.
    """
    from rapid_llm.kernels.dispatcher import environment

    malformed = [
        ({"RAPID_LLM_FORCE": "bad"}, "RAPID_LLM_FORCE: expected '<op>=<row>' items such as"),
        ({"RAPID_LLM_HIDE_LIBS": "tritonn"}, "RAPID_LLM_HIDE_LIBS: unknown libraries ['tritonn']; known: "),
        ({"RAPID_LLM_TRITON_INTERPRET": "maybe"}, "RAPID_LLM_TRITON_INTERPRET: expected 1/0"),
        ({"RAPID_LLM_CHECK_BOUNDS": "2"}, "RAPID_LLM_CHECK_BOUNDS: expected 1/0"),
    ]
    unknown_names = [
        (
            {"RAPID_LLM_DENY": "flashinfr"},
            "RAPID_LLM_DENY: unknown name(s) 'flashinfr' (neither a backend nor a row); backends: aot, cublas, deep_ep",
        ),
        (
            {"RAPID_LLM_FORCE": "norm.rms_norm=native/rms"},
            "RAPID_LLM_FORCE: 'native/rms' is not a row of norm.rms_norm; rows: torch/rms_norm, native/rms_norm",
        ),
        ({"RAPID_LLM_FORCE": "norm.rms=native/rms_norm"}, "RAPID_LLM_FORCE: unknown op 'norm.rms'; ops: "),
    ]
    # Every malformed value with every command; unknown names with every command but doctor (it reports them).
    cases = [(argv, variables, expected) for variables, expected in malformed for argv in _COMMANDS]
    cases += [(argv, variables, expected) for variables, expected in unknown_names for argv in _COMMANDS[1:]]
    for argv, variables, expected in cases:
        with monkeypatch.context() as patch:
            patch.setattr(environment, "_PROBED", {})
            for name in [k for k in os.environ if k.startswith("RAPID_LLM_")]:
                patch.delenv(name)
            for name, value in variables.items():
                patch.setenv(name, value)
            code = main(list(argv))
        out, err = capsys.readouterr()
        label = f"{variables} rapid-llm {' '.join(argv)}"
        assert code == 2, f"{label}: exit {code}; stderr {err!r}"
        assert out == "", label
        assert err.count("\n") == 1 and err.startswith("rapid-llm: " + expected), f"{label}: {err!r}"
    # A real process, probing this machine (no --device), with the variable that fails before torch is imported.
    variables, expected = malformed[1]
    [(code, out, err)] = _run_cli_processes([(["plan"], variables)])
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("rapid-llm: " + expected), err


def test_doctor_flags_unknown_deny_and_force_names_and_still_reports(monkeypatch, capsys):
    """Catches: doctor echoing unknown RAPID_LLM_DENY / RAPID_LLM_FORCE names as if they were in effect.

    They must be marked and listed as problems (text and JSON) after the full report, with exit 1.
    In-process (a subprocess pays a torch import per command): the probe's process cache is swapped
    for an empty one, so the variables are read afresh, and restored after.
    """
    from rapid_llm.kernels.dispatcher import environment

    monkeypatch.setattr(environment, "_PROBED", {})
    monkeypatch.setenv("RAPID_LLM_DENY", "flashinfer,flashinfr")
    monkeypatch.setenv("RAPID_LLM_FORCE", "norm.rms_norm=native/rms;embedding.rotary=native/rotary")
    code = main(["doctor"])
    text, err = capsys.readouterr()
    json_code = main(["doctor", "--json"])
    out, json_err = capsys.readouterr()
    assert code == 1 and err == "", err
    assert "deny             flashinfer, flashinfr ✗ unknown" in text
    assert "embedding.rotary=native/rotary; norm.rms_norm=native/rms ✗ unknown" in text
    for op in TABLE.ops:  # the rows a deny or force may name, by name
        assert any(line.split()[:1] == [op] and TABLE.rows(op)[0].name in line for line in text.splitlines())
    problems = text[text.index("\nproblems\n") :].splitlines()[2:]
    assert len(problems) == 2
    assert problems[0].startswith("  ✗ RAPID_LLM_DENY: unknown name(s) 'flashinfr'")
    assert problems[1].startswith("  ✗ RAPID_LLM_FORCE: 'native/rms' is not a row of norm.rms_norm")
    doc = json.loads(out)
    assert json_code == 1 and json_err == ""
    assert [p.split(":")[0] for p in doc["problems"]] == ["RAPID_LLM_DENY", "RAPID_LLM_FORCE"]
    assert doc["deny"] == ["flashinfer", "flashinfr"] and doc["ops"]


def test_doctor_without_problems_exits_0(capsys):
    """Catches: doctor's problem check flagging a clean environment (or the JSON lacking "problems")."""
    code, doc = run_json(capsys, "doctor")
    assert code == 0 and doc["problems"] == []


@pytest.mark.parametrize("argv", [["matrix", "--device", "cpu"], ["plan", "--json", "--device", "cpu"]])
def test_a_closed_stdout_ends_the_command_quietly(argv):
    """Catches: `rapid-llm matrix | head -1` printing a BrokenPipeError traceback (twice: once more at exit).

    The reader closes the pipe before the command writes, so every write fails: exit 141 (128 + SIGPIPE, what
    a Unix tool killed by SIGPIPE reports), nothing on stderr.
    """
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rapid_llm.cli", *argv],
            env=_cli_env(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    _, err = process.communicate(timeout=300)
    assert err == "", err
    assert process.returncode == 141


def test_reading_one_line_of_a_long_output_then_closing_is_quiet():
    """Catches: the BrokenPipeError traceback in the way users meet it: read the first line, close the pipe."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rapid_llm.cli", "plan", "--json", "--device", "cpu"],
        env=_cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "{\n"
    process.stdout.close()
    err = process.stderr.read()
    process.wait(timeout=300)
    assert err == "", err
    assert process.returncode in (0, 141)  # 0 only if everything fit in the pipe before it closed
