"""Fill the GEMM tuning store on the GPU: `python -m perf.tune_gemm --out FILE.json [--budget-s 240] [--kernels A,B]`.

For every (kernel, m bucket, n, k) of the presets' projections (perf/test_gemm_bench.py MM_SHAPES, the
8192^3 anchor) it times each candidate tile of the kernel (CANDIDATES, filtered by the device's shared
memory and, for native/mm_splitk, its m <= 16 range) at the bucket's upper m with CUDA events, the L2
flushed before each call, checks the fastest against the reference, and writes it as a store entry
(ops/gemm/tiles.py: kernel, dtype, m bucket, n, k, knobs, us) with the device, triton version and date.
The heuristic's own tiles are always a candidate, so an entry is never slower than what it replaces in
the same run. Bounded: it stops starting new keys after --budget-s and writes what it has. Copy FILE into
rapid_llm/kernels/ops/gemm/tuning/<model>.json to ship it, or into $RAPID_LLM_TUNING_DIR to try it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time

import torch

from perf.gpu_timing import event_timer
from perf.test_gemm_bench import MM_ANCHOR, MM_SHAPES
from rapid_llm.kernels.ops.gemm import tiles
from rapid_llm.kernels.ops.gemm.mm import gemv, splitk, tiled, w4a16
from rapid_llm.kernels.ops.gemm.reference import mm as reference_mm
from rapid_llm.kernels.ops.gemm.reference import w4a16_mm as reference_w4a16_mm
from rapid_llm.kernels.ops.gemm.reference import w8a16_mm as reference_w8a16_mm

KERNELS = {
    "native/mm": tiled,
    "native/mm_splitk": splitk,
    "native/w8a16_mm_splitk": splitk,
    "native/w8a16_mm": tiled,
    "native/mm_gemv": gemv,
    "native/w8a16_mm_gemv": gemv,
    "native/w4a16_mm": w4a16,
    "native/w4a16_mm_gemv": w4a16,
}
#: gemm.w4a16_mm's kernels, by their launch function: timed on GPTQ-packed weights of group 128 (the store's
#: key has no packing or group: one entry serves both packings; AWQ reads the same bytes as rows of words).
INT4_WEIGHTS = {"native/w4a16_mm": w4a16.launch_mm, "native/w4a16_mm_gemv": w4a16.launch_gemv}
INT4_GROUP = 128
#: Kernels whose weights are int8 with one scale per output channel (gemm.w8a16_mm's rows).
INT8_WEIGHTS = frozenset({"native/w8a16_mm_splitk", "native/w8a16_mm", "native/w8a16_mm_gemv"})
#: m values tuned per kernel (each one names its token bucket).
TOKENS = {
    "native/mm_splitk": (1, 16),
    "native/mm": (16, 128, 4096),
    "native/w8a16_mm_splitk": (1, 16),
    "native/w8a16_mm": (128,),
    "native/mm_gemv": (1,),
    "native/w8a16_mm_gemv": (1,),
    "native/w4a16_mm": (1, 16, 128, 4096),
    "native/w4a16_mm_gemv": (1,),
}
CANDIDATES = {
    "native/mm": [
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": w, "num_stages": s}
        for bm, bn, w, s in ((64, 128, 4, 4), (128, 64, 4, 4), (128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3))
    ],
    "native/mm_splitk": [
        {"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4, "num_stages": 4}
        for bn, bk, split in itertools.product((16, 32, 64, 128), (128, 256, 512), (1, 2, 4, 8))
    ],
    # int8 weights: half the bytes per element, so longer K steps keep as many bytes in flight
    "native/w8a16_mm_splitk": [
        {"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4, "num_stages": 4}
        for bn, bk, split in itertools.product((16, 32, 64, 128), (256, 512, 1024), (1, 2, 4))
    ],
}
CANDIDATES["native/w8a16_mm"] = CANDIDATES["native/mm"]
# int4: a quarter of bf16's bytes; decode tiles split K further (SPLIT_K is a runtime argument: no recompile),
# prefill tiles are native/mm's (BLOCK_K is capped at the group size by the launch)
CANDIDATES["native/w4a16_mm"] = [
    {"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": w, "num_stages": s}
    for bn, bk, split, w, s in itertools.product((32, 64, 128), (64, 128), (1, 4, 8, 16, 32), (4, 8), (3, 4))
] + [{**{name: v for name, v in knobs.items() if name != "GROUP_M"}, "SPLIT_K": 1} for knobs in CANDIDATES["native/mm"]]
CANDIDATES["native/w4a16_mm_gemv"] = [
    {"BLOCK_M": 1, "BLOCK_N": bn, "SPLIT_K": split, "num_warps": w, "num_stages": s}
    for bn, split, w, s in itertools.product((16, 32, 64, 128, 256), (1, 2, 4, 8, 16, 32), (4, 8), (1, 2, 3))
    if bn <= 64 * w  # the group's unpacked tile (128 x BLOCK_N fp32): <= 64 registers a thread
]
for _kernel, _element_bytes in (("native/mm_gemv", 2), ("native/w8a16_mm_gemv", 1)):
    CANDIDATES[_kernel] = [
        {"BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": row_bytes // _element_bytes, "num_warps": w, "num_stages": s}
        for bn, row_bytes, w, s in itertools.product((4, 8, 16, 32), (512, 1024, 2048), (4, 8), (2, 3))
        if bn * row_bytes // _element_bytes <= 8192  # the fp32 accumulator: <= 64 registers a thread at 4 warps
    ]


def _fits(kernel: str, knobs: dict, m: int, limit: int) -> bool:
    if tiles.refusal(knobs, "bf16", limit, None):
        return False
    if kernel in ("native/mm", "native/w4a16_mm"):  # a tile far taller than m wastes the tensor cores
        return knobs["BLOCK_M"] <= max(16, 2 ** math.ceil(math.log2(max(m, 1))))
    return True


def _runner(kernel, module, x, w, scale, out):
    """(run(knobs): one launch of `kernel` into out, the reference's output) over x and the bf16 weight w [N, K]
    (int8 with its scale for gemm.w8a16_mm's kernels; requantized to GPTQ int4 for gemm.w4a16_mm's)."""
    if kernel not in INT4_WEIGHTS:
        expected = reference_mm(x, w) if scale is None else reference_w8a16_mm(x, w, scale)
        return (lambda knobs: module.launch(x, w, None, out, knobs, scale=scale)), expected
    n, k = w.shape
    groups = w.float().t().reshape(k // INT4_GROUP, INT4_GROUP, n)  # symmetric GPTQ: zero 8, stored 7
    scales = (groups.abs().amax(1).clamp_min(1e-8) / 7.5).half()
    q = (groups / scales.float()[:, None]).round().clamp(-8, 7).to(torch.int64).reshape(k, n) + 8
    qweight = sum(q[i::8] << (4 * i) for i in range(8))
    qweight = torch.where(qweight >= 2**31, qweight - 2**32, qweight).to(torch.int32)
    qzeros = torch.full((k // INT4_GROUP, n // 8), 0x77777777, dtype=torch.int32, device=w.device)
    args = (x, qweight, scales, qzeros, INT4_GROUP, "gptq")
    launch = INT4_WEIGHTS[kernel]
    return (lambda knobs: launch(*args, None, out, knobs)), reference_w4a16_mm(*args)


def tune(budget_s: float, kernels=tuple(KERNELS)) -> tuple[list, list]:
    device = torch.device("cuda")
    limit = tiles.shared_memory_limit(device)
    props = torch.cuda.get_device_properties(device)
    sm, programs = props.major * 10 + props.minor, props.multi_processor_count
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=device)
    shapes = [(n, k) for n, k, _ in MM_SHAPES] + [MM_ANCHOR[1:]]
    entries, log = [], []
    started = time.perf_counter()
    for kernel in kernels:
        module = KERNELS[kernel]
        for n, k in shapes:
            for m in TOKENS[kernel]:
                if time.perf_counter() - started > budget_s:
                    log.append({"kernel": kernel, "n": n, "k": k, "m": m, "skipped": "budget spent"})
                    continue
                gen = torch.Generator(device="cuda").manual_seed(m + n + k)
                x = torch.randn((m, k), device=device, generator=gen).bfloat16()
                w = (torch.randn((n, k), device=device, generator=gen) / math.sqrt(k)).bfloat16()
                scale = None
                if kernel in INT8_WEIGHTS:  # channel-wise int8 as a W8A16 checkpoint stores it
                    scale = w.float().abs().amax(dim=1).clamp_min(1e-8) / 127
                    w = (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
                out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
                run, expected = _runner(kernel, module, x, w, scale, out)
                default = tiles.heuristic(kernel, m, n, k, sm, programs)
                candidates = [default] + [c for c in CANDIDATES[kernel] if c != default and _fits(kernel, c, m, limit)]
                timings = []
                for knobs in candidates:
                    try:
                        us = event_timer(lambda: run(knobs), flush=flush, iterations=10).median_us
                    except Exception as error:  # a tile Triton cannot compile here: not a candidate
                        log.append(
                            {"kernel": kernel, "knobs": knobs, "error": f"{type(error).__name__}: {error}"[:200]}
                        )
                        continue
                    timings.append((us, knobs))
                us, best = min(timings, key=lambda item: item[0])
                run(best)
                error = (out.float() - expected.float()).abs().max().item()
                default_us = next(t for t, knobs in timings if knobs is default)
                entries.append(tiles.store_entry(kernel, "bf16", m, n, k, best, us))
                log.append(
                    {
                        "kernel": kernel,
                        "m": m,
                        "n": n,
                        "k": k,
                        "best_us": us,
                        "heuristic_us": default_us,
                        "candidates": len(timings),
                        "max_abs_diff": error,
                        "knobs": best,
                    }
                )
                print(
                    f"{kernel:18s} m={m:5d} n={n:6d} k={k:5d}  {us:9.1f} us (heuristic {default_us:9.1f})  {best}",
                    flush=True,
                )
    return entries, log


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated kernel names (default: all)")
    args = parser.parse_args(argv)
    kernels = tuple(args.kernels.split(","))
    unknown = set(kernels) - set(KERNELS)
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; known: {sorted(KERNELS)}")
    import triton

    entries, log = tune(args.budget_s, kernels)
    document = {
        "device": torch.cuda.get_device_name(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join([sys.executable, "-m", "perf.tune_gemm", *(argv if argv is not None else sys.argv[1:])]),
        "entries": entries,
        "log": log,
    }
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    print(f"wrote {len(entries)} entries to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
