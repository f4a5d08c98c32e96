"""The explanation tree: why each row was selected, ranked below, or rejected.

    norm.rms_norm  dtype=bf16 device=cuda:sm90 shape={num_tokens:64, hidden:4096} layout={x:rows}
    ├─ ✓ native/rms_norm   selected   (priority 10)
    └─ · torch/rms_norm    eligible, ranked below (reference)

Every condition of every row is evaluated and kept (`Check`), so a rejected
row lists each failed condition with what it requires and what was observed.
`to_dict()` is the stable JSON form (schema version in SCHEMA_VERSION).
"""

from __future__ import annotations

import attrs

SCHEMA_VERSION = 1


@attrs.frozen
class Check:
    """One condition of one row: what it requires, what the query had, whether it holds."""

    condition: str
    required: str
    observed: str
    ok: bool

    def render(self) -> str:
        return f"{self.condition}: requires {self.required}; observed {self.observed}"

    def to_dict(self) -> dict:
        return {"condition": self.condition, "required": self.required, "observed": self.observed, "ok": self.ok}


@attrs.frozen
class Query:
    """What dispatch was asked (all fields as display strings or tuples)."""

    op: str
    device: str
    dtype: str
    shape: tuple[tuple[str, int], ...]
    layout: tuple[str, ...]
    libs: tuple[tuple[str, str], ...]
    force: str | None
    deny: tuple[str, ...]
    graph_safe: bool | str

    def header(self) -> str:
        shape = ", ".join(f"{k}:{v}" for k, v in self.shape)
        text = f"{self.op}  dtype={self.dtype} device={self.device} shape={{{shape}}}"
        if self.layout:
            text += " layout={" + ", ".join(self.layout) + "}"
        if self.force:
            text += f" force={self.force}"
        if self.deny:
            text += " deny={" + ", ".join(self.deny) + "}"
        if self.graph_safe:
            text += " graph_safe_only" + (" (through a step plan)" if self.graph_safe is not True else "")
        return text

    def to_dict(self) -> dict:
        return {
            "op": self.op,
            "device": self.device,
            "dtype": self.dtype,
            "shape": dict(self.shape),
            "layout": list(self.layout),
            "libs": dict(self.libs),
            "force": self.force,
            "deny": list(self.deny),
            "graph_safe_only": self.graph_safe,
        }


@attrs.frozen
class RowVerdict:
    """A row's outcome: status is 'selected', 'eligible' or 'rejected'."""

    row: str
    status: str
    note: str
    checks: tuple[Check, ...]

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)

    def to_dict(self) -> dict:
        return {
            "row": self.row,
            "status": self.status,
            "note": self.note,
            "checks": [check.to_dict() for check in self.checks],
        }


_MARKS = {"selected": "✓", "eligible": "·", "rejected": "✗"}


@attrs.frozen
class Explanation:
    query: Query
    verdicts: tuple[RowVerdict, ...]

    @property
    def selected(self) -> str | None:
        return next((v.row for v in self.verdicts if v.status == "selected"), None)

    def verdict(self, row: str) -> RowVerdict:
        return next(v for v in self.verdicts if v.row == row)

    def render_text(self, verbose: bool = False) -> str:
        """The tree. `verbose` also lists the conditions that held."""
        lines = [self.query.header()]
        width = max((len(v.row) for v in self.verdicts), default=0) + 2
        for index, verdict in enumerate(self.verdicts):
            last = index == len(self.verdicts) - 1
            branch, stem = ("└─", "   ") if last else ("├─", "│  ")
            if not verdict.note:
                label = verdict.status
            elif verdict.status == "selected":
                label = f"selected   {verdict.note}"
            else:
                label = f"{verdict.status}, {verdict.note}"
            lines.append(f"{branch} {_MARKS[verdict.status]} {verdict.row:<{width}}{label}")
            shown = verdict.checks if verbose else verdict.failures
            for check_index, check in enumerate(shown):
                twig = "└─" if check_index == len(shown) - 1 else "├─"
                mark = "" if not verbose else ("ok  " if check.ok else "FAIL ")
                lines.append(f"{stem}  {twig} {mark}{check.render()}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "query": self.query.to_dict(),
            "selected": self.selected,
            "rows": [verdict.to_dict() for verdict in self.verdicts],
        }
