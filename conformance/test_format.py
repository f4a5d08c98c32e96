"""The repository is formatted by its one formatter configuration (pyproject.toml [tool.ruff]: one line length).

Catches a change that was not run through `ruff format` (the test extra installs ruff): diffs stay about what
changed, not about how it was wrapped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_the_tree_is_formatted_by_ruff():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"files `ruff format` would change (run `ruff format .`):\n{result.stdout[-3000:]}"
