"""What an absence cell can change: the rows whose reach differs from the all-present cell's.

    python -m conformance.cell_scope [--device cpu|cuda:sm90] [--json]

A cell (RAPID_LLM_HIDE_LIBS, RAPID_LLM_TRITON_INTERPRET) changes only the
conditions that read the library set and the device: a row's `libraries`
(hidden ones read as not installed), its `capability` (the interpreter flag
of a cpu device, and a capability narrowed to some dtypes), and, for the CUDA
extension's aot/ and jit/ rows, the probe that `cuda_extension` hides. A
row's reach is the set of dtypes those conditions let it serve; the rows
whose reach differs from the all-present cell's (nothing hidden, the
interpreter on where the device is a cpu: the README's test command) are the
affected rows, and their ops the affected ops. Every other condition (shape,
layout, golden, priority) is the same in every cell, so where no row's reach
moves, no selection moves either.

With RAPID_LLM_CELL_SCOPE=1, conformance/conftest.py keeps only the tests
that can see a difference (ci/absence_matrix sets it): the tests of affected
rows and ops (items parametrised by a row, a PlannedOp, an op id or a public
op function; a forced row's outcome depends on that row alone, so an item
naming a row is judged by the row), the cell's own assertions
(test_absence_cell.py) and the torch-free import tests (test_torch_free.py).

Torch-free: reads the table, the installed distributions' versions and the
environment variables; the device is given (default: cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rapid_llm.kernels.dispatcher import Device, Libraries, build_tables
from rapid_llm.kernels.dispatcher.environment import installed_library_versions, parse_flag, parse_hidden_libs

#: Modules every scoped cell runs whole: the cell's own assertions, and the torch-free import tests.
ALWAYS = ("test_absence_cell.py", "test_torch_free.py")
#: Backends whose rows a load-time probe of this package's CUDA extension decides (hidden as `cuda_extension`).
EXTENSION_BACKENDS = ("aot", "jit")


def reach(row, device: Device, libs: Libraries, hidden) -> frozenset[str]:
    """The dtypes `row`'s library and device conditions let it serve on `device` with `libs` installed."""
    if not all(requirement.check(libs.get(requirement.name))[0] for requirement in row.libraries):
        return frozenset()
    if row.backend in EXTENSION_BACKENDS and "cuda_extension" in hidden:
        return frozenset()
    if not row.capability:
        return row.dtypes
    return frozenset(
        dtype for dtype in row.dtypes if any(requirement.accepts(device, dtype) for requirement in row.capability)
    )


class Scope:
    """The affected rows and ops of one cell, against the all-present cell on the same device."""

    def __init__(self, table, device: Device, installed: dict, hidden, interpret: bool):
        self.hidden = frozenset(hidden)
        self.interpret = interpret
        self.device = Device(device.kind, device.sm, triton_interpreter=device.kind == "cpu" and interpret)
        all_present = Device(device.kind, device.sm, triton_interpreter=device.kind == "cpu")
        libs = Libraries(installed)
        cell_libs = libs.without(self.hidden)
        self.changes = {}  # row name -> (all-present reach, this cell's reach)
        for op in table.ops:
            for row in table.rows(op):
                before, after = reach(row, all_present, libs, ()), reach(row, self.device, cell_libs, self.hidden)
                if before != after:
                    self.changes[row.name] = (before, after)
        self.rows = frozenset(self.changes)
        self.ops = frozenset(table.rows_by_name[name].op for name in self.rows)

    @classmethod
    def of(cls, environ=None, device: Device | None = None, table=None) -> "Scope":
        """This process's cell (or `environ`'s), on `device` (default: cpu)."""
        environ = os.environ if environ is None else environ
        return cls(
            table or build_tables(),
            device or Device("cpu"),
            installed_library_versions(),
            parse_hidden_libs(environ.get("RAPID_LLM_HIDE_LIBS", "")),
            parse_flag("RAPID_LLM_TRITON_INTERPRET", environ.get("RAPID_LLM_TRITON_INTERPRET")),
        )

    def summary(self) -> str:
        cell = (
            f"hidden {{{', '.join(sorted(self.hidden))}}}, interpreter {'on' if self.interpret else 'off'}, "
            f"device {self.device}"
        )
        if not self.rows:
            return f"cell scope ({cell}): no row's reach differs from the all-present cell's"
        return (
            f"cell scope ({cell}): {len(self.rows)} row(s) of {len(self.ops)} op(s) differ from the "
            f"all-present cell: {', '.join(sorted(self.rows))}"
        )

    def to_dict(self) -> dict:
        return {
            "hidden": sorted(self.hidden),
            "interpreter": self.interpret,
            "device": str(self.device),
            "ops": sorted(self.ops),
            "rows": {
                name: {"all_present": sorted(before), "cell": sorted(after)}
                for name, (before, after) in sorted(self.changes.items())
            },
        }


def item_references(params: dict, table) -> tuple[set, set]:
    """(row names, op ids) that a test item's parameter values name."""
    rows, ops = set(), set()
    short_names = {op.split(".", 1)[1]: op for op in table.ops}
    for value in params.values():
        row = getattr(value, "row", None)  # a PlannedOp
        name = getattr(value, "name", None)
        if isinstance(value, str):
            text = value.split(":", 1)[1] if value.startswith("public:") else value
            if text in table.rows_by_name:
                rows.add(text)
            elif text in table.rows_by_op:
                ops.add(text)
        elif row is not None and getattr(row, "name", None) in table.rows_by_name:
            rows.add(row.name)
        elif isinstance(name, str) and name in table.rows_by_name and getattr(value, "op", None):
            rows.add(name)  # a KernelSpec
        elif (
            callable(value)
            and getattr(value, "__module__", "").startswith("rapid_llm.")
            and getattr(value, "__name__", None) in short_names
        ):
            ops.add(short_names[value.__name__])  # a public op function: it runs the row selected here
    return rows, ops


def in_scope(item, scope: Scope, table) -> bool:
    """Whether a collected test item can see this cell's difference."""
    if os.path.basename(str(item.path)) in ALWAYS:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    rows, ops = item_references(callspec.params, table)
    if rows:
        return bool(rows & scope.rows)
    return bool(ops & scope.ops)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.cell_scope", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda:smNN")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    scope = Scope.of(device=Device.parse(args.device))
    print(json.dumps(scope.to_dict(), indent=1) if args.json else scope.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
