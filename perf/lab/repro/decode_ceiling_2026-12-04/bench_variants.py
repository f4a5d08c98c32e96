"""H200: the one-token GEMV variants of gemv_variants.py (AHEAD: next K step's weights in flight during the
FMAs; X2D off: it still converts layouts) beside the shipped rows and cuBLAS bf16, CUDA-graph replays with
L2 flushed; each output checked against the shipped row's. Table on stdout, JSON to argv[1]."""

import itertools
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemv_variants as lab

from perf.gpu_timing import event_timer
from perf.test_gemm_bench import _activations, _weights
from rapid_llm.kernels import fp8_block_mm, mm, w8a16_mm

flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
records = []


def graph_us(fn):
    """(median replay time, the output the captured call returned: the graph writes it on every replay)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = fn()
    return event_timer(graph.replay, flush=flush, iterations=20).median_us, got


def arm(section, shape, name, fn, out, want):
    """fn() launches one call and returns its output (out for the lab launches, which return None)."""
    try:
        us, got = graph_us(fn)
        got = out if got is None else got
        diff = (got.float() - want.float()).abs().max().item()
    except Exception as error:
        us, diff = -1.0, f"{type(error).__name__}: {str(error)[:100]}"
    records.append({"section": section, "shape": shape, "arm": name, "us": us, "diff": diff})
    print(f"{section:6s} {shape:12s} {name:58s} {us:8.2f} us diff {diff}", flush=True)


KNOBS = [(bn, bk, w) for bn, bk, w in itertools.product((4, 8, 16), (512, 1024, 2048), (4, 8)) if bn * bk <= 16384]
gen = torch.Generator(device="cuda").manual_seed(0)
for n, k in ((8192, 8192), (4096, 14336), (28672, 4096), (6144, 4096), (4096, 4096)):
    shape = f"{n}x{k}"
    w = (torch.randn((n, k), device="cuda", generator=gen) * 0.02).bfloat16()
    x = torch.randn((1, k), device="cuda", generator=gen).bfloat16()
    scale = (w.float().abs().amax(1) / 127).clamp_min(1e-8)
    w_q = (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    scale = scale.bfloat16()
    ones = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    out = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    arm("cublas", shape, "F.linear bf16", lambda: torch.nn.functional.linear(x, w), out, x @ w.t())
    want8 = w8a16_mm(x, w_q, scale)
    arm("w8a16", shape, "w8a16_mm (dispatch)", lambda: w8a16_mm(x, w_q, scale), out, want8)
    want16 = mm(x, w)
    arm("bf16", shape, "mm (dispatch)", lambda: mm(x, w), out, want16)
    for (bn, bk, warps), ahead in itertools.product(KNOBS, (False, True)):
        name = f"BLOCK_N={bn} BLOCK_K={bk} warps={warps} AHEAD={int(ahead)}"
        arm("w8a16", shape, name, lambda: lab.launch(x, w_q, scale, out, bn, bk, False, ahead, warps), out, want8)
        if bn * bk <= 8192:
            arm("bf16", shape, name, lambda: lab.launch(x, w, ones, out, bn, bk, False, ahead, warps), out, want16)
    del w, w_q

FP8 = [(bn, bk, w) for bn, bk, w in ((4, 1024, 4), (4, 2048, 4), (8, 1024, 4), (8, 512, 4), (4, 512, 4), (16, 512, 8),
                                     (32, 256, 8), (32, 256, 4), (2, 2048, 4))]  # fmt: skip
for n, k in ((2112, 7168), (4096, 7168), (7168, 7168), (24576, 1536), (7168, 16384)):
    shape = f"{n}x{k}"
    a, a_scale = _activations(1, k, seed=1 + k)
    b, b_scale = _weights(n, k, seed=n + k)
    a_scale = a_scale.contiguous()
    out = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    want = fp8_block_mm(a, a_scale, b, b_scale)
    arm("fp8", shape, "fp8_block_mm (dispatch)", lambda: fp8_block_mm(a, a_scale, b, b_scale), out, want)
    for (bn, bk, warps), ahead in itertools.product(FP8, (False, True)):
        name = f"BLOCK_N={bn} BLOCK_K={bk} warps={warps} AHEAD={int(ahead)}"
        arm("fp8", shape, name, lambda: lab.launch_fp8(a, a_scale, b, b_scale, out, bn, bk, ahead, warps), out, want)

with open(sys.argv[1], "w") as handle:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "records": records}, handle, indent=1)  # fmt: skip
print("\nsummary: per section and shape, the shipped row, the best AHEAD=0 and AHEAD=1 arms")
for section in ("cublas", "w8a16", "bf16", "fp8"):
    for shape in dict.fromkeys(r["shape"] for r in records if r["section"] == section):
        rows = [r for r in records if r["section"] == section and r["shape"] == shape and r["us"] > 0]
        shipped = [r for r in rows if "dispatch" in r["arm"] or section == "cublas"]
        line = f"{section:6s} {shape:12s} shipped {shipped[0]['us'] if shipped else -1:7.2f}"
        for ahead in ("AHEAD=0", "AHEAD=1"):
            best = min((r for r in rows if r["arm"].endswith(ahead)), key=lambda r: r["us"], default=None)
            if best:
                line += f" | {ahead} {best['us']:7.2f} ({best['arm'][:-8]})"
        print(line)
