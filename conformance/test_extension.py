"""The CUDA extension rows (aot/ and jit/ scale and update_kv_buffer): probes, lazy loading, the one op
list and its schemas, the JIT cache's key and trust, and the launchers on a GPU.

Parity of the rows against their torch references comes from test_parity.py
(the rows are skipped there with their explain() reason where they cannot
run). This module covers what parity cannot:

  - on a machine without the build, the aot probe says "not built" and
    dispatch moves past the row with that reason in explain();
  - the jit probe names what is missing (the opt-in variable, a CUDA device,
    the toolkit, a trusted cache directory) and never compiles;
  - importing the package, building the table and dispatching never load
    rapid_llm._C (a subprocess with an import blocker);
  - the extension is declared once: csrc/common_extension.cc defines exactly
    aot.extension_ops(), every schema lists its `Tensor!` outputs first, each
    launcher's C++ declaration and definition take the schema's arguments in
    its order, the *_cuda.py wrappers call the ops in that order, and the
    probes refuse a loaded library whose schema is not outputs-first (CPU,
    by parsing the sources: no compiler needed);
  - the JIT cache: its key is a hash of the sources' content, the flags and
    the versions (not mtimes), a directory not owned by us or writable by
    others is refused before anything is built into or loaded from it, and a
    changed source never reuses the old library (CPU: pure functions and a
    stubbed torch.utils.cpp_extension.load);
  - on a GPU: bad input through the public path never reaches the unchecked
    row targets, bad input through torch.ops directly is the C++ side's
    TORCH_CHECK RuntimeError, unaligned views take the scalar path and stay
    bitwise equal to torch, strided loc/kv/buffer are honoured, and a second
    process reuses the JIT cache instead of recompiling.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import os
import re
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
import torch

from rapid_llm.kernels import aot, jit
from rapid_llm.kernels.dispatcher import GoldenRecord, NoEligibleKernel, OpTable, build_tables, dispatch, resolve_target
from rapid_llm.kernels.ops.checks import OpInputError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = Path(REPO_ROOT, "csrc")
TABLE = build_tables()
OP = "elementwise.scale"
EXTENSION_BUILT = importlib.util.find_spec("rapid_llm._C") is not None
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
#: The probes' own messages (not built, no CUDA, no toolkit, untrusted cache) are what these tests read; in the
#: absence cell that hides the extension (RAPID_LLM_HIDE_LIBS=cuda_extension) both probes report that instead,
#: which conformance/test_absence_cell.py checks.
EXTENSION_HIDDEN = bool(aot.extension_hidden())
extension_visible = pytest.mark.skipif(
    EXTENSION_HIDDEN,
    reason="the CUDA extension is hidden in this absence cell "
    "(RAPID_LLM_HIDE_LIBS=cuda_extension): its probes report that",
)


def _verified(row, priority):
    """The row as if its parity were recorded: eligible by default, so dispatch would pick it."""
    golden = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/scale", evidence="test")
    return attrs.evolve(row, golden=golden, priority=priority)


# ---------------------------------------------------------------------------
# aot: the probe and dispatch on a machine without rapid_llm._C
# ---------------------------------------------------------------------------


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
@extension_visible
def test_aot_probe_says_not_built_and_how_to_build():
    """Catches a probe that reports a bare 'missing' (or crashes) when rapid_llm._C was never built."""
    ok, reason = aot.available()
    assert not ok
    assert "rapid_llm._C is not built" in reason and "RAPID_LLM_BUILD_EXT=1" in reason


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
@extension_visible
def test_unbuilt_aot_row_is_passed_over_with_the_probe_reason_in_explain():
    """Catches an aot row that crashes load() or vanishes silently: ranked first (as if verified and
    measured) on a GPU query, it must fail to load with the probe's reason and hand over to the reference."""
    aot_row, reference = TABLE.rows_by_name["aot/scale"], TABLE.reference(OP)
    table = OpTable.from_rows([reference, _verified(aot_row, priority=50)])
    selection = dispatch(
        OP, device="cuda:sm90", dtype="bf16", shape={"num_elements": 4096}, layout={"x:contiguous"}, table=table
    )
    assert selection.row.name == "aot/scale"
    loaded = selection.load()
    assert loaded.row.name == reference.name
    text = loaded.selection.explain()
    assert "aot/scale" in text and "rapid_llm._C is not built" in text, text


@pytest.mark.skipif(EXTENSION_BUILT, reason="rapid_llm._C is built here: the negative path needs a machine without it")
@extension_visible
def test_forcing_the_unbuilt_aot_row_is_an_error_naming_the_reason():
    """Catches a forced aot row silently falling back (DESIGN §3: a forced row that cannot run is an error)."""
    selection = dispatch(
        OP,
        device="cuda:sm90",
        dtype="fp16",
        shape={"num_elements": 4096},
        layout={"x:contiguous"},
        table=TABLE,
        force="aot/scale",
    )
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
@extension_visible
def test_jit_probe_without_cuda_says_so(monkeypatch):
    """Catches the probe passing (and a later compile failing obscurely) on a machine without a GPU."""
    monkeypatch.setenv("RAPID_LLM_JIT", "1")
    ok, reason = jit.available()
    assert not ok and "no CUDA device" in reason


@extension_visible
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
    assert 'SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")' in setup_text and "os.walk(CSRC)" in setup_text
    assert jit.SOURCE_SUFFIXES == (".cu", ".cc", ".cpp") and jit.source_root() == CSRC
    names = {os.path.relpath(path, REPO_ROOT) for path in jit.sources()}
    assert {"csrc/common_extension.cc", "csrc/elementwise/scale.cu", "csrc/kvcache/update_kv_buffer.cu"} <= names
    # csrc/host/ is rapid_llm._host, its own module: compiled into _C it would define PyInit__host there too
    assert not any(name.startswith("csrc/host/") for name in names) and "HOST = os.path.join(CSRC" in setup_text


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
    import rapid_llm.kernels.ops.elementwise.scale_cuda
    import rapid_llm.kernels.ops.kvcache.update_kv_buffer_cuda

    table = dispatcher.build_tables()
    selection = dispatcher.dispatch("elementwise.scale", device="cuda:sm90", dtype="bf16",
                                    shape={"num_elements": 4096}, layout={"x:contiguous"},
                                    libs={"triton": "3.1.0"}, table=table, force="aot/scale")
    selection.explain()
    rapid_llm.kernels.aot.extension_ops()
    import torch
    print(json.dumps({
        "extension_loaded": "rapid_llm._C" in sys.modules,
        "jit_library_loaded": any("rapid_llm_jit" in path for path in torch.ops.loaded_libraries),
    }))
""")


def test_import_table_and_dispatch_never_load_the_extension():
    """Catches rapid_llm._C imported at package top level, by a family's rows, by a *_cuda.py module at
    import, by extension_ops() or by dispatch/explain (DESIGN §7); and a JIT build triggered by importing
    its wrapper."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("RAPID_LLM_")}
    environ["RAPID_LLM_JIT"] = "1"  # even opted in, importing must not build
    result = subprocess.run(
        [sys.executable, "-c", NO_EXTENSION_SCRIPT],
        env=environ,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"subprocess failed:\n{result.stderr}"
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"extension_loaded": False, "jit_library_loaded": False}, outcome


# ---------------------------------------------------------------------------
# The extension declared once: one op list, outputs-first schemas, launchers in schema order
# ---------------------------------------------------------------------------

_DEF = re.compile(r'm\.def\(\s*"([^"]*)"\s*\)')
_CUDA_IMPL = re.compile(r'm\.impl\(\s*"(\w+)"\s*,\s*c10::kCUDA\s*,\s*&rapid_llm::(\w+)\s*\)')


def _registration_text() -> str:
    return (CSRC / "common_extension.cc").read_text()


def _schemas() -> dict[str, object]:
    """{op name: torch FunctionSchema} of every m.def in csrc/common_extension.cc (one per name)."""
    texts = _DEF.findall(_registration_text())
    assert texts, 'no m.def("...") found in csrc/common_extension.cc'
    schemas = [torch._C.parse_schema(text) for text in texts]
    names = [schema.name for schema in schemas]
    assert len(names) == len(set(names)), f"an op is defined twice: {names}"
    return dict(zip(names, schemas))


def test_common_extension_defines_exactly_the_extension_ops():
    """Catches the op list declared twice and drifting: an aot/ or jit/ row whose op the C++ side never
    registers (the probe would reject every build), or a registered op no row calls (dead code).
    aot.extension_ops() (derived from the rows) is the one list; common_extension.cc must match it."""
    assert set(_schemas()) == set(aot.extension_ops())
    assert len(aot.extension_ops()) == len(set(aot.extension_ops()))


def test_every_extension_op_has_a_cuda_kernel_bound_to_its_launcher():
    """Catches an m.def without its CUDA m.impl (the probe reports 'without a CUDA kernel' on every
    build) or an impl bound to another op's launcher."""
    bound = dict(_CUDA_IMPL.findall(_registration_text()))
    assert bound == {name: name for name in aot.extension_ops()}, bound


def test_every_schema_lists_its_outputs_first():
    """Catches a schema with an input before a `Tensor!` output (the old update_kv_buffer(Tensor kv,
    Tensor loc, Tensor! buffer)): one argument order across schemas, outputs first, nothing returned."""
    for name, schema in _schemas().items():
        writes = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert writes, f"{schema}: no Tensor! output (these ops write in place and return nothing)"
        assert [a.name for a in schema.arguments[: len(writes)]] == writes, f"{schema}: outputs not first"
        assert aot.outputs_first(schema), schema
        assert list(schema.returns) == [], f"{schema}: returns something (the caller owns the outputs)"
    assert _schema_parameters(_schemas()["update_kv_buffer"]) == [
        ("buffer", "Tensor!"),
        ("kv", "Tensor"),
        ("loc", "Tensor"),
    ]


# C++ parameter types of the launchers, by the schema type they must bind to.
_CPP_TYPES = {
    r"at::Tensor\s*&": "Tensor!",
    r"const\s+at::Tensor\s*&": "Tensor",
    r"double": "float",
    r"int64_t": "int",
    r"bool": "bool",
}


def _cpp_parameters(text: str) -> list[tuple[str, str]]:
    """[(name, schema type)] of a C++ parameter list such as `at::Tensor& out, const at::Tensor& x, double f`."""
    parameters = []
    for parameter in (part.strip() for part in text.split(",") if part.strip()):
        for pattern, schema_type in _CPP_TYPES.items():
            match = re.fullmatch(pattern + r"\s*(\w+)", parameter)
            if match:
                parameters.append((match.group(1), schema_type))
                break
        else:
            raise AssertionError(f"launcher parameter {parameter!r} has a type this test does not map to a schema")
    return parameters


def _schema_parameters(schema) -> list[tuple[str, str]]:
    def kind(argument):
        written = argument.alias_info is not None and argument.alias_info.is_write
        return f"{argument.type}!" if written else str(argument.type)

    return [(argument.name, kind(argument)) for argument in schema.arguments]


def test_launchers_take_the_schema_arguments_in_the_schema_order():
    """Catches a launcher whose declaration (rapid_llm_ext.h) or definition (.cu) takes the arguments in
    another order than its schema: torch infers every Tensor parameter as `Tensor`, so
    `void update_kv_buffer(const at::Tensor& kv, const at::Tensor& loc, at::Tensor& buffer)` under the
    schema (Tensor! buffer, Tensor kv, Tensor loc) compiles, registers, and swaps the tensors."""
    schemas = _schemas()
    header = (CSRC / "include" / "rapid_llm_ext.h").read_text()
    declared = {
        name: _cpp_parameters(params)
        for name, params in re.findall(r"^void (\w+)\(([^)]*)\);", header, flags=re.MULTILINE)
    }
    defined = {}
    for path in CSRC.rglob("*.cu"):
        for name, params in re.findall(r"^void (\w+)\(([^)]*)\)\s*\{", path.read_text(), flags=re.MULTILINE):
            if name in schemas:
                assert name not in defined, f"{name} defined twice ({path})"
                defined[name] = _cpp_parameters(params)
    for name, schema in schemas.items():
        expected = _schema_parameters(schema)
        assert declared.get(name) == expected, f"rapid_llm_ext.h declares {name}{declared.get(name)}, schema {schema}"
        assert defined.get(name) == expected, f"the .cu defines {name}{defined.get(name)}, schema {schema}"


def test_shared_launcher_helpers_are_defined_once_in_the_header():
    """Catches a helper (dims_to_string, packed_rows, ...) copied back into a .cu: two definitions that can
    drift (one fixed, the other still crashing or mis-judging a layout)."""
    helpers = ("dims_to_string", "packed_rows", "is_vector_aligned", "is_served_float")
    header = (CSRC / "include" / "rapid_llm_ext.h").read_text()
    for helper in helpers:
        assert re.search(rf"^inline \w[\w:<>]* {helper}\(", header, flags=re.MULTILINE), helper
        for path in [*CSRC.rglob("*.cu"), *CSRC.rglob("*.cc"), *CSRC.rglob("*.cpp")]:
            assert not re.search(rf"\b{helper}\([^;{{}}()]*\)\s*\{{", path.read_text()), (
                f"{helper} defined again in {path}"
            )


class _RecordingOp:
    def __init__(self, log, namespace, name):
        self.log, self.namespace, self.name = log, namespace, name

    def __call__(self, *args):
        self.log.append((self.namespace, self.name, args))


def _expected_calls(name):
    """(wrapper arguments, check(recorded args, result)) of the *_cuda.py wrapper of op `name`, on CPU tensors."""
    if name == "scale":
        x = torch.randn(4, 8)

        def check(args, result):
            out, source, factor = args
            assert source is x and factor == 0.5 and type(factor) is float
            assert out is result and out is not x and out.shape == x.shape and out.dtype == x.dtype

        return (x, 0.5), check
    if name == "update_kv_buffer":
        kv, loc, buffer = torch.randn(3, 4, 8), torch.arange(3), torch.zeros(10, 4, 8)

        def check(args, result):
            assert args[0] is buffer and args[1] is kv and args[2] is loc, "not (buffer, kv, loc)"
            assert result is buffer

        return (kv, loc, buffer), check
    if name == "decode":
        q = torch.randn(2, 8, 128).half()
        kv_buffer = torch.zeros(32, 4, 128, dtype=torch.float8_e4m3fn)
        page_table, seq_lens = torch.arange(4, dtype=torch.int32).view(2, 2), torch.tensor([20, 9], dtype=torch.int32)
        k_scale, v_scale = torch.ones(1), torch.full((1,), 0.5)

        def check(args, result):
            out, partial, partial_lse, *inputs, page_size, sm_scale, splits = args
            assert all(a is b for a, b in zip(inputs, (q, kv_buffer, page_table, seq_lens, k_scale, v_scale))), (
                "not (out, partial, partial_lse, q, kv_buffer, page_table, seq_lens, k_scale, v_scale, ...)"
            )
            assert result is out and out.shape == q.shape and out.dtype == q.dtype
            assert partial.dtype == partial_lse.dtype == torch.float32
            assert (page_size, sm_scale, splits) == (8, 0.125, 1) and type(sm_scale) is float

        return (q, kv_buffer, page_table, seq_lens, 8, 0.125, k_scale, v_scale), check
    if name == "w4a16_mm":
        x = torch.randn(3, 64).bfloat16()
        qweight, qzeros = torch.zeros(8, 16, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32)
        scales, bias = torch.ones(1, 16).half(), torch.randn(16).bfloat16()

        def check(args, result):
            out, rows, *inputs, group_size, v1_zeros = args
            assert rows.data_ptr() == x.data_ptr() and rows.shape == x.shape, "x not second"
            assert all(a is b for a, b in zip(inputs, (qweight, scales, qzeros, bias))), (
                "not (out, x, qweight, scales, qzeros, bias, group_size, v1_zeros)"
            )
            assert out.data_ptr() == result.data_ptr() and result.shape == (3, 16) and result.dtype == x.dtype
            assert group_size == 64 and v1_zeros is True  # packing "gptq": the stored zero is zero - 1

        return (x, qweight, scales, qzeros, 64, "gptq", bias), check
    if name == "w8a16_mm":
        x, w_q = torch.randn(2, 32).half(), torch.zeros(24, 32, dtype=torch.int8)
        w_scale = torch.ones(24, 1)

        def check(args, result):
            out, rows, weight, scale, bias = args
            assert rows.data_ptr() == x.data_ptr() and rows.shape == x.shape, "x not second"
            assert weight is w_q and scale is w_scale, "not (out, x, w_q, w_scale, bias)"
            assert bias.numel() == 0 and bias.dtype == x.dtype  # no bias: an empty tensor
            assert out.data_ptr() == result.data_ptr() and result.shape == (2, 24) and result.dtype == x.dtype

        return (x, w_q, w_scale), check
    raise AssertionError(f"op {name!r}: add its expected call (outputs first) to this test")


def test_cuda_wrappers_call_the_ops_in_schema_order(monkeypatch):
    """Catches an aot/ or jit/ row target passing its tensors in the op's public order instead of the
    schema's outputs-first order (the kernel would write kv), or the two builds' wrappers differing in
    anything but the namespace. Every extension op's rows are covered (a new op fails until added)."""
    log = []
    monkeypatch.setattr(aot, "op", lambda name: _RecordingOp(log, "aot", name))
    monkeypatch.setattr(jit, "op", lambda name: _RecordingOp(log, "jit", name))
    rows = [row for row in TABLE.rows_by_name.values() if row.backend in aot.EXTENSION_BACKENDS]
    assert {row.op.partition(".")[2] for row in rows} == set(aot.extension_ops())
    for row in rows:
        name = row.op.partition(".")[2]
        module, _, attribute = row.target.partition(":")
        target = getattr(importlib.import_module(module), attribute)
        arguments, check = _expected_calls(name)
        log.clear()
        result = target(*arguments)
        assert [(namespace, op) for namespace, op, _ in log] == [(row.backend, name)], (row.name, log)
        check(log[0][2], result)


_library_counter = itertools.count()


def _fake_extension(schema_text):
    """A torch library in a fresh namespace defining one op `op` with a CUDA kernel (no compiler needed)."""
    namespace = f"rapid_llm_test_probe{os.getpid()}_{next(_library_counter)}"
    library = torch.library.Library(namespace, "DEF")
    library.define(schema_text)
    library.impl("op", lambda *args: None, "CUDA")
    return namespace, library


def test_probe_refuses_a_stale_library_whose_schema_is_not_outputs_first():
    """Catches a rapid_llm._C (or JIT library) built before the outputs-first order being accepted: the
    wrappers would pass (buffer, kv, loc) to update_kv_buffer(Tensor kv, Tensor loc, Tensor! buffer)."""
    stale_namespace, stale = _fake_extension("op(Tensor kv, Tensor loc, Tensor(a!) buffer) -> ()")
    ok, reason = aot.registered_ops(stale_namespace, ["op"], built_by="the test library")
    assert not ok and "outputs are not first" in reason and "rebuild" in reason, reason
    fresh_namespace, fresh = _fake_extension("op(Tensor(a!) buffer, Tensor kv, Tensor loc) -> ()")
    assert aot.registered_ops(fresh_namespace, ["op"], built_by="the test library") == (True, "")
    del stale, fresh


# ---------------------------------------------------------------------------
# JIT cache: the key (content, flags, versions; not mtimes)
# ---------------------------------------------------------------------------

ENVIRONMENT = {
    "rapid_llm": "0.1.0",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "cuda_toolkit": "13.0.88 at /cuda",
    "archs": "9.0",
    "python": "py312",
    "python_abi": "cpython-312",
}
FLAGS = {
    "cxx": ("-O3", "-DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit"),
    "nvcc": ("-O3", "-DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit"),
}


def _source_tree(root: Path) -> Path:
    files = {
        "common_extension.cc": "// registration\n",
        "include/rapid_llm_ext.h": "#pragma once\n",
        "elementwise/scale.cu": "// scale\n",
        "README.md": "docs\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_jit_cache_key_changes_with_any_source_or_header_byte(tmp_path):
    """Catches a cache keyed on versions only (or on mtimes): a changed kernel, header or new file would
    load the library of the old sources. Also: the key is a path component (no separators)."""
    root = _source_tree(tmp_path / "csrc")
    key = jit.build_key(root, FLAGS, ENVIRONMENT)
    assert re.fullmatch(r"[A-Za-z0-9._+-]+-[0-9a-f]{16}", key), key
    assert jit.build_key(root, FLAGS, ENVIRONMENT) == key
    for name in ("elementwise/scale.cu", "include/rapid_llm_ext.h", "common_extension.cc"):
        path = root / name
        original = path.read_bytes()
        path.write_bytes(original.replace(b"#", b"!") if b"#" in original else original + b" ")
        assert jit.build_key(root, FLAGS, ENVIRONMENT) != key, f"a change of {name} kept the key"
        path.write_bytes(original)
    assert jit.build_key(root, FLAGS, ENVIRONMENT) == key
    (root / "kvcache").mkdir()
    (root / "kvcache" / "update_kv_buffer.cu").write_text("// new op\n")
    assert jit.build_key(root, FLAGS, ENVIRONMENT) != key, "a new source kept the key"
    (root / "kvcache" / "update_kv_buffer.cu").unlink()
    (root / "elementwise" / "scale.cu").rename(root / "elementwise" / "scale2.cu")
    assert jit.build_key(root, FLAGS, ENVIRONMENT) != key, "a renamed source kept the key"


def test_jit_cache_key_ignores_modification_times_and_documentation(tmp_path):
    """Catches a key (or reuse decision) that reads mtimes: a checkout with older mtimes but other content
    loaded the stale library; the same content with new mtimes need not rebuild. README edits neither."""
    root = _source_tree(tmp_path / "csrc")
    key = jit.build_key(root, FLAGS, ENVIRONMENT)
    for path in root.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    assert jit.build_key(root, FLAGS, ENVIRONMENT) == key
    (root / "README.md").write_text("other docs\n")
    assert jit.build_key(root, FLAGS, ENVIRONMENT) == key


def test_jit_cache_key_changes_with_flags_and_every_version(tmp_path):
    """Catches a library reused across a rapid_llm upgrade, another torch/CUDA/toolkit/Python, other archs
    or other compile flags (e.g. another op namespace): each must select another directory."""
    root = _source_tree(tmp_path / "csrc")
    key = jit.build_key(root, FLAGS, ENVIRONMENT)
    for name in ENVIRONMENT:
        changed = dict(ENVIRONMENT, **{name: ENVIRONMENT[name] + "1"})
        assert jit.build_key(root, FLAGS, changed) != key, f"a change of {name} kept the key"
    for compiler in FLAGS:
        changed = dict(FLAGS, **{compiler: (*FLAGS[compiler], "-DNDEBUG")})
        assert jit.build_key(root, changed, ENVIRONMENT) != key, f"a change of the {compiler} flags kept the key"
    assert jit.build_key(root, dict(FLAGS, cxx=("-O3 -DX",)), ENVIRONMENT) != jit.build_key(
        root, dict(FLAGS, cxx=("-O3", "-DX")), ENVIRONMENT
    ), "flag boundaries are not part of the key"


def test_jit_cache_key_covers_every_compiled_file_and_the_real_environment(monkeypatch):
    """Catches key_files() missing a source or the header of the real csrc/ (a change there would reuse a
    stale library), and build_environment() missing a field the key is documented to cover."""
    import rapid_llm

    files = {path.relative_to(CSRC).as_posix() for path in jit.key_files(CSRC)}
    assert {os.path.relpath(path, CSRC) for path in jit.sources()} <= files
    assert "include/rapid_llm_ext.h" in files and "README.md" not in files
    flags = jit.compile_flags()
    assert all(f"-DRAPID_LLM_OP_NAMESPACE={jit.NAMESPACE}" in flags[compiler] for compiler in ("cxx", "nvcc"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")  # no device query
    environment = jit.build_environment()
    assert set(environment) == set(ENVIRONMENT)
    assert environment["rapid_llm"] == rapid_llm.__version__ and environment["torch"] == torch.__version__
    assert environment["archs"] == "8.0;9.0+PTX" and environment["cuda"] == str(torch.version.cuda)
    assert re.fullmatch(r"[A-Za-z0-9._+-]+-[0-9a-f]{16}", jit.build_key(CSRC, flags, environment))


# ---------------------------------------------------------------------------
# JIT cache: trust (owned by us, writable by no one else) before building into or loading from it
# ---------------------------------------------------------------------------


def _directory(path: Path, mode: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def test_jit_cache_trust_accepts_a_private_directory_and_missing_ones(tmp_path):
    """Catches a trust check that refuses the normal case: a 0o700 (or 0o755) base owned by us, with or
    without the key directory below it yet."""
    base = _directory(tmp_path / "cache", 0o700)
    assert jit.cache_trust_problem(base / "key", base) is None
    _directory(base / "key", 0o700)
    assert jit.cache_trust_problem(base / "key", base) is None
    os.chmod(base, 0o755)
    assert jit.cache_trust_problem(base / "key", base) is None


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o1777])
def test_jit_cache_trust_refuses_a_group_or_other_writable_directory(tmp_path, mode):
    """Catches a shared, writable cache (RAPID_LLM_JIT_CACHE=/tmp/... made by someone with umask 0) being
    trusted: another user could plant rapid_llm_jit_ext.so there and this process would load it."""
    base = _directory(tmp_path / "cache", mode)
    problem = jit.cache_trust_problem(base / "key", base)
    assert problem is not None and "group/other-writable" in problem and str(base) in problem, problem
    assert "\n" not in problem
    os.chmod(base, 0o700)
    _directory(base / "key", mode)
    problem = jit.cache_trust_problem(base / "key", base)
    assert problem is not None and str(base / "key") in problem, "the key directory's mode was not checked"
    os.chmod(base / "key", 0o700)


def test_jit_cache_trust_refuses_a_directory_owned_by_another_user(tmp_path, monkeypatch):
    """Catches a check on the mode only: a 0o755 directory another user owns is theirs to fill."""
    base = _directory(tmp_path / "cache", 0o700)
    other = os.geteuid() + 1
    problem = jit.cache_trust_problem(base, base, uid=other)
    assert problem is not None and f"owned by uid {os.geteuid()}" in problem and f"uid {other}" in problem
    monkeypatch.setattr(os, "geteuid", lambda: other)  # as if this process ran as another user
    assert jit.cache_trust_problem(base / "key", base) is not None


def test_jit_cache_trust_refuses_a_file_in_place_of_a_directory(tmp_path):
    """Catches a walk that only stat()s the leaf: a regular file as the key directory, or above it."""
    base = _directory(tmp_path / "cache", 0o700)
    (base / "key").write_text("")
    assert "not a directory" in jit.cache_trust_problem(base / "key", base)
    assert jit.cache_trust_problem(base / "key" / "below", base) is not None


def test_prepare_cache_directory_creates_private_directories_and_refuses_untrusted_ones(tmp_path):
    """Catches cache directories created with the umask's mode (0o775 under umask 002: group-writable) and a
    build going ahead in an untrusted directory instead of a one-line RuntimeError."""
    base = tmp_path / "a" / "b" / "cache"
    directory = jit.prepare_cache_directory(base / "key", base)
    for path in (tmp_path / "a", tmp_path / "a" / "b", base, directory):
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, f"{path} is {oct(os.stat(path).st_mode)}"
    os.chmod(base, 0o777)
    with pytest.raises(RuntimeError) as info:
        jit.prepare_cache_directory(base / "other", base)
    assert "group/other-writable" in str(info.value) and "\n" not in str(info.value)
    assert not (base / "other").exists(), "created a directory inside an untrusted base"
    os.chmod(base, 0o700)


def _fake_toolkit(tmp_path, monkeypatch):
    """Everything jit.available() checks before the cache, faked: opted in, a device, nvcc, headers, ninja."""
    from torch.utils import cpp_extension

    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "bin" / "nvcc").write_text("")
    (home / "include" / "cuda_runtime.h").write_text("")
    monkeypatch.setenv("RAPID_LLM_JIT", "1")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")  # the key needs no device query
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: True)


@extension_visible
def test_jit_probe_refuses_an_untrusted_cache_and_explain_shows_why(tmp_path, monkeypatch):
    """Catches an untrusted cache surfacing only as a crash at the first kernel call: the probe (which
    compiles and creates nothing) must reject it, so the jit/ row's load fails with that reason in
    explain() (a forced row: NoEligibleKernel naming it)."""
    _fake_toolkit(tmp_path, monkeypatch)
    shared = _directory(tmp_path / "shared", 0o777)
    monkeypatch.setenv("RAPID_LLM_JIT_CACHE", str(shared))
    ok, reason = jit.available()
    assert not ok and "group/other-writable" in reason and "\n" not in reason, reason
    resolve_target.cache_clear()
    try:
        selection = dispatch(
            OP,
            device="cuda:sm90",
            dtype="bf16",
            shape={"num_elements": 4096},
            layout={"x:contiguous"},
            table=TABLE,
            force="jit/scale",
        )
        with pytest.raises(NoEligibleKernel) as info:
            selection.load()
        assert "group/other-writable" in str(info.value), str(info.value)
    finally:
        resolve_target.cache_clear()
    private = tmp_path / "private"
    monkeypatch.setenv("RAPID_LLM_JIT_CACHE", str(private))
    assert jit.available() == (True, "")
    assert not private.exists(), "the probe created the cache directory"


def test_jit_build_reuses_only_a_library_of_the_same_content(tmp_path, monkeypatch, caplog):
    """Catches the stale-library bug: reuse decided by mtimes (a tree with older mtimes but other content
    loaded the old .so). With torch's build stubbed: a changed source byte builds into another directory
    even with old mtimes, the same content reuses its own, and an untrusted cache is refused before
    torch.utils.cpp_extension.load is called."""
    from torch.utils import cpp_extension

    root = _source_tree(tmp_path / "csrc")
    builds = []

    def fake_load(*, name, build_directory, **_):
        library = Path(build_directory) / f"{name}.so"
        builds.append((build_directory, library.exists()))
        library.write_bytes(b"built")

    monkeypatch.setattr(jit, "source_root", lambda: root)
    monkeypatch.setattr(jit, "available", lambda: (True, ""))
    monkeypatch.setattr(jit, "registered_ops", lambda *args, **kwargs: (True, ""))
    monkeypatch.setattr(jit, "build_environment", lambda: dict(ENVIRONMENT))
    monkeypatch.setattr(cpp_extension, "load", fake_load)
    monkeypatch.setenv("RAPID_LLM_JIT_CACHE", str(tmp_path / "cache"))

    def load():
        jit._load_library_once.cache_clear()
        try:
            with caplog.at_level(logging.INFO, logger=jit.logger.name):
                caplog.clear()
                return jit.load_library(), caplog.text
        finally:
            jit._load_library_once.cache_clear()

    first, log = load()
    assert "compiling the CUDA extension" in log and stat.S_IMODE(os.stat(first.parent).st_mode) == 0o700
    again, log = load()
    assert again == first and "loading the CUDA extension from the JIT cache" in log
    source = root / "elementwise" / "scale.cu"
    source.write_text("// scale, changed\n")
    os.utime(source, (1_000_000_000, 1_000_000_000))  # older than the library
    changed, log = load()
    assert changed.parent != first.parent and "compiling the CUDA extension" in log, "reused the stale library"
    assert builds[-1] == (str(changed.parent), False)
    os.chmod(tmp_path / "cache", 0o777)
    count = len(builds)
    with pytest.raises(RuntimeError) as info:
        load()
    assert "group/other-writable" in str(info.value) and len(builds) == count, "built in an untrusted cache"
    os.chmod(tmp_path / "cache", 0o700)


# ---------------------------------------------------------------------------
# GPU: checks before the rows, TORCH_CHECKs, the unaligned path, the JIT cache
# ---------------------------------------------------------------------------


def _wrapper_or_skip(row_name):
    row = TABLE.rows_by_name[row_name]
    fn, reason = resolve_target(row.target, row.available)
    if fn is None:
        pytest.skip(f"{row_name} does not load here: {reason}")
    return fn


def _torch_op_or_skip(row_name, op_name):
    _wrapper_or_skip(row_name)
    return aot.op(op_name) if row_name.startswith("aot/") else jit.op(op_name)


EXTENSION_ROWS = ["aot/scale", "jit/scale"]


def _assert_direct_calls_raise(row_name, op_name, cases_source):
    """Run `cases_source` (defines `cases`: [(args, words)]) in a child process that calls the row's
    torch op with each args and expects a RuntimeError containing words. A child, because a crash in
    a launcher's error path (as seen on the H200: SIGSEGV while formatting a message) would otherwise
    take the whole test run down; here it fails this test with the last case reached."""
    program = (
        textwrap.dedent("""
        import torch
        from rapid_llm.kernels import aot, jit
        assert (aot.available() if {aot!r} else jit.available())[0]
        operator = aot.op({op!r}) if {aot!r} else jit.op({op!r})
    """).format(aot=row_name.startswith("aot/"), op=op_name)
        + textwrap.dedent(cases_source)
        + textwrap.dedent("""
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
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300, env=os.environ.copy()
    )
    output = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0 and "all cases raised" in result.stdout, (
        f"{row_name}: direct torch.ops calls with bad input (exit status {result.returncode}):\n{output}"
    )


def _forced_planner(op, row_name):
    from rapid_llm.kernels.dispatcher import Planner, probe_environment

    return Planner(attrs.evolve(probe_environment(), force={op: row_name}))


@needs_cuda
@pytest.mark.parametrize("row_name", EXTENSION_ROWS)
class TestExtensionOnGpu:
    def test_bad_input_never_reaches_the_unchecked_row(self, row_name, monkeypatch):
        """Catches bad input reaching an unchecked row target: through the public path with the row
        forced, a CPU, strided or integer x is the op check's OpInputError or the row is not eligible
        (its layout/device condition), never a call of the extension op."""
        _wrapper_or_skip(row_name)
        planner = _forced_planner(OP, row_name)
        good = torch.randn(64, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(planner.call(OP, (good, 2.0)), torch.mul(good, 2.0))

        def reached(name):
            raise AssertionError(f"the extension op {name} was called with bad input")

        monkeypatch.setattr(aot, "op", reached)
        monkeypatch.setattr(jit, "op", reached)
        for bad in (
            torch.ones(8),
            torch.ones(8, 6, device="cuda").t(),
            torch.ones(8, dtype=torch.int32, device="cuda"),
            "not a tensor",
        ):
            with pytest.raises((OpInputError, NoEligibleKernel)):
                planner.call(OP, (bad, 2.0))

    def test_direct_op_calls_fail_the_torch_checks(self, row_name):
        """Catches a launcher without TORCH_CHECK validation: torch.ops callers get a clear RuntimeError
        instead of an illegal memory access (CPU memory, wrong shape, dtype, layout, aliasing), and a
        launcher whose error path crashes the process (run in a child process: a crash fails this test)."""
        _torch_op_or_skip(row_name, "scale")
        _assert_direct_calls_raise(
            row_name,
            "scale",
            """
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
        """,
        )

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
    def test_unaligned_views_match_torch_bitwise(self, row_name, dtype):
        """Catches the 16-byte vector path taken on pointers that are not 16-byte aligned (a view at an
        odd storage offset: a misaligned-address fault or shifted elements) and a tail dropped."""
        operator = _torch_op_or_skip(row_name, "scale")
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
    _torch_op_or_skip("jit/scale", "scale")  # builds here if needed (or skips with the probe's reason)
    script = textwrap.dedent("""
        import logging, time
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        started = time.perf_counter()
        from rapid_llm.kernels import jit
        jit.load_library()
        print("LOAD_SECONDS", time.perf_counter() - started)
    """)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
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


@needs_cuda
@pytest.mark.parametrize("row_name", KV_ROWS)
class TestKvWriteExtensionOnGpu:
    def test_direct_op_calls_fail_the_torch_checks(self, row_name):
        """Catches a launcher that scatters with unchecked shapes, dtypes or layouts (a wild write), a
        call in the old (kv, loc, buffer) order accepted, a buffer whose rows alias (stride 0) written,
        and a launcher whose error path crashes the process (a child process: a crash fails this test)."""
        _torch_op_or_skip(row_name, "update_kv_buffer")
        _assert_direct_calls_raise(
            row_name,
            "update_kv_buffer",
            """
            kv = torch.randn(4, 8, 64, device="cuda", dtype=torch.bfloat16)
            loc = torch.arange(4, device="cuda", dtype=torch.int32)
            buffer = torch.zeros(16, 8, 64, device="cuda", dtype=torch.bfloat16)
            cases = [
                ((buffer.cpu(), kv.cpu(), loc.cpu()), "must be a CUDA tensor"),
                ((buffer.half(), kv, loc), "must equal kv dtype"),
                ((buffer[:, :4], kv, loc), "buffer must be [rows, 8, 64]"),
                ((buffer, kv, loc.float()), "int32 or int64"),
                ((buffer, kv, loc[:3]), "loc must be [4]"),
                ((buffer, kv.transpose(1, 2).contiguous().transpose(1, 2), loc), "heads of kv must be contiguous"),
                ((kv, loc, buffer), "kv dtype must be float32, float16 or bfloat16"),
                ((buffer[:1].expand(16, 8, 64), kv, loc), "single memory location"),
            ]
        """,
        )

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

    @pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_strided_loc_kv_and_buffer_rows(self, row_name, index_dtype, dtype):
        """Catches the kernel reading loc[t] as if contiguous (a column of a [T, 2] tensor wrote the rows
        named by the interleaved values) and kv/buffer row strides ignored (padded rows), on both the
        vector path (128-element rows) and the scalar one (7-element rows)."""
        fn = _wrapper_or_skip(row_name)
        for head_dim, pad in ((128, 8), (7, 3)):
            width = 4 * head_dim
            kv = torch.randn(5, width + pad, device="cuda", dtype=torch.float32).to(dtype)[:, :width]
            kv = kv.view(5, 4, head_dim)  # row stride width + pad
            storage = torch.randn(12, width + pad, device="cuda", dtype=torch.float32).to(dtype)
            buffer = storage[:, :width].view(12, 4, head_dim)
            pairs = torch.tensor([[9, 0], [2, 0], [11, 0], [5, 0], [0, 0]], device="cuda", dtype=index_dtype)
            loc = pairs[:, 0]  # stride 2; the interleaved zeros would name row 0 for every other token
            assert loc.stride(0) == 2 and kv.stride(0) == width + pad and buffer.stride(0) == width + pad
            expected = buffer.clone()
            expected[loc.long()] = kv
            before_padding = storage[:, width:].clone()
            fn(kv, loc, buffer)
            torch.cuda.synchronize()
            assert torch.equal(buffer, expected), f"head_dim {head_dim}: rows written other than loc's"
            assert torch.equal(storage[:, width:], before_padding), "wrote into a row's padding"


# ---------------------------------------------------------------------------
# attention.decode over an fp8 KV buffer on the extension path (aot/ and jit/decode_fp8)
# ---------------------------------------------------------------------------

DECODE_ROWS = ["aot/decode_fp8", "jit/decode_fp8"]


def _fp8_decode_inputs(batch, q_heads, kv_heads, lengths, page_size, dtype, seed, magnitude=1.0):
    """q, an e4m3 buffer of shuffled pages (non-monotonic, past each sequence's end NaN-free garbage), the
    page table, seq_lens and the scales, on CUDA."""
    g = torch.Generator().manual_seed(seed)
    pages_per = max(-(-length // page_size) for length in lengths) + 1
    pages = batch * pages_per + 3
    table = torch.randperm(pages, generator=g)[: batch * pages_per].view(batch, pages_per).to(torch.int32)
    values = torch.randn((pages * page_size, 2 * kv_heads, 128), generator=g) * 3
    scale = (values.abs().amax() / 448).reshape(1)
    buffer = (values / scale).to(torch.float8_e4m3fn)
    q = (torch.randn((batch, q_heads, 128), generator=g) * magnitude).to(dtype)
    lens = torch.tensor(lengths, dtype=torch.int32)
    return [x.cuda() for x in (q, buffer, table, lens)] + [page_size, 128**-0.5, scale.cuda(), (scale * 0.5).cuda()]


@needs_cuda
@pytest.mark.parametrize("row_name", DECODE_ROWS)
class TestFp8DecodeExtensionOnGpu:
    @pytest.mark.parametrize(
        "case",
        [
            # (batch, Hq, Hk, lengths, page size): GQA 4 / 8 / 1 (MHA) / 32 (two blocks of 16 heads per KV head),
            # pages of 1 (a lookup per position), 16, 64 (one page a 32-position chunk); lengths that end mid chunk,
            # one position, a long context (split-K) and a batch large enough for one split
            (3, 32, 8, [1, 100, 1000], 16),
            (2, 16, 2, [33, 4097], 64),
            (2, 8, 8, [31, 257], 1),
            (1, 32, 1, [2000], 16),
            (1, 32, 8, [32768], 64),
            (64, 32, 8, [1024] * 64, 16),
        ],
        ids=["gqa4_page16", "gqa8_page64", "mha_page1", "gqa32_two_head_blocks", "long_32k", "b64_one_split"],
    )
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_equals_the_native_fp8_row(self, row_name, case, dtype):
        """Catches a wrong operand permutation (the logits' dims or the value product's position pairs: a
        large diff everywhere), a position past a sequence's end read (its bytes are garbage here), a page
        looked up at the wrong granularity, the heads of a KV head's second 16-head block, a split or the
        merge wrong, and (bf16) q's power-of-two scaling or its compensation off."""
        fn = _wrapper_or_skip(row_name)
        from rapid_llm.kernels.ops.attention import decode

        batch, q_heads, kv_heads, lengths, page_size = case
        lengths = (lengths * batch)[:batch]
        args = _fp8_decode_inputs(batch, q_heads, kv_heads, lengths, page_size, dtype, seed=len(lengths))
        got = fn(*args)
        want = decode.decode(*args)
        torch.cuda.synchronize()
        assert torch.isfinite(got).all(), "an unwritten or NaN output element"
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)

    @pytest.mark.parametrize("magnitude", [1e-6, 1e3, 1e5])
    def test_bf16_query_scaling_keeps_fp16_in_range(self, row_name, magnitude):
        """Catches q entering fp16 unscaled (1e5 overflows fp16: inf logits; 1e-6 underflows: uniform
        weights) where the Triton row scales it by a power of two."""
        fn = _wrapper_or_skip(row_name)
        from rapid_llm.kernels.ops.attention import decode

        args = _fp8_decode_inputs(2, 32, 8, [300, 77], 16, torch.bfloat16, seed=7, magnitude=magnitude)
        args[5] = 128**-0.5 / magnitude  # logits of order one whatever q's magnitude
        got, want = fn(*args), decode.decode(*args)
        torch.cuda.synchronize()
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)

    def test_graph_replay_with_splits_equals_eager(self, row_name):
        """Catches the split merge (a programmatic dependent launch of the decode kernel) reading partial
        outputs before the decode grid has written them, or an edge lost in CUDA-graph capture: a replay after
        new q values are copied in must equal an eager call on them (one 32k sequence: tens of splits)."""
        fn = _wrapper_or_skip(row_name)
        args = _fp8_decode_inputs(1, 32, 8, [32768], 16, torch.bfloat16, seed=11)
        q = args[0]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn(*args)  # warm-up (the jit/ build loads) outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = fn(*args)
        q.copy_(torch.randn(q.shape, generator=torch.Generator().manual_seed(12)).to(q))
        graph.replay()
        want = fn(*args)
        torch.cuda.synchronize()
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, atol=0, rtol=0)

    @pytest.mark.parametrize("capture", [False, True], ids=["eager", "graph"])
    def test_waits_for_the_kernels_that_write_its_inputs(self, row_name, capture):
        """Catches the decode kernel (a programmatic dependent launch of the stream's previous kernel) reading
        q, the KV buffer or seq_lens before the kernels just before it have written them, or its output read
        by the next kernel before it is complete: each step rewrites q, the buffer (every byte: its values or
        their negations) and seq_lens with kernels, decodes (32 splits at B=1, one split at B=64) and copies
        the output with a kernel, back to back on one stream (eagerly, and replayed from one CUDA graph)."""
        fn = _wrapper_or_skip(row_name)
        from rapid_llm.kernels.ops.attention import decode

        steps = 4
        plans = []
        for batch, length, seed in ((1, 32768, 21), (64, 1000, 22)):
            args = _fp8_decode_inputs(batch, 32, 8, [length] * batch, 16, torch.bfloat16, seed=seed)
            q, buffer, lens = args[0], args[1], args[3]
            g = torch.Generator().manual_seed(seed)
            new_q = torch.randn((steps, *q.shape), generator=g).to(q)
            new_lens = torch.stack([lens, lens // 7 + 1, lens - 1, lens // 300 + 3]).to(lens)
            copies = torch.empty((steps, *q.shape), dtype=q.dtype, device="cuda")
            plans.append((args, buffer.view(torch.uint8).clone(), new_q, new_lens, copies))

        def step_all():
            for args, base, new_q, new_lens, copies in plans:
                q, buffer, lens = args[0], args[1], args[3]
                for step in range(steps):
                    torch.mul(new_q[step], 1.0, out=q)
                    torch.bitwise_xor(base, 0x80 * (step % 2), out=buffer.view(torch.uint8))  # sign flips
                    torch.add(new_lens[step], 0, out=lens)
                    torch.mul(fn(*args), 1.0, out=copies[step])

        fn(*plans[0][0])  # the jit/ build loads outside any capture
        torch.cuda.synchronize()
        if capture:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step_all()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step_all()
            for plan in plans:
                plan[-1].fill_(float("nan"))
            graph.replay()
        else:
            step_all()
        torch.cuda.synchronize()
        for args, base, new_q, new_lens, copies in plans:
            q, buffer, lens = args[0], args[1], args[3]
            for step in range(steps):
                q.copy_(new_q[step])
                buffer.view(torch.uint8).copy_(base ^ (0x80 * (step % 2)))
                lens.copy_(new_lens[step])
                want = decode.decode(*args)
                assert torch.isfinite(copies[step]).all(), f"step {step}: an output element unwritten"
                torch.testing.assert_close(
                    copies[step].float(),
                    want.float(),
                    atol=2e-2,
                    rtol=2e-2,
                    msg=lambda m: f"step {step}, B={q.shape[0]}: {m}",
                )

    def test_direct_op_calls_fail_the_torch_checks(self, row_name):
        """Catches a launcher that decodes unchecked inputs (another head dim, an unaligned buffer, a page
        size that is no power of two, an fp16 buffer), and an error path that crashes the process."""
        _torch_op_or_skip(row_name, "decode")
        _assert_direct_calls_raise(
            row_name,
            "decode",
            """
            q = torch.randn(2, 8, 128, device="cuda", dtype=torch.bfloat16)
            buffer = torch.zeros(64, 4, 128, device="cuda", dtype=torch.float8_e4m3fn)
            table = torch.zeros(2, 4, device="cuda", dtype=torch.int32)
            lens = torch.full((2,), 40, device="cuda", dtype=torch.int32)
            one = torch.ones(1, device="cuda")
            out = torch.empty_like(q)
            none = torch.empty(0, device="cuda")
            def call(**changes):
                args = dict(out=out, partial=none, partial_lse=none, q=q, kv_buffer=buffer, page_table=table,
                            seq_lens=lens, k_scale=one, v_scale=one, page_size=16, sm_scale=0.1, num_splits=1)
                args.update(changes)
                return tuple(args.values())
            cases = [
                (call(q=q.cpu()), "must be a CUDA tensor"),
                (call(q=q[..., :64].contiguous(), out=out[..., :64].contiguous()), "q must be [B, Hq, 128]"),
                (call(kv_buffer=buffer.half()), "must be float8_e4m3fn"),
                (call(kv_buffer=torch.zeros(64, 4, 136, device="cuda", dtype=torch.float8_e4m3fn)[..., 8:]),
                 "16-byte aligned"),
                (call(kv_buffer=buffer[:, :3]), "must be [rows, 2*Hk, 128]"),
                (call(page_size=12), "power of two"),
                (call(page_table=table.long()), "page_table must be int32"),
                (call(num_splits=2), "partial must be contiguous float32"),
            ]
        """,
        )
