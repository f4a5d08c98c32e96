"""The dispatcher tier imports and works with torch and triton absent (DESIGN §1, §3).

Each test runs a fresh interpreter (sys.executable): the pytest process has
torch imported already, so only a subprocess can show what an import pulls in.
A meta-path finder makes any import of torch or triton raise, so a stray
import anywhere on the dispatcher's path fails the run instead of passing
silently on a machine that has torch installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLOCKER = textwrap.dedent("""
    import sys

    class _NoTorch:
        def find_spec(self, fullname, path=None, target=None):
            if fullname.partition(".")[0] in ("torch", "triton"):
                raise ImportError(f"torch-free test: import of {fullname} blocked")
            return None

    sys.meta_path.insert(0, _NoTorch())
""")

DISPATCH_SCRIPT = BLOCKER + textwrap.dedent("""
    import json

    import rapid_llm
    import rapid_llm.kernels
    import rapid_llm.kernels.dispatcher as dispatcher

    table = dispatcher.build_tables()
    target_modules = sorted({row.target.partition(":")[0] for row in table.rows_by_name.values()})
    queries = {
        "norm.rms_norm": ({"num_tokens": 16, "hidden": 4096}, {"x:rows"}),
        "elementwise.scale": ({"num_elements": 4096}, {"x:contiguous"}),
    }
    # Fetching the names imports their (lazily exported) modules; calling them must import nothing.
    dispatch, NoEligibleKernel = dispatcher.dispatch, dispatcher.NoEligibleKernel
    modules_before_dispatch = set(sys.modules)
    results = {}
    for op, (shape, layout) in queries.items():
        common = dict(dtype="bf16", shape=shape, layout=layout, libs={"triton": "3.1.0"}, table=table)
        default = dispatch(op, device="cpu+triton-interpreter", **common)
        native = next(row.name for row in table.rows(op) if row.backend == "native")
        forced = dispatch(op, device="cpu+triton-interpreter", force=native, **common)
        try:
            dispatch(op, device="cpu", force=native, **common)
            missing = None
        except NoEligibleKernel as error:
            missing = str(error)
        results[op] = {
            "rows": [row.name for row in table.rows(op)],
            "reference": table.reference(op).name,
            "default": default.row.name,
            "native": native,
            "forced": forced.row.name,
            "text": default.explain() + "\\n" + forced.explain(verbose=True),
            "dict": json.dumps(default.to_dict()),
            "missing": missing,
        }
    imported_by_dispatch = sorted(set(sys.modules) - modules_before_dispatch)
    print(json.dumps({
        "results": results,
        "imported_by_dispatch": imported_by_dispatch,
        "target_modules_loaded": [m for m in target_modules if m in sys.modules],
        "heavy": sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "triton")),
    }))
""")

METADATA_SCRIPT = textwrap.dedent("""
    import json
    import sys

    at_startup = "importlib.metadata" in sys.modules
    import rapid_llm.kernels
    print(json.dumps({"at_startup": at_startup, "after": "importlib.metadata" in sys.modules}))
""")


def run_python(script: str) -> dict:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAPID_LLM_") and key != "TRITON_INTERPRET"
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=environ, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"subprocess failed:\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def torch_free_run() -> dict:
    return run_python(DISPATCH_SCRIPT)


def test_dispatcher_imports_builds_and_dispatches_without_torch(torch_free_run):
    """Catches a torch or triton import anywhere on the path package -> dispatcher -> build_tables ->
    dispatch -> explain (the run itself fails on such an import), e.g. a family __init__ importing its
    kernel module, or a target imported at table build."""
    assert torch_free_run["heavy"] == []
    assert torch_free_run["target_modules_loaded"] == [], "targets must be imported lazily, never at build"
    assert set(torch_free_run["results"]) == {"norm.rms_norm", "elementwise.scale"}


def test_dispatch_imports_nothing(torch_free_run):
    """Catches dispatch()/explain()/to_dict() importing modules (DESIGN §3: dispatch imports nothing)."""
    assert torch_free_run["imported_by_dispatch"] == []


@pytest.mark.parametrize("op", ["norm.rms_norm", "elementwise.scale"])
def test_torch_free_dispatch_gives_real_answers(torch_free_run, op):
    """Catches the torch-free path only 'working' by returning nothing useful: each op selects a row
    of its own, force= reaches the native row, its explanation renders, and the native row misses on
    a plain cpu (no interpreter opt-in) with the reason in the error."""
    result = torch_free_run["results"][op]
    assert result["default"] in result["rows"]
    assert result["forced"] == result["native"]
    assert op in result["text"] and "✓" in result["text"]
    assert json.loads(result["dict"])["selected"] == result["default"]
    assert result["missing"] is not None and result["native"] in result["missing"]
    assert "device" in result["missing"]


def test_importing_kernels_does_not_import_importlib_metadata():
    """Catches version probing (importlib.metadata, slow) moving onto the import path of
    rapid_llm.kernels; it belongs to probe_environment() only."""
    result = run_python(METADATA_SCRIPT)
    if result["at_startup"]:
        pytest.skip(
            "this interpreter imports importlib.metadata at startup (a site .pth), "
            "so what rapid_llm.kernels imports cannot be observed"
        )
    assert result["after"] is False
