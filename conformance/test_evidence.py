"""The committed evidence backs every claim that cites it (torch-free: runs on CPU-only CI).

Golden records. A row's `GoldenRecord(verified=True, max_abs_diff=..., evidence=...)`
claims that a parity run measured it within max_abs_diff of its baseline. For
every verified non-reference row of build_tables(), the cited file must:

  - exist in the repository (paths are relative to the repository root);
  - be a parity report as conformance/conftest.py writes it (RAPID_LLM_PARITY_REPORT):
    `max_abs_diff_by_row`, `measurements`, `device`, `exit_status`;
  - come from a clean run (exit_status 0): test_parity records a measurement only after its
    tolerance check passed, so a failed case of the row would be missing from the file;
  - hold the row, with measurements of it in every dtype the row serves, all against the
    record's baseline, and `max_abs_diff_by_row[row]` the largest of them;
  - show that value <= the record's max_abs_diff;
  - have measured the row on a CUDA device: Triton's CPU interpreter truncates fp32 -> bf16
    where the GPU rounds to nearest even, so interpreter parity is no evidence for bf16
    (conformance/test_parity.py skips it there), and a golden record covers bf16.

Superseded runs. Every parity_*.json under perf/results/h200/ is cited by at least
one row: a run no row cites has been superseded and is deleted (git keeps it).

Cited paths. Every `perf/results/...` path in the package's sources (row comments,
kernel docstrings) and in README.md / perf/README.md exists (placeholders such as
`<gpu>` or `*` are not paths). Every script a result file's `command` names
(`ci/...py`, `perf/...py`) exists, or moved and is listed with its new path in
perf.sweeps.FORMERLY: evidence is never edited, so old commands stay as they ran.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from rapid_llm.kernels.dispatcher import build_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPU_RESULTS = ROOT / "perf" / "results" / "h200"
TABLE = build_tables()
EVIDENCED_ROWS = [row for row in TABLE.rows_by_name.values() if row.golden.verified and not row.is_reference]
PARITY_KEYS = ("max_abs_diff_by_row", "measurements", "device", "exit_status")

#: A repository path under perf/results/ as source text cites it; trailing sentence punctuation is stripped.
RESULTS_PATH = re.compile(r"perf/results/[^\s)'\"`,;]+")
#: Where cited result paths are read: the package's sources, and the two READMEs that cite evidence.
CITING_SOURCES = {
    "rapid_llm": sorted((ROOT / "rapid_llm").rglob("*.py")),
    "docs": [ROOT / "README.md", ROOT / "perf" / "README.md"],
}


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _load_json(path: pathlib.Path):
    with open(path) as handle:
        return json.load(handle)


def _cited_results_paths(paths) -> dict[str, list[str]]:
    """{cited path: [file:line, ...]} for every perf/results/... path in the given files."""
    cited: dict[str, list[str]] = {}
    for path in paths:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in RESULTS_PATH.finditer(line):
                cited_path = match.group(0).rstrip(".:")
                if any(mark in cited_path for mark in "<>*{}"):
                    continue  # a placeholder in prose ("perf/results/<gpu>/"), not a path
                cited.setdefault(cited_path, []).append(f"{_relative(path)}:{number}")
    return cited


# ---------------------------------------------------------------------------
# Golden records
# ---------------------------------------------------------------------------


def test_some_rows_cite_evidence():
    # The parametrisation below must not pass by being empty.
    assert EVIDENCED_ROWS, "no verified non-reference row in build_tables(): nothing to check"


@pytest.mark.parametrize("row", EVIDENCED_ROWS, ids=lambda row: row.name)
def test_golden_record_is_backed_by_a_gpu_parity_run(row):
    golden = row.golden
    assert golden.evidence, f"{row.name}: verified golden record without an evidence path"
    path = ROOT / golden.evidence
    assert path.is_file(), f"{row.name}: its evidence {golden.evidence} does not exist in the repository"

    report = _load_json(path)
    missing = [key for key in PARITY_KEYS if key not in report] if isinstance(report, dict) else list(PARITY_KEYS)
    assert not missing, (f"{row.name}: {golden.evidence} is not a parity report (conformance/conftest.py's "
                         f"format): it lacks {missing}")
    assert report["exit_status"] == 0, (
        f"{row.name}: {golden.evidence} comes from a conformance run that exited {report['exit_status']}; a "
        "failed parity case is absent from the file, so only a clean run is evidence")
    by_row = report["max_abs_diff_by_row"]
    assert row.name in by_row, (f"{row.name}: {golden.evidence} holds no parity measurement of this row "
                                f"(it has {sorted(by_row)})")

    measurements = [m for m in report["measurements"] if m["row"] == row.name]
    assert measurements, f"{row.name}: {golden.evidence} lists it in max_abs_diff_by_row but has no measurements"
    off_gpu = sorted({m["device"] for m in measurements if not str(m["device"]).startswith("cuda")})
    assert not off_gpu and str(report["device"]).startswith("cuda"), (
        f"{row.name}: {golden.evidence} measured it on {off_gpu or report['device']}, not a CUDA device; a golden "
        "record covers bf16, and Triton's CPU interpreter truncates fp32 -> bf16 (no evidence for it)")
    unmeasured = sorted(set(row.dtypes) - {m["dtype"] for m in measurements})
    assert not unmeasured, f"{row.name}: {golden.evidence} has no measurement of it in {unmeasured}"
    if "bf16" in row.dtypes:
        assert any(m["dtype"] == "bf16" for m in measurements)
    baselines = sorted({m["baseline"] for m in measurements})
    assert baselines == [golden.baseline], (
        f"{row.name}: {golden.evidence} compared it with {baselines}, the record names {golden.baseline!r}")
    worst = max(m["max_abs_diff"] for m in measurements)
    assert by_row[row.name] == worst, (
        f"{row.name}: {golden.evidence} max_abs_diff_by_row says {by_row[row.name]}, its measurements {worst}")

    assert by_row[row.name] <= golden.max_abs_diff, (
        f"{row.name}: {golden.evidence} measured max |diff| {by_row[row.name]} vs {golden.baseline}, above the "
        f"golden record's {golden.max_abs_diff}: the record claims more than its evidence shows")


def test_every_gpu_parity_run_is_cited():
    """A parity run no row cites is superseded: delete it (git keeps it) rather than keep stale evidence."""
    cited = {(ROOT / row.golden.evidence).resolve() for row in EVIDENCED_ROWS if row.golden.evidence}
    runs = sorted(GPU_RESULTS.rglob("parity_*.json"))
    uncited = [_relative(path) for path in runs if path.resolve() not in cited]
    assert not uncited, (f"parity runs no golden record cites (superseded: delete them): {uncited}; cited: "
                         f"{sorted(_relative(path) for path in cited)}")


# ---------------------------------------------------------------------------
# Cited paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sources", sorted(CITING_SOURCES))
def test_cited_results_paths_exist(sources):
    cited = _cited_results_paths(CITING_SOURCES[sources])
    missing = {path: where for path, where in sorted(cited.items()) if not (ROOT / path).exists()}
    assert not missing, "cited perf/results paths that do not exist:\n" + "\n".join(
        f"  {path}  (cited at {', '.join(where)})" for path, where in missing.items())


def _result_commands():
    """(result file, command) for every JSON result under perf/results that records its command."""
    for path in sorted((ROOT / "perf" / "results").rglob("*.json")):
        document = _load_json(path)
        if isinstance(document, dict) and isinstance(document.get("command"), str):
            yield _relative(path), document["command"]


def test_scripts_named_by_results_exist():
    from perf.sweeps import FORMERLY

    moved_to_missing = {old: new for old, new in FORMERLY.items() if not (ROOT / new).is_file()}
    assert not moved_to_missing, f"perf.sweeps.FORMERLY maps to scripts that do not exist: {moved_to_missing}"
    missing = []
    for result, command in _result_commands():
        for script in re.findall(r"(?<![\w/.-])((?:ci|perf)/[\w./-]+\.py)\b", command):
            if not (ROOT / script).is_file() and script not in FORMERLY:
                missing.append(f"{result}: {script}")
    assert missing == [], ("result files name scripts that neither exist nor are listed as moved in "
                           f"perf/sweeps/__init__.py FORMERLY: {missing}")


def test_sweep_scripts_are_python_modules():
    sweeps = ROOT / "perf" / "sweeps"
    files = [path for path in sweeps.iterdir() if path.is_file()]
    assert (sweeps / "__init__.py") in files
    others = [path.name for path in files if path.suffix != ".py"]
    assert not others, f"perf/sweeps holds sweep scripts only (python -m perf.sweeps.<name>): {others}"
