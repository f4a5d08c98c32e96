"""The evidence index: a short stable id for each committed result file under perf/results/.

    from perf.evidence import resolve
    resolve("h200.attention.bench")
    # -> "perf/results/h200/attention_2026-12-03/bench_attention.json"

perf/results/index.json maps each id to {"path", "what", "device", "date"}; the path is relative to the
repository root. Rows (GoldenRecord.evidence), docs and ci scripts cite evidence by id, so a file can move
without touching what cites it; conformance/test_evidence.py holds the index and the files together.

An id is lower-case dotted words, device first: `<device>.<area>.<kind>[.<name>...]`, e.g.
`h200.attention.parity.native_prefill`. Standard library only (no torch): CPU-only CI reads it.
"""

from __future__ import annotations

import functools
import json
import pathlib
import re
from types import MappingProxyType
from typing import Mapping

ROOT = pathlib.Path(__file__).resolve().parent.parent
INDEX = ROOT / "perf" / "results" / "index.json"
#: `<device>.<area>...`: lower-case words of letters, digits and underscores joined by dots, two or more.
ID_PATTERN = re.compile(r"[a-z0-9]+(?:\.[a-z0-9_]+)+")
FIELDS = ("path", "what", "device", "date")


class EvidenceIndexError(ValueError):
    """perf/results/index.json is malformed: a duplicate or ill-formed id, or an entry missing a field."""


def _reject_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise EvidenceIndexError(f"{INDEX.relative_to(ROOT)}: id {key!r} appears twice")
        seen[key] = value
    return seen


def load(path: pathlib.Path = INDEX) -> dict[str, dict]:
    """Read an index file: {id: {"path", "what", "device", "date"}}, checked for form (not for files)."""
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle, object_pairs_hook=_reject_duplicates)
    if not isinstance(document, dict):
        raise EvidenceIndexError(f"{path}: expected an object of id -> entry")
    for evidence_id, entry in document.items():
        if not ID_PATTERN.fullmatch(evidence_id):
            raise EvidenceIndexError(
                f"{path}: id {evidence_id!r} is not dotted lower-case words (<device>.<area>.<kind>[.<name>])"
            )
        missing = [field for field in FIELDS if not isinstance(entry, dict) or not entry.get(field)]
        if missing:
            raise EvidenceIndexError(f"{path}: {evidence_id} lacks {missing}")
    return document


@functools.lru_cache(maxsize=1)
def index() -> Mapping[str, Mapping[str, str]]:
    """The repository's index, read once."""
    return MappingProxyType({key: MappingProxyType(entry) for key, entry in load().items()})


def entry(evidence_id: str) -> Mapping[str, str]:
    """The index entry of an id; KeyError naming the id when the index has none."""
    try:
        return index()[evidence_id]
    except KeyError:
        raise KeyError(f"evidence id {evidence_id!r} is not in {INDEX.relative_to(ROOT)}") from None


def resolve(evidence_id: str) -> str:
    """The repository-relative path of an id's file."""
    return entry(evidence_id)["path"]


def file(evidence_id: str) -> pathlib.Path:
    """The absolute path of an id's file."""
    return ROOT / resolve(evidence_id)
