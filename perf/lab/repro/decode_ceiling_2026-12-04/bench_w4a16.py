"""H200: w4a16_variants.py (AWQ with the k-sum deferred; one or two groups in flight; m = 1) and native/w4a16_mm_swap_ab
(the tensor-core decode row, knob sets; m = 1 and 16) beside the dispatched gemm.w4a16_mm row (shipped tiles) and fp16
cuBLAS at 8192^2 and 4096 x 14336, GPTQ v1 and AWQ g128; CUDA-graph replays with L2 flushed, every arm checked
against the reference. Table on stdout, JSON to argv[1]."""

import itertools
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import w4a16_variants as lab

from conformance.cases.gemm import _int4_weights
from perf.gpu_timing import event_timer
from rapid_llm.kernels import w4a16_mm
from rapid_llm.kernels.ops.gemm.mm import w4a16_swap_ab
from rapid_llm.kernels.ops.gemm.reference import w4a16_mm as reference

flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
records = []


def graph_us(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = fn()
    return event_timer(graph.replay, flush=flush, iterations=20).median_us, got


generator = torch.Generator().manual_seed(0)
for (n, k), packing, m in itertools.product(((8192, 8192), (4096, 14336)), ("gptq", "awq"), (1, 16)):
    qweight, scales, qzeros = (t.cuda() for t in _int4_weights(n, k, 128, packing, generator, torch.float16))
    x = torch.randn((m, k), generator=generator).half().cuda()
    w = torch.randn((n, k), device="cuda").half()
    want = reference(x, qweight, scales, qzeros, 128, packing).float()
    out = torch.empty((m, n), dtype=torch.float16, device="cuda")
    arms = {
        "cublas fp16 F.linear": (lambda: torch.nn.functional.linear(x, w), None),
        "gemm.w4a16_mm (dispatch)": (lambda: w4a16_mm(x, qweight, scales, qzeros, 128, packing), want),
    }
    for bn, split, warps, stages in itertools.product((64, 128), (2, 4, 8, 16), (4, 8), (2, 3)):
        knobs = {"BLOCK_M": 16, "BLOCK_N": bn, "SPLIT_K": split, "num_warps": warps, "num_stages": stages}
        arms[f"tc BLOCK_N={bn} SPLIT_K={split} warps={warps} stages={stages}"] = (
            lambda knobs=knobs: w4a16_swap_ab.launch(x, qweight, scales, qzeros, 128, packing, None, out, knobs) or out,
            want,
        )
    for bn, split, depth, warps in itertools.product((32, 64, 128), (2, 4, 8, 16), (1, 2), (4, 8)):
        if m > 1:
            break
        name = f"variant BLOCK_N={bn} SPLIT_K={split} DEPTH={depth} warps={warps}"
        arms[name] = (
            lambda bn=bn, split=split, depth=depth, warps=warps: lab.launch(
                x, qweight, scales, qzeros, 128, packing, out, bn, split, depth, warps
            ),
            want,
        )
    for name, (fn, expected) in arms.items():
        try:
            us, got = graph_us(fn)
            diff = None if expected is None else (got.float() - expected).abs().max().item()
        except Exception as error:
            us, diff = -1.0, f"{type(error).__name__}: {str(error)[:100]}"
        records.append({"m": m, "n": n, "k": k, "packing": packing, "arm": name, "us": us, "diff": diff})
        print(f"{m:3d} {n:6d} {k:6d} {packing:5s} {name:60s} {us:8.2f} us diff {diff}", flush=True)

with open(sys.argv[1], "w") as handle:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "records": records}, handle, indent=1)  # fmt: skip
print("\nsummary")
for key in dict.fromkeys((r["m"], r["n"], r["k"], r["packing"]) for r in records):
    rows = [r for r in records if (r["m"], r["n"], r["k"], r["packing"]) == key and r["us"] > 0]
    named = " | ".join(f"{r['arm']} {r['us']:.2f}" for r in rows if r["arm"][:2] not in ("va", "tc"))
    for depth in ("DEPTH=1", "DEPTH=2", "tc "):
        best = min((r for r in rows if depth in r["arm"]), key=lambda r: r["us"], default=None)
        named += f" | best {best['arm'] if best else '-'} {best['us'] if best else -1:.2f}"
    print(f"{key}: {named}")
