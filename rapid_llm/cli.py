"""`rapid-llm`: see what this machine (or one you describe) would run, and why.

    rapid-llm doctor                         device, SM, libraries, extension, hidden/denied/forced
    rapid-llm matrix [--device cuda:sm90 --lib flashinfer=0.6.0]
    rapid-llm explain norm.rms_norm --dtype bf16 --shape num_tokens=64,hidden=4096 [--device cuda:sm80]
    rapid-llm plan [--model llama-3-8b] [--device cuda:sm90] [--dtype bf16] [--verbose]
    rapid-llm run [--model llama-3-8b] [--layers 2] [--batch 2] [--prompt-len 16] [--decode-steps 4] [--dtype bf16]

Every command takes --json (schema version in each document's "schema").
With neither --device nor --lib, commands describe this process's probed
environment and `explain` also loads the selected target (an import failure
shows as a rejection); otherwise dispatch runs purely on the description.

Exit status:

    0    the command ran (`explain`: a row was selected)
    1    `explain`: no row is eligible (the tree says why, and its last line names the failure);
         `doctor`: it found problems (RAPID_LLM_DENY / RAPID_LLM_FORCE names the table lacks),
         listed in its report after everything else; `run`: the final logits left the tolerance of
         the all-reference run
    2    a usage or configuration error: a bad argument or a bad RAPID_LLM_* value. One line on
         stderr, "rapid-llm: ...", naming the argument or variable and the valid choices
    130  interrupted (Ctrl-C)
    141  stdout was closed early (`rapid-llm plan | head -1`): output stops without a traceback,
         with the status a Unix tool killed by SIGPIPE reports (128 + 13), so `set -o pipefail`
         scripts see it as they see `yes | head -1`

Arguments are checked against the table before anything runs: dispatch
itself accepts any dtype, dim name or version string (a typo simply matches
no row), so nonsense would otherwise come back as a plausible-looking report.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

#: 2: plan entries gained `reason`; not_served_yet entries are {what, where, dims}
SCHEMA_VERSION = 2

#: Exit statuses (module docstring).
EXIT_NO_ELIGIBLE = 1
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
#: `run`: the final logits left the tolerance of the all-reference run
EXIT_CHECK_FAILED = 1

#: SM versions --device accepts: compute capability 3.0 (sm30, the oldest CUDA GPUs) through 12.9 (sm129,
#: room past today's newest, sm120/sm121). Anything outside is a typo (sm900) or a device index (cuda:0).
SM_RANGE = range(30, 130)


class UsageError(Exception):
    """A bad argument or RAPID_LLM_* value: main() prints it as one stderr line and returns EXIT_USAGE.

    Raised instead of SystemExit so that every error path goes through one formatting point in main()
    (and in-process callers get an exit status back, not an exception).
    """


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line (a UsageError) rather than the usage text plus a line.

    Subparsers inherit the class (add_subparsers defaults parser_class to the parent's type).
    """

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------------------
# Arguments -> values, each checked against what the table defines
# ---------------------------------------------------------------------------


def _parse_device(text: str):
    """--device -> Device. A cuda device needs its SM version: capability conditions are judged on it."""
    from .kernels.dispatcher import Device

    expected = (
        f"expected cpu, cpu+triton-interpreter or cuda:smNN with NN in {SM_RANGE[0]}..{SM_RANGE[-1]} "
        "(major*10+minor: cuda:sm80, cuda:sm90, cuda:sm120; an SM version, not a device index)"
    )
    try:
        device = Device.parse(text)
    except ValueError:
        raise UsageError(f"--device: cannot parse device {text!r}; {expected}") from None
    if device.kind == "cuda" and device.sm is None:
        raise UsageError(
            f"--device {text!r}: give the GPU's SM version (rows' device conditions are judged on it); {expected}"
        )
    if device.kind == "cuda" and device.sm not in SM_RANGE:
        raise UsageError(f"--device {text!r}: sm{device.sm} is not a CUDA compute capability; {expected}")
    return device


def _parse_libs(specs):
    """--lib NAME=VERSION (repeatable) -> Libraries. A version must start with a number: version_key('abc')
    is (), which every "new enough" check would report as too old instead of as a typo."""
    from .kernels.dispatcher import Libraries
    from .kernels.dispatcher.spec import version_key

    try:
        libs = Libraries.parse(specs)
    except ValueError as error:
        message = str(error)
        raise UsageError(message if message.startswith("--lib") else f"--lib: {message}") from None
    for name, version in libs.versions:
        if not version_key(version):
            raise UsageError(f"--lib {name}={version}: the version must start with a number, such as {name}=3.6.0")
    return libs


def _parse_shape(text: str | None, dims, owner: str) -> dict[str, int]:
    """--shape name=int,... -> {name: int}: each name one of `dims` (those `owner` names), given once, >= 1.

    dispatch() takes any mapping: an unknown name (a typo) meets no condition and is silently ignored,
    and a dim below 1 describes no tensor any kernel runs on, so both are rejected here.
    """
    shape: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = (part.strip() for part in item.partition("="))
        try:
            number = int(value)
        except ValueError:
            number = None
        if not sep or not name or number is None:
            raise UsageError(f"--shape expects name=int[,name=int...] such as num_tokens=64,hidden=4096, got {item!r}")
        if name not in dims:
            raise UsageError(f"--shape: {name!r} is not a dim of {owner}; dims: {', '.join(dims)}")
        if name in shape:
            raise UsageError(f"--shape gives {name!r} twice")
        if number < 1:
            raise UsageError(f"--shape {name}={number}: every dim must be >= 1")
        shape[name] = number
    return shape


def _check_dtype(dtype: str, allowed, owner: str) -> None:
    """dtype must be a label `owner` is defined for (a label never in any contract would match no row)."""
    if dtype in allowed:
        return
    from .kernels.dispatcher.spec import DTYPE_TORCH_NAMES

    label = {torch_name: label for label, torch_name in DTYPE_TORCH_NAMES.items()}.get(dtype.removeprefix("torch."))
    hint = f" (did you mean {label}?)" if label in allowed else ""
    raise UsageError(f"--dtype {dtype!r} is not a dtype of {owner}; dtypes: {', '.join(sorted(allowed))}{hint}")


def _dims_of(contracts) -> list[str]:
    """The dim names of these contracts, each once, in contract order."""
    names: list[str] = []
    for contract in contracts:
        names += [name for name in contract.dim_names if name not in names]
    return names


# ---------------------------------------------------------------------------
# The environment: this process, or the machine --device/--lib describe
# ---------------------------------------------------------------------------


def _probe(args):
    """(Environment, is_local). --device/--lib/--no-local-libs describe another machine; deny/force still apply.

    Arguments are parsed first (a typo costs no torch import). probe_environment() raises ValueError for a
    bad RAPID_LLM_* value; that is the user's configuration, not a bug, so it becomes a UsageError (the
    message names the variable and what it accepts).
    """
    from .kernels.dispatcher import Libraries, probe_environment

    device_text = getattr(args, "device", None)
    lib_specs = getattr(args, "lib", None)
    no_local_libs = getattr(args, "no_local_libs", False)
    # A described device needs no torch import (and no GPU) to probe.
    device = _parse_device(device_text) if device_text is not None else None
    described = _parse_libs(lib_specs) if lib_specs else None
    try:
        env = probe_environment(device=device) if device is not None else probe_environment()
    except ValueError as error:
        raise UsageError(str(error)) from None
    if device is None and described is None and not no_local_libs:
        return env, True
    libs = Libraries() if no_local_libs else env.libs
    if described is not None:
        libs = Libraries({**libs.as_dict(), **described.as_dict()})
    import attrs

    return attrs.evolve(env, libs=libs), False


def _environment_problems(env, table) -> list[str]:
    """What RAPID_LLM_DENY / RAPID_LLM_FORCE name that this table lacks: one message for all unknown deny
    names, one per bad force item.

    The probe checks only these variables' syntax; their names are checked against the table here (as
    Planner does at construction), so a typo reads as a typo rather than as a dispatch traceback.
    """
    from .kernels.dispatcher.spec import BACKEND_CLASSES

    problems = []
    unknown = sorted(env.deny - table.deniable_names())
    if unknown:
        problems.append(
            f"RAPID_LLM_DENY: unknown name(s) {', '.join(map(repr, unknown))} (neither a backend "
            f"nor a row); backends: {', '.join(sorted(BACKEND_CLASSES))}; rows: listed under 'ops' by "
            "`rapid-llm doctor`"
        )
    for op, row in env.force:
        if op not in table.rows_by_op:
            problems.append(f"RAPID_LLM_FORCE: unknown op {op!r}; ops: {', '.join(table.ops)}")
        elif row not in {r.name for r in table.rows(op)}:
            problems.append(
                f"RAPID_LLM_FORCE: {row!r} is not a row of {op}; rows: {', '.join(r.name for r in table.rows(op))}"
            )
    return problems


def _environment(args, table):
    """_probe(), then refuse to run on deny/force names the table lacks (doctor reports them instead)."""
    env, local = _probe(args)
    problems = _environment_problems(env, table)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s): run `rapid-llm doctor`)" if len(problems) > 1 else ""
        raise UsageError(problems[0] + more)
    return env, local


def _select(op, env, table, *, dtype, shape, layout, force=None, deny=None, load=False):
    """dispatch() that returns (explanation, None) or, on a miss, (explanation, the one-line failure).

    Names are checked before this is called, so dispatch's ValueError (unknown force/deny names) cannot
    occur; NoEligibleKernel is a result here, not an error.
    """
    from .kernels.dispatcher import NoEligibleKernel, dispatch

    try:
        selection = dispatch(
            op,
            device=env.device,
            dtype=dtype,
            shape=shape,
            layout=layout,
            libs=env.libs,
            table=table,
            force=force if force is not None else env.forced_row(op),
            deny=env.deny | frozenset(deny or ()),
        )
        if load:
            selection = selection.load().selection
        return selection.explanation, None
    except NoEligibleKernel as error:
        return error.explanation, str(error).splitlines()[0]


def _print_json(document) -> None:
    import json

    print(json.dumps(document, indent=2, sort_keys=False))


# ---------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------


def _library_probes(installed: dict, hidden) -> dict:
    """{library: {tested, ok, reason}} from each external library's probe (rapid_llm/kernels/backends/).

    A probe imports its library only when it is installed and not hidden, so doctor shows a broken
    install's loader message (an import that fails is a reason, never a crash)."""
    import importlib

    from .kernels.backends import LIBRARY_PROBES

    probes = {}
    for name, module_name in LIBRARY_PROBES.items():
        backend = importlib.import_module(module_name)
        tested = backend.REQUIREMENT.describe()
        if name in hidden:
            probes[name] = {"tested": tested, "ok": False, "reason": "hidden by RAPID_LLM_HIDE_LIBS"}
        elif name not in installed:
            probes[name] = {"tested": tested, "ok": False, "reason": "not installed"}
        else:
            ok, reason = backend.available()
            probes[name] = {"tested": tested, "ok": ok, "reason": reason}
    return probes


def cmd_doctor(args) -> int:
    """The report, then any problems; exit 1 when there are problems (the report is still useful to read)."""
    import importlib.util
    import platform

    from . import __version__
    from .kernels.dispatcher import default_table
    from .kernels.dispatcher.environment import installed_library_versions
    from .kernels.dispatcher.libraries import known_libraries

    known = known_libraries()

    table = default_table()
    env, _ = _probe(args)  # an unparsable RAPID_LLM_* value leaves nothing to report: exit 2 there
    problems = _environment_problems(env, table)
    deniable = table.deniable_names()
    installed = installed_library_versions()
    libraries = {}
    for name in known:
        if name in env.hidden_libs:
            status = f"hidden by RAPID_LLM_HIDE_LIBS (installed: {installed.get(name, 'no')})"
        elif name in installed:
            status = installed[name]
        elif not known[name].distributions:  # part of this package (the CUDA extension): no version
            present = any(importlib.util.find_spec(module) for module in known[name].modules)
            status = f"built ({', '.join(known[name].modules)})" if present else "not built"
        else:
            status = "not installed"
        libraries[name] = status
    probes = _library_probes(installed, env.hidden_libs)
    extension = importlib.util.find_spec("rapid_llm._C") is not None
    document = {
        "schema": SCHEMA_VERSION,
        "rapid_llm": __version__,
        "python": platform.python_version(),
        "torch": env.torch_version,
        "device": str(env.device),
        "device_name": env.device_name,
        "cuda_devices": list(env.cuda_devices),
        "triton_interpreter": env.triton_interpret,
        "libraries": libraries,
        "library_probes": probes,
        "extension_built": extension,
        "hidden_libs": sorted(env.hidden_libs),
        "deny": sorted(env.deny),
        "force": dict(env.force),
        "ops": {op: [row.name for row in table.rows(op)] for op in table.ops},
        "problems": problems,
    }
    if args.json:
        _print_json(document)
        return EXIT_PROBLEMS if problems else 0

    def force_item(op, row):
        known = op in table.rows_by_op and row in {r.name for r in table.rows(op)}
        return f"{op}={row}" + ("" if known else " ✗ unknown")

    print(
        f"rapid_llm {document['rapid_llm']}  python {document['python']}  torch {document['torch'] or 'not installed'}"
    )
    device = document["device"] + (f" ({env.device_name})" if env.device_name else "")
    print(f"device           {device}")
    if env.cuda_devices:
        print(f"cuda devices     {', '.join(env.cuda_devices)}")
    print(f"triton interp.   {'on (RAPID_LLM_TRITON_INTERPRET=1)' if env.triton_interpret else 'off'}")
    print("libraries")
    width = max(len(status) for status in libraries.values())
    for name, status in libraries.items():
        probe = probes.get(name)
        detail = ""
        if probe is not None:
            verdict = (
                ("ok: " + probe["reason"])
                if probe["ok"]
                else (
                    ""
                    if probe["reason"] in ("not installed", "hidden by RAPID_LLM_HIDE_LIBS")
                    else "✗ " + probe["reason"]
                )
            )
            detail = f"  tested: {probe['tested']}" + (f"; {verdict}" if verdict else "")
        print(f"  {name:<12} {status:<{width}}{detail}".rstrip())
    print(f"extension        {'rapid_llm._C built' if extension else 'not built (RAPID_LLM_BUILD_EXT=1 to build)'}")
    print(f"hidden libs      {', '.join(document['hidden_libs']) or '-'}")
    deny = [name + ("" if name in deniable else " ✗ unknown") for name in document["deny"]]
    print(f"deny             {', '.join(deny) or '-'}")
    print(f"force            {'; '.join(force_item(op, row) for op, row in env.force) or '-'}")
    # Every row by name: what RAPID_LLM_DENY / RAPID_LLM_FORCE (and --deny / --force) take.
    print(f"ops              {len(table.ops)} ops, {len(table.rows_by_name)} rows")
    width = max(len(op) for op in table.ops) + 2
    for op in table.ops:
        print(f"  {op:<{width}}{', '.join(row.name for row in table.rows(op))}")
    if problems:
        print("problems")
        for problem in problems:
            print(f"  ✗ {problem}")
    return EXIT_PROBLEMS if problems else 0


# ---------------------------------------------------------------------------
# matrix
# ---------------------------------------------------------------------------


def _row_conditions(row) -> str:
    parts = [f"dtypes {','.join(sorted(row.dtypes))}"]
    parts += [f"lib {lib.describe()}" for lib in row.libraries]
    if row.capability:
        parts.append(" or ".join(cap.describe() for cap in row.capability))
    parts += [con.describe() for con in row.shape]
    parts += [f"layout {tag}" for tag in sorted(row.layout)]
    if not row.graph_safe:
        parts.append("not graph-safe")
    if not row.golden.verified:
        parts.append("golden: unverified")
    return "; ".join(parts)


def matrix_entries(env, table, ops, shape: dict, only_dtype: str | None = None) -> list[dict]:
    """The entries of `rapid-llm matrix --json`: one per (op, dtype of its contract, row), with the row's
    status (selected / eligible / rejected / eligible if shape fits), note, conditions and failed checks.
    Each op is judged with the dims of `shape` its contract names; ci/selection_gate.py snapshots these."""
    entries = []
    for op in ops:
        contract = table.contracts[op]
        op_shape = {name: value for name, value in shape.items() if name in contract.dim_names}
        for dtype in sorted(contract.dtypes):
            if only_dtype and dtype != only_dtype:
                continue
            explanation, _ = _select(op, env, table, dtype=dtype, shape=op_shape, layout=contract.layouts)
            for verdict in explanation.verdicts:
                row = table.rows_by_name[verdict.row]
                # Shape conditions on dims --shape did not give are listed, not judged.
                failures = [
                    c
                    for c in verdict.failures
                    if not (c.condition.startswith("shape ") and c.condition[6:] not in op_shape)
                ]
                status = verdict.status if (verdict.status != "rejected" or failures) else "eligible if shape fits"
                entries.append(
                    {
                        "op": op,
                        "dtype": dtype,
                        "row": row.name,
                        "status": status,
                        "note": verdict.note,
                        "conditions": _row_conditions(row),
                        "reasons": [check.render() for check in failures],
                    }
                )
    return entries


def cmd_matrix(args) -> int:
    from .kernels.dispatcher import default_table

    table = default_table()
    unknown = [op for op in args.op or () if op not in table.rows_by_op]
    if unknown:
        raise UsageError(f"--op {unknown[0]!r}: no such op; ops: {', '.join(table.ops)}")
    ops = [op for op in table.ops if not args.op or op in args.op]
    contracts = [table.contracts[op] for op in ops]
    if args.dtype is not None:
        _check_dtype(args.dtype, frozenset().union(*(c.dtypes for c in contracts)), "the selected ops")
    shape = _parse_shape(args.shape, _dims_of(contracts), "any selected op")
    env, _ = _environment(args, table)
    entries = matrix_entries(env, table, ops, shape, args.dtype)
    if args.json:
        _print_json(
            {
                "schema": SCHEMA_VERSION,
                "device": str(env.device),
                "libs": env.libs.as_dict(),
                "shape": shape,
                "entries": entries,
            }
        )
        return 0
    libs = ", ".join(f"{k} {v}" for k, v in env.libs.versions) or "none"
    print(
        f"support matrix  device={env.device}  libs: {libs}"
        + (f"  shape={shape}" if shape else "  (shape conditions listed, not judged)")
    )
    by_row: dict = {}
    for entry in entries:
        by_row.setdefault((entry["op"], entry["row"]), []).append(entry)
    op_width = max((len(op) for op, _ in by_row), default=2) + 2
    row_width = max((len(row) for _, row in by_row), default=3) + 2
    print(f"{'op':<{op_width}}{'row':<{row_width}}status by dtype")
    for (op, row), group in by_row.items():
        statuses = "  ".join(f"{e['dtype']}:{_SHORT_STATUS.get(e['status'], e['status'])}" for e in group)
        print(f"{op:<{op_width}}{row:<{row_width}}{statuses}")
        print(f"{'':<{op_width + row_width}}needs: {group[0]['conditions']}")
        reasons = []
        for e in group:
            reasons += [r for r in e["reasons"] if r not in reasons]
        for reason in reasons:
            print(f"{'':<{op_width + row_width}}✗ {reason}")
    return 0


_SHORT_STATUS = {
    "selected": "✓ selected",
    "eligible": "· eligible",
    "rejected": "✗ rejected",
    "eligible if shape fits": "· if shape fits",
}


# ---------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------


def _layout_for(args, contract) -> frozenset:
    """--layout -> the tags the call site provides: default every tag the op's check can derive, 'none' for
    none; a promise (e.g. qkv:finite) only when named.

    A tag the op's contract does not define can never be required by one of its rows, so it is a typo.
    """
    if args.layout is None:
        return contract.layouts
    if args.layout.strip().lower() == "none":
        return frozenset()
    tags = frozenset(tag.strip() for tag in args.layout.split(",") if tag.strip())
    unknown = sorted(tags - contract.tags)
    if unknown:
        raise UsageError(
            f"--layout: {contract.op} has no layout tag {unknown[0]!r}; tags: "
            f"{', '.join(sorted(contract.tags)) or '(none)'}, or 'none'"
        )
    return tags


def cmd_explain(args) -> int:
    from .kernels.dispatcher import default_table

    table = default_table()
    if args.op not in table.rows_by_op:
        raise UsageError(f"unknown op {args.op!r}; ops: {', '.join(table.ops)}")
    contract = table.contracts[args.op]
    rows = [row.name for row in table.rows(args.op)]
    _check_dtype(args.dtype, contract.dtypes, args.op)
    shape = _parse_shape(args.shape, contract.dim_names, args.op)
    layout = _layout_for(args, contract)
    if args.force is not None and args.force not in rows:
        raise UsageError(f"--force {args.force!r} is not a row of {args.op}; rows: {', '.join(rows)}")
    deny = [name.strip() for name in (args.deny or "").split(",") if name.strip()]
    unknown = sorted(set(deny) - table.deniable_names())
    if unknown:
        from .kernels.dispatcher.spec import BACKEND_CLASSES

        raise UsageError(
            f"--deny {unknown[0]!r} is neither a backend nor a row; backends: "
            f"{', '.join(sorted(BACKEND_CLASSES))}; rows of {args.op}: {', '.join(rows)}"
        )
    env, local = _environment(args, table)
    explanation, failure = _select(
        args.op, env, table, dtype=args.dtype, shape=shape, layout=layout, force=args.force, deny=deny, load=local
    )
    if args.json:
        document = explanation.to_dict()
        document["loaded"] = local
        document["error"] = failure
        _print_json(document)
    else:
        print(explanation.render_text(verbose=args.verbose))
        if failure:
            print(f"\n{failure}")
    return 0 if failure is None else EXIT_NO_ELIGIBLE


# ---------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------


def _plan_entries(use, contract, env, table, dtype, buckets) -> list[dict]:
    """One entry per token bucket of one op use: the plan an engine resolves for that bucket.

    A bucket is judged at its largest token count: the use's dims at that count (use.shape), keyed as
    Planner keys them (contract.bucket_key) and dispatched at the key's upper bounds, as Planner resolves it.
    Neighbouring buckets whose keys are equal (a use none of whose dims grows with the tokens) are one plan,
    one entry spanning them.
    """
    dtype, layout = use.dtype or dtype, contract.layouts - use.not_provided
    entries: list[dict] = []
    last_key = None
    for low, high in buckets:
        key = contract.bucket_key(use.shape(high))
        if key == last_key:
            entries[-1]["tokens"][1] = high
            continue
        last_key = key
        representative = {name: top for name, _, top in key}
        explanation, failure = _select(use.op, env, table, dtype=dtype, shape=representative, layout=layout)
        entries.append(
            {
                "op": use.op,
                "where": use.where,
                "dims": dict(use.dims),
                "tokens": [low, high],
                "selected": explanation.selected,
                "reason": _reason(explanation, failure, table),
                "why": _why(explanation, failure),
                "explanation": explanation.to_dict(),
            }
        )
    return entries


def _why(explanation, failure: str | None) -> str:
    """One line: the selected row's note, then each other row's fate; a miss leads with dispatch's headline."""
    parts = []
    if failure:
        parts.append("✗ " + failure.partition(": ")[2])
    for verdict in explanation.verdicts:
        if verdict.status == "selected":
            parts.append(verdict.note)
        elif verdict.status == "rejected":
            failed = ", ".join(sorted({c.condition.split(" ")[0] for c in verdict.failures}))
            parts.append(f"{verdict.row} ✗ {failed}")
        else:  # eligible: "ranked below (reference)", or "not forced" beside a forced row
            parts.append(f"{verdict.row} {verdict.note or 'ranked below'}")
    return "; ".join(parts)


def _reason(explanation, failure: str | None, table) -> str:
    """One clause for why the selected row won: the bucket's measurement against the next eligible row it
    timed, else the row's default rank ("priority 10", "reference"); a miss is dispatch's headline."""
    from .kernels.dispatcher.spec import UNMEASURED

    if failure:
        return "✗ " + failure.partition(": ")[2]
    selected = explanation.verdict(explanation.selected)
    if selected.note == "(forced)":
        return "forced"
    measured = _measured(explanation, table)
    if measured:
        return measured
    row = table.rows_by_name[selected.row]
    if row.is_reference:
        return "reference"
    return "unmeasured" if row.priority is UNMEASURED else f"priority {row.priority}"


def _measured(explanation, table) -> str | None:
    """The clause "measured 34.9 µs vs 50.0 µs for X" where the bucket's benchmark timed the selected row and X,
    the next eligible row it timed; None otherwise (a row timed alone keeps its default place: priority decided)."""
    query = explanation.query
    bucket = table.contracts[query.op].bucket_key(dict(query.shape))
    ranking = table.rankings.lookup(query.device, query.op, query.dtype, bucket)
    times = dict(ranking.order) if ranking is not None else {}
    timed = [v.row for v in explanation.verdicts if v.status in ("selected", "eligible") and v.row in times]
    if len(timed) < 2 or timed[0] != explanation.selected:
        return None
    return f"measured {times[timed[0]]:.1f} µs vs {times[timed[1]]:.1f} µs for {timed[1]}"


def _tokens_label(tokens) -> str:
    low, high = tokens
    return str(low) if low == high else f"{low}-{high}"


def _runs(entries: list[dict]) -> list[list[dict]]:
    """The entries of one op use cut where the selected row changes: consecutive buckets of one row are a run."""
    runs: list[list[dict]] = []
    for entry in entries:
        if runs and runs[-1][-1]["selected"] == entry["selected"]:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs


def _run_reason(run: list[dict]) -> str:
    """The run's reason: the clause most of its buckets share, then each other clause with the tokens it holds
    for (a bucket measured inside a run that default priority otherwise decides)."""
    spans: dict[str, list[list[int]]] = {}  # reason -> its token ranges, in run order
    for entry in run:
        ranges = spans.setdefault(entry["reason"], [])
        if ranges and ranges[-1][1] + 1 == entry["tokens"][0]:
            ranges[-1][1] = entry["tokens"][1]
        else:
            ranges.append(list(entry["tokens"]))
    buckets = Counter(entry["reason"] for entry in run)
    main = max(spans, key=buckets.__getitem__)
    others = [
        f"at {', '.join(_tokens_label(tokens) for tokens in ranges)}: {reason}"
        for reason, ranges in spans.items()
        if reason != main
    ]
    return "; ".join([main, *others])


def _print_runs(plans) -> None:
    """Default text: per op use, one line per run of buckets that select the same row."""
    lines = []
    for entries in plans:
        runs = _runs(entries)
        for run in runs:
            span = [run[0]["tokens"][0], run[-1]["tokens"][1]]
            tokens = "all tokens" if len(runs) == 1 else "tokens " + _tokens_label(span)
            lines.append((run[0]["op"], run[0]["where"], tokens, run[0]["selected"] or "-", f"({_run_reason(run)})"))
    # Columns sized to their longest entry: nothing is cut.
    widths = [max(len(line[column]) for line in lines) + 2 for column in range(4)]
    for line in lines:
        print("".join(f"{cell:<{width}}" for cell, width in zip(line, widths)) + line[4])


def _print_every_bucket(served: list[dict]) -> None:
    """--verbose: one line per bucket with every row's fate."""
    op_width = max([len("op")] + [len(e["op"]) for e in served]) + 2
    where_width = max([len("where")] + [len(e["where"]) for e in served]) + 2
    tokens_width = max([len("tokens")] + [len(_tokens_label(e["tokens"])) for e in served]) + 2
    row_width = max([len("selected")] + [len(e["selected"] or "-") for e in served]) + 2
    print(f"{'op':<{op_width}}{'where':<{where_width}}{'tokens':<{tokens_width}}{'selected':<{row_width}}why")
    for entry in served:
        tokens = _tokens_label(entry["tokens"])
        print(
            f"{entry['op']:<{op_width}}{entry['where']:<{where_width}}{tokens:<{tokens_width}}"
            f"{entry['selected'] or '-':<{row_width}}{entry['why']}"
        )


def _print_gaps(gaps) -> None:
    """What the model does that no op of the table serves, one line per kind of work."""
    by_what: dict[str, list[str]] = {}
    for gap in gaps:
        by_what.setdefault(gap.what, []).append(gap.where)
    print("\nnot served by rapid_llm yet (no op in the table):")
    width = max(len(what) for what in by_what) + 2
    for what, wheres in by_what.items():
        print(f"  {what:<{width}}{'; '.join(wheres)}")


def cmd_plan(args) -> int:
    from .kernels.dispatcher import TOKEN_BUCKETS, default_table
    from .models import preset

    try:
        model = preset(args.model)
    except KeyError as error:
        raise UsageError(f"--model: {error.args[0]}") from None
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens {args.max_tokens}: must be >= 1 (the first token bucket is 1)")
    problems = model.parallelism_errors(args.tp, args.ep)
    if problems:
        raise UsageError(f"--tp {args.tp} --ep {args.ep}: " + "; ".join(problems))
    table = default_table()
    _check_dtype(args.dtype, frozenset().union(*(c.dtypes for c in table.contracts.values())), "the table's ops")
    env, _ = _environment(args, table)
    buckets = TOKEN_BUCKETS.buckets_up_to(args.max_tokens)
    # A preset names only ops the table has (conformance/test_cli_plan.py holds them together).
    uses = model.op_uses(args.tp, args.ep)
    plans = [_plan_entries(use, table.contracts[use.op], env, table, args.dtype, buckets) for use in uses]
    served = [entry for entries in plans for entry in entries]
    gaps = model.gaps(args.tp, args.ep)
    if args.json:
        _print_json(
            {
                "schema": SCHEMA_VERSION,
                "model": model.name,
                "tp": args.tp,
                "ep": args.ep,
                "device": str(env.device),
                "libs": env.libs.as_dict(),
                "dtype": args.dtype,
                "plans": served,
                "not_served_yet": [{"what": gap.what, "where": gap.where, "dims": dict(gap.dims)} for gap in gaps],
            }
        )
        return 0
    libs = ", ".join(f"{k} {v}" for k, v in env.libs.versions) or "none"
    parallel = f"  tp={args.tp} ep={args.ep}" if (args.tp, args.ep) != (1, 1) else ""
    print(f"{model.name}{parallel}  device={env.device}  dtype={args.dtype}  libs: {libs}")
    buckets_line = f"token buckets: {TOKEN_BUCKETS.describe()}, up to {args.max_tokens}"
    if args.verbose:
        print(buckets_line)
        _print_every_bucket(served)
    else:
        print(f"{buckets_line} (a line per run of buckets that select one row; --verbose: every bucket, every row)")
        _print_runs(plans)
    if gaps:
        _print_gaps(gaps)
    return 0


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------

#: `run --dtype` choices: the activation and weight dtypes the step builds.
RUN_DTYPES = ("bf16", "fp16", "fp32")


def _run_config(args):
    """--model, --layers, ... -> RunConfig, each checked; defaults depend on the device (a few layers on the CPU)."""
    from .models import PRESETS

    if args.model not in PRESETS:
        raise UsageError(f"--model {args.model!r}: no such preset; presets: {', '.join(sorted(PRESETS))}")
    import torch

    cuda = torch.cuda.is_available()
    if args.graph and not cuda:
        raise UsageError("--graph captures the decode step in a CUDA graph: it needs a CUDA device, and there is none")
    if args.graph and PRESETS[args.model].is_moe:
        raise UsageError(
            f"--graph {args.model}: its MoE routing sizes each expert's GEMM on the host (counts per expert), which a "
            "captured graph cannot replay; --graph runs the dense presets"
        )
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError(f"--plot {args.plot}: needs matplotlib, which is not installed (pip install matplotlib)")
    preset = PRESETS[args.model]
    layers = args.layers if args.layers is not None else (preset.num_layers if cuda else 2)
    if not 1 <= layers <= preset.num_layers:
        raise UsageError(f"--layers {layers}: {preset.name} has 1..{preset.num_layers}")
    for name in ("batch", "prompt_len", "narrow"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if args.decode_steps < 0:
        raise UsageError(f"--decode-steps {args.decode_steps}: must be >= 0")
    from .step.run import RunConfig

    try:
        RunConfig(model=args.model, narrow=args.narrow).preset()
    except ValueError as error:
        raise UsageError(f"--narrow {args.narrow}: {error}") from None
    return RunConfig(
        model=args.model,
        layers=layers,
        batch=args.batch,
        prompt_len=args.prompt_len,
        decode_steps=args.decode_steps,
        dtype=args.dtype,
        seed=args.seed,
        narrow=args.narrow,
        device="cuda" if cuda else "cpu",
        graph=args.graph,
    )


def cmd_run(args) -> int:
    config = _run_config(args)
    _probe(args)  # a bad RAPID_LLM_* value is a usage error, as in every command
    from .step.report import document, render_text
    from .step.run import run

    doc = document(run(config))
    if args.plot:
        from .step.plot import plot

        plot(doc, args.plot)
    if args.json:
        _print_json(doc)
    else:
        print(render_text(doc))
        if args.plot:
            print(f"\nplot: {args.plot}")
    return 0 if doc["check"]["ok"] else EXIT_CHECK_FAILED


# ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rapid-llm",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 ok; 1 explain: no eligible row, doctor: problems found; "
        "2 bad argument or RAPID_LLM_* value; 141 stdout closed early",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def machine_options(p):
        p.add_argument(
            "--device",
            help=f"describe another device: cpu, cpu+triton-interpreter, cuda:sm90 (sm{SM_RANGE[0]}..sm{SM_RANGE[-1]})",
        )
        p.add_argument(
            "--lib",
            action="append",
            metavar="NAME=VERSION",
            help="describe an installed library (repeatable); adds to/overrides this machine's",
        )
        p.add_argument("--no-local-libs", action="store_true", help="start from no libraries instead of this machine's")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("doctor", help="this process's device, libraries, extension and overrides")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("matrix", help="op x row x dtype: conditions and status here")
    machine_options(p)
    p.add_argument("--op", action="append", help="only this op (repeatable)")
    p.add_argument("--dtype", help="only this dtype")
    p.add_argument("--shape", help="judge shape conditions for this shape: name=int,...")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("explain", help="the explanation tree of one dispatch")
    p.add_argument("op")
    p.add_argument("--dtype", required=True)
    p.add_argument("--shape", help="named dims: num_tokens=64,hidden=4096")
    p.add_argument(
        "--layout",
        help="layout tags the call site provides (default: all that the op's check derives; promises such as "
        "qkv:finite only when named; 'none')",
    )
    p.add_argument("--force", help="force this row (bypasses only the golden gate)")
    p.add_argument("--deny", help="comma-separated backends or rows to exclude")
    p.add_argument("--verbose", action="store_true", help="also list the conditions that held")
    machine_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("plan", help="every op a model calls -> the row each token bucket selects, and why")
    p.add_argument(
        "--model",
        default="llama-3-8b",
        help="preset: llama-3-8b, qwen2.5-7b, mixtral-8x7b, qwen3-30b-a3b, deepseek-v3 (default llama-3-8b)",
    )
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--max-tokens", type=int, default=32768, help="list token buckets up to this (>= 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks: one rank's ops and its all-reduces")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel ranks (MoE): EP dispatch / combine")
    p.add_argument("--verbose", action="store_true", help="every token bucket, with every row's fate")
    machine_options(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser(
        "run", help="build a preset's model (random weights, a few layers on the CPU), prefill + decode, time every op"
    )
    p.add_argument(
        "--model",
        default="llama-3-8b",
        help="preset: llama-3-8b, qwen2.5-7b, mixtral-8x7b, qwen3-30b-a3b, deepseek-v3 (default llama-3-8b)",
    )
    p.add_argument(
        "--layers", type=int, help="the model's first N layers (default: 2 on the CPU, every layer on a GPU)"
    )
    p.add_argument("--batch", type=int, default=2, help="prompts (default 2)")
    p.add_argument("--prompt-len", type=int, default=16, help="the longest prompt's tokens; the others are shorter")
    p.add_argument("--decode-steps", type=int, default=4, help="decode steps after the prefill (default 4)")
    p.add_argument("--dtype", choices=RUN_DTYPES, default="bf16", help="activations and weights (default bf16)")
    p.add_argument("--seed", type=int, default=0, help="weights, prompts and page order (default 0)")
    p.add_argument(
        "--narrow",
        type=int,
        default=1,
        help="divide the widths (hidden, MLP, heads, experts, vocab) by N: tests and quick looks (default 1: the preset)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="stacked bars of time per op, ours against the all-reference run")
    p.add_argument("--graph", action="store_true", help="run decode as a captured CUDA graph (CUDA only)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_run)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null (Python docs, "Note on SIGPIPE"): the interpreter's final flush of what is
    still buffered then succeeds instead of printing a second BrokenPipeError at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured in-process): nothing to do
        pass


def main(argv=None) -> int:
    """Run one command; return its exit status (module docstring). Errors are one stderr line, never a traceback."""
    try:
        args = _parser().parse_args(argv)
        status = args.func(args)
        sys.stdout.flush()  # a reader that went away shows up here, inside the handler, not at interpreter exit
        return status
    except UsageError as error:
        print(f"rapid-llm: {error}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
