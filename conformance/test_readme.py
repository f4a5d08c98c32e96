"""The README's promises that can be run are run.

Catches the "In code" snippet failing as pasted (it used `x` and `w` without
defining them): a new user's first copy-paste must work.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _section(title: str) -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_in_code_snippet_runs_as_pasted(capsys):
    blocks = re.findall(r"```python\n(.*?)```", _section("In code"), flags=re.S)
    assert blocks, "the README's In code section has no python block"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md:In code", "exec"), namespace)
    assert namespace["y"].shape == namespace["x"].shape
    assert "norm.rms_norm" in capsys.readouterr().out
