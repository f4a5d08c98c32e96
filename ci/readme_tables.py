"""Regenerate the README's generated sections from committed evidence and the table.

    python ci/readme_tables.py          # rewrite README.md in place
    python ci/readme_tables.py --check  # exit 1 if README.md is stale (CI)

Sections (between `<!-- NAME:start -->` and `<!-- NAME:end -->` markers):
  support-matrix   `rapid-llm matrix` for the GPU we benchmark on (cuda:sm90, triton 3.6.0 and the external
                   libraries at the versions the H200 image loads)
                   and for a CPU machine with the interpreter opt-in: pure dispatch, no GPU needed
  perf-table       from perf/results/h200/bench_h200.json (the committed GPU evidence)
  library-table    from perf/results/h200/libraries_2026-12-01/bench_libraries.json (library rows beside ours)
  attention-table  from perf/results/h200/attention_2026-12-01/bench_attention.json (native attention rows;
                   attention.decode and attention.prefill from bench_attention_{decode,prefill}.json beside it)
  dispatcher-table from the CPU dispatcher baseline, perf/baselines/cpu/<machine id>/NNNN_dispatcher.json
                   (pytest-benchmark's saved format; found as ci/perf_gate finds it)
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import sys
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
EVIDENCE = os.path.join(ROOT, "perf", "results", "h200", "bench_h200.json")
LIBRARY_EVIDENCE = os.path.join(ROOT, "perf", "results", "h200", "libraries_2026-12-01", "bench_libraries.json")
ATTENTION_EVIDENCE = os.path.join(ROOT, "perf", "results", "h200", "attention_2026-12-01", "bench_attention.json")
ATTENTION_DECODE_EVIDENCE = os.path.join(os.path.dirname(ATTENTION_EVIDENCE), "bench_attention_decode.json")
ATTENTION_PREFILL_EVIDENCE = os.path.join(os.path.dirname(ATTENTION_EVIDENCE), "bench_attention_prefill.json")
ATTENTION_MLA_DECODE_EVIDENCE = os.path.join(os.path.dirname(ATTENTION_EVIDENCE), "bench_attention_mla_decode.json")
DISPATCHER_STORAGE = os.path.join(ROOT, "perf", "baselines", "cpu")
#: How the README names each dispatcher benchmark, and its requirement in short. The table lists
#: every benchmark of the baseline but the calibration, in this order first; one missing here
#: still gets a line (its test name and the requirement text it records).
DISPATCHER_LABELS = {
    "test_memoised_dispatch": ("memoised `dispatch()`", "≤ 1 µs"),
    "test_cold_dispatch": ("cold `dispatch()` of one op", "≤ 100 µs"),
    "test_planned_call": ("`PlannedOp` call (overhead over the direct call in the last column)", "≤ 0.3 µs overhead"),
    "test_direct_call": ("direct call of the same target", "-"),
    "test_public_call_overhead": ("public op `rms_norm(x, w, eps)`, fp32 [1, 8] on the CPU (overhead over a "
                                  "`PlannedOp` call of the same plan in the last column)",
                                  "overhead < 8.19 µs (before the refactor)"),
    "test_build_tables": ("`build_tables()`", "-"),
    "test_explain_cli": ("`rapid-llm explain` in-process", "-"),
    "test_import_and_build_subprocess": ("new process: import `rapid_llm.kernels` + build all tables", "≤ 100 ms"),
}
SUITE_PREFIX = "perf/test_dispatcher_bench.py::"


def _perf_gate():
    """ci/perf_gate.py as a module: one rule for where the baseline is and what it holds."""
    spec = importlib.util.spec_from_file_location("perf_gate", os.path.join(ROOT, "ci", "perf_gate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dispatcher_rows(benchmarks: dict, calibration: str) -> list[tuple[str, str, str]]:
    """(test name, label, requirement) for every benchmark of the baseline but the calibration.

    benchmarks: {fullname: pytest-benchmark benchmark entry} of the saved baseline.
    """
    names = [name.removeprefix(SUITE_PREFIX) for name in benchmarks if name != calibration]
    ordered = [name for name in DISPATCHER_LABELS if name in names]
    ordered += sorted(name for name in names if name not in DISPATCHER_LABELS)
    rows = []
    for name in ordered:
        info = benchmarks[SUITE_PREFIX + name].get("extra_info", {})
        label, requirement = DISPATCHER_LABELS.get(
            name, (f"`{name}`", (info.get("requirement") or {}).get("text", "-")))
        rows.append((name, label, requirement))
    return rows


def _cli(*argv) -> str:
    from rapid_llm.cli import main

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        main(list(argv))
    return buffer.getvalue().rstrip()


#: The H200 image with every external library this project tests (../shared/tools/fetch_gpu_wheels.sh all).
H200_LIBS = ("triton=3.6.0", "flashinfer=0.6.0", "flash_attn=0.0.3", "flash_mla=1.0.0", "deep_gemm=2.5.0",
             "deep_ep=1.2.1")


def support_matrix() -> str:
    lib_args = [arg for lib in H200_LIBS for arg in ("--lib", lib)]
    gpu = _cli("matrix", "--device", "cuda:sm90", "--no-local-libs", *lib_args)
    cpu = _cli("matrix", "--device", "cpu+triton-interpreter", "--no-local-libs", "--lib", "triton=3.6.0")
    return ("On the H200 with the external libraries installed (`rapid-llm matrix --device cuda:sm90 "
            f"--no-local-libs {' '.join(lib_args)}`; a library row marked `✗ golden` is not yet verified "
            "on the GPU and serves only when forced):\n\n"
            f"```\n{gpu}\n```\n\nOn a CPU machine with `RAPID_LLM_TRITON_INTERPRET=1` "
            "(`--device cpu+triton-interpreter`):\n\n"
            f"```\n{cpu}\n```")


def _cell(case) -> str:
    """Decode sizes: GPU time per call inside a CUDA-graph replay. Prefill sizes: L2-flushed event time."""
    if case is None:
        return "-"
    if case.get("graph_us"):
        return f"{case['graph_us']:.1f} µs (graph)"
    return f"{case['us']:.1f} µs · {case['GBps'] / 1000:.2f} TB/s · {case['pct_of_copy_bw']:.0f}%"


def perf_table() -> str:
    with open(EVIDENCE) as handle:
        evidence = json.load(handle)
    rows = {}
    for case in evidence["cases"]:
        rows.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = [
        f"{evidence['device']} (sm{evidence['sm']}), torch {evidence['torch']}, triton {evidence['triton']}, "
        f"{evidence['date'][:10]}; device-to-device copy measured in the same run: "
        f"{evidence['copy_bandwidth_GBps'] / 1000:.2f} TB/s. Decode sizes (≤ 64 tokens): GPU time per call "
        "inside a CUDA-graph replay. Prefill sizes: CUDA-event median with L2 flushed · bandwidth (bytes "
        "read + written once) · % of that copy bandwidth. Every case and timer is in "
        "`perf/results/h200/bench_h200.json` (`python perf/gpu_report.py`); this table keeps decode and "
        "the two largest prefill sizes.",
        "",
        "| op | case | native | torch reference | peer: torch eager (`F.rms_norm`; `add_` + `F.rms_norm`; `F.silu`/`F.gelu` then `mul`; `F.embedding`; `index_copy_`) | peer: FlashInfer 0.6.0 |",
        "|---|---|---|---|---|---|",
    ]
    for (op, case_id), by_row in rows.items():
        native = next((c for r, c in by_row.items() if r.startswith("native/")), None)
        reference = next((c for r, c in by_row.items() if r.startswith("torch/")), None)
        peer = next((c for r, c in by_row.items() if r.startswith("peer/torch")), None)
        flashinfer = by_row.get("peer/flashinfer")
        tokens = native["tokens"] if native and native.get("tokens") is not None else None
        if tokens is not None and 64 < tokens < 16384:
            continue
        lines.append(f"| {op} | {case_id} | {_cell(native)} | {_cell(reference)} | {_cell(peer)} | {_cell(flashinfer)} |")
    return "\n".join(lines)


def _library_cell(case) -> str:
    """Event time; TFLOP/s where the case counts FLOPs; TB/s and % of copy for the rest and for decode (its
    bytes are the KV or latent cache read); graph-replay time where measured."""
    text = f"{case['us']:.1f} µs"
    if case.get("TFLOPs"):
        text += f" · {case['TFLOPs']:.0f} TFLOP/s"
    if case.get("GBps") and (not case.get("TFLOPs") or "decode" in case["op"]):
        text += f" · {case['GBps'] / 1000:.2f} TB/s · {case['pct_of_copy_bw']:.0f}%"
    if case.get("graph_us"):
        text += f" · {case['graph_us']:.1f} µs (graph)"
    return text


def _run_cases(evidence_path: str) -> tuple[dict, list]:
    """A gpu_report run and its cases, each with its TFLOP/s (the raw pytest-benchmark file beside the summary
    supplies it where the summary predates gpu_report keeping it)."""
    with open(evidence_path) as handle:
        evidence = json.load(handle)
    raw = os.path.join(os.path.dirname(evidence_path),
                       os.path.basename(evidence_path).replace("bench_", "pytest_benchmark_"))
    with open(raw) as handle:
        tflops = {b["name"]: (b.get("extra_info") or {}).get("TFLOPs") for b in json.load(handle)["benchmarks"]}
    return evidence, [{**case, "TFLOPs": case.get("TFLOPs") or tflops.get(case["test"])} for case in evidence["cases"]]


def _ranked_table(evidence_path: str, intro: str, op_runs: tuple = ()) -> str:
    """One line per (op, case): every row of the run, fastest first. op_runs: (op, evidence path) pairs whose
    op's cases come from that later run instead (the intro says so)."""
    evidence, cases = _run_cases(evidence_path)
    order = {}  # ops in the order the first run lists them (a replaced op keeps its place)
    for case in cases:
        order.setdefault(case["op"], len(order))
    replaced = dict(op_runs)
    cases = [case for case in cases if case["op"] not in replaced]
    for op, path in op_runs:
        cases += [case for case in _run_cases(path)[1] if case["op"] == op]
    rows = {}
    for case in cases:
        rows.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = [
        f"{evidence['device']} (sm{evidence['sm']}), torch {evidence['torch']}, triton {evidence['triton']}, "
        f"{evidence['date'][:10]}, copy {evidence['copy_bandwidth_GBps'] / 1000:.2f} TB/s in the same run. {intro}",
        "",
        "| op | case | rows, fastest first |",
        "|---|---|---|",
    ]
    for (op, case_id), by_row in sorted(rows.items(), key=lambda item: order.get(item[0][0], len(order))):
        ranked = sorted(by_row.items(), key=lambda item: item[1]["us"])
        cells = "; ".join(f"`{row}` {_library_cell(case)}" for row, case in ranked)
        lines.append(f"| {op} | {case_id} | {cells} |")
    return "\n".join(lines)


def library_table() -> str:
    """Every external row beside our native row (or the peer) at the same case, from the library run."""
    return _ranked_table(LIBRARY_EVIDENCE, (
        "One run (`ci/gpu_library_evidence OUT bench`; every case, timer and correctness check in "
        "`perf/results/h200/libraries_2026-12-01/bench_libraries.json`). CUDA-event median with L2 flushed; "
        "graph-replay time where the row is capturable at decode sizes. The priority of each library row comes "
        "from this run. The FlashInfer attention rows plan (a host sync) inside every call."))


def attention_table() -> str:
    """The attention ops: our native rows, the library rows and the peers, four runs (decode, prefill and MLA
    decode from the later ones)."""
    return _ranked_table(ATTENTION_EVIDENCE, (
        "Four runs: every op but attention.decode, attention.prefill and attention.mla_decode from "
        "`ci/gpu_attention_evidence OUT bench` (`perf/results/h200/attention_2026-12-01/bench_attention.json`, `variants/call15`), attention.decode "
        "from the decode benchmark alone (`bench_attention_decode.json`, `variants/call53`, the CUDA extension's fp8 rows "
        "built, FlashInfer's CUDA-graph mode as a peer in graph replay; call15's host had made the event timing of "
        "the small decode calls host-bound, p20-p80 89-132 us at B=8), "
        "attention.prefill from the prefill benchmark alone after its sm90 kernel changed "
        "(`bench_attention_prefill.json`, `variants/call31`: two consumer warpgroups, 128-key tiles, the output through TMA), "
        "attention.mla_decode from the MLA decode benchmark alone after its sm90 kernel for 64+ heads changed "
        "(`bench_attention_mla_decode.json`, `variants/call50`: two warp-specialised warpgroups on alternate tiles; "
        "FlashInfer's MLA rows, 5-60x slower in call15, deselected there: their JIT build). "
        "CUDA-event median with L2 flushed; graph-replay time of capturable rows at every decode and MLA decode "
        "shape (device time without the host's per-call enqueue, which event timing includes where it outlasts "
        "the flush). Peers: torch SDPA, and FlashInfer planned once per step outside the timing "
        "(`peer/flashinfer.*(planned)`; its rows plan in every call), at decode also in its CUDA-graph mode "
        "(`peer/flashinfer.decode(graph)`, run() captured and replayed). Decode TB/s: the KV (or latent) bytes "
        "read."), op_runs=(("attention.decode", ATTENTION_DECODE_EVIDENCE),
                          ("attention.prefill", ATTENTION_PREFILL_EVIDENCE),
                          ("attention.mla_decode", ATTENTION_MLA_DECODE_EVIDENCE)))


def _time(seconds: float) -> str:
    for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _signed_time(seconds: float) -> str:
    return f"-{_time(-seconds)}" if seconds < 0 else _time(seconds)


def dispatcher_table() -> str:
    gate = _perf_gate()
    path = gate.locate_baseline(DISPATCHER_STORAGE)
    with open(path) as handle:
        baseline = json.load(handle)
    made = baseline.get(gate.GATE_KEY)
    if made is None:
        raise SystemExit(f"{path} was not written by ci/perf_gate --update-baseline (no '{gate.GATE_KEY}' key)")
    benchmarks = {bench["fullname"]: bench for bench in baseline["benchmarks"]}
    lines = [
        f"CPU dispatcher costs from the stored baseline (`{os.path.relpath(path, ROOT)}`, "
        f"{baseline['datetime'][:10]}, {made['runs']} runs, this project's 2-core VM, Python "
        f"{baseline['machine_info'].get('python_version', '?')}). Median: the median over the runs of "
        "pytest-benchmark's median; best: the fastest batch seen while interleaved with the calibration "
        "workload (the machine at full speed), in the run the file keeps.",
        "",
        "| what | median | best | requirement | note |",
        "|---|---|---|---|---|",
    ]
    for name, label, requirement in dispatcher_rows(benchmarks, made["calibration"]):
        info = benchmarks[SUITE_PREFIX + name].get("extra_info", {})
        best = (info.get("paired") or {}).get("work_min_s")
        note = ""
        if "plan_overhead_s" in info:
            note = f"overhead {_time(info['plan_overhead_s'])}"
        if "public_overhead_s" in info:
            before = " / ".join(_time(value) for value in info.get("before_refactor_overhead_s", []))
            note = (f"overhead {_signed_time(info['public_overhead_s'])} (public "
                    f"{_time(info['interleaved_public_s'])} vs PlannedOp {_time(info['interleaved_planned_s'])}, "
                    f"interleaved); before the refactor: {before}")
        if "torch_imported" in info:
            note = (f"bare interpreter {_time(info['bare_interpreter_median_s'])}, interpreter + attrs "
                    f"{_time(info['attrs_only_median_s']) if 'attrs_only_median_s' in info else '-'}; "
                    f"torch imported: {info['torch_imported']}, triton imported: {info['triton_imported']}")
        lines.append(f"| {label} | {_time(info[gate.GATE_KEY]['median_s'])} | {_time(best) if best else '-'} | "
                     f"{requirement} | {note} |")
    return "\n".join(lines)


def render(text: str) -> str:
    for name, make in (("support-matrix", support_matrix), ("perf-table", perf_table),
                       ("library-table", library_table), ("attention-table", attention_table),
                       ("dispatcher-table", dispatcher_table)):
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        head, found, rest = text.partition(start)
        if not found:
            raise SystemExit(f"README.md lacks the marker {start}")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"README.md lacks the marker {end}")
        text = f"{head}{start}\n{make()}\n{end}{tail}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with open(README) as handle:
        current = handle.read()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md generated sections are stale: run python ci/readme_tables.py", file=sys.stderr)
            return 1
        print("README.md generated sections are current")
        return 0
    with open(README, "w") as handle:
        handle.write(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
