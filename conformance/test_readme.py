"""The README's promises that can be run are run, and the pages stay navigable.

Catches the "In code" snippet failing as pasted (it used `x` and `w` without
defining them): a new user's first copy-paste must work. Catches the README
growing back into a lab notebook (it reached 1,572 lines of generated tables and
measurement history), a link from the README, perf/README.md or a docs/ page
to a file that moved or was removed, and docs/comm.md's process-group example
failing as pasted on two processes.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

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


def test_paged_kv_cache_example_runs_after_the_first(capsys):
    """Catches the paged KV-cache example going stale (an op's signature or plan_for changed under it)."""
    blocks = re.findall(r"```python\n(.*?)```", _section("In code"), flags=re.S)
    assert len(blocks) >= 2, "the README's In code section lost its paged KV-cache example"
    namespace: dict = {}
    for index, block in enumerate(blocks[:2]):
        exec(compile(block, f"README.md:In code block {index + 1}", "exec"), namespace)
    assert namespace["out"].shape == (2, namespace["q_heads"], namespace["dim"])
    assert "decode" in capsys.readouterr().out.splitlines()[-1]


#: The README is a newcomer's page (DESIGN §8); generated tables and long how-tos live in docs/.
README_MAX_LINES = 400
#: A relative markdown link: [text](target), not a URL or an in-page anchor.
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)([^)\s#]+)(?:#[^)]*)?\)")


def test_readme_stays_a_newcomers_page():
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move generated tables to docs/ "
        "(ci/readme_tables.py) and long how-tos to a docs/ page the README links"
    )


def test_relative_links_of_the_pages_resolve():
    pages = ["README.md", os.path.join("perf", "README.md")]
    pages += sorted(
        os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")
    )
    broken = []
    for page in pages:
        text = open(os.path.join(ROOT, page), encoding="utf-8").read()
        for target in RELATIVE_LINK.findall(text):
            if not os.path.exists(os.path.join(ROOT, os.path.dirname(page), target)):
                broken.append(f"{page}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"


def test_the_files_one_new_op_touches_are_where_every_op_keeps_its_pieces():
    """The README's "Adding an op" table names the files one new op touches. Catches the list going stale: for
    every op of the table, its contract's check lives in ops/<family>/checks.py, its reference row's target in
    ops/<family>/reference.py, its native rows' targets under ops/<family>/, its public function in
    ops/<family>/api.py, its parity cases in conformance/cases/<family>.py and a benchmark in perf/, which are
    the table's rows 2-7 (row 1, the family's __init__, is where the contract was found)."""
    import importlib

    from rapid_llm.kernels.dispatcher import default_table

    section = _section("Adding an op")
    for named in (
        "ops/<family>/__init__.py",
        "ops/<family>/checks.py",
        "ops/<family>/reference.py",
        "ops/<family>/<op>.py",
        "ops/<family>/api.py",
        "conformance/cases/<family>.py",
        "perf/test_<family>_bench.py",
    ):
        assert named in section, f"the README's Adding an op table no longer names {named}"
    table = default_table()
    benches = "".join(
        open(os.path.join(ROOT, "perf", name), encoding="utf-8").read()
        for name in os.listdir(os.path.join(ROOT, "perf"))
        if re.match(r"test_.*_bench\.py$", name)
    )
    for op, contract in table.contracts.items():
        family, _, name = op.partition(".")
        package = f"rapid_llm.kernels.ops.{family}"
        assert contract.check.startswith(f"{package}.checks:"), (op, contract.check)
        assert table.reference(op).target.startswith(f"{package}.reference:"), op
        for row in table.rows(op):
            if row.backend == "native":
                assert row.target.startswith(f"{package}."), (row.name, row.target)
        api = importlib.import_module(f"{package}.api")
        assert name in api.__all__, f"{op}: no public function {name} in {package}.api"
        assert importlib.import_module(f"conformance.cases.{family}").CASES.get(op), (
            f"{op}: no parity cases in conformance/cases/{family}.py"
        )
        assert op in benches or f'"{op}"' in benches or name in benches, f"{op}: no benchmark in perf/test_*_bench.py"


def test_the_comm_pages_example_runs_on_two_processes(tmp_path):
    """docs/comm.md's setup block, as pasted, under torch.distributed.run with two gloo processes on the
    loopback (bounded: 180 s). Catches the page's process-group setup (or the ops' calls in it) going stale."""
    text = open(os.path.join(ROOT, "docs", "comm.md"), encoding="utf-8").read()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(block)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2"]
    launch += ["--master-addr", "127.0.0.1", "--master-port", str(port), str(script)]
    environment = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(launch, capture_output=True, text=True, timeout=180, env=environment, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}/2:" in result.stdout, result.stdout[-2000:]
