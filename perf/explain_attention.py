"""Dispatch's decision for every attention op and shape of perf/test_attention_bench.py, on this machine.

    python -m perf.explain_attention [--json OUT.json]

For each benchmark case: the case's arguments are built as the benchmark builds them, the op's own argument
check derives the layout tags and contract dims, and dispatch (this machine's device, installed libraries and
measured rankings) selects a row; the selected row is then called through a Planner and must return. Prints
each explain() tree (the kernel that runs, why it ranked first, why each sibling did not) and a summary table:
op, case, selected row, and the row an engine gets that also makes the op's promises (qkv:finite), where that
differs. Needs a CUDA device (the shapes are the benchmark's).
"""

from __future__ import annotations

import argparse
import json
import sys


def cases():
    """(op, case, args) for every attention benchmark shape."""
    from perf import test_attention_bench as bench

    for case in bench.DECODE_SHAPES:
        yield bench.DECODE, case, bench._decode_inputs(case)[0]
    for case in bench.PREFILL_SHAPES:
        q, k, v, cu = bench._ragged_inputs(case, case.head_dim)
        yield bench.PREFILL, case, (q, k, v, cu, case.length, case.head_dim**-0.5, True, False)
    for case in bench.MLA_PREFILL_SHAPES:
        q, k, v, cu = bench._ragged_inputs(case, 128)
        yield bench.MLA_PREFILL, case, (q, k, v, cu, case.length, case.head_dim**-0.5, True, False)
    for case in bench.PREFILL_PAGED_SHAPES:
        yield bench.PREFILL_PAGED, case, bench._prefill_paged_inputs(case)
    for case in bench.MLA_DECODE_SHAPES:
        yield bench.MLA_DECODE, case, bench._mla_decode_inputs(case)


def main(argv=None) -> int:
    import torch

    from perf import test_attention_bench as bench
    from rapid_llm.kernels.dispatcher import Planner, dispatch, probe_environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the decisions (op, case, selected row, explain text) here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf.explain_attention: needs a CUDA device (the benchmark's shapes)", file=sys.stderr)
        return 2
    env = probe_environment()
    planner = Planner(env)
    decisions = []
    for op, case, call_args in cases():
        layout, dims = bench._layout(op, call_args)
        selection = dispatch(op, device=env.device, dtype=case.dtype, shape=dims, layout=layout, libs=env.libs)
        planner.plan(op, dtype=case.dtype, shape=dims, layout=layout)(*call_args)
        torch.cuda.synchronize()
        text = selection.explain()
        print(f"## {op} {case.id}\n{text}\n", flush=True)
        decision = {"op": op, "case": case.id, "selected": selection.row.name, "explain": text}
        promises = planner.table.contracts[op].promises
        if promises:
            promised = dispatch(
                op, device=env.device, dtype=case.dtype, shape=dims, layout=layout | promises, libs=env.libs
            )
            decision["with_promises"] = {"promises": sorted(promises), "selected": promised.row.name}
        decisions.append(decision)
        del call_args
        torch.cuda.empty_cache()
    width = max(len(d["op"]) + len(d["case"]) for d in decisions) + 2
    for d in decisions:
        promised = d.get("with_promises", {}).get("selected")
        also = f"   (promising {', '.join(d['with_promises']['promises'])}: {promised})" if promised else ""
        print(f"{d['op']}  {d['case']:<{width - len(d['op'])}}{d['selected']}{also}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "decisions": decisions}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
