"""H200: fixup_swap_ab.py (the K slices added inside the launch; counters zeroed per call or cached) beside
native/fp8_block_mm_swap_ab (slices merged by a second kernel) at the same knobs, and DeepGEMM, on DeepSeek-V3's
projections at m = 1, 16, 64; CUDA-graph replays with L2 flushed, every arm checked against the reference.
Table on stdout, JSON to argv[1]."""

import itertools
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixup_swap_ab as lab

from perf.gpu_timing import event_timer
from perf.test_gemm_bench import _activations, _weights
from rapid_llm.kernels.ops.gemm.fp8 import block_scales, swap_ab
from rapid_llm.kernels.ops.gemm.reference import fp8_block_mm as reference

try:
    import deep_gemm
except ImportError:
    deep_gemm = None
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
records = []


def graph_us(fn) -> float:
    for _ in range(3):  # the cached counters must come back to zero: several calls before the capture
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return event_timer(graph.replay, flush=flush, iterations=20).median_us


for (n, k), m in itertools.product(
    ((2112, 7168), (4096, 7168), (7168, 7168), (24576, 1536), (7168, 16384)), (1, 16, 64)
):
    a, a_scale = _activations(m, k, seed=m + k)
    b, b_scale = _weights(n, k, seed=n + k)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    want = reference(a, a_scale, b, b_scale).float()
    arms = {}
    if deep_gemm is not None:
        arms["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out)
    for split, bn in itertools.product((2, 4, 8), (64, 128)):
        knobs = {"BLOCK_M": 16 if m <= 16 else 64, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": 4,
                 "num_stages": 4}  # fmt: skip
        tag = f"SPLIT_K={split} BLOCK_N={bn}"
        arms[f"swap_ab merge {tag}"] = lambda knobs=knobs: swap_ab.launch(
            a, b, block_scales(a_scale, b_scale), None, out, knobs
        )
        arms[f"fixup zeroed {tag}"] = lambda knobs=knobs: lab.launch(a, a_scale, b, b_scale, out, knobs)
        arms[f"fixup cached {tag}"] = lambda knobs=knobs: lab.launch(a, a_scale, b, b_scale, out, knobs, True)
    for name, fn in arms.items():
        out.fill_(float("nan"))
        try:
            us = graph_us(fn)
            diff = (out.float() - want).abs().max().item()
        except Exception as error:
            us, diff = -1.0, f"{type(error).__name__}: {str(error)[:100]}"
        records.append({"m": m, "n": n, "k": k, "arm": name, "us": us, "diff": diff})
        print(f"{m:3d} {n:6d} {k:6d} {name:40s} {us:8.2f} us diff {diff}", flush=True)

with open(sys.argv[1], "w") as handle:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "records": records}, handle, indent=1)  # fmt: skip
print("\nsummary: best of each kind")
for key in dict.fromkeys((r["m"], r["n"], r["k"]) for r in records):
    rows = [r for r in records if (r["m"], r["n"], r["k"]) == key and r["us"] > 0]
    line = f"m={key[0]} {key[1]}x{key[2]}:"
    for kind in ("deep_gemm", "swap_ab merge", "fixup zeroed", "fixup cached"):
        best = min((r for r in rows if r["arm"].startswith(kind)), key=lambda r: r["us"], default=None)
        line += f" | {kind} {best['us'] if best else -1:.2f}"
    print(line)
