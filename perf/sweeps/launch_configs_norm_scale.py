"""Launch-config sweep of native rms_norm and scale on a GPU (the evidence for their launch_config()).

    python -m perf.sweeps.launch_configs_norm_scale --out DIR      # from the repository root

(formerly ci/gpu_tuning_sweep.py; its committed result is
perf/results/h200/tuning_sweep_2026-11-29.json.)

For rms_norm and scale at decode and prefill shapes, times the heuristic's
launch config, a grid of alternatives, torch's own kernels and a
device-to-device copy (the bandwidth ceiling) in ONE process, so every
figure is a ratio against the same run. Large shapes: CUDA events around
each call with a 512 MiB L2 flush before it (outside the events), median of
many. Small shapes: CUDA-graph replay of 200 calls, per-call time. Writes
DIR/tuning_sweep.json and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

if not __package__:  # run as a file (python perf/sweeps/...py): the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch
import triton

from rapid_llm.kernels.ops.elementwise import scale as scale_module
from rapid_llm.kernels.ops.elementwise.reference import scale as scale_reference
from rapid_llm.kernels.ops.norm import rms_norm as rms_module
from rapid_llm.kernels.ops.norm.reference import rms_norm as rms_reference

FLUSH = None


def flush_l2():
    FLUSH.zero_()


def time_events(fn, iterations=60, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def time_graph(fn, calls=200, replays=20):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


def rms_variant(x, w, out, config):
    rows = x.view(-1, x.shape[-1])
    grid = (triton.cdiv(rows.shape[0], config["BLOCK_ROWS"]),)
    return lambda: rms_module._rms_norm_kernel[grid](
        rows, w, out, rows.stride(0), w.stride(0), rows.shape[1], rows.shape[0], 1e-6, **config
    )


def scale_variant(x, out, config):
    n = x.numel()
    grid = (triton.cdiv(n, config["BLOCK"]),)
    return lambda: scale_module._scale_kernel[grid](x, out, n, 0.5, **config)


def main():
    global FLUSH
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    FLUSH = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "method": "large: CUDA events per call after a 512 MiB L2 flush, median of 60; "
        "small (<=64 rows): CUDA-graph replay of 200 calls, median per-call of 20 replays",
        "cases": [],
    }

    source = torch.randn(1 << 30, dtype=torch.bfloat16, device="cuda")
    target = torch.empty_like(source)
    copy_us = time_events(lambda: target.copy_(source), iterations=20)
    copy_gbs = 2 * source.numel() * 2 / copy_us / 1e3
    results["copy"] = {"bytes": 4 * source.numel(), "us": copy_us, "GB/s": copy_gbs}
    del source, target

    def record(op, impl, shape, dtype, us, nbytes, graph=False, diff=None, config=None):
        entry = {
            "op": op,
            "impl": impl,
            "shape": list(shape),
            "dtype": str(dtype).removeprefix("torch."),
            "us": us,
            "timer": "graph" if graph else "events",
            "GB/s": nbytes / us / 1e3,
            "pct_copy": 100 * nbytes / us / 1e3 / copy_gbs,
            "bytes": nbytes,
        }
        if diff is not None:
            entry["max_abs_diff_vs_reference"] = diff
        if config is not None:
            entry["config"] = {k: v for k, v in config.items()}
        results["cases"].append(entry)

    rms_shapes = [
        (1, 4096),
        (16, 4096),
        (64, 4096),
        (64, 7168),
        (4096, 4096),
        (16384, 7168),
        (32768, 4096),
        (32768, 2048),
        (32768, 3584),
        (262144, 128),
        (8, 32768),
    ]
    for rows, hidden in rms_shapes:
        dtype = torch.bfloat16
        x = torch.randn(rows, hidden, dtype=dtype, device="cuda") * 3
        w = torch.randn(hidden, dtype=dtype, device="cuda")
        out = torch.empty_like(x)
        nbytes = 2 * x.numel() * 2 + hidden * 2
        small = rows <= 64
        timer = time_graph if small else time_events
        reference = rms_reference(x, w, 1e-6)
        base = rms_module.launch_config(hidden)
        configs = {"heuristic": base}
        for warps in (2, 4, 8, 16):
            for block_rows in {1, 2, 4, base["BLOCK_ROWS"]} if base["BLOCK_HIDDEN"] <= 2048 else {1, 2}:
                config = dict(base, num_warps=warps, BLOCK_ROWS=block_rows)
                if config != base:
                    configs[f"w{warps}_r{block_rows}"] = config
        for name, config in configs.items():
            fn = rms_variant(x, w, out, config)
            fn()
            torch.cuda.synchronize()
            diff = (out.float() - reference.float()).abs().max().item()
            record("norm.rms_norm", f"native:{name}", (rows, hidden), dtype, timer(fn), nbytes, small, diff, config)
        if hasattr(torch.nn.functional, "rms_norm"):
            fn = lambda: torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6)
            diff = (fn().float() - reference.float()).abs().max().item()
            record("norm.rms_norm", "peer:torch.F.rms_norm", (rows, hidden), dtype, timer(fn), nbytes, small, diff)
        record(
            "norm.rms_norm",
            "torch/rms_norm(reference)",
            (rows, hidden),
            dtype,
            timer(lambda: rms_reference(x, w, 1e-6)),
            nbytes,
            small,
        )
        del x, w, out

    for numel in (64 * 4096, 4096 * 4096, 32768 * 4096):
        for dtype in (torch.bfloat16, torch.float32):
            if dtype == torch.float32 and numel < 32768 * 4096:
                continue
            x = torch.randn(numel, dtype=dtype, device="cuda")
            out = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            small = numel <= 64 * 4096
            timer = time_graph if small else time_events
            reference = scale_reference(x, 0.5)
            base = scale_module.launch_config(numel)
            configs = {"heuristic": base}
            for block in (1024, 2048, 4096, 8192):
                for warps in (4, 8):
                    config = {"BLOCK": block, "num_warps": warps}
                    if config != base:
                        configs[f"b{block}_w{warps}"] = config
            for name, config in configs.items():
                fn = scale_variant(x, out, config)
                fn()
                torch.cuda.synchronize()
                diff = (out.float() - reference.float()).abs().max().item()
                record("elementwise.scale", f"native:{name}", (numel,), dtype, timer(fn), nbytes, small, diff, config)
            record(
                "elementwise.scale",
                "torch/scale(reference)",
                (numel,),
                dtype,
                timer(lambda: torch.mul(x, 0.5)),
                nbytes,
                small,
            )
            del x, out

    with open(f"{args.out}/tuning_sweep.json", "w") as handle:
        json.dump(results, handle, indent=1)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s on {results['device']}")
    best = {}
    for case in results["cases"]:
        key = (case["op"], tuple(case["shape"]), case["dtype"])
        best.setdefault(key, []).append(case)
    for key, cases in best.items():
        cases.sort(key=lambda c: c["us"])
        heuristic = next(c for c in cases if c["impl"].endswith("heuristic"))
        peer = [c for c in cases if not c["impl"].startswith("native")]
        print(
            f"{key[0]:<18}{str(key[1]):<16}{key[2]:<9} best {cases[0]['impl']:<26}{cases[0]['us']:8.2f}us "
            f"{cases[0]['pct_copy']:5.1f}% | heuristic {heuristic['us']:8.2f}us {heuristic['pct_copy']:5.1f}% | "
            + " ".join(f"{c['impl']} {c['us']:.2f}us" for c in peer)
        )


if __name__ == "__main__":
    main()
