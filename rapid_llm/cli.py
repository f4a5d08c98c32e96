"""`rapid-llm`: see what this machine (or one you describe) would run, and why.

    rapid-llm doctor                         device, SM, libraries, extension, hidden/denied/forced
    rapid-llm matrix [--device cuda:sm90 --lib flashinfer=0.6.0]
    rapid-llm explain norm.rms_norm --dtype bf16 --shape num_tokens=64,hidden=4096 [--device cuda:sm80]
    rapid-llm plan [--model llama-3-8b] [--device cuda:sm90] [--dtype bf16]

Every command takes --json (schema version in each document's "schema").
With neither --device nor --lib, commands describe this process's probed
environment and `explain` also loads the selected target (an import failure
shows as a rejection); otherwise dispatch runs purely on the description.
"""

from __future__ import annotations

import argparse
import sys

SCHEMA_VERSION = 1


def _parse_shape(text: str | None) -> dict[str, int]:
    shape = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"rapid-llm: --shape expects name=int[,name=int...], got {item!r}")
        shape[name.strip()] = int(value)
    return shape


def _environment(args):
    """(Environment, is_local). --device/--lib describe another machine; deny/force still apply."""
    from .kernels.dispatcher import Device, Libraries, probe_environment

    device = getattr(args, "device", None)
    libs = getattr(args, "lib", None)
    if device is None and not libs and not getattr(args, "no_local_libs", False):
        return probe_environment(), True
    try:
        # A described device needs no torch import (and no GPU) to probe.
        env = probe_environment(device=Device.parse(device)) if device else probe_environment()
        described = Libraries() if getattr(args, "no_local_libs", False) else env.libs
        if libs:
            described = Libraries({**described.as_dict(), **Libraries.parse(libs).as_dict()})
    except ValueError as error:
        raise SystemExit(f"rapid-llm: {error}") from None
    import attrs

    return attrs.evolve(env, libs=described), False


def _select(op, env, table, *, dtype, shape, layout, force=None, deny=None, load=False):
    """dispatch() that returns the Selection or the NoEligibleKernel's explanation (never raises on a miss)."""
    from .kernels.dispatcher import NoEligibleKernel, dispatch

    try:
        selection = dispatch(op, device=env.device, dtype=dtype, shape=shape, layout=layout, libs=env.libs,
                             table=table, force=force if force is not None else env.forced_row(op),
                             deny=env.deny | frozenset(deny or ()))
        if load:
            selection = selection.load().selection
        return selection.explanation, None
    except NoEligibleKernel as error:
        return error.explanation, str(error).splitlines()[0]


def _print_json(document) -> None:
    import json

    print(json.dumps(document, indent=2, sort_keys=False))


def _layout_for(args, contract) -> frozenset:
    if args.layout is None:
        return contract.layouts
    if args.layout.strip().lower() == "none":
        return frozenset()
    return frozenset(tag.strip() for tag in args.layout.split(",") if tag.strip())


# ---------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------


def cmd_doctor(args) -> int:
    import importlib.util
    import platform

    from . import __version__
    from .kernels.dispatcher import default_table
    from .kernels.dispatcher.environment import installed_library_versions
    from .kernels.dispatcher.spec import KNOWN_LIBRARIES

    env, _ = _environment(args)
    table = default_table()
    installed = installed_library_versions()
    libraries = {}
    for name in KNOWN_LIBRARIES:
        if name in env.hidden_libs:
            status = f"hidden by RAPID_LLM_HIDE_LIBS (installed: {installed.get(name, 'no')})"
        elif name in installed:
            status = installed[name]
        else:
            status = "not installed"
        libraries[name] = status
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
        "extension_built": extension,
        "hidden_libs": sorted(env.hidden_libs),
        "deny": sorted(env.deny),
        "force": dict(env.force),
        "ops": {op: [row.name for row in table.rows(op)] for op in table.ops},
    }
    if args.json:
        _print_json(document)
        return 0
    print(f"rapid_llm {document['rapid_llm']}  python {document['python']}  torch {document['torch'] or 'not installed'}")
    device = document["device"] + (f" ({env.device_name})" if env.device_name else "")
    print(f"device           {device}")
    if env.cuda_devices:
        print(f"cuda devices     {', '.join(env.cuda_devices)}")
    print(f"triton interp.   {'on (RAPID_LLM_TRITON_INTERPRET=1)' if env.triton_interpret else 'off'}")
    print("libraries")
    for name, status in libraries.items():
        print(f"  {name:<12} {status}")
    print(f"extension        {'rapid_llm._C built' if extension else 'not built (RAPID_LLM_BUILD_EXT=1 to build)'}")
    print(f"hidden libs      {', '.join(document['hidden_libs']) or '-'}")
    print(f"deny             {', '.join(document['deny']) or '-'}")
    print(f"force            {'; '.join(f'{k}={v}' for k, v in env.force) or '-'}")
    print(f"ops              {len(table.ops)} ops, {len(table.rows_by_name)} rows")
    return 0


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


def cmd_matrix(args) -> int:
    from .kernels.dispatcher import default_table

    env, _ = _environment(args)
    table = default_table()
    shape = _parse_shape(args.shape)
    entries = []
    for op in table.ops:
        if args.op and op not in args.op:
            continue
        contract = table.contracts[op]
        for dtype in sorted(contract.dtypes):
            if args.dtype and dtype != args.dtype:
                continue
            explanation, _ = _select(op, env, table, dtype=dtype, shape=shape, layout=contract.layouts)
            for verdict in explanation.verdicts:
                row = table.rows_by_name[verdict.row]
                # Without --shape, shape conditions are listed, not judged.
                failures = [c for c in verdict.failures if shape or not c.condition.startswith("shape ")]
                status = verdict.status if (verdict.status != "rejected" or failures) else "eligible if shape fits"
                entries.append({
                    "op": op, "dtype": dtype, "row": row.name, "status": status, "note": verdict.note,
                    "conditions": _row_conditions(row),
                    "reasons": [check.render() for check in failures],
                })
    if args.json:
        _print_json({"schema": SCHEMA_VERSION, "device": str(env.device), "libs": env.libs.as_dict(),
                     "shape": shape, "entries": entries})
        return 0
    libs = ", ".join(f"{k} {v}" for k, v in env.libs.versions) or "none"
    print(f"support matrix  device={env.device}  libs: {libs}"
          + (f"  shape={shape}" if shape else "  (shape conditions listed, not judged)"))
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


_SHORT_STATUS = {"selected": "✓ selected", "eligible": "· eligible", "rejected": "✗ rejected",
                 "eligible if shape fits": "· if shape fits"}


# ---------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------


def cmd_explain(args) -> int:
    from .kernels.dispatcher import default_table

    env, local = _environment(args)
    table = default_table()
    if args.op not in table.contracts:
        raise SystemExit(f"rapid-llm: unknown op {args.op!r}; ops: {', '.join(table.ops)}")
    contract = table.contracts[args.op]
    try:
        explanation, failure = _select(
            args.op, env, table, dtype=args.dtype, shape=_parse_shape(args.shape),
            layout=_layout_for(args, contract), force=args.force,
            deny=[d.strip() for d in (args.deny or "").split(",") if d.strip()], load=local,
        )
    except ValueError as error:
        raise SystemExit(f"rapid-llm: {error}") from None
    if args.json:
        document = explanation.to_dict()
        document["loaded"] = local
        document["error"] = failure
        _print_json(document)
    else:
        print(explanation.render_text(verbose=args.verbose))
        if failure:
            print(f"\n{failure}")
    return 0 if failure is None else 2


# ---------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------


def _plan_groups(op, dims, env, table, dtype, buckets):
    """Consecutive token buckets that select the same row, merged: [(low, high, explanation)]."""
    contract = table.contracts[op]
    shape_dims = {name: value for name, value in dims if name in contract.dim_names}
    groups = []
    for low, high in buckets:
        shape = {"num_tokens": high, **shape_dims} if "num_tokens" in contract.dim_names else shape_dims
        explanation, _ = _select(op, env, table, dtype=dtype, shape=shape, layout=contract.layouts)
        if groups and groups[-1][2].selected == explanation.selected:
            groups[-1] = (groups[-1][0], high, groups[-1][2])
        else:
            groups.append((low, high, explanation))
    return groups


def _why(explanation) -> str:
    parts = []
    for verdict in explanation.verdicts:
        if verdict.status == "selected":
            parts.append(verdict.note)
        elif verdict.status == "rejected":
            failed = ", ".join(sorted({c.condition.split(" ")[0] for c in verdict.failures}))
            parts.append(f"{verdict.row} ✗ {failed}")
        else:
            parts.append(f"{verdict.row} ranked below")
    return "; ".join(parts)


def cmd_plan(args) -> int:
    from .kernels.dispatcher import default_table
    from .kernels.ops.interfaces import TOKEN_BUCKETS
    from .models import preset

    try:
        model = preset(args.model)
    except KeyError as error:
        raise SystemExit(f"rapid-llm: {error.args[0]}") from None
    env, _ = _environment(args)
    table = default_table()
    buckets = TOKEN_BUCKETS.buckets_up_to(args.max_tokens)
    served, not_served = [], []
    for use in model.op_uses():
        if use.op not in table.contracts:
            not_served.append({"op": use.op, "where": use.where, "dims": dict(use.dims)})
            continue
        for low, high, explanation in _plan_groups(use.op, use.dims, env, table, args.dtype, buckets):
            served.append({"op": use.op, "where": use.where, "dims": dict(use.dims),
                           "tokens": [low, high], "selected": explanation.selected, "why": _why(explanation),
                           "explanation": explanation.to_dict()})
    if args.json:
        _print_json({"schema": SCHEMA_VERSION, "model": model.name, "device": str(env.device),
                     "libs": env.libs.as_dict(), "dtype": args.dtype, "plans": served,
                     "not_served_yet": not_served})
        return 0
    libs = ", ".join(f"{k} {v}" for k, v in env.libs.versions) or "none"
    print(f"{model.name}  device={env.device}  dtype={args.dtype}  libs: {libs}")
    op_width = max([len("op")] + [len(e["op"]) for e in served]) + 2
    row_width = max([len("selected")] + [len(e["selected"] or "-") for e in served]) + 2
    print(f"{'op':<{op_width}}{'where':<38}{'tokens':<14}{'selected':<{row_width}}why")
    for entry in served:
        low, high = entry["tokens"]
        tokens = f"{low}-{high}" if low != high else str(low)
        print(f"{entry['op']:<{op_width}}{entry['where'][:36]:<38}{tokens:<14}{entry['selected'] or '-':<{row_width}}"
              f"{entry['why']}")
    if not_served:
        print("\nnot served yet (no rows in the table):")
        for entry in not_served:
            dims = ", ".join(f"{k}={v}" for k, v in entry["dims"].items())
            print(f"  {entry['op']:<32}{entry['where']}  ({dims})")
    return 0


# ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rapid-llm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def machine_options(p):
        p.add_argument("--device", help="describe another device: cpu, cpu+triton-interpreter, cuda:sm90")
        p.add_argument("--lib", action="append", metavar="NAME=VERSION",
                       help="describe an installed library (repeatable); adds to/overrides this machine's")
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
    p.add_argument("--layout", help="layout tags the call site provides (default: all of the op's; 'none')")
    p.add_argument("--force", help="force this row (bypasses only the golden gate)")
    p.add_argument("--deny", help="comma-separated backends or rows to exclude")
    p.add_argument("--verbose", action="store_true", help="also list the conditions that held")
    machine_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("plan", help="every op a model needs x every token bucket -> selected row + why")
    p.add_argument("--model", default="llama-3-8b", help="preset: llama-3-8b, qwen2.5-7b, mixtral-8x7b, "
                   "qwen3-30b-a3b, deepseek-v3 (default llama-3-8b)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--max-tokens", type=int, default=32768)
    machine_options(p)
    p.set_defaults(func=cmd_plan)
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
