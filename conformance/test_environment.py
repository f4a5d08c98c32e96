"""probe_environment(), Device and the library-hiding import blocker (DESIGN §3, §5).

The probe is the only impure step: it reads RAPID_LLM_* variables once per
process. These tests pass their own mapping (`environ=`) so they hold in every
absence cell of ci/, and run the process-wide probe only in subprocesses or
where its caching is what is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rapid_llm.kernels.dispatcher import (
    CapabilityRequirement,
    Device,
    Environment,
    GoldenRecord,
    KernelSpec,
    LibraryRequirement,
    OpTable,
    dispatch,
    probe_environment,
)
from rapid_llm.kernels.dispatcher.environment import installed_library_versions

try:
    from conformance import _fake_targets as fake
except ImportError:  # conformance/ is on sys.path but not importable as a package
    import _fake_targets as fake

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clean_environ(**variables) -> dict:
    """os.environ without any RAPID_LLM_* / TRITON_INTERPRET setting of the calling cell, plus `variables`."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAPID_LLM_") and key != "TRITON_INTERPRET"
    }
    environ.update(variables)
    return environ


# ---------------------------------------------------------------------------
# Parsing the variables
# ---------------------------------------------------------------------------


def test_deny_is_parsed_into_names():
    """Catches RAPID_LLM_DENY being ignored or split wrongly (spaces, empty items)."""
    env = probe_environment(environ={"RAPID_LLM_DENY": " flashinfer, native/rms_norm,, "})
    assert env.deny == frozenset({"flashinfer", "native/rms_norm"})
    assert probe_environment(environ={}).deny == frozenset()


def test_force_is_parsed_per_op():
    """Catches RAPID_LLM_FORCE items being dropped, mixed up between ops, or applied to every op."""
    env = probe_environment(environ={"RAPID_LLM_FORCE": "norm.rms_norm=native/rms_norm;elementwise.scale=torch/scale"})
    assert env.forced_row("norm.rms_norm") == "native/rms_norm"
    assert env.forced_row("elementwise.scale") == "torch/scale"
    assert env.forced_row("attention.decode") is None
    assert probe_environment(environ={}).forced_row("norm.rms_norm") is None


def test_hidden_libraries_are_removed_even_when_installed():
    """Catches RAPID_LLM_HIDE_LIBS not hiding an installed library (the absence cells of ci/ would then
    test nothing)."""
    if "triton" not in installed_library_versions():
        pytest.skip("triton is not installed in this environment: hiding an absent library proves nothing")
    assert "triton" in probe_environment(environ={}).libs.as_dict()
    env = probe_environment(environ={"RAPID_LLM_HIDE_LIBS": "triton"})
    assert env.libs.get("triton") is None
    assert env.hidden_libs == frozenset({"triton"})


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_triton_interpret_opt_in(value):
    """Catches RAPID_LLM_TRITON_INTERPRET=1 not reaching the Environment (and, on a cpu-only
    machine, the Device that the interpreter rows' capability checks)."""
    env = probe_environment(environ={"RAPID_LLM_TRITON_INTERPRET": value})
    assert env.triton_interpret is True
    if env.device.kind == "cpu":
        assert env.device.triton_interpreter is True


@pytest.mark.parametrize("value", [None, "", "0", "false"])
def test_triton_interpret_off(value):
    """Catches the interpreter being switched on by default or by an explicit 'off' value."""
    env = probe_environment(environ={} if value is None else {"RAPID_LLM_TRITON_INTERPRET": value})
    assert env.triton_interpret is False
    assert env.device.triton_interpreter is False


@pytest.mark.parametrize(
    "variable, value",
    [
        ("RAPID_LLM_FORCE", "norm.rms_norm"),
        ("RAPID_LLM_FORCE", "norm.rms_norm=rms_norm"),
        ("RAPID_LLM_FORCE", "rms_norm=native/rms_norm"),
        ("RAPID_LLM_HIDE_LIBS", "tritonn"),
        ("RAPID_LLM_HIDE_LIBS", "triton,torch"),
        ("RAPID_LLM_FORCE", "norm.rms_norm=native/rms_norm;norm.rms_norm=torch/rms_norm"),
    ],
    ids=[
        "force-no-equals",
        "force-row-without-backend",
        "force-op-without-family",
        "hide-misspelled",
        "hide-not-an-optional-library",
        "force-same-op-twice",
    ],
)
def test_malformed_variable_raises_naming_it(variable, value):
    """Catches a malformed variable being ignored (the operator believes a row is forced or a library
    hidden when it is not)."""
    with pytest.raises(ValueError, match=variable):
        probe_environment(environ={variable: value})


@pytest.mark.parametrize("value", ["ture", "enabled"])
def test_malformed_triton_interpret_raises(value):
    """Catches a typo in RAPID_LLM_TRITON_INTERPRET silently turning the interpreter (and with it every
    native row on CPU CI) off."""
    try:
        probe_environment(environ={"RAPID_LLM_TRITON_INTERPRET": value})
    except ValueError as error:
        assert "RAPID_LLM_TRITON_INTERPRET" in str(error)
    else:
        raise AssertionError(f"RAPID_LLM_TRITON_INTERPRET={value!r} was accepted")


# ---------------------------------------------------------------------------
# Device
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, kind, sm, interpreter",
    [
        ("cpu", "cpu", None, False),
        ("cpu+triton-interpreter", "cpu", None, True),
        ("cuda", "cuda", None, False),
        ("cuda:sm90", "cuda", 90, False),
        ("cuda:90", "cuda", 90, False),
        ("  CUDA:SM100 ", "cuda", 100, False),
    ],
)
def test_device_parse_round_trips(text, kind, sm, interpreter):
    """Catches device strings (CLI --device, explain headers) parsed to the wrong device or not
    re-parseable from their own rendering."""
    device = Device.parse(text)
    assert (device.kind, device.sm, device.triton_interpreter) == (kind, sm, interpreter)
    assert Device.parse(str(device)) == device


@pytest.mark.parametrize(
    "text", ["gpu", "cuda:smX", "cuda:sm", "cpu:0", "", "cuda:9.0", "rocm:sm90", "cuda:0", "cuda:1"]
)
def test_device_parse_rejects_bad_strings(text):
    """Catches an unparseable device string becoming some default device."""
    with pytest.raises(ValueError):
        Device.parse(text)


@pytest.mark.parametrize(
    "fields",
    [dict(kind="tpu"), dict(kind="cpu", sm=90), dict(kind="cuda", sm=90, triton_interpreter=True)],
    ids=["unknown-kind", "cpu-with-sm", "cuda-with-interpreter"],
)
def test_device_rejects_impossible_values(fields):
    """Catches Device values that no capability can reason about."""
    with pytest.raises(ValueError):
        Device(**fields)


# ---------------------------------------------------------------------------
# Purity
# ---------------------------------------------------------------------------


def _purity_table() -> OpTable:
    verified = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/ref", evidence="x.json")
    return OpTable.from_rows(
        [
            fake.reference_row(),
            KernelSpec(
                name="native/first",
                op=fake.OP,
                backend="native",
                target=fake.target("fast"),
                dtypes=fake.OP_DTYPES,
                golden=verified,
                priority=10,
                capability=[CapabilityRequirement("cpu", triton_interpreter=True), CapabilityRequirement("cuda")],
            ),
            KernelSpec(
                name="native/plain",
                op=fake.OP,
                backend="native",
                target=fake.target("slow"),
                dtypes=fake.OP_DTYPES,
                golden=verified,
                priority=5,
            ),
        ],
        fake.CONTRACTS,
    )


def _select(env: Environment, table: OpTable) -> str:
    return dispatch(
        fake.OP,
        device=env.device,
        dtype="bf16",
        libs=env.libs,
        deny=env.deny,
        force=env.forced_row(fake.OP),
        table=table,
    ).row.name


def test_dispatch_from_a_probed_env_ignores_later_os_environ_changes(monkeypatch):
    """Catches dispatch (or the Environment value) reading os.environ: after the probe, changing the
    variables must not change the selection. A fresh table defeats the memo, so dispatch really
    re-runs after the change."""
    env = probe_environment(environ={"RAPID_LLM_TRITON_INTERPRET": "1"})
    before = _select(env, _purity_table())
    assert before == "native/first"
    monkeypatch.setenv("RAPID_LLM_TRITON_INTERPRET", "0")
    monkeypatch.setenv("RAPID_LLM_DENY", "native/first")
    monkeypatch.setenv("RAPID_LLM_FORCE", f"{fake.OP}=native/plain")
    assert _select(env, _purity_table()) == before
    # The changed variables do matter when they are probed: the check above could fail.
    assert _select(probe_environment(environ=dict(os.environ)), _purity_table()) != before


def test_process_wide_probe_is_cached(monkeypatch):
    """Catches probe_environment() re-reading os.environ per call (the environment would change under
    a running engine, and plans cached from the old one would disagree with new ones)."""
    first = probe_environment()
    monkeypatch.setenv("RAPID_LLM_DENY", "native")
    monkeypatch.setenv("RAPID_LLM_FORCE", "norm.rms_norm=torch/rms_norm")
    assert probe_environment() is first


# ---------------------------------------------------------------------------
# RAPID_LLM_HIDE_LIBS in a real process: the import blocker
# ---------------------------------------------------------------------------

HIDDEN_TRITON_SCRIPT = textwrap.dedent("""
    import json
    from rapid_llm.kernels.dispatcher import dispatch, probe_environment

    env = probe_environment()
    import importlib.util
    import torch  # torch probes for triton itself: it must see "not installed", not crash
    found = importlib.util.find_spec("triton") is not None
    try:
        import triton  # noqa: F401
    except ImportError as error:
        blocked = f"{type(error).__name__}: {error}"
    else:
        blocked = None
    selection = dispatch("norm.rms_norm", device=env.device, dtype="bf16",
                         shape={"num_tokens": 4, "hidden": 64}, layout={"x:rows"}, libs=env.libs,
                         deny=env.deny, force=env.forced_row("norm.rms_norm"))
    print(json.dumps({"blocked": blocked, "find_spec_found": found, "libs": env.libs.as_dict(), "device": str(env.device),
                      "selected": selection.row.name, "explanation": selection.to_dict(),
                      "text": selection.explain()}))
""")


@pytest.fixture(scope="module")
def hidden_triton_run() -> dict:
    result = subprocess.run(
        [sys.executable, "-c", HIDDEN_TRITON_SCRIPT],
        env=clean_environ(RAPID_LLM_HIDE_LIBS="triton", RAPID_LLM_TRITON_INTERPRET="1"),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_hidden_library_import_fails_loudly(hidden_triton_run):
    """Catches RAPID_LLM_HIDE_LIBS only editing the version table: a stray `import triton` must fail
    as for an uninstalled module (DESIGN §5), and `importlib.util.find_spec` must report it missing
    rather than raise (torch probes for triton that way at CUDA initialisation)."""
    blocked = hidden_triton_run["blocked"]
    assert blocked is not None, "import triton succeeded although RAPID_LLM_HIDE_LIBS=triton"
    assert blocked.startswith("ModuleNotFoundError") and "triton" in blocked
    assert hidden_triton_run["find_spec_found"] is False


def test_hidden_triton_makes_dispatch_pick_the_reference_and_say_why(hidden_triton_run):
    """Catches a hidden triton still counting as installed: rms_norm must fall to torch/rms_norm and
    the native row's explanation must say triton is not installed."""
    run = hidden_triton_run
    assert "triton" not in run["libs"]
    assert run["selected"] == "torch/rms_norm"
    native = next(entry for entry in run["explanation"]["rows"] if entry["row"] == "native/rms_norm")
    assert native["status"] == "rejected"
    library = next(check for check in native["checks"] if check["condition"] == "library triton")
    assert library["ok"] is False and "not installed" in library["observed"]
    assert "not installed" in run["text"]


def test_native_rows_library_requirement_names_triton():
    """Catches the premise of the hidden-triton tests going stale: the real native rms_norm row must
    still require triton (otherwise hiding it proves nothing)."""
    from rapid_llm.kernels.dispatcher import build_tables

    row = build_tables().rows_by_name["native/rms_norm"]
    assert any(isinstance(lib, LibraryRequirement) and lib.name == "triton" for lib in row.libraries)


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("0", False), (None, False)])
def test_check_bounds_opt_in(value, expected):
    """Catches RAPID_LLM_CHECK_BOUNDS=1 not reaching the Environment (the debug mode that value-checks
    CUDA tensors would silently stay off)."""
    env = probe_environment(environ={} if value is None else {"RAPID_LLM_CHECK_BOUNDS": value})
    assert env.check_bounds is expected


def test_malformed_check_bounds_raises_naming_it():
    with pytest.raises(ValueError) as error:
        probe_environment(environ={"RAPID_LLM_CHECK_BOUNDS": "yes please"})
    assert "RAPID_LLM_CHECK_BOUNDS" in str(error.value)


def test_interpreter_requirement_names_the_variable_that_enables_it():
    """Catches a rejection 'requires cpu via the Triton interpreter; observed cpu' that does not say how."""
    from rapid_llm.kernels.dispatcher import CapabilityRequirement

    assert "RAPID_LLM_TRITON_INTERPRET=1" in CapabilityRequirement("cpu", triton_interpreter=True).describe()
