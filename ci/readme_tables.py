"""Regenerate the generated sections of the docs/ pages from committed evidence and the table.

    python ci/readme_tables.py          # rewrite the docs/ pages' generated sections in place
    python ci/readme_tables.py --check  # exit 1 if a generated section is stale

Each page keeps its hand-written text; the generator rewrites only what lies between its
`<!-- NAME:start -->` and `<!-- NAME:end -->` markers. Numbers come from the committed evidence,
read by id through perf/results/index.json (perf/evidence.py), or from dispatch itself:

  docs/support-matrix.md
    attention-features  per attention op, the rows implementing each optional feature (window, soft cap,
                        sinks, lse, several query tokens, tree masks): from the table
    support-matrix   `rapid-llm matrix` for the GPU we benchmark on (cuda:sm90, triton 3.6.0 and the external
                     libraries at the versions the H200 image loads) and for a CPU machine with the
                     interpreter opt-in: pure dispatch, no GPU needed
  docs/performance.md
    model-step-table h200.model_step.decode / .prefill / .moe / .compiled (python -m perf.model_step)
    gemm-mm-table    h200.gemm.bench.mm.presets (gemm.mm and gemm.w8a16_mm: cuBLAS and our rows per case, the selected row)
    gemm-fp8-table   h200.gemm.bench.fp8.ranked, h200.gemm.bench.fp8_block.gluon, h200.gemm.bench.fp8_block.m1 (the
                     fp8 GEMMs: our rows beside DeepGEMM and torch._scaled_mm)
    host-cost-table  h200.host_cost (python -m perf.host_cost: host time per call, ours beside the peers)
    perf-table       h200.core.bench (norm, activation, elementwise, embedding, rotary, kvcache, quantization)
    attention-table  h200.attention.bench (every attention row and engine-driven peer, one run)
    step-plan-table  h200.attention.bench.step_plans (+ .raw): the rows with a per-step preparation, each through
                     its step plan and per call, beside the engine-driven peers
    extension-table  h200.extension.bench.scale and h200.extension.bench.kv_write (the CUDA extension's rows)
    dispatcher-table the CPU dispatcher baseline, perf/baselines/cpu/<machine id>/NNNN_dispatcher.json
                     (pytest-benchmark's saved format; found as ci/perf_gate finds it)
  docs/libraries.md
    library-table    h200.libraries.bench (library rows beside ours)
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
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from perf import evidence  # noqa: E402  (the repository root on sys.path first: run as a script)

CORE_BENCH = "h200.core.bench"
LIBRARY_BENCH = "h200.libraries.bench"
ATTENTION_BENCH = "h200.attention.bench"
EXTENSION_BENCHES = ("h200.extension.bench.scale", "h200.extension.bench.kv_write")
DISPATCHER_STORAGE = os.path.join(ROOT, "perf", "baselines", "cpu")
#: How the docs name each dispatcher benchmark, and its requirement in short. The table lists
#: every benchmark of the baseline but the calibration, in this order first; one missing here
#: still gets a line (its test name and the requirement text it records).
DISPATCHER_LABELS = {
    "test_memoised_dispatch": ("memoised `dispatch()`", "≤ 1 µs"),
    "test_cold_dispatch": ("cold `dispatch()` of one op", "≤ 100 µs"),
    "test_planned_call": ("`PlannedOp` call (overhead over the direct call in the last column)", "≤ 0.3 µs overhead"),
    "test_direct_call": ("direct call of the same target", "-"),
    "test_public_call_overhead": (
        "public op `rms_norm(x, w, eps)`, fp32 [1, 8] on the CPU (overhead over a "
        "`PlannedOp` call of the same plan in the last column)",
        "overhead < 8.19 µs (before the refactor)",
    ),
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
    """(full name, label, requirement) for every benchmark of the baseline but the calibration: the dispatcher
    suite's in DISPATCHER_LABELS order, then the others (the host-path suite's) by name.

    benchmarks: {fullname: pytest-benchmark benchmark entry} of the saved baseline.
    """
    names = [name for name in benchmarks if name != calibration]
    short = {name: name.removeprefix(SUITE_PREFIX) for name in names}
    ordered = [SUITE_PREFIX + label for label in DISPATCHER_LABELS if SUITE_PREFIX + label in benchmarks]
    ordered += sorted(name for name in names if name not in ordered)
    rows = []
    for name in ordered:
        info = benchmarks[name].get("extra_info", {})
        label, requirement = DISPATCHER_LABELS.get(
            short[name], (f"`{short[name].rpartition('::')[2]}`", (info.get("requirement") or {}).get("text", "-"))
        )
        rows.append((name, label, requirement))
    return rows


def _cli(*argv) -> str:
    from rapid_llm.cli import main

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        main(list(argv))
    return buffer.getvalue().rstrip()


#: The H200 image with every external library this project tests (../shared/tools/fetch_gpu_wheels.sh all).
H200_LIBS = (
    "triton=3.6.0",
    "flashinfer=0.6.0",
    "flash_attn=0.0.3",
    "flash_mla=1.0.0",
    "deep_gemm=2.5.0",
    "deep_ep=1.2.1",
)


def support_matrix() -> str:
    lib_args = [arg for lib in H200_LIBS for arg in ("--lib", lib)]
    gpu = _cli("matrix", "--device", "cuda:sm90", "--no-local-libs", *lib_args)
    cpu = _cli("matrix", "--device", "cpu+triton-interpreter", "--no-local-libs", "--lib", "triton=3.6.0")
    return (
        "On the H200 with the external libraries installed (`rapid-llm matrix --device cuda:sm90 "
        f"--no-local-libs {' '.join(lib_args)}`; a library row marked `✗ golden` is not yet verified "
        "on the GPU and serves only when forced):\n\n"
        f"```\n{gpu}\n```\n\nOn a CPU machine with `RAPID_LLM_TRITON_INTERPRET=1` "
        "(`--device cpu+triton-interpreter`):\n\n"
        f"```\n{cpu}\n```"
    )


#: {feature (the attention package's FEATURE_OFF_TAGS names): the argument a call uses it through}
_FEATURE_ARGUMENTS = {
    "window": "window_left",
    "softcap": "logits_soft_cap",
    "sinks": "sinks",
    "lse": "return_lse",
    "tokens": "num_q_tokens > 1",
    "mask": "custom_mask",
}


def attention_features_table() -> str:
    """Per attention op, which row implements which optional feature: a row that does not requires the
    feature's off-tag, so a call using the feature is served by the rows marked here (dispatch's
    explain() names the missing tag for the others)."""
    from rapid_llm.kernels.dispatcher import default_table
    from rapid_llm.kernels.ops.attention import FEATURE_OFF_TAGS, OP_FEATURES

    table = default_table()
    sections = []
    for op, features in OP_FEATURES.items():
        if not features:
            continue
        header = " | ".join(f"`{_FEATURE_ARGUMENTS[feature]}`" for feature in features)
        lines = [f"`{op}`\n", f"| row | {header} |", "|---|" + "---|" * len(features)]
        for row in table.rows(op):
            marks = " | ".join("-" if FEATURE_OFF_TAGS[feature] in row.layout else "✓" for feature in features)
            lines.append(f"| {row.name} | {marks} |")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def _cell(case) -> str:
    """Decode sizes: GPU time per call inside a CUDA-graph replay. Prefill sizes: L2-flushed event time."""
    if case is None:
        return "-"
    if case.get("graph_us"):
        return f"{case['graph_us']:.1f} µs (graph)"
    return f"{case['us']:.1f} µs · {case['GBps'] / 1000:.2f} TB/s · {case['pct_of_copy_bw']:.0f}%"


def _load(evidence_id: str) -> dict:
    with open(evidence.file(evidence_id)) as handle:
        return json.load(handle)


def _run_line(evidence_id: str, run: dict) -> str:
    """Where a table's numbers come from: the id, its file, and the device, versions and date the file records."""
    return (
        f"`{evidence_id}` (`{evidence.resolve(evidence_id)}`): {run['device']} (sm{run['sm']}), torch "
        f"{run['torch']}, triton {run['triton']}, {run['date'][:10]}; device-to-device copy in the same run "
        f"{run['copy_bandwidth_GBps'] / 1000:.2f} TB/s"
    )


def perf_table() -> str:
    run = _load(CORE_BENCH)
    rows = {}
    for case in run["cases"]:
        rows.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = [
        f"From {_run_line(CORE_BENCH, run)}. Decode sizes (≤ 64 tokens): GPU time per call inside a "
        "CUDA-graph replay. Prefill sizes: CUDA-event median with L2 flushed · bandwidth (bytes read + written "
        "once) · % of that copy bandwidth. The file has every case and timer; this table keeps decode and "
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
        lines.append(
            f"| {op} | {case_id} | {_cell(native)} | {_cell(reference)} | {_cell(peer)} | {_cell(flashinfer)} |"
        )
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


def _run_cases(evidence_id: str) -> tuple[dict, list]:
    """A gpu_report run and its cases, each with its TFLOP/s (the raw pytest-benchmark file, indexed as
    `<id>.raw`, supplies it where the summary predates gpu_report keeping it)."""
    run = _load(evidence_id)
    tflops = {}
    if f"{evidence_id}.raw" in evidence.index():
        tflops = {
            b["name"]: (b.get("extra_info") or {}).get("TFLOPs") for b in _load(f"{evidence_id}.raw")["benchmarks"]
        }
    return run, [{**case, "TFLOPs": case.get("TFLOPs") or tflops.get(case["test"])} for case in run["cases"]]


def _ranked_table(runs: tuple, intro: str) -> str:
    """One line per (op, case): every row of the run, fastest first.

    runs: (evidence id, ops) pairs; the first run's ops are None (all of its ops but those a later run names),
    each later run supplies the ops it names."""
    (first_id, _), later = runs[0], runs[1:]
    first, cases = _run_cases(first_id)
    order = {}  # ops in the order the first run lists them (a replaced op keeps its place)
    for case in cases:
        order.setdefault(case["op"], len(order))
    replaced = {op for _, ops in later for op in ops}
    cases = [case for case in cases if case["op"] not in replaced]
    sources = [_run_line(first_id, first)]
    for evidence_id, ops in later:
        run, later_cases = _run_cases(evidence_id)
        cases += [case for case in later_cases if case["op"] in ops]
        sources.append(f"{_run_line(evidence_id, run)} ({', '.join(ops)})")
    rows = {}
    for case in cases:
        rows.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = [
        intro,
        "",
        *(f"- {source}" for source in sources),
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
    return _ranked_table(
        ((LIBRARY_BENCH, None),),
        (
            "One run (`ci/gpu_library_evidence OUT bench`; every case, timer and correctness check in the file). "
            "CUDA-event median with L2 flushed; graph-replay time where the row is capturable at decode sizes. "
            "The priority of each library row comes from this run. The FlashInfer attention rows plan (a host "
            "sync) inside every call."
        ),
    )


#: Our rows (the kernels this library ships): the rows the attention table states ratios for.
OUR_BACKENDS = ("native", "aot", "jit")


def _device_time(case, timer: str):
    return case.get("graph_us") if timer == "graph" else case.get("us")


def attention_table() -> str:
    """The attention ops from one run: per case our fastest row against the fastest library driven as engines
    drive it (the ratio), then every row and peer of the case, fastest first."""
    run, cases = _run_cases(ATTENTION_BENCH)
    rows = {}
    for case in cases:
        rows.setdefault((case["op"], case["case"]), {})[case["row"]] = case
    lines = [
        "One run, every arm of a case side by side in one process (`ci/gpu_attention_evidence OUT warm`, then "
        "`WARM=0 ci/gpu_attention_evidence OUT bench`): each native kernel as its own row, the CUDA extension's "
        "fp8 decode, and every library row as our dispatch calls it (FlashInfer's rows plan, a host sync, in "
        "every call; FlashMLA's row computes its split schedule in every call), beside the libraries driven as "
        "engines drive them (`peer/...`: FlashInfer planned once per step, FlashMLA's schedule once per step, "
        "both outside the timing; torch SDPA). Decode and MLA decode: CUDA-graph replay per call (engines replay "
        "decode steps), where every arm compared was captured; else, and for prefill, CUDA-event median with "
        "L2 flushed. **vs engine** = the fastest engine-driven peer's time / our fastest row's time, same timer "
        "(> 1: ours is faster). The FA3 and FlashInfer ragged prefill rows serve only calls that promise "
        "`qkv:finite` (see [how dispatch decides](../README.md#how-dispatch-decides)).",
        "",
        f"- {_run_line(ATTENTION_BENCH, run)}",
        "",
        "| op | case | our fastest row | fastest engine-driven peer | vs engine | every arm, fastest first |",
        "|---|---|---|---|---|---|",
    ]
    for (op, case_id), by_row in rows.items():
        ours = {row: case for row, case in by_row.items() if row.partition("/")[0] in OUR_BACKENDS}
        peer = {row: case for row, case in by_row.items() if row.startswith("peer/") and case.get("us")}
        engine = next(iter(ours.values()), {}).get("engine_peer") or {}
        timer = "graph" if engine.get("graph") and all(c.get("graph_us") for c in ours.values()) else "event"
        best_ours = min(ours.items(), key=lambda item: _device_time(item[1], timer), default=None)
        best_peer = engine.get(timer)
        if best_ours and best_peer:
            ours_cell = f"`{best_ours[0]}` {_device_time(best_ours[1], timer):.1f} µs"
            peer_cell = f"`{best_peer['row']}` {best_peer['us']:.1f} µs"
            ratio = f"{best_peer['us'] / _device_time(best_ours[1], timer):.2f}x ({timer})"
        else:
            ours_cell = f"`{best_ours[0]}` {best_ours[1]['us']:.1f} µs" if best_ours else "-"
            peer_cell, ratio = ("-", "-") if not peer else ("-", "no engine-driven peer")
        ranked = sorted(by_row.items(), key=lambda item: item[1].get("graph_us") or item[1]["us"])
        cells = "; ".join(f"`{row}` {_library_cell(case)}" for row, case in ranked)
        lines.append(f"| {op} | {case_id} | {ours_cell} | {peer_cell} | {ratio} | {cells} |")
    return "\n".join(lines)


MODEL_STEP = "h200.model_step"


def _model_step(part: str):
    """The result of one perf.model_step part and its header, or None when that evidence is not committed."""
    try:
        return _load(f"{MODEL_STEP}.{part}")
    except KeyError:
        return None


def _breakdown_line(run: dict, top: int = 6) -> str:
    parts = [f"{item['name'].split('.')[-1]} ({item['where']}) {item['ms']:.2f} ms" for item in run["breakdown"][:top]]
    return "; ".join(parts)


def model_step_table() -> str:
    """The model step against the hardware's limit (perf/model_step.py): decode as one CUDA graph against the
    roofline, the baselines, prefill against the bf16 peak, and each run's largest op uses."""
    decode, prefill = _model_step("decode"), _model_step("prefill")
    compiled, moe = _model_step("compiled"), _model_step("moe")
    if decode is None:
        return "No model-step run is committed yet."
    d = decode["result"]
    lines = [
        "`python -m perf.model_step --out DIR` on the GPU (its docstring has every formula). Decode: "
        f"{d['model']}, every layer ({d['layers']}), bf16, batch {d['batch']}, context {d['context']}, random "
        "weights and KV; the roofline is (weight bytes + KV bytes read) / the device-to-device copy bandwidth "
        "measured in the same run. Per-op breakdowns: one eager step with a synchronize around every call.",
        "",
        f"- `{MODEL_STEP}.decode` (`{evidence.resolve(MODEL_STEP + '.decode')}`): {decode['device']}, torch "
        f"{decode['versions']['torch']}, triton {decode['versions'].get('triton')}; roofline "
        f"{d['roofline_ms']:.2f} ms = ({d['weight_bytes'] / 1e9:.1f} GB weights + {d['kv_bytes'] / 1e9:.1f} GB "
        f"KV) / {d['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s",
        "",
        "| run | how | time per step | / roofline |",
        "|---|---|---|---|",
    ]
    runs = dict(d["runs"])
    if compiled is not None:
        runs.update(compiled["result"]["runs"])
    hows = {
        "ours": "every op planned graph_safe_only, paged decode through its step plan",
        "reference": "every op on its torch reference row (its KV write syncs: eager only)",
        "compiled_reference": "torch.compile of the reference layer, captured",
    }
    for label, run in runs.items():
        if "error" in run:
            lines.append(f"| {label} | {hows.get(label, '')} | failed: {run['error']} | - |")
            continue
        for kind in ("graph", "eager"):
            if f"{kind}_ms" in run:
                lines.append(
                    f"| {label} ({'one CUDA graph' if kind == 'graph' else 'eager, no per-op sync'}) | "
                    f"{hows.get(label, '')} | {run[f'{kind}_ms']:.2f} ms | {run[f'{kind}_over_roofline']:.2f}x |"
                )
    lines += ["", f"Largest op uses of our eager decode step: {_breakdown_line(runs['ours'])}."]
    if prefill is not None:
        p = prefill["result"]
        lines += [
            "",
            f"Prefill (`{MODEL_STEP}.prefill`): {p['model']}, {p['prompts']} x {p['prompt_length']} tokens, eager: "
            f"{p['step_ms']:.1f} ms per step, {p['tflops_per_s']:.0f} TFLOP/s = "
            f"{100 * p['fraction_of_bf16_dense_peak']:.1f}% of the {p['bf16_dense_peak_flops'] / 1e12:.1f} TFLOP/s "
            f"dense bf16 peak. Largest op uses: {_breakdown_line(p)}.",
        ]
    if moe is not None:
        lines += ["", f"MoE and MLA presets (`{MODEL_STEP}.moe`, `rapid-llm run` on the GPU):", ""]
        for model, doc in moe["result"].items():
            if "error" in doc:
                lines.append(f"- {model} ({doc['layers_reduced']}): failed: {doc['error']}")
                continue
            ours = doc["throughput"]["ours"]
            uses = sorted(doc["uses"], key=lambda use: -use["ours_ms"])[:6]
            top = "; ".join(f"{use['name'].split('.')[-1]} ({use['where']}) {use['ours_ms']:.1f} ms" for use in uses)
            fallbacks = ", ".join(sorted({f["op"] for f in doc["fallbacks"]})) or "none"
            lines.append(
                f"- {model} ({doc['layers_reduced']}; batch {doc['config']['batch']}, prompts of "
                f"{max(doc['prompt_lengths'])} tokens): prefill {ours['prefill_tokens_per_s']:,.0f} tok/s, decode "
                f"{ours['decode_tokens_per_s']:,.0f} tok/s (eager, a synchronize around every call); logits "
                f"{'within' if doc['check']['ok'] else 'OUTSIDE'} tolerance; torch-reference fallbacks: {fallbacks}; "
                f"largest uses: {top}"
            )
    return "\n".join(lines)


HOST_COST = "h200.host_cost"


def host_cost_table() -> str:
    """Host (CPU) time per call on the GPU machine: our public op and its PlannedOp.impl beside the peer's call."""
    run = _load(HOST_COST)
    lines = [
        "What an eager engine pays on the host per call (`python -m perf.host_cost` on the GPU machine): "
        "`time.perf_counter` over back-to-back calls without a synchronize, median of interleaved rounds. "
        "**public**: the op as imported (its check, the plan lookup, the kernel); **impl**: the planned kernel "
        "(`PlannedOp.impl`, what `rapid-llm run` and a kept plan call); both are host replays with "
        "`rapid_llm._host` built (`ops/host_replay.py`); **python**: the kernel entry's Python, never replayed "
        "(`PlannedOp.kernel`); **peer**: the library's own call, driven as engines drive it; `torch.add` on a "
        "4-element tensor is the host's yardstick. **replayed**: whether both replayed calls returned exactly "
        "what the Python entry returns on the same inputs.",
        "",
        f"- `{HOST_COST}` (`{evidence.resolve(HOST_COST)}`): {run['device']}, torch {run['versions']['torch']}, "
        f"triton {run['versions']['triton']}",
        "",
        "| case | row | public | impl | python | peer | public / peer | torch.add | replayed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, case in run["cases"].items():
        us = case["us_per_call"]
        peer = f"{us['peer']:.1f} µs (`{case['peer']}`)" if "peer" in us else "-"
        ratio = f"{us['public'] / us['peer']:.2f}x" if "peer" in us else "-"
        python = f"{us['python']:.1f} µs" if "python" in us else "-"
        replay = case.get("replay")
        replayed = (
            ("equal" if case.get("replay_equal") else "DIFFERS")
            if isinstance(replay, dict) and set(replay.values()) == {"replay"}
            else "no"
        )
        lines.append(
            f"| {name} | `{case['row']}` | {us['public']:.1f} µs | {us['impl']:.1f} µs | {python} | {peer} | {ratio} | "
            f"{us['torch.add']:.1f} µs | {replayed} |"
        )
    return "\n".join(lines)


GEMM_MM_BENCH = "h200.gemm.bench.mm.presets"
GEMM_W4A16_BENCH = "h200.gemm.bench.w4a16.tuned"
GEMM_MM_ROWS = {
    "gemm.mm": ("cublas/linear", "native/mm_gemv", "native/mm_splitk", "native/mm"),
    "gemm.w8a16_mm": ("native/w8a16_mm_gemv", "native/w8a16_mm_splitk", "native/w8a16_mm"),
}


def gemm_mm_table() -> str:
    """gemm.mm and gemm.w8a16_mm per case: every row's time, its % of copy bandwidth (decode: the weight read is
    the cost) and TFLOP/s, the row dispatch selects (rankings) and its ratio to the best row of the op; for
    w8a16, bf16 cuBLAS on the same shape (what the int8 weights are measured against)."""
    run, cases = _run_cases(GEMM_MM_BENCH)
    lines = [
        "`gemm.mm` (bf16, w `[N, K]`) and `gemm.w8a16_mm` (int8 w `[N, K]`, a bf16 scale per output channel) per "
        "row: CUDA-event median with L2 flushed (`python perf/gpu_report.py --suites perf/test_gemm_bench.py -- -k "
        '"test_mm or test_w8a16_mm"`, tiles from the shipped tuning store); % of the copy bandwidth measured in the '
        "same run on x + w + out bytes; TFLOP/s on 2MNK. **selected**: the row dispatch picks for the case on the "
        "H200 (the measured rankings), and its time over the op's fastest row. `Triton vs cuBLAS`: `cublas/linear`'s "
        "time over our fastest Triton row's (> 1: ours is faster); `vs bf16 cuBLAS`: `cublas/linear`'s time on the "
        "same shape in bf16 over the selected weight-only row's (our fastest Triton row's where dispatch selects "
        "the reference: rows awaiting their H200 parity run).",
        "",
        f"- {_run_line(GEMM_MM_BENCH, run)}",
    ]
    for op, rows in GEMM_MM_ROWS.items():
        lines += ["", _gemm_op_table(op, rows, cases)]
    run, cases = _run_cases(GEMM_W4A16_BENCH)
    lines += [
        "",
        "`gemm.w4a16_mm` (GPTQ v1 / AWQ int4 weights, group 128; the case names the packing), in a run of its own "
        "with bf16 `cublas/linear` at the same shapes; heuristic tiles (no tuning entries yet):",
        "",
        f"- {_run_line(GEMM_W4A16_BENCH, run)}",
        "",
        _gemm_op_table("gemm.w4a16_mm", ("native/w4a16_mm_gemv", "native/w4a16_mm"), cases),
    ]
    return "\n".join(lines)


def _gemm_cell(case: dict | None, decode_max: int) -> str:
    """A GEMM case's time and % of copy bandwidth, with TFLOP/s above the decode token counts."""
    if case is None:
        return "-"
    tflops = f", {case['TFLOPs']:.0f} TFLOP/s" if case.get("TFLOPs") and case["tokens"] > decode_max else ""
    return f"{case['us']:.1f} µs ({case['pct_of_copy_bw']:.0f}% BW{tflops})"


def _gemm_op_table(op: str, columns: tuple, cases: list) -> str:
    from rapid_llm.kernels.dispatcher import Device, Libraries, default_table, dispatch

    by_case, cublas = {}, {}
    for case in cases:
        if case["op"] == op:
            by_case.setdefault(case["case"], {})[case["row"]] = case
        if case["row"] == "cublas/linear":
            cublas[tuple(case["shape"])] = case["us"]
    versus = op != "gemm.mm"
    header = [f"`{row}`" for row in columns] + ["selected", "vs bf16 cuBLAS" if versus else "Triton vs cuBLAS"]
    lines = [f"`{op}`:", "", "| case | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    table = default_table()
    libs = Libraries({"triton": "3.6.0"})
    for case_id, rows in by_case.items():
        cells = [_gemm_cell(rows.get(row), decode_max=16) for row in columns]
        m, n, k = next(iter(rows.values()))["shape"]
        selection = dispatch(
            op,
            device=Device("cuda", 90),
            dtype="bf16",
            shape={"num_tokens": m, "n": n, "k": k},
            layout=frozenset({"x:rows", "w:rows", "bias:unit"}),
            libs=libs,
            table=table,
        )
        chosen = selection.row.name
        best = min(case["us"] for case in rows.values())
        ratio = f"{rows[chosen]['us'] / best:.2f}x" if chosen in rows else "-"
        cells.append(f"`{chosen}` ({ratio})")
        ours = [case["us"] for row, case in rows.items() if row.startswith("native/")]
        # w8a16: the selected row against bf16 cuBLAS on the shape; mm: our fastest Triton row against cuBLAS
        mine = rows[chosen]["us"] if versus and chosen in rows else min(ours, default=None)
        bf16 = cublas.get(tuple(next(iter(rows.values()))["shape"]))
        cells.append(f"{bf16 / mine:.2f}x" if bf16 and mine else "-")
        lines.append(f"| {case_id} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


GEMM_FP8_BENCH = "h200.gemm.bench.fp8.ranked"
GEMM_FP8_GLUON_BENCH = "h200.gemm.bench.fp8_block.gluon"
GEMM_FP8_M1_BENCH = "h200.gemm.bench.fp8_block.m1"
#: (run, op, our rows, the peer row they are measured against, the least tokens shown)
GEMM_FP8_TABLES = (
    (
        GEMM_FP8_BENCH,
        "gemm.fp8_block_mm",
        ("native/fp8_block_mm", "native/fp8_block_mm_splitk"),
        "deep_gemm/fp8_gemm_nt",
        0,
    ),
    (
        GEMM_FP8_GLUON_BENCH,
        "gemm.fp8_block_mm",
        ("native/fp8_block_mm", "native/fp8_block_mm_gluon"),
        "deep_gemm/fp8_gemm_nt",
        129,
    ),
    (
        GEMM_FP8_M1_BENCH,
        "gemm.fp8_block_mm",
        ("native/fp8_block_mm_splitk", "native/fp8_block_mm_gemv"),
        "deep_gemm/fp8_gemm_nt",
        0,
    ),
    (GEMM_FP8_BENCH, "gemm.fp8_mm", ("native/fp8_mm", "native/fp8_mm_splitk"), "cublas/scaled_mm", 0),
)


def gemm_fp8_table() -> str:
    """The fp8 GEMMs per case: our rows beside DeepGEMM (block scales) and torch._scaled_mm (per-token x
    per-channel), TFLOP/s at prefill sizes and % of copy bandwidth at decode sizes, and the peer's time over
    our fastest row's; one table per run (rows compared within one run only)."""
    lines = [
        "The fp8 GEMMs (e4m3 operands, bf16 out): CUDA-event median with L2 flushed (`python perf/gpu_report.py "
        '--suites perf/test_gemm_bench.py -- -k "test_fp8_mm or (test_fp8_block_mm and not torch)"`, tiles from '
        "the shipped tuning store). Cells: µs, % of the copy bandwidth on a + b + scales + out bytes, and TFLOP/s "
        "(m > 64). **ours vs peer**: the peer row's time over our fastest row's (> 1: ours is faster)."
    ]
    for evidence_id, op, ours, peer, least_tokens in GEMM_FP8_TABLES:
        run, cases = _run_cases(evidence_id)
        by_case = {}
        for case in cases:
            if case["op"] == op and case["tokens"] >= least_tokens:
                by_case.setdefault(case["case"], {})[case["row"]] = case
        columns = (*ours, peer)
        scope = f", m >= {least_tokens}" if least_tokens else ""
        lines += ["", f"`{op}`{scope}, from {_run_line(evidence_id, run)}:", ""]
        lines.append("| case | " + " | ".join(f"`{row}`" for row in columns) + " | ours vs peer |")
        lines.append("|---|" + "---|" * (len(columns) + 1))
        for case_id, rows in by_case.items():
            cells = [_gemm_cell(rows.get(row), decode_max=64) for row in columns]
            mine = min((rows[row]["us"] for row in ours if row in rows), default=None)
            cells.append(f"{rows[peer]['us'] / mine:.2f}x" if mine and peer in rows else "-")
            lines.append(f"| {case_id} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


STEP_PLAN_BENCH = "h200.attention.bench.step_plans"


def step_plan_table() -> str:
    """The paged attention rows with a per-step preparation: the cost of a layer's call through a step plan (what
    dispatch ranks them by) against the same row called per call, and the preparation's own host time."""
    run, cases = _run_cases(STEP_PLAN_BENCH)
    with open(evidence.file(STEP_PLAN_BENCH + ".raw")) as handle:
        extra = {b["name"]: b["extra_info"] for b in json.load(handle)["benchmarks"]}
    lines = [
        "The rows with a per-step preparation (`KernelSpec.step`: FlashInfer's plan, FlashMLA's schedule, our "
        "launch policy), timed as `rapid-llm run` and engines call them: through a step plan, the preparation "
        "once per step outside the timing, the call each layer makes timed (CUDA-graph replay where captured: "
        "FlashInfer's decode rows are capturable through their step plans). **per call**: the same row called without "
        "a step plan (its preparation in every call; CUDA-event median). **preparation**: host time of one step "
        "plan's construction (once per step, shared by every layer). Dispatch ranks these rows by the step-plan "
        "time (`python -m perf.write_rankings h200.attention.bench h200.attention.bench.step_plans`).",
        "",
        f"- {_run_line(STEP_PLAN_BENCH, run)}",
        "",
        "| op | case | row | through its step plan | per call | preparation | fastest engine-driven peer |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        info = extra.get(case["test"], {})
        if info.get("per_call_us") is None:
            continue
        timer = "graph" if case.get("graph_us") else "event"
        engine = (case.get("engine_peer") or {}).get(timer)
        peer = f"`{engine['row']}` {engine['us']:.1f} µs" if engine else "-"
        lines.append(
            f"| {case['op']} | {case['case']} | `{case['row']}` | {_device_time(case, timer):.1f} µs ({timer}) | "
            f"{info['per_call_us']:.1f} µs | {info['step_prepare_us']:.0f} µs | {peer} |"
        )
    return "\n".join(lines)


def extension_table() -> str:
    """The CUDA extension's rows (aot/, jit/) beside the native and reference rows of the same ops."""
    return _ranked_table(
        ((EXTENSION_BENCHES[0], None), *((run, ("kvcache.update_kv_buffer",)) for run in EXTENSION_BENCHES[1:])),
        (
            "`ci/gpu_extension_evidence` runs of the elementwise and KV-write benchmarks with the extension built "
            "(`TORCH_CUDA_ARCH_LIST=9.0`), bf16 unless the case says otherwise. CUDA-event median with L2 flushed; "
            "graph-replay time at decode sizes."
        ),
    )


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
        f"CPU dispatcher and host-path costs from the stored baseline (`{os.path.relpath(path, ROOT)}`, "
        f"{baseline['datetime'][:10]}, {made['runs']} runs, this project's 2-core VM, Python "
        f"{baseline['machine_info'].get('python_version', '?')}). Median: the median over the runs of "
        "pytest-benchmark's median; best: the fastest batch seen while interleaved with the calibration "
        "workload (the machine at full speed), in the run the file keeps.",
        "",
        "| what | median | best | requirement | note |",
        "|---|---|---|---|---|",
    ]
    for name, label, requirement in dispatcher_rows(benchmarks, made["calibration"]):
        info = benchmarks[name].get("extra_info", {})
        best = (info.get("paired") or {}).get("work_min_s")
        note = ""
        if "plan_overhead_s" in info:
            note = f"overhead {_time(info['plan_overhead_s'])}"
        if "public_overhead_s" in info:
            before = " / ".join(_time(value) for value in info.get("before_refactor_overhead_s", []))
            note = (
                f"overhead {_signed_time(info['public_overhead_s'])} (public "
                f"{_time(info['interleaved_public_s'])} vs PlannedOp {_time(info['interleaved_planned_s'])}, "
                f"interleaved); before the refactor: {before}"
            )
        if "torch_imported" in info:
            note = (
                f"bare interpreter {_time(info['bare_interpreter_median_s'])}, interpreter + attrs "
                f"{_time(info['attrs_only_median_s']) if 'attrs_only_median_s' in info else '-'}; "
                f"torch imported: {info['torch_imported']}, triton imported: {info['triton_imported']}"
            )
        lines.append(
            f"| {label} | {_time(info[gate.GATE_KEY]['median_s'])} | {_time(best) if best else '-'} | "
            f"{requirement} | {note} |"
        )
    return "\n".join(lines)


#: Each page and the generated sections it holds, in page order.
PAGES = {
    "docs/support-matrix.md": (("attention-features", attention_features_table), ("support-matrix", support_matrix)),
    "docs/performance.md": (
        ("model-step-table", model_step_table),
        ("host-cost-table", host_cost_table),
        ("perf-table", perf_table),
        ("attention-table", attention_table),
        ("gemm-mm-table", gemm_mm_table),
        ("gemm-fp8-table", gemm_fp8_table),
        ("step-plan-table", step_plan_table),
        ("extension-table", extension_table),
        ("dispatcher-table", dispatcher_table),
    ),
    "docs/libraries.md": (("library-table", library_table),),
}


def render(page: str, text: str) -> str:
    for name, make in PAGES[page]:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        head, found, rest = text.partition(start)
        if not found:
            raise SystemExit(f"{page} lacks the marker {start}")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"{page} lacks the marker {end}")
        text = f"{head}{start}\n{make()}\n{end}{tail}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    stale = []
    for page in PAGES:
        path = os.path.join(ROOT, page)
        with open(path, encoding="utf-8") as handle:
            current = handle.read()
        fresh = render(page, current)
        if fresh == current:
            continue
        stale.append(page)
        if not args.check:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(fresh)
    if args.check:
        if stale:
            print(
                f"generated sections are stale in {', '.join(stale)}: run python ci/readme_tables.py", file=sys.stderr
            )
            return 1
        print("the docs pages' generated sections are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
