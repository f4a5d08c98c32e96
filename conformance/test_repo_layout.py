"""The repository as a new user meets it: the test commands work from the root.

Catches `pytest` (bare, from the repository root) failing collection with
`ModuleNotFoundError: No module named 'conformance'` while `python -m pytest`
works (python -m puts the current directory on sys.path; bare pytest does
not, unless the config says so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("command", [["pytest"], [sys.executable, "-m", "pytest"]], ids=["pytest", "python -m pytest"])
def test_collection_from_the_repository_root(command):
    if command == ["pytest"]:
        executable = os.path.join(os.path.dirname(sys.executable), "pytest")
        if not os.path.exists(executable):
            executable = shutil.which("pytest")
        if executable is None:
            pytest.skip("no pytest executable next to this interpreter or on PATH")
        command = [executable]
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [*command, "--collect-only", "-q", "-p", "no:cacheprovider", "conformance/test_spec.py"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "test_spec.py::" in result.stdout
