"""H200: fp8_swap_ab.py (weights on the wgmma M side, tokens on N) at m = 1, 16, 64 on DeepSeek-V3's projections
beside native/fp8_block_mm_splitk (shipped tiles), native/fp8_block_mm_gemv (m = 1) and DeepGEMM, CUDA-graph
replays with L2 flushed, every arm checked against the reference. Table on stdout, JSON to argv[1]."""

import itertools
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_swap_ab as lab

from perf.gpu_timing import event_timer
from perf.test_gemm_bench import _activations, _weights
from rapid_llm.kernels.ops.gemm.fp8 import gemv, splitk
from rapid_llm.kernels.ops.gemm.reference import fp8_block_mm as reference

try:
    import deep_gemm
except ImportError:
    deep_gemm = None
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
records = []


def graph_us(fn) -> float:
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
    arms = {"native/fp8_block_mm_splitk": lambda: splitk.fp8_block_mm(a, a_scale, b, b_scale, out)}
    if m == 1:
        arms["native/fp8_block_mm_gemv"] = lambda: gemv.fp8_block_mm_gemv(a, a_scale, b, b_scale, out)
    if deep_gemm is not None:
        arms["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out)
    block_ms = (16,) if m <= 16 else (32, 64)
    for bm, bn, split, stages in itertools.product(block_ms, (64, 128), (1, 2, 4, 8, 16), (4, 6, 8)):
        arms[f"swap BLOCK_M={bm} BLOCK_N={bn} SPLIT_K={split} stages={stages}"] = (
            lambda bm=bm, bn=bn, split=split, stages=stages: lab.launch(
                a, a_scale, b, b_scale, out, bm, bn, split, num_stages=stages
            )
        )
    for name, fn in arms.items():
        out.fill_(float("nan"))
        try:
            us = graph_us(fn)
            diff = (out.float() - want).abs().max().item()
        except Exception as error:
            us, diff = -1.0, f"{type(error).__name__}: {str(error)[:100]}"
        records.append({"m": m, "n": n, "k": k, "arm": name, "us": us, "diff": diff})
        print(f"{m:3d} {n:6d} {k:6d} {name:56s} {us:8.2f} us diff {diff}", flush=True)

with open(sys.argv[1], "w") as handle:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "records": records}, handle, indent=1)  # fmt: skip
print("\nsummary: shipped rows and DeepGEMM beside the best swapped arm")
for key in dict.fromkeys((r["m"], r["n"], r["k"]) for r in records):
    rows = [r for r in records if (r["m"], r["n"], r["k"]) == key and r["us"] > 0]
    named = " | ".join(f"{r['arm']} {r['us']:.2f}" for r in rows if not r["arm"].startswith("swap"))
    best = min((r for r in rows if r["arm"].startswith("swap")), key=lambda r: r["us"], default=None)
    print(
        f"m={key[0]} {key[1]}x{key[2]}: {named} | best {best['arm'] if best else '-'} {best['us'] if best else -1:.2f}"
    )
