"""Measured rankings: which rows were fastest at a shape bucket on a GPU class (torch-free data).

A benchmark run (perf/write_rankings.py over the committed benchmark JSON) writes, per device class
("cuda:sm90") and per (op, dtype, bucket), the rows it timed there, fastest first, with their median
times and the evidence id of the run. The file is package data (rapid_llm/kernels/rankings/*.json),
never typed in. build_tables() loads it into the table, so dispatch() stays a pure function of its
arguments: where a query's bucket was measured, the eligible rows that run timed trade places among
the slots they hold in the default order, fastest first (a row it did not time keeps its place). A
bucket never measured ranks by default priority, and explain() says which of the two decided.

File (schema 1):
    {"schema": 1, "device_class": "cuda:sm90", "device": "NVIDIA H200", "evidence": "<id>",
     "entries": [{"op": "attention.prefill", "dtype": "bf16",
                  "bucket": [["num_tokens", 8193, 16384], ["max_seqlen", 513, 1024], ...],
                  "ranking": [["native/prefill_gluon", 286.0], ["flash_attn/varlen_fwd", 322.0]],
                  "shapes": 1}]}
A bucket lists every dim of the op's contract that the benchmark's call reported, as
OpContract.bucket_key() gives it; a row's time is its mean over the `shapes` benchmark shapes of the
bucket (every ranked row was timed at each of them).
"""

from __future__ import annotations

import functools
import json
import os
from types import MappingProxyType

SCHEMA = 1
_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rankings")


class Ranking:
    """One measured bucket: rows fastest first with their median microseconds, and where it was measured."""

    __slots__ = ("op", "dtype", "device_class", "bucket", "order", "device", "evidence", "shapes")

    def __init__(self, *, op, dtype, device_class, bucket, order, device, evidence, shapes=1):
        for name, value in (
            ("op", op),
            ("dtype", dtype),
            ("device_class", device_class),
            ("bucket", tuple(tuple(item) for item in bucket)),
            ("order", tuple((str(row), float(us)) for row, us in order)),
            ("device", device),
            ("evidence", evidence),
            ("shapes", int(shapes)),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"Ranking is immutable (tried to set {name!r})")

    def position(self, row: str) -> int | None:
        return next((index for index, (name, _) in enumerate(self.order) if name == row), None)

    def describe(self, row: str) -> str:
        """'NVIDIA H200, this bucket: 286 us vs 322 us for flash_attn/varlen_fwd, evidence <id>'."""
        index = self.position(row)
        mine = f"{self.order[index][1]:.1f} us"
        others = [f"{us:.1f} us for {name}" for name, us in self.order if name != row][:2]
        versus = f" vs {', '.join(others)}" if others else " (the only row measured)"
        where = "at this bucket" if self.shapes == 1 else f"at this bucket (mean of {self.shapes} shapes)"
        return f"measured on {self.device} {where}: {mine}{versus}; evidence {self.evidence}"


class RankingStore:
    """(device class, op, dtype, bucket) -> Ranking. Immutable; equality is identity (a value built once)."""

    __slots__ = ("_by_key", "_classes")

    def __init__(self, rankings=()):
        by_key = {}
        for ranking in rankings:
            by_key[(ranking.device_class, ranking.op, ranking.dtype, ranking.bucket)] = ranking
        object.__setattr__(self, "_by_key", MappingProxyType(by_key))
        object.__setattr__(self, "_classes", frozenset(ranking.device_class for ranking in rankings))

    def __setattr__(self, name, value):
        raise AttributeError(f"RankingStore is immutable (tried to set {name!r})")

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self):
        return iter(self._by_key.values())

    def measures(self, device_class: str) -> bool:
        """True when some bucket was measured on this device class."""
        return device_class in self._classes

    def lookup(self, device_class: str, op: str, dtype: str, bucket: tuple) -> Ranking | None:
        return self._by_key.get((device_class, op, dtype, bucket))


EMPTY = RankingStore()


def parse(document: dict, source: str) -> list[Ranking]:
    """The rankings of one file's document; a malformed file raises ValueError naming `source`."""
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{source}: rankings schema {document.get('schema')!r}, expected {SCHEMA}")
    try:
        return [
            Ranking(
                op=entry["op"],
                dtype=entry["dtype"],
                device_class=document["device_class"],
                bucket=entry["bucket"],
                order=entry["ranking"],
                device=document["device"],
                evidence=entry.get("evidence", document["evidence"]),
                shapes=entry.get("shapes", 1),
            )
            for entry in document["entries"]
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{source}: malformed rankings entry: {error!r}") from None


@functools.lru_cache(maxsize=None)
def load_package_rankings(directory: str = _DATA) -> RankingStore:
    """Every rankings/*.json shipped with the package (an absent folder: no measured buckets). Read once per
    process and folder: package data does not change while the process runs, and the store is immutable."""
    if not os.path.isdir(directory):
        return EMPTY
    rankings = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as handle:
                rankings += parse(json.load(handle), path)
    return RankingStore(rankings)
