"""The CUDA extension rows (aot/scale, jit/scale): probes, lazy loading, input checks, the JIT cache.

Parity of both rows against torch/scale comes from test_parity.py over
SCALE_CASES (the rows are skipped there with their explain() reason where
they cannot run). This module covers what parity cannot:

  - on a machine without the build, the aot probe says "not built" and
    dispatch moves past the row with that reason in explain();
  - the jit probe names what is missing (the opt-in variable, a CUDA device,
    the toolkit) and never compiles;
  - importing the package, building the table and dispatching never load
    rapid_llm._C (a subprocess with an import blocker);
  - on a GPU: bad input through the wrappers is an OpInputError, bad input
    through torch.ops directly is the C++ side's TORCH_CHECK RuntimeError,
    unaligned views take the scalar path and stay bitwise equal to torch,
    and a second process reuses the JIT cache instead of recompiling.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
import torch

from rapid_llm.kernels import aot, jit
from rapid_llm.kernels.dispatcher import GoldenRecord, NoEligibleKernel, OpTable, build_tables, dispatch
from rapid_llm.kernels.ops.checks import OpInputError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = build_tables()
OP = "elementwise.scale"
EXTENSION_BUILT = importlib.util.find_spec("rapid_llm._C") is not None
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def _verified(row, priority):
    """The row as if its parity were recorded: eligible by default, so dispatch would pick it."""
    golden = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/scale", evidence="test")
    return attrs.evolve(row, golden=golden, priority=priority)


# ---------------------------------------------------------------------------
# aot: the probe and dispatch on a machine without rapid_llm._C
# ---------------------------------------------------------------------------


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
def test_aot_probe_says_not_built_and_how_to_build():
    """Catches a probe that reports a bare 'missing' (or crashes) when rapid_llm._C was never built."""
    ok, reason = aot.available()
    assert not ok
    assert "rapid_llm._C is not built" in reason and "RAPID_LLM_BUILD_EXT=1" in reason


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
def test_unbuilt_aot_row_is_passed_over_with_the_probe_reason_in_explain():
    """Catches an aot row that crashes load() or vanishes silently: ranked first (as if verified and
    measured) on a GPU query, it must fail to load with the probe's reason and hand over to the reference."""
    aot_row, reference = TABLE.rows_by_name["aot/scale"], TABLE.reference(OP)
    table = OpTable.from_rows([reference, _verified(aot_row, priority=50)])
    selection = dispatch(OP, device="cuda:sm90", dtype="bf16", shape={"num_elements": 4096},
                         layout={"x:contiguous"}, table=table)
    assert selection.row.name == "aot/scale"
    loaded = selection.load()
    assert loaded.row.name == reference.name
    text = loaded.selection.explain()
    assert "aot/scale" in text and "rapid_llm._C is not built" in text, text


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
def test_forcing_the_unbuilt_aot_row_is_an_error_naming_the_reason():
    """Catches a forced aot row silently falling back (DESIGN §3: a forced row that cannot run is an error)."""
    selection = dispatch(OP, device="cuda:sm90", dtype="fp16", shape={"num_elements": 4096},
                         layout={"x:contiguous"}, table=TABLE, force="aot/scale")
    with pytest.raises(NoEligibleKernel) as info:
        selection.load()
    assert "rapid_llm._C is not built" in str(info.value)


# ---------------------------------------------------------------------------
# jit: the probe's reasons (it never compiles)
# ---------------------------------------------------------------------------


def test_jit_probe_names_the_opt_in_variable_when_unset(monkeypatch):
    """Catches a JIT row that builds (a minute of nvcc) in a process that did not ask for it."""
    monkeypatch.delenv("RAPID_LLM_JIT", raising=False)
    ok, reason = jit.available()
    assert not ok and "RAPID_LLM_JIT=1" in reason


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA device: the no-CUDA reason cannot be observed")
def test_jit_probe_without_cuda_says_so(monkeypatch):
    """Catches the probe passing (and a later compile failing obscurely) on a machine without a GPU."""
    monkeypatch.setenv("RAPID_LLM_JIT", "1")
    ok, reason = jit.available()
    assert not ok and "no CUDA device" in reason


def test_jit_probe_without_a_toolkit_says_so(monkeypatch):
    """Catches a probe that trusts CUDA_HOME blindly: no nvcc there must be a reason, not a build error."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("RAPID_LLM_JIT", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    ok, reason = jit.available()
    assert not ok and "no CUDA toolkit" in reason
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/nonexistent/cuda")
    ok, reason = jit.available()
    assert not ok and "nvcc not found" in reason


def test_jit_and_aot_build_the_same_sources():
    """Catches the JIT build drifting from setup.py's source rule (a kernel that only one build has)."""
    with open(os.path.join(REPO_ROOT, "setup.py")) as handle:
        setup_text = handle.read()
    assert 'SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")' in setup_text and 'os.walk(CSRC)' in setup_text
    assert jit.SOURCE_SUFFIXES == (".cu", ".cc", ".cpp") and jit.source_root() == Path(REPO_ROOT, "csrc")
    names = {os.path.relpath(path, REPO_ROOT) for path in jit.sources()}
    assert {"csrc/common_extension.cc", "csrc/elementwise/scale.cu"} <= names


# ---------------------------------------------------------------------------
# Nothing loads the extension at import, table build or dispatch
# ---------------------------------------------------------------------------

NO_EXTENSION_SCRIPT = textwrap.dedent("""
    import json
    import sys

    class _NoExtension:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "rapid_llm._C":
                raise ImportError("test: import of rapid_llm._C blocked")
            return None

    sys.meta_path.insert(0, _NoExtension())

    import rapid_llm
    import rapid_llm.kernels
    import rapid_llm.kernels.dispatcher as dispatcher
    import rapid_llm.kernels.aot
    import rapid_llm.kernels.jit
    import rapid_llm.kernels.ops.elementwise.scale_aot
    import rapid_llm.kernels.ops.elementwise.scale_jit

    table = dispatcher.build_tables()
    selection = dispatcher.dispatch("elementwise.scale", device="cuda:sm90", dtype="bf16",
                                    shape={"num_elements": 4096}, layout={"x:contiguous"},
                                    libs={"triton": "3.1.0"}, table=table, force="aot/scale")
    selection.explain()
    import torch
    print(json.dumps({
        "extension_loaded": "rapid_llm._C" in sys.modules,
        "jit_library_loaded": any("rapid_llm_jit" in path for path in torch.ops.loaded_libraries),
    }))
""")


def test_import_table_and_dispatch_never_load_the_extension():
    """Catches rapid_llm._C imported at package top level, by a family's rows, by a wrapper module at
    import, or by dispatch/explain (DESIGN §7); and a JIT build triggered by importing its wrapper."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("RAPID_LLM_")}
    environ["RAPID_LLM_JIT"] = "1"  # even opted in, importing must not build
    result = subprocess.run([sys.executable, "-c", NO_EXTENSION_SCRIPT], env=environ, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"subprocess failed:\n{result.stderr}"
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"extension_loaded": False, "jit_library_loaded": False}, outcome


# ---------------------------------------------------------------------------
# GPU: input checks on both sides, the unaligned path, the JIT cache
# ---------------------------------------------------------------------------


def _wrapper_or_skip(row_name):
    from rapid_llm.kernels.dispatcher import resolve_target

    row = TABLE.rows_by_name[row_name]
    fn, reason = resolve_target(row.target, row.available)
    if fn is None:
        pytest.skip(f"{row_name} does not load here: {reason}")
    return fn


def _torch_op_or_skip(row_name):
    _wrapper_or_skip(row_name)
    if row_name == "aot/scale":
        return torch.ops.rapid_llm.scale
    return jit.op("scale")


EXTENSION_ROWS = ["aot/scale", "jit/scale"]


def _assert_direct_calls_raise(row_name, op_name, cases_source):
    """Run `cases_source` (defines `cases`: [(args, words)]) in a child process that calls the row's
    torch op with each args and expects a RuntimeError containing words. A child, because a crash in
    a launcher's error path (as seen on the H200: SIGSEGV while formatting a message) would otherwise
    take the whole test run down; here it fails this test with the last case reached."""
    program = textwrap.dedent("""
        import torch
        from rapid_llm.kernels import aot, jit
        assert (aot.available() if {aot!r} else jit.available())[0]
        operator = torch.ops.rapid_llm.{op} if {aot!r} else jit.op({op!r})
    """).format(aot=row_name.startswith("aot/"), op=op_name) + textwrap.dedent(cases_source) + textwrap.dedent("""
        for index, (args, words) in enumerate(cases):
            print("case", index, flush=True)
            try:
                operator(*args)
            except RuntimeError as error:
                assert words in str(error), f"case {index}: expected {words!r} in: {error}"
            else:
                raise AssertionError(f"case {index}: no error for bad input")
        print("all cases raised", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                            env=os.environ.copy())
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0 and "all cases raised" in result.stdout, (
        f"{row_name}: direct torch.ops calls with bad input (exit status {result.returncode}):\n{output}")


@needs_cuda
@pytest.mark.parametrize("row_name", EXTENSION_ROWS)
class TestExtensionOnGpu:
    def test_wrapper_rejects_bad_input_with_op_input_error(self, row_name):
        """Catches a wrapper that passes CPU, strided or integer tensors on to the kernel."""
        fn = _wrapper_or_skip(row_name)
        for bad, words in ((torch.ones(8), "CUDA tensor"),
                           (torch.ones(8, 6, device="cuda").t(), "contiguous"),
                           (torch.ones(8, dtype=torch.int32, device="cuda"), "float32")):
            with pytest.raises(OpInputError) as info:
                fn(bad, 2.0)
            assert info.value.argument == "x" and words in str(info.value), str(info.value)

    def test_direct_op_calls_fail_the_torch_checks(self, row_name):
        """Catches a launcher without TORCH_CHECK validation: torch.ops callers get a clear RuntimeError
        instead of an illegal memory access (CPU memory, wrong shape, dtype, layout, aliasing), and a
        launcher whose error path crashes the process (run in a child process: a crash fails this test)."""
        _torch_op_or_skip(row_name)
        _assert_direct_calls_raise(row_name, "scale", """
            x = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
            cases = [
                ((torch.empty(64, 32, dtype=torch.bfloat16), x.cpu(), 2.0), "must be a CUDA tensor"),
                ((torch.empty(64, 32, dtype=torch.bfloat16), x, 2.0), "must be a CUDA tensor"),
                ((torch.empty(64, 31, device="cuda", dtype=torch.bfloat16), x, 2.0), "must equal input shape"),
                ((torch.empty(64, 32, device="cuda", dtype=torch.float16), x, 2.0), "must equal input dtype"),
                ((torch.empty(64, 32, device="cuda", dtype=torch.float64), x.double(), 2.0),
                 "float32, float16 or bfloat16"),
                ((torch.empty(32, 64, device="cuda", dtype=torch.bfloat16).t(), x, 2.0), "out must be contiguous"),
                ((torch.empty(64, 32, device="cuda", dtype=torch.bfloat16), x.t().contiguous().t(), 2.0),
                 "input must be contiguous"),
                ((x, x, 2.0), "single memory location"),
            ]
        """)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
    def test_unaligned_views_match_torch_bitwise(self, row_name, dtype):
        """Catches the 16-byte vector path taken on pointers that are not 16-byte aligned (a view at an
        odd storage offset: a misaligned-address fault or shifted elements) and a tail dropped."""
        operator = _torch_op_or_skip(row_name)
        base = torch.randn(4099, device="cuda", dtype=torch.float32).to(dtype)
        source = base[1:]  # contiguous, 2 or 4 bytes past a 16-byte boundary
        out_base = torch.full((4101,), float("nan"), device="cuda", dtype=dtype)
        out = out_base[3:]  # 4098 elements, 6 or 12 bytes past a 16-byte boundary
        operator(out, source, 0.7071067811865476)
        torch.cuda.synchronize()
        assert torch.equal(out, torch.mul(source, 0.7071067811865476))
        assert torch.isnan(out_base[:3]).all(), "wrote before the output view"


@needs_cuda
def test_second_process_reuses_the_jit_cache():
    """Catches a JIT build that recompiles in every process (a minute per engine start): after this
    process built it, a fresh process must load from the cache, log that, and be quick."""
    _torch_op_or_skip("jit/scale")  # builds here if needed (or skips with the probe's reason)
    script = textwrap.dedent("""
        import logging, time
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        started = time.perf_counter()
        from rapid_llm.kernels import jit
        jit.load_library()
        print("LOAD_SECONDS", time.perf_counter() - started)
    """)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "loading the CUDA extension from the JIT cache" in output, output
    assert "compiling the CUDA extension" not in output, output
    load_seconds = float(output.split("LOAD_SECONDS")[1].split()[0])
    assert load_seconds < 20.0, f"second load took {load_seconds:.1f} s (process {wall:.1f} s): a recompile?"


# ---------------------------------------------------------------------------
# kvcache.update_kv_buffer on the extension path (aot/ and jit/update_kv_buffer)
# ---------------------------------------------------------------------------

KV_ROWS = ["aot/update_kv_buffer", "jit/update_kv_buffer"]


def _kv_op_or_skip(row_name):
    _wrapper_or_skip(row_name)
    return torch.ops.rapid_llm.update_kv_buffer if row_name.startswith("aot/") else jit.op("update_kv_buffer")


@needs_cuda
@pytest.mark.parametrize("row_name", KV_ROWS)
class TestKvWriteExtensionOnGpu:
    def test_direct_op_calls_fail_the_torch_checks(self, row_name):
        """Catches a launcher that scatters with unchecked shapes, dtypes or layouts (a wild write), and one
        whose error path crashes the process (run in a child process: a crash fails this test)."""
        _kv_op_or_skip(row_name)
        _assert_direct_calls_raise(row_name, "update_kv_buffer", """
            kv = torch.randn(4, 8, 64, device="cuda", dtype=torch.bfloat16)
            loc = torch.arange(4, device="cuda", dtype=torch.int32)
            buffer = torch.zeros(16, 8, 64, device="cuda", dtype=torch.bfloat16)
            cases = [
                ((kv.cpu(), loc.cpu(), buffer.cpu()), "must be a CUDA tensor"),
                ((kv, loc, buffer.half()), "must equal kv dtype"),
                ((kv, loc, buffer[:, :4]), "buffer must be [rows, 8, 64]"),
                ((kv, loc.float(), buffer), "int32 or int64"),
                ((kv, loc[:3], buffer), "loc must be [4]"),
                ((kv.transpose(1, 2).contiguous().transpose(1, 2), loc, buffer), "heads of kv must be contiguous"),
            ]
        """)

    def test_unaligned_rows_and_out_of_range_ids(self, row_name):
        """Catches the 16-byte path taken on rows that are not 16-byte aligned (odd head_dim 7: 14-byte
        rows), and an id past the buffer written instead of skipped."""
        fn = _wrapper_or_skip(row_name)
        kv = torch.randn(3, 2, 7, device="cuda", dtype=torch.bfloat16)
        buffer = torch.randn(10, 2, 7, device="cuda", dtype=torch.bfloat16)
        before = buffer.clone()
        fn(kv, torch.tensor([4, 10, 1], device="cuda", dtype=torch.int64), buffer)
        torch.cuda.synchronize()
        assert torch.equal(buffer[4], kv[0]) and torch.equal(buffer[1], kv[2])
        untouched = [i for i in range(10) if i not in (1, 4)]
        assert torch.equal(buffer[untouched], before[untouched]), "a row not named in loc was written"
