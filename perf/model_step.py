"""The model step on a GPU, against the hardware's limit: `python -m perf.model_step --out DIR [--parts ...]`.

Parts (each writes DIR/<part>.json and prints a short table):

decode   Llama-3-8B (every layer, bf16, random weights), batch 64, context 4096: one decode step (the 4096th
         token of every sequence; the cache holds random K/V), for
           ours        every op through Planner(graph_safe_only=True), paged decode through its step plan,
                       captured as one CUDA graph and replayed;
           reference   every op on its torch reference row, eager (its KV write syncs on the host: not
                       capturable);
           compiled    torch.compile of the reference layer (each op's reference function traced, one graph
                       per layer shape; the KV write as a plain index_put, capturable), captured and replayed;
         time per step = CUDA-event time of N calls / N. The roofline of the step:
             (weight bytes + KV bytes read) / copy bandwidth
         weight bytes: every projection, norm and lm_head read once (the embedding reads B rows: not counted);
         KV bytes: layers x B x context x 2 (K, V) x Hk x D x 2 bytes; copy bandwidth: a 4 GiB device copy
         (read + write bytes / time) measured in the same run. Also the eager step (no graph, no syncs) and a
         per-op breakdown of one eager step with a synchronize around every call (rapid_llm/step/recorder.py),
         and the graph replay's logits against the eager step's (max |diff|).
prefill  Llama-3-8B prefill of 4 prompts x 4096 tokens (eager, ours): time per step (CUDA events around the
         forward) and its fraction of the dense bf16 peak (989.4 TFLOP/s on the H100/H200 SXM):
             FLOPs = 2 x tokens x (projection parameters per layer x layers) + 2 x lm_head on the 4 last tokens
                     + causal attention 2 x L^2 x Hq x D per sequence and layer (QK^T and PV, 2 FLOPs per
                       multiply-add each, over half of the L x L square)
         plus the per-op breakdown.
compiled the decode step's torch.compile baseline (above), a part of its own (minutes of compiling).
moe      `rapid-llm run`'s document (rapid_llm/step/run.py) for Qwen3-30B-A3B and DeepSeek-V3 with their layers
         reduced to fit one GPU (stated in the JSON): per-op breakdown, rows, fallbacks, logits check; the
         second of two runs in one process (the first compiles the kernels).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time

import torch

from rapid_llm.kernels.dispatcher import Planner, default_table, probe_environment
from rapid_llm.kernels.dispatcher.select import resolve_target
from rapid_llm.models import PRESETS
from rapid_llm.step.cache import PagedCache
from rapid_llm.step.model import Batch, Decoder, rope_cache
from rapid_llm.step.recorder import Recorder
from rapid_llm.step.run import reference_environment
from rapid_llm.step.weights import Fp8Weight, leaves, random_weights

BF16_DENSE_PEAK = 989.4e12


def _versions() -> dict:
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("triton", "flashinfer", "flash_mla"):
        with contextlib.suppress(Exception):
            versions[name] = __import__(name).__version__
    return versions


def _device() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def _event_seconds(function, repeats: int) -> float:
    """Mean seconds of function() over `repeats` calls, CUDA events around the loop (after one warm call)."""
    function()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        function()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def copy_bandwidth(gib: int = 4) -> float:
    """Bytes per second of a device-to-device copy (read + write)."""
    source = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    return 2 * (gib << 30) / _event_seconds(lambda: target.copy_(source), 10)


def weight_bytes(weights) -> int:
    """Bytes a decode step reads of the weights: every tensor but the embedding table (an fp8 weight with its
    block scales)."""
    parts = (
        part
        for leaf in leaves({key: value for key, value in weights.items() if key != "embed"})
        for part in ((leaf.weight, leaf.scale) if isinstance(leaf, Fp8Weight) else (leaf,))
    )
    return sum(part.numel() * part.element_size() for part in parts)


def _index_put_kv(kv, loc, buffer):
    """buffer[loc] = kv: the KV write of the compiled reference (every slot of the benchmark is valid)."""
    buffer[loc] = kv
    return buffer


class Direct:
    """A recorder that calls each op's torch reference function directly and times nothing: what
    torch.compile traces for the compiled reference model (no planner, no Python of ours in the graph).
    The reference KV write selects the valid slots with nonzero (a host sync); here it is a plain index_put."""

    def __init__(self, table):
        self.impls = {op: resolve_target(table.reference(op).target, None)[0] for op in table.ops}
        self.impls["kvcache.update_kv_buffer"] = _index_put_kv

    def begin_step(self):
        pass

    def op(self, op, where, *args):
        return self.impls[op](*args)

    def torch(self, what, where, function, *args, **kwargs):
        return function(*args, **kwargs)

    def timed(self, what, where):
        return contextlib.nullcontext()


def breakdown(recorder: Recorder, phase: str) -> list[dict]:
    """Per-op time of one step from a recorder that synchronised around every call, largest first."""
    rows = [
        {
            "kind": use.kind,
            "name": use.name,
            "where": use.where,
            "row": use.row,
            "calls": use.calls.get(phase, 0),
            "ms": 1e3 * use.seconds.get(phase, 0.0),
        }
        for use in recorder.uses.values()
        if use.calls.get(phase)
    ]
    return sorted(rows, key=lambda row: -row["ms"])


def _planners(graph_safe_only: bool) -> dict:
    """{"ours": the probed environment's planner, "reference": every op forced to its torch row}."""
    table, env = default_table(), probe_environment()
    return {
        "ours": Planner(env, table, graph_safe_only=graph_safe_only),
        "reference": Planner(reference_environment(env, table), table, graph_safe_only=graph_safe_only),
    }


def _decode_setup(model: str, batch: int, context: int):
    """(preset, weights, cache, rope, step, header) of the decode benchmark (module docstring)."""
    preset = PRESETS[model]
    layers = preset.num_layers
    weights = random_weights(preset, layers, seed=0, dtype=torch.bfloat16, device="cuda")
    cache = PagedCache(preset, layers, batch, context, dtype=torch.bfloat16, device="cuda", seed=0)
    for buffer in cache.buffers:
        buffer.uniform_(-1, 1)
    cache.seq_lens.fill_(context)
    rope = rope_cache(context, preset.head_dim, preset.rope_theta, "cuda")
    sequences = torch.arange(batch, device="cuda")
    step = Batch(
        ids=torch.randint(0, preset.vocab, (batch,), device="cuda"),
        positions=torch.full((batch,), context - 1, device="cuda"),
        sequences=sequences,
        last=sequences,
    )
    bandwidth = copy_bandwidth()
    kv_bytes = layers * batch * context * 2 * preset.num_kv_heads * preset.head_dim * 2
    w_bytes = weight_bytes(weights)
    header = {
        "model": model,
        "layers": layers,
        "batch": batch,
        "context": context,
        "dtype": "bf16",
        "weight_bytes": w_bytes,
        "kv_bytes": kv_bytes,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "roofline_ms": 1e3 * (w_bytes + kv_bytes) / bandwidth,
        "runs": {},
    }
    return preset, weights, cache, rope, step, header


def decode_part(model: str, batch: int, context: int, repeats: int) -> dict:
    preset, weights, cache, rope, step, result = _decode_setup(model, batch, context)
    roofline = result["roofline_ms"] / 1e3
    planners = _planners(graph_safe_only=True)
    planners["reference"] = _planners(graph_safe_only=False)["reference"]
    eager_logits = {}
    for label, planner in planners.items():
        timed = Recorder(planner, torch.cuda.synchronize)
        timed.phase = "decode"
        Decoder(preset, weights, cache, timed, rope).forward(step)  # warm: compiles, plans, JIT
        timed.uses.clear()
        eager_logits[label] = Decoder(preset, weights, cache, timed, rope).forward(step)
        eager = Decoder(preset, weights, cache, Recorder(planner, steps=timed.steps), rope)
        eager_s = _event_seconds(lambda eager=eager: eager.forward(step), 3 if label == "ours" else 1)
        run = {
            "eager_ms": 1e3 * eager_s,
            "eager_over_roofline": eager_s / roofline,
            "rows": sorted({use.row for use in timed.uses.values() if use.row}),
            "breakdown": breakdown(timed, "decode"),
        }
        if label == "ours":
            captured = Recorder(planner, steps=timed.steps, frozen=True)
            graph_decoder = Decoder(preset, weights, cache, captured, rope)
            graph = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                graph_logits = graph_decoder.forward(step)
            graph_s = _event_seconds(graph.replay, repeats)
            run["graph_ms"] = 1e3 * graph_s
            run["graph_over_roofline"] = graph_s / roofline
            run["graph_vs_eager_logits_max_abs_diff"] = (graph_logits - eager_logits[label]).abs().max().item()
            del graph, graph_logits
        result["runs"][label] = run
        torch.cuda.empty_cache()
    ours, reference = eager_logits["ours"], eager_logits["reference"]
    result["ours_vs_reference_logits_max_abs_diff"] = (ours - reference).abs().max().item()
    result["max_abs_reference_logit"] = reference.abs().max().item()
    return result


def compiled_part(model: str, batch: int, context: int, repeats: int) -> dict:
    """torch.compile of the reference model's layer (Direct: each op's reference function), captured as a graph,
    on the decode benchmark's step."""
    preset, weights, cache, rope, step, result = _decode_setup(model, batch, context)
    decoder = Decoder(preset, weights, cache, Direct(default_table()), rope)
    decoder.layer = torch.compile(decoder.layer, dynamic=False)
    start = time.perf_counter()
    try:
        for _ in range(2):
            decoder.forward(step)
        torch.cuda.synchronize()
    except Exception as error:  # a compiler failure is a result to report, not a crash of the benchmark
        result["runs"]["compiled_reference"] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        return result
    compile_s = time.perf_counter() - start
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decoder.forward(step)
    seconds = _event_seconds(graph.replay, repeats)
    result["runs"]["compiled_reference"] = {
        "graph_ms": 1e3 * seconds,
        "graph_over_roofline": 1e3 * seconds / result["roofline_ms"],
        "compile_and_warm_s": compile_s,
    }
    return result


def prefill_part(model: str, prompts: int, length: int) -> dict:
    preset = PRESETS[model]
    layers = preset.num_layers
    weights = random_weights(preset, layers, seed=0, dtype=torch.bfloat16, device="cuda")
    cache = PagedCache(preset, layers, prompts, length, dtype=torch.bfloat16, device="cuda", seed=0)
    rope = rope_cache(length, preset.head_dim, preset.rope_theta, "cuda")
    tokens = prompts * length
    cu = torch.arange(0, tokens + 1, length, device="cuda", dtype=torch.int32)
    batch = Batch(
        ids=torch.randint(0, preset.vocab, (tokens,), device="cuda"),
        positions=torch.arange(length, device="cuda").repeat(prompts),
        sequences=torch.arange(prompts, device="cuda").repeat_interleave(length),
        last=(cu[1:] - 1).long(),
        cu_seqlens=cu,
        max_seqlen=length,
    )
    planners = _planners(graph_safe_only=False)
    timed = Recorder(planners["ours"], torch.cuda.synchronize)
    Decoder(preset, weights, cache, timed, rope).forward(batch)  # warm
    timed.uses.clear()
    Decoder(preset, weights, cache, timed, rope).forward(batch)
    decoder = Decoder(preset, weights, cache, Recorder(planners["ours"]), rope)
    seconds = _event_seconds(lambda: decoder.forward(batch), 3)
    per_layer = sum(
        value.numel()
        for key, value in weights["layers"][0].items()
        if isinstance(value, torch.Tensor) and value.dim() == 2
    )
    per_layer += sum(value.numel() for value in weights["layers"][0]["mlp"].values() if value.dim() == 2)
    hq, d = preset.num_q_heads, preset.head_dim
    flops = 2 * tokens * per_layer * layers + 2 * prompts * weights["lm_head"].numel()
    flops += prompts * layers * 2 * length * length * hq * d
    return {
        "model": model,
        "layers": layers,
        "prompts": prompts,
        "prompt_length": length,
        "dtype": "bf16",
        "step_ms": 1e3 * seconds,
        "tokens_per_s": tokens / seconds,
        "flops": flops,
        "tflops_per_s": flops / seconds / 1e12,
        "fraction_of_bf16_dense_peak": flops / seconds / BF16_DENSE_PEAK,
        "bf16_dense_peak_flops": BF16_DENSE_PEAK,
        "rows": sorted({use.row for use in timed.uses.values() if use.row}),
        "breakdown": breakdown(timed, "prefill"),
    }


#: (preset, layers, why that many): layers reduced to fit one GPU next to the all-reference run.
MOE_RUNS = (
    ("qwen3-30b-a3b", 8, "8 of 48 layers (every layer MoE)"),
    ("deepseek-v3", 4, "4 of 61 layers: the 3 dense layers and 1 MoE layer (fp8 weights built from fp32)"),
)


def moe_part(batch: int, prompt_len: int, decode_steps: int) -> dict:
    from rapid_llm.step.report import document
    from rapid_llm.step.run import RunConfig, run

    documents = {}
    for model, layers, why in MOE_RUNS:
        config = RunConfig(
            model=model, layers=layers, batch=batch, prompt_len=prompt_len, decode_steps=decode_steps, device="cuda"
        )
        try:
            run(config)  # warm: every kernel compiled and every plan made, so the breakdown times the kernels
            doc = document(run(config))
        except Exception as error:  # one preset's failure is reported, the others still run
            doc = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        doc["layers_reduced"] = why
        documents[model] = doc
        torch.cuda.empty_cache()
    return documents


def _print_decode(result: dict) -> None:
    print(
        f"decode {result['model']} B{result['batch']} ctx{result['context']}: roofline {result['roofline_ms']:.2f} ms "
        f"({result['weight_bytes'] / 1e9:.1f} GB weights + {result['kv_bytes'] / 1e9:.1f} GB KV at "
        f"{result['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s)"
    )
    for label, run in result["runs"].items():
        if "error" in run:
            print(f"  {label:<20} {run['error']}")
            continue
        parts = [
            f"{kind} {run[f'{kind}_ms']:.2f} ms ({run[f'{kind}_over_roofline']:.2f}x roofline)"
            for kind in ("graph", "eager")
            if f"{kind}_ms" in run
        ]
        print(f"  {label:<20} " + "  ".join(parts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--parts", default="decode,prefill,moe,compiled")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    header = {
        "device": _device(),
        "versions": _versions(),
        "command": "python -m perf.model_step " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": os.environ.get("RAPID_LLM_COMMIT"),
    }
    for part in args.parts.split(","):
        start = time.perf_counter()
        if part == "decode":
            result = decode_part(args.model, args.batch, args.context, args.repeats)
            _print_decode(result)
        elif part == "compiled":
            result = compiled_part(args.model, args.batch, args.context, args.repeats)
            _print_decode(result)
        elif part == "prefill":
            result = prefill_part(args.model, 4, 4096)
            print(
                f"prefill {result['model']} {result['prompts']}x{result['prompt_length']}: {result['step_ms']:.1f} ms, "
                f"{result['tflops_per_s']:.0f} TFLOP/s = {100 * result['fraction_of_bf16_dense_peak']:.1f}% of bf16 peak"
            )
        elif part == "moe":
            result = moe_part(batch=8, prompt_len=256, decode_steps=3)
            for model, doc in result.items():
                print(f"run {model}: {doc.get('error') or doc['throughput']['ours']} ({doc['layers_reduced']})")
        else:
            parser.error(f"--parts: unknown part {part!r}")
        result = {**header, "part": part, "seconds": time.perf_counter() - start, "result": result}
        with open(os.path.join(args.out, f"{part}.json"), "w") as handle:
            json.dump(result, handle, indent=1, default=str)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
