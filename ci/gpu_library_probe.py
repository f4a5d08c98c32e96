"""Facts about the external-library rows that parity alone does not show, measured on the GPU.

    python ci/gpu_library_probe.py pairs OUT.txt         "ROW CASE" lines: every external row x case
    python ci/gpu_library_probe.py row OUT.json ROW [CASE]  one row (or one case of it), in its own process
    python ci/gpu_library_probe.py fa3 OUT.json          the fa3-fwd build's features
    python ci/gpu_library_probe.py merge OUT.json PARTS  one report

For an external-library row of the default table that loads here:
  - graph capture: the row's kernel captured in a CUDA graph and replayed on new inputs must equal an
    eager call; a row whose adapter syncs or plans on the host fails to capture (the error is recorded).
    The result is what the row's graph_safe must say (conformance checks the committed file);
  - first call: seconds of the first call (a JIT compile, for FlashInfer and DeepGEMM) and of a second.
Also: which FA3 features this fa3-fwd build has (paged KV, fp16), by calling them.
Writes one JSON file; prints a short table.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # conformance/, rapid_llm/


def _specified(op, args, output, index):
    """The elements of output `index` the op's contract specifies (conformance's OUTPUT_MASKS), or all."""
    from conformance.cases import OUTPUT_MASKS

    if op not in OUTPUT_MASKS:
        return output
    masks = OUTPUT_MASKS[op](*args)
    mask = masks[index] if isinstance(masks, tuple) else masks
    return output[mask]


def _graph_capture(fn, args, op):
    """(ok, detail): capture fn(*args) in a CUDA graph, replay, compare with an eager call (the elements the
    contract specifies: a grouped GEMM leaves padding rows unspecified)."""
    import torch

    try:
        eager = fn(*args)
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*args)  # warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fn(*args)
        graph.replay()
        torch.cuda.synchronize()
        first = eager[0] if isinstance(eager, tuple) else eager
        second = captured[0] if isinstance(captured, tuple) else captured
        same = bool(torch.equal(_specified(op, args, first, 0), _specified(op, args, second, 0)))
        return same, "replay equals the eager call" if same else "replay differs from the eager call"
    except Exception as error:  # capture errors are the measurement
        torch.cuda.synchronize()
        return False, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"


def _fa3_features():
    import torch

    result = {}
    try:
        from fa3_fwd_interface import flash_attn_with_kvcache
    except Exception as error:
        return {"import": f"{type(error).__name__}: {error}"}
    q = torch.randn(2, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(8, 16, 2, 128, device="cuda", dtype=torch.bfloat16)
    table = torch.arange(8, dtype=torch.int32, device="cuda").view(2, 4)
    lens = torch.tensor([40, 17], dtype=torch.int32, device="cuda")
    for label, dtype in (("paged_kv_bf16", torch.bfloat16), ("paged_kv_fp16", torch.float16)):
        try:
            flash_attn_with_kvcache(q.to(dtype), cache.to(dtype), cache.to(dtype), cache_seqlens=lens, page_table=table)
            torch.cuda.synchronize()
            result[label] = "works"
        except Exception as error:
            result[label] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return result


def probe_row(row_name: str, case_id: str | None = None) -> dict:
    """Load the row, call it on every parity case it accepts (or on `case_id` only: one process per case lets
    a JIT library compile its kernel variants in parallel; each variant compiles on its first call), then
    capture the first small case it ran in a CUDA graph."""
    import torch

    from conformance.cases import CASES
    from rapid_llm.kernels.dispatcher import default_table
    from rapid_llm.kernels.dispatcher.select import resolve_target
    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    table = default_table()
    row = table.rows_by_name[row_name]
    module, _, function = table.contracts[row.op].check.partition(":")
    check = getattr(__import__(module, fromlist=[function]), function)
    record = {"row": row.name, "op": row.op, "declared_graph_safe": row.graph_safe}
    start = time.perf_counter()
    fn, reason = resolve_target(row.target, row.available)
    record["load_s"] = round(time.perf_counter() - start, 3)
    if fn is None:
        record["loads"] = reason
        return record
    calls, first_case = [], None
    for case in CASES[row.op]:
        if case_id is not None and case.id != case_id:
            continue
        for dtype in sorted(row.dtypes & case.dtypes):
            args, _, layout = case.make(TORCH_DTYPES[dtype], "cuda", torch.Generator().manual_seed(5))
            if not row.layout <= layout:
                continue
            try:
                _, _, dims = check(*args)
            except Exception:
                continue
            if not all(c.accepts(dict(dims).get(c.dim)) for c in row.shape):
                continue
            start = time.perf_counter()
            try:
                fn(*args)
                torch.cuda.synchronize()
            except Exception as error:  # a call that fails is a finding, recorded with the library's message
                calls.append({"case": case.id, "dtype": dtype, "error": f"{type(error).__name__}: {error}"[:400]})
                continue
            calls.append({"case": case.id, "dtype": dtype, "seconds": round(time.perf_counter() - start, 4)})
            if first_case is None and not case.gpu_only:
                first_case = (case.id, args)
    record["calls"] = calls
    record["slowest_first_call_s"] = max((c["seconds"] for c in calls if "seconds" in c), default=None)
    if first_case is not None:
        ok, detail = _graph_capture(fn, first_case[1], row.op)
        record.update(graph_case=first_case[0], graph_capturable=ok, graph_detail=detail)
    return record


def _merge(parts):
    """One record per row from its per-case parts: every call, the slowest first call, and the graph capture
    of the row's first small case (parts arrive in case order)."""
    rows: dict[str, dict] = {}
    for part in parts:
        record = rows.setdefault(part["row"], {key: part[key] for key in ("row", "op", "declared_graph_safe")})
        if "loads" in part:
            record["loads"] = part["loads"]
        record.setdefault("calls", []).extend(part.get("calls", []))
        if "graph_case" in part and "graph_case" not in record:
            record.update({key: part[key] for key in ("graph_case", "graph_capturable", "graph_detail")})
    for record in rows.values():
        record["slowest_first_call_s"] = max((c["seconds"] for c in record["calls"] if "seconds" in c), default=None)
        record["failed_calls"] = [c for c in record["calls"] if "error" in c]
    return list(rows.values())


def main(argv) -> int:
    """row OUT.json ROW [CASE]: one row (one process per row or per case); pairs OUT.txt: "ROW CASE" per line
    for every external row and case of its op; fa3 OUT.json: FA3's features; merge OUT.json PARTS...: one report."""
    import torch

    command, path, *rest = argv
    if command == "pairs":
        from conformance.cases import CASES
        from rapid_llm.kernels.dispatcher import default_table

        table = default_table()
        with open(path, "w") as handle:
            for op in table.ops:
                for row in table.rows(op):
                    if row.implementation_class == "external":
                        handle.writelines(f"{row.name} {case.id}\n" for case in CASES[op])
        return 0
    if command == "row":
        report = probe_row(rest[0], rest[1] if len(rest) > 1 else None)
    elif command == "fa3":
        report = _fa3_features()
    else:
        missing = [part for part in rest if not os.path.exists(part)]
        parts = [json.load(open(part)) for part in rest if os.path.exists(part)]
        report = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "rows": _merge([p for p in parts if "row" in p]),
            "fa3_features": [p for p in parts if "row" not in p],
            "missing_parts": missing,
        }  # a probe process that died before writing (its .log says why)
        for record in report["rows"]:
            print(
                f"{record['row']:34s} declared graph_safe={record['declared_graph_safe']!s:5s} "
                f"capturable={record.get('graph_capturable', '-')!s:5s} "
                f"slowest first call={record.get('slowest_first_call_s', '-')}s "
                f"{record.get('graph_detail', record.get('loads', ''))[:80]}"
            )
        print("fa3 features:", report["fa3_features"])
    with open(path, "w") as handle:
        json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
