"""Fill the GEMM tuning store on the GPU: `python -m perf.tune_gemm --out FILE.json [--budget-s 240] [--kernels A,B]`.

`--tokens 1,16` tunes only those m values (the decode buckets first, when one call cannot cover every bucket).

For every (kernel, m bucket, n, k) of the presets' projections (perf/test_gemm_bench.py MM_SHAPES, the
8192^3 anchor; the fp8 kernels of ops/gemm/fp8/ at FP8_SHAPES on quantized inputs) it times each candidate tile of the kernel (CANDIDATES, filtered by the device's shared
memory and, for native/mm_splitk, its m <= 16 range) at the bucket's upper m with CUDA events, the L2
flushed before each call, checks the fastest against the reference, and writes it as a store entry
(ops/gemm/tiles.py: kernel, dtype, m bucket, n, k, knobs, us) with the device, triton version and date.
The heuristic's own tiles are always a candidate, so an entry is never slower than what it replaces in
the same run. Bounded: it stops starting new keys after --budget-s and writes what it has. Copy FILE into
rapid_llm/kernels/ops/gemm/tuning/<model>.json to ship it, or into $RAPID_LLM_TUNING_DIR to try it.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import sys
import time

import torch

from perf.gpu_timing import event_timer
from perf.test_gemm_bench import DENSE_SHAPES, MM_ANCHOR, MM_SHAPES, channel_weights
from perf.test_gemm_bench import _activations as block_activations
from perf.test_gemm_bench import _weights as block_weights
from rapid_llm.kernels.ops.gemm import SCALE_BLOCK, reference, tiles
from rapid_llm.kernels.ops.gemm.fp8 import block_scales, channel_scales
from rapid_llm.kernels.ops.gemm.fp8 import gemv as fp8_gemv
from rapid_llm.kernels.ops.gemm.fp8 import splitk as fp8_splitk
from rapid_llm.kernels.ops.gemm.fp8 import swap_ab as fp8_swap_ab
from rapid_llm.kernels.ops.gemm.fp8 import tiled as fp8_tiled
from rapid_llm.kernels.ops.gemm.mm import gemv, splitk, tiled, w4a16, w4a16_swap_ab
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
    "native/w4a16_mm_swap_ab": w4a16_swap_ab,
}
#: The fp8 GEMMs' kernels (ops/gemm/fp8/), tuned on fp8 inputs at their own shapes (FP8_SHAPES).
FP8_KERNELS = {
    "native/fp8_block_mm": fp8_tiled,
    "native/fp8_block_mm_splitk": fp8_splitk,
    "native/fp8_mm": fp8_tiled,
    "native/fp8_mm_splitk": fp8_splitk,
    "native/fp8_block_mm_gemv": fp8_gemv,
    "native/fp8_block_mm_swap_ab": fp8_swap_ab,
}
#: The Gluon kernel (triton 3.6.x only: Gluon's API): its module is imported when it is tuned.
FP8_KERNELS["native/fp8_block_mm_gluon"] = "rapid_llm.kernels.ops.gemm.fp8.gluon"
#: Block-scaled kernels: DeepSeek-V3's dense projections (perf/test_gemm_bench.py) and 7168 x 7168;
#: channel-scaled: the 8192^2 anchor and 7168 x 7168.
_BLOCK_SHAPES = (*((n, k) for n, k, _ in DENSE_SHAPES), (7168, 7168))
FP8_SHAPES = {
    "native/fp8_block_mm": _BLOCK_SHAPES,
    "native/fp8_block_mm_splitk": _BLOCK_SHAPES,
    "native/fp8_block_mm_gluon": _BLOCK_SHAPES,
    "native/fp8_block_mm_gemv": _BLOCK_SHAPES,
    "native/fp8_block_mm_swap_ab": _BLOCK_SHAPES,
    "native/fp8_mm": ((8192, 8192), (7168, 7168)),
    "native/fp8_mm_splitk": ((8192, 8192), (7168, 7168)),
}
#: gemm.w4a16_mm's kernels, by their launch function: timed on GPTQ-packed weights of group 128 (the store's
#: key has no packing or group: one entry serves both packings; AWQ reads the same bytes as rows of words).
INT4_WEIGHTS = {
    "native/w4a16_mm": w4a16.launch_mm,
    "native/w4a16_mm_gemv": w4a16.launch_gemv,
    "native/w4a16_mm_swap_ab": w4a16_swap_ab.launch,
}
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
    # split-K: the decode buckets at 1, 16 and 64 tokens (64 names the 17-128 bucket: the range it is made for)
    "native/fp8_block_mm": (128, 4096),
    "native/fp8_block_mm_gluon": (4096,),
    "native/fp8_block_mm_gemv": (1,),
    "native/fp8_block_mm_splitk": (1, 16, 64),
    "native/fp8_block_mm_swap_ab": (1, 16, 64),
    "native/fp8_mm": (128, 4096, 8192),
    "native/fp8_mm_splitk": (1, 16, 64),
    "native/w4a16_mm": (1, 16, 128, 4096),
    "native/w4a16_mm_gemv": (1,),
    "native/w4a16_mm_swap_ab": (1, 16),
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
# fp8: BLOCK_K 128 (the block-scaled kernels' one scale per step); the per-step fp32 product doubles the
# accumulator's registers, so 128 x 256 tiles are offered with 8 warps only.
CANDIDATES["native/fp8_block_mm"] = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": w, "num_stages": s}
    for bm, bn, w, s in (
        (64, 128, 4, 4),
        (64, 128, 4, 5),
        (128, 64, 4, 4),
        (128, 128, 8, 3),
        (128, 128, 8, 4),
        (128, 128, 8, 5),
        (128, 256, 8, 3),
        (64, 256, 8, 4),
    )
]
# the Gluon kernel has one tile (128 x 128 x 128, two consumer warpgroups); grouping and ring slots vary
CANDIDATES["native/fp8_block_mm_gluon"] = [
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": g, "num_warps": 4, "num_stages": s}
    for g, s in itertools.product((4, 8, 16), (3, 4, 5))
]
CANDIDATES["native/fp8_mm"] = CANDIDATES["native/fp8_block_mm"] + [
    {**knobs, "BLOCK_K": 256, "num_stages": 3} for knobs in CANDIDATES["native/fp8_block_mm"] if knobs["BLOCK_N"] <= 128
]
CANDIDATES["native/fp8_block_mm_splitk"] = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": 4, "num_stages": s}
    for bm, bn, split, s in itertools.product((16, 32, 64), (32, 64, 128), (1, 2, 4, 8, 16), (4, 6))
]
# weight rows on the MMA's M side (BLOCK_N divides the 128-row weight block), tokens on its N side
CANDIDATES["native/fp8_block_mm_swap_ab"] = [
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": 4, "num_stages": s}
    for bm, bn, split, s in itertools.product((16, 32, 64), (64, 128), (1, 2, 4, 8, 16), (4, 6))
]
CANDIDATES["native/fp8_mm_splitk"] = CANDIDATES["native/fp8_block_mm_splitk"] + [
    {**knobs, "BLOCK_K": 256} for knobs in CANDIDATES["native/fp8_block_mm_splitk"] if knobs["num_stages"] == 4
]
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
# tensor-core decode int4: 64 or 128 weight columns on the MMA's M side, one 16-token tile, K split in groups
CANDIDATES["native/w4a16_mm_swap_ab"] = [
    {"BLOCK_M": 16, "BLOCK_N": bn, "SPLIT_K": split, "num_warps": w, "num_stages": s}
    for bn, split, w, s in itertools.product((64, 128), (1, 2, 4, 8, 16, 32), (4, 8), (1, 2, 3))
]
# the fp8 one-token kernel: BLOCK_N divides 128 (one weight block per program), BLOCK_K whole scale groups
CANDIDATES["native/fp8_block_mm_gemv"] = [
    {"BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s}
    for bn, bk, w, s in itertools.product((4, 8, 16, 32), (256, 512, 1024, 2048), (4, 8), (2, 3))
    if bn * bk <= 8192  # the fp32 accumulator: <= 64 registers a thread at 4 warps
]
for _kernel, _element_bytes in (("native/mm_gemv", 2), ("native/w8a16_mm_gemv", 1)):
    CANDIDATES[_kernel] = [
        {"BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": row_bytes // _element_bytes, "num_warps": w, "num_stages": s}
        for bn, row_bytes, w, s in itertools.product((4, 8, 16, 32), (512, 1024, 2048), (4, 8), (2, 3))
        if bn * row_bytes // _element_bytes <= 8192  # the fp32 accumulator: <= 64 registers a thread at 4 warps
    ]


def _fits(kernel: str, knobs: dict, m: int, limit: int, dtype: str = "bf16") -> bool:
    block_k_multiple = SCALE_BLOCK if kernel in FP8_KERNELS else None
    if tiles.refusal(knobs, dtype, limit, block_k_multiple, kernel):
        return False
    if kernel == "native/w4a16_mm" and knobs.get("SPLIT_K", 1) > 1 and m > 16:
        return False  # split over K for decode token counts only: [SPLIT_K, m, N] fp32 slices
    if kernel in (
        "native/mm",
        "native/w4a16_mm",
        "native/fp8_mm_splitk",
        "native/fp8_block_mm_splitk",
        "native/fp8_block_mm_swap_ab",
    ):
        # a tile far taller than m wastes the tensor cores on clamped rows
        return knobs["BLOCK_M"] <= max(16, 2 ** math.ceil(math.log2(max(m, 1))))
    return True


def _fastest(kernel, m, n, k, dtype, run, error_of, *, sm, programs, limit, flush, log) -> dict:
    """Times the heuristic's tiles and every fitting candidate as run(knobs) (the L2 flushed), checks the
    fastest with error_of() (max |diff| from the reference after run(best)), logs it and returns its store
    entry."""
    default = tiles.heuristic(kernel, m, n, k, sm, programs)
    candidates = [default] + [c for c in CANDIDATES[kernel] if c != default and _fits(kernel, c, m, limit, dtype)]
    timings = []
    for knobs in candidates:
        try:
            us = event_timer(lambda: run(knobs), flush=flush, iterations=10).median_us
        except Exception as error:  # a tile Triton cannot compile here: not a candidate
            log.append({"kernel": kernel, "knobs": knobs, "error": f"{type(error).__name__}: {error}"[:200]})
            continue
        timings.append((us, knobs))
    us, best = min(timings, key=lambda item: item[0])
    run(best)
    error = error_of()
    default_us = next(t for t, knobs in timings if knobs is default)
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
    print(f"{kernel:18s} m={m:5d} n={n:6d} k={k:5d}  {us:9.1f} us (heuristic {default_us:9.1f})  {best}", flush=True)
    return tiles.store_entry(kernel, dtype, m, n, k, best, us)


def _fp8_inputs(kernel, m, n, k):
    """(a, b, scales for launch(), the reference's argument tuple) of the engine's quantized inputs: block
    kernels per_token_group_fp8 with TMA-aligned scales and 128x128 weight blocks; channel kernels
    per_token_fp8 and per-channel weights."""
    from rapid_llm.kernels import per_token_fp8

    if kernel.startswith("native/fp8_block_mm"):  # every gemm.fp8_block_mm kernel
        a, a_scale = block_activations(m, k, seed=m + k)
        b, b_scale = block_weights(n, k, seed=n + k)
        return a, b, block_scales(a_scale, b_scale), (a, a_scale, b, b_scale)
    gen = torch.Generator(device="cuda").manual_seed(m + k)
    a, a_scale = per_token_fp8(torch.randn((m, k), device="cuda", generator=gen).bfloat16())
    b, b_scale = channel_weights(n, k, seed=n + k)
    return a, b, channel_scales(a_scale, b_scale), (a, a_scale, b, b_scale)


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


def tune(budget_s: float, kernels=(*KERNELS, *FP8_KERNELS), tokens=None) -> tuple[list, list]:
    """Store entries and the log for `kernels` at their TOKENS m values (only those in `tokens` if given)."""
    device = torch.device("cuda")
    limit = tiles.shared_memory_limit(device)
    props = torch.cuda.get_device_properties(device)
    sm, programs = props.major * 10 + props.minor, props.multi_processor_count
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=device)
    shapes = [(n, k) for n, k, _ in MM_SHAPES] + [MM_ANCHOR[1:]]
    entries, log = [], []
    context = {"sm": sm, "programs": programs, "limit": limit, "flush": flush, "log": log}
    started = time.perf_counter()
    for kernel in (kernel for kernel in kernels if kernel in KERNELS):
        module = KERNELS[kernel]
        for n, k in shapes:
            for m in (m for m in TOKENS[kernel] if tokens is None or m in tokens):
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
                entries.append(
                    _fastest(
                        kernel,
                        m,
                        n,
                        k,
                        "bf16",
                        run,
                        lambda: (out.float() - expected.float()).abs().max().item(),
                        **context,
                    )
                )
    for kernel in (kernel for kernel in kernels if kernel in FP8_KERNELS):
        module = FP8_KERNELS[kernel]
        if isinstance(module, str):
            module = importlib.import_module(module)
        for n, k in FP8_SHAPES[kernel]:
            for m in (m for m in TOKENS[kernel] if tokens is None or m in tokens):
                if time.perf_counter() - started > budget_s:
                    log.append({"kernel": kernel, "n": n, "k": k, "m": m, "skipped": "budget spent"})
                    continue
                a, b, scales, args = _fp8_inputs(kernel, m, n, k)
                out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
                want = reference.fp8_block_mm(*args) if scales.blocks else reference.fp8_mm(*args)
                entries.append(
                    _fastest(
                        kernel,
                        m,
                        n,
                        k,
                        "fp8_e4m3",
                        lambda knobs: module.launch(a, b, scales, None, out, knobs),
                        lambda: (out.float() - want.float()).abs().max().item(),
                        **context,
                    )
                )
    return entries, log


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument(
        "--kernels", default=",".join((*KERNELS, *FP8_KERNELS)), help="comma-separated kernel names (default: all)"
    )
    parser.add_argument("--tokens", help="comma-separated m values to tune (default: each kernel's TOKENS)")
    args = parser.parse_args(argv)
    tokens = None if args.tokens is None else {int(m) for m in args.tokens.split(",")}
    kernels = tuple(args.kernels.split(","))
    unknown = set(kernels) - set(KERNELS) - set(FP8_KERNELS)
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; known: {sorted((*KERNELS, *FP8_KERNELS))}")

    entries, log = tune(args.budget_s, kernels, tokens)
    write_store_document(args.out, "perf.tune_gemm", argv, entries, log)
    return 0


def write_store_document(path: str, module: str, argv, entries: list, log: list) -> None:
    """A tuning run's store file: the device, triton, torch, date and command, the entries and the log."""
    import triton

    document = {
        "device": torch.cuda.get_device_name(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join([sys.executable, "-m", module, *(argv if argv is not None else sys.argv[1:])]),
        "entries": entries,
        "log": log,
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    print(f"wrote {len(entries)} entries to {path}")


if __name__ == "__main__":
    sys.exit(main())
