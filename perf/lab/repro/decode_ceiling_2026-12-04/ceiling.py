"""H200: what a decode-sized weight stream can reach. For each weight size of the GEMM family's decode
targets, the fastest read-only Triton kernel (every byte read once, 128-bit loads, best over block x unroll x
warps) and a device copy of the same total traffic, beside cuBLAS bf16 at m = 1 and 16 and the library's
weight-only one-token rows (their shipped tiles and knob sets), all as CUDA-graph replays with L2 flushed.
A table on stdout, JSON to argv[1].

    PYTHONPATH=$PWD:$PWD/.gpu-site python perf/lab/repro/decode_ceiling_2026-12-04/ceiling.py OUT.json
"""

import itertools
import json
import sys

import torch
import triton
import triton.language as tl

from perf.gpu_timing import event_timer
from perf.tune_gemm import _runner
from rapid_llm.kernels import w8a16_mm
from rapid_llm.kernels.ops.gemm.mm import gemv as mm_gemv

flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")


@triton.jit
def _read_kernel(src, out, words, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * BLOCK * UNROLL
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for i in tl.static_range(UNROLL):
        offsets = base + i * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(src + offsets, mask=offsets < words, other=0)
    tl.store(out + tl.program_id(0), tl.sum(acc, axis=0))


def graph_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return event_timer(graph.replay, flush=flush, iterations=20).median_us


records = []


def record(section, name, us, **extra):
    records.append({"section": section, "name": name, "us": us, **extra})
    print(f"{section:10s} {name:70s} {us:8.2f} us {extra if extra else ''}", flush=True)


# 1. read-only and copy ceilings per byte count
SIZES = {
    "int4 8192^2 + g128 scales/zeros": 8192 * 8192 // 2 + 8192 * 64 * 2 + 64 * 1024 * 4,
    "int8 8192^2 + scales": 8192 * 8192 + 8192 * 2,
    "fp8 2112x7168": 2112 * 7168,
    "fp8 4096x7168": 4096 * 7168,
    "fp8 24576x1536": 24576 * 1536,
    "fp8 7168x7168": 7168 * 7168,
    "fp8 7168x16384": 7168 * 16384,
    "bf16 2048x4096": 2048 * 4096 * 2,
    "bf16 4096x4096": 4096 * 4096 * 2,
    "bf16 6144x4096": 6144 * 4096 * 2,
    "bf16 8192x8192": 8192 * 8192 * 2,
    "bf16 28672x4096": 28672 * 4096 * 2,
}
for label, size in SIZES.items():
    words = size // 4
    src = torch.randint(-(2**31), 2**31 - 1, (words,), dtype=torch.int32, device="cuda")
    best = None
    for block, unroll, warps in itertools.product((1024, 2048, 4096), (1, 2, 4, 8), (4, 8)):
        grid = triton.cdiv(words, block * unroll)
        out = torch.empty(grid, dtype=torch.int32, device="cuda")
        us = graph_us(lambda: _read_kernel[(grid,)](src, out, words, BLOCK=block, UNROLL=unroll, num_warps=warps))
        if best is None or us < best[0]:
            best = (us, block, unroll, warps)
    half = torch.empty(words // 2, dtype=torch.int32, device="cuda")
    same_traffic = graph_us(lambda: half.copy_(src[: words // 2]))
    full = torch.empty_like(src)
    full_copy = graph_us(lambda: full.copy_(src))
    record("ceiling", label + " read-only best", best[0], bytes=size, knobs=best[1:], TBps=size / best[0] / 1e6)
    record("ceiling", label + " copy, same traffic", same_traffic, bytes=size, TBps=size / same_traffic / 1e6)
    record("ceiling", label + " copy of the bytes", full_copy, bytes=size, TBps=2 * size / full_copy / 1e6)
    del src, half, full

# 2. cuBLAS bf16 and the weight-only one-token rows at 8192^2 (the targets' shape) and the w8a16 shapes
gen = torch.Generator(device="cuda").manual_seed(0)
for n, k in ((8192, 8192), (4096, 14336), (28672, 4096), (6144, 4096)):
    w = (torch.randn((n, k), device="cuda", generator=gen) * 0.02).bfloat16()
    for m in (1, 16):
        x = torch.randn((m, k), device="cuda", generator=gen).bfloat16()
        record("cublas", f"F.linear bf16 m={m} {n}x{k}", graph_us(lambda: torch.nn.functional.linear(x, w)))
    x = torch.randn((1, k), device="cuda", generator=gen).bfloat16()
    out = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    scale = (w.float().abs().amax(1) / 127).clamp_min(1e-8)
    w_q = (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    scale = scale.bfloat16()
    want = w8a16_mm(x, w_q, scale).float()
    record("w8a16", f"w8a16_mm (dispatch) {n}x{k}", graph_us(lambda: w8a16_mm(x, w_q, scale)))
    for bn, bk, warps, stages in itertools.product((4, 8, 16), (512, 1024, 2048), (4, 8), (2, 3)):
        if bn * bk > 16384:
            continue
        knobs = {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}
        run = lambda: mm_gemv.launch(x, w_q, None, out, knobs, scale=scale)  # noqa: E731
        try:
            us = graph_us(run)
            diff = (out.float() - want).abs().max().item()
        except Exception as error:
            record("w8a16", f"gemv {knobs} failed {type(error).__name__}", -1.0)
            continue
        record("w8a16", f"gemv {n}x{k} {knobs}", us, diff=diff)
    if (n, k) == (8192, 8192):
        out_int4 = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
        run4, want4 = _runner("native/w4a16_mm_gemv", None, x, w, None, out_int4)
        want4 = want4.float()
        for bn, split, warps, stages in itertools.product((16, 32, 64, 128), (1, 2, 4, 8, 16), (4, 8), (1, 2, 3)):
            if bn > 64 * warps:
                continue
            knobs = {"BLOCK_N": bn, "SPLIT_K": split, "num_warps": warps, "num_stages": stages}
            try:
                us = graph_us(lambda: run4(dict(knobs)))
                diff = (out_int4.float() - want4).abs().max().item()
            except Exception as error:
                record("w4a16", f"gemv {knobs} failed {type(error).__name__}", -1.0)
                continue
            record("w4a16", f"gemv gptq 8192x8192 {knobs}", us, diff=diff)
    del w, w_q

with open(sys.argv[1], "w") as handle:
    json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "records": records}, handle, indent=1)  # fmt: skip
print("\nsummary")
for section in ("ceiling", "cublas"):
    for r in records:
        if r["section"] == section:
            print(f"{r['name']:60s} {r['us']:8.2f}")
for section in ("w8a16", "w4a16"):
    rows = sorted((r for r in records if r["section"] == section and r["us"] > 0), key=lambda r: r["us"])
    for r in rows[:6]:
        print(f"{r['name']:100s} {r['us']:8.2f}")
