"""External libraries' availability probes (rapid_llm/kernels/backends/): installed, in range, imports.

A missing, too old or broken library must be a reason (for explain() and doctor), never a crash,
and the probe must not import the library before the version says it may.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from rapid_llm.kernels.backends import LIBRARY_PROBES
from rapid_llm.kernels.backends.probe import probe
from rapid_llm.kernels.dispatcher.libraries import known_libraries
from rapid_llm.kernels.dispatcher.spec import LibraryRequirement

REQUIREMENT = LibraryRequirement("flashinfer", min_version="0.6", below_version="0.7")


def test_every_external_library_has_a_probe_with_its_tested_range():
    """Catches a library the product names (known_libraries()) without a probe, or a probe for another library."""
    assert set(LIBRARY_PROBES) == set(known_libraries()) - {"triton", "cuda_extension"}
    for name, module_name in LIBRARY_PROBES.items():
        backend = importlib.import_module(module_name)
        assert backend.REQUIREMENT.name == name and backend.REQUIREMENT.min_version, module_name
        assert callable(backend.available)


def test_importing_the_probes_imports_no_library():
    """Catches a probe package importing its library at import (a broken library would then crash any
    process that merely builds the table or runs doctor)."""
    library_modules = {m for info in known_libraries().values() for m in info.modules} | {"tvm_ffi"}
    before = {m for m in library_modules if sys.modules.get(m) is not None}
    for module_name in LIBRARY_PROBES.values():
        importlib.import_module(module_name)
    after = {m for m in library_modules if sys.modules.get(m) is not None}
    assert after == before


def test_not_installed_is_a_reason():
    ok, reason = probe(REQUIREMENT, "flashinfer", installed_version=None)
    assert not ok and "not installed" in reason and ">=0.6,<0.7" in reason


@pytest.mark.parametrize("version, word", [("0.5.3", "too old"), ("0.7.0", "too new")])
def test_a_version_outside_the_tested_range_is_refused_without_importing(version, word, monkeypatch):
    """Catches a probe importing (and maybe crashing on) a library version its adapters were not written for."""
    imported = []
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name))
    ok, reason = probe(REQUIREMENT, "flashinfer", installed_version=version)
    assert not ok and word in reason and version in reason and ">=0.6,<0.7" in reason
    assert imported == []


def test_an_import_that_fails_is_the_loaders_message(tmp_path, monkeypatch):
    """Catches a broken install (e.g. a DeepGEMM build needing another torch: 'undefined symbol') crashing
    the process instead of becoming the row's rejection reason."""
    package = tmp_path / "rapid_llm_fake_broken_lib"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('libfoo.so: undefined symbol: _ZN3c10bar')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok, reason = probe(REQUIREMENT, "rapid_llm_fake_broken_lib", installed_version="0.6.0")
    assert not ok and "undefined symbol" in reason and "ImportError" in reason


def test_an_installed_library_in_range_that_imports_is_ok(tmp_path, monkeypatch):
    package = tmp_path / "rapid_llm_fake_good_lib"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok, reason = probe(REQUIREMENT, "rapid_llm_fake_good_lib", installed_version="0.6.0")
    assert ok and "0.6.0" in reason


def test_doctor_reports_each_librarys_tested_range_and_probe(capsys):
    from rapid_llm.cli import main

    import json

    assert main(["doctor", "--json"]) in (0, 1)
    probes = json.loads(capsys.readouterr().out)["library_probes"]
    assert set(probes) == set(LIBRARY_PROBES)
    for name, entry in probes.items():
        assert entry["tested"].startswith(name) and isinstance(entry["ok"], bool) and entry["reason"]
