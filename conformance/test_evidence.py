"""The committed evidence backs every claim that cites it (torch-free: runs on CPU-only CI).

The index. perf/results/index.json gives each curated result file a short stable id
(perf/evidence.py reads it). Every id is unique and well formed, every indexed file exists
under perf/results/, and every file under perf/results/ is indexed: result files nothing
cites belong in git history (or a decision record in perf/lab/), not in the tree.

Golden records. A row's `GoldenRecord(verified=True, max_abs_diff=..., evidence=...)`
claims that a parity run measured it within max_abs_diff of its baseline. `evidence` is an
index id (preferred) or, while the package's citations are converted, a repository path.
For every verified non-reference row of build_tables(), the cited file must:

  - be in the index (an id) or exist in the repository (a path, relative to the repository root);
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

Cited paths and ids. Every `perf/results/...` path in the package's sources (row comments,
kernel docstrings) and in README.md / perf/README.md / docs/*.md exists (placeholders such as
`<gpu>` or `*` are not paths); every evidence id those pages cite in backticks, and every id
rapid_llm/ and csrc/ cite, is in the index. Every script a result file's `command` names
(`ci/...py`, `perf/...py`) exists, or moved and is listed with its new path in
perf.sweeps.FORMERLY: evidence is never edited, so old commands stay as they ran.

Product source. rapid_llm/ and csrc/ cite evidence by id only: no `perf/results/` path, no
device-call number (`call12`) or `variants/` folder (measurement history lives in git and
perf/lab/).
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from perf import evidence as evidence_index
from rapid_llm.kernels.dispatcher import build_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results"
GPU_RESULTS = RESULTS / "h200"
INDEX = evidence_index.load()
TABLE = build_tables()
EVIDENCED_ROWS = [row for row in TABLE.rows_by_name.values() if row.golden.verified and not row.is_reference]
PARITY_KEYS = ("max_abs_diff_by_row", "measurements", "device", "exit_status")

#: A repository path under perf/results/ as source text cites it; trailing sentence punctuation is stripped.
RESULTS_PATH = re.compile(r"perf/results/[^\s)'\"`,;]+")
#: Where cited result paths are read: the package's sources, the READMEs and the docs pages.
CITING_SOURCES = {
    "rapid_llm": sorted((ROOT / "rapid_llm").rglob("*.py")),
    "docs": [ROOT / "README.md", ROOT / "perf" / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
}
_DEVICES = "|".join(sorted({re.escape(evidence_id.split(".")[0]) for evidence_id in INDEX}))
#: An evidence id as a docs page cites it: in backticks, starting with a device the index knows.
CITED_ID = re.compile(r"`((?:%s)\.[a-z0-9_.]*[a-z0-9_])`" % _DEVICES)
#: An evidence id as product source cites it ("evidence h200.attention.sweep"): dotted words after a device.
SOURCE_ID = re.compile(r"(?<![\w./-])((?:%s)(?:\.[a-z0-9_]+)+)" % _DEVICES)
#: What product source must not carry (DESIGN §8): result paths, device-call numbers, the variants folder.
LAB_NOTEBOOK = re.compile(r"perf/results/|\bcall\d+\b|variants/")
PRODUCT_SOURCES = sorted(
    path
    for folder in ("rapid_llm", "csrc")
    for path in (ROOT / folder).rglob("*")
    if path.is_file() and path.suffix in {".py", ".cu", ".cuh", ".cc", ".cpp", ".h"}
)


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _evidence_file(evidence: str) -> pathlib.Path:
    """The file a golden record cites: an index id resolved through the index, else (transitionally) a path.

    A citation without a '/' is an id: one the index lacks fails here, naming it."""
    if evidence in INDEX:
        return ROOT / INDEX[evidence]["path"]
    assert "/" in evidence, f"evidence {evidence!r} is neither an id in perf/results/index.json nor a repository path"
    return ROOT / evidence


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
# The index
# ---------------------------------------------------------------------------


def test_index_ids_are_unique_and_well_formed():
    # evidence_index.load() raises on a duplicate id (json.load would keep the last silently), an id
    # that is not dotted lower-case words, or an entry without path / what / device / date.
    document = evidence_index.load()
    assert document, "perf/results/index.json is empty"
    assert all(evidence_index.ID_PATTERN.fullmatch(evidence_id) for evidence_id in document)


def test_every_indexed_file_exists_under_results():
    missing = {
        evidence_id: entry["path"] for evidence_id, entry in INDEX.items() if not (ROOT / entry["path"]).is_file()
    }
    assert not missing, f"index entries whose file does not exist: {missing}"
    outside = {
        evidence_id: entry["path"]
        for evidence_id, entry in INDEX.items()
        if not entry["path"].startswith("perf/results/")
    }
    assert not outside, f"index entries outside perf/results/ (lab material is never cited): {outside}"
    paths = [entry["path"] for entry in INDEX.values()]
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    assert not repeated, f"files indexed under two ids: {repeated}"


def test_every_result_file_is_indexed():
    """perf/results/ holds curated evidence only: a file no id names is lab material or history."""
    indexed = {entry["path"] for entry in INDEX.values()}
    stray = sorted(
        _relative(path)
        for path in RESULTS.rglob("*")
        if path.is_file() and path != evidence_index.INDEX and _relative(path) not in indexed
    )
    assert not stray, (
        "files under perf/results/ that perf/results/index.json does not index (index them if "
        f"something cites them; otherwise git rm them, git keeps them): {stray}"
    )


def test_resolve_names_an_unknown_id():
    with pytest.raises(KeyError, match="h200.no_such.id"):
        evidence_index.resolve("h200.no_such.id")


# ---------------------------------------------------------------------------
# Golden records
# ---------------------------------------------------------------------------


def test_some_rows_cite_evidence():
    # The parametrisation below must not pass by being empty.
    assert EVIDENCED_ROWS, "no verified non-reference row in build_tables(): nothing to check"


@pytest.mark.parametrize("row", EVIDENCED_ROWS, ids=lambda row: row.name)
def test_golden_record_is_backed_by_a_gpu_parity_run(row):
    golden = row.golden
    assert golden.evidence, f"{row.name}: verified golden record without evidence"
    path = _evidence_file(golden.evidence)
    assert path.is_file(), f"{row.name}: its evidence {golden.evidence} ({_relative(path)}) does not exist"

    report = _load_json(path)
    missing = [key for key in PARITY_KEYS if key not in report] if isinstance(report, dict) else list(PARITY_KEYS)
    assert not missing, (
        f"{row.name}: {golden.evidence} is not a parity report (conformance/conftest.py's format): it lacks {missing}"
    )
    assert report["exit_status"] == 0, (
        f"{row.name}: {golden.evidence} comes from a conformance run that exited {report['exit_status']}; a "
        "failed parity case is absent from the file, so only a clean run is evidence"
    )
    by_row = report["max_abs_diff_by_row"]
    assert row.name in by_row, (
        f"{row.name}: {golden.evidence} holds no parity measurement of this row (it has {sorted(by_row)})"
    )

    measurements = [m for m in report["measurements"] if m["row"] == row.name]
    assert measurements, f"{row.name}: {golden.evidence} lists it in max_abs_diff_by_row but has no measurements"
    off_gpu = sorted({m["device"] for m in measurements if not str(m["device"]).startswith("cuda")})
    assert not off_gpu and str(report["device"]).startswith("cuda"), (
        f"{row.name}: {golden.evidence} measured it on {off_gpu or report['device']}, not a CUDA device; a golden "
        "record covers bf16, and Triton's CPU interpreter truncates fp32 -> bf16 (no evidence for it)"
    )
    unmeasured = sorted(set(row.dtypes) - {m["dtype"] for m in measurements})
    assert not unmeasured, f"{row.name}: {golden.evidence} has no measurement of it in {unmeasured}"
    if "bf16" in row.dtypes:
        assert any(m["dtype"] == "bf16" for m in measurements)
    baselines = sorted({m["baseline"] for m in measurements})
    assert baselines == [golden.baseline], (
        f"{row.name}: {golden.evidence} compared it with {baselines}, the record names {golden.baseline!r}"
    )
    worst = max(m["max_abs_diff"] for m in measurements)
    assert by_row[row.name] == worst, (
        f"{row.name}: {golden.evidence} max_abs_diff_by_row says {by_row[row.name]}, its measurements {worst}"
    )

    assert by_row[row.name] <= golden.max_abs_diff, (
        f"{row.name}: {golden.evidence} measured max |diff| {by_row[row.name]} vs {golden.baseline}, above the "
        f"golden record's {golden.max_abs_diff}: the record claims more than its evidence shows"
    )


def test_every_gpu_parity_run_is_cited():
    """A parity run no row cites is superseded: delete it (git keeps it) rather than keep stale evidence."""
    cited = {_evidence_file(row.golden.evidence).resolve() for row in EVIDENCED_ROWS if row.golden.evidence}
    runs = sorted(GPU_RESULTS.rglob("parity_*.json"))
    uncited = [_relative(path) for path in runs if path.resolve() not in cited]
    assert not uncited, (
        f"parity runs no golden record cites (superseded: delete them): {uncited}; cited: "
        f"{sorted(_relative(path) for path in cited)}"
    )


# ---------------------------------------------------------------------------
# Cited paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("sources", sorted(CITING_SOURCES))
def test_cited_results_paths_exist(sources):
    cited = _cited_results_paths(CITING_SOURCES[sources])
    missing = {path: where for path, where in sorted(cited.items()) if not (ROOT / path).exists()}
    assert not missing, "cited perf/results paths that do not exist:\n" + "\n".join(
        f"  {path}  (cited at {', '.join(where)})" for path, where in missing.items()
    )


def test_evidence_ids_cited_by_docs_exist():
    unknown = {}
    for path in CITING_SOURCES["docs"]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for evidence_id in CITED_ID.findall(line):
                if evidence_id not in INDEX:
                    unknown.setdefault(evidence_id, []).append(f"{_relative(path)}:{number}")
    assert not unknown, "cited evidence ids not in perf/results/index.json:\n" + "\n".join(
        f"  {evidence_id}  (cited at {', '.join(where)})" for evidence_id, where in sorted(unknown.items())
    )


def test_evidence_ids_cited_by_product_source_exist():
    unknown = {}
    for path in PRODUCT_SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for evidence_id in SOURCE_ID.findall(line):
                if evidence_id not in INDEX:
                    unknown.setdefault(evidence_id, []).append(f"{_relative(path)}:{number}")
    assert not unknown, "evidence ids rapid_llm/ or csrc/ cite that perf/results/index.json lacks:\n" + "\n".join(
        f"  {evidence_id}  (cited at {', '.join(where)})" for evidence_id, where in sorted(unknown.items())
    )


def test_product_source_cites_evidence_by_id_only():
    found = [
        f"{_relative(path)}:{number}: {match.group(0)}"
        for path in PRODUCT_SOURCES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in LAB_NOTEBOOK.finditer(line)
    ]
    assert not found, (
        "rapid_llm/ and csrc/ cite evidence by id (perf/results/index.json), never a results "
        "path or a device-call number:\n" + "\n".join(f"  {hit}" for hit in found)
    )


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
    assert missing == [], (
        "result files name scripts that neither exist nor are listed as moved in "
        f"perf/sweeps/__init__.py FORMERLY: {missing}"
    )


def test_sweep_scripts_are_python_modules():
    sweeps = ROOT / "perf" / "sweeps"
    files = [path for path in sweeps.iterdir() if path.is_file()]
    assert (sweeps / "__init__.py") in files
    others = [path.name for path in files if path.suffix != ".py"]
    assert not others, f"perf/sweeps holds sweep scripts only (python -m perf.sweeps.<name>): {others}"
