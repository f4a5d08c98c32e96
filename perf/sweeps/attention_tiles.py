"""Tile sweeps of the native attention kernels on a GPU (the evidence for their launch_config()).

    python -m perf.sweeps.attention_tiles --out DIR [--compile-only [--shard I/N]] [--only SECTION ...]

One process times every configuration (perf/gpu_timing.py: CUDA events, 512 MiB L2 flush before
each call, median; B=1 decode also in CUDA-graph replay), so every figure is comparable with the
same run's copy bandwidth. --compile-only calls each configuration once without timing: run it
first (several processes with disjoint --only sections, or --shard I/N of one section) to fill
Triton's cache, so the timing run compiles nothing.

  decode      attention.decode, GQA 32/8 d128 page 16, bf16 and fp8 KV, B=64 L=4096, B=8 L=8192,
              B=1 L=32768: BLOCK_N x num_warps x num_stages, and the split count (heuristic, x0.5, x2)
  mla_decode  attention.mla_decode, page 64: Hq=128 and Hq=16 at B=64 L=4096, Hq=16 and 128 at B=1
              L=32768: kernel (TMA boxes, pointer loads with unmasked whole tiles, masked pointer
              loads) x BLOCK_N x num_stages x split count (MLA_SPLITS)
  prefill     attention.prefill causal GQA 32/8 d128 at 4 x 4096 and 16 x 1024 tokens, and the MLA
              prefill shape (16 heads, 192 / 128) at 4 x 4096: the TMA kernel's BLOCK_N x num_warps x
              num_stages x warp specialization at BLOCK_M 128 (and two 64-row tiles), and the pointer
              kernel's BLOCK_M x BLOCK_N x num_warps x num_stages at 4 x 4096

Each entry records the configuration, whether launch_config() picks it ("heuristic"), µs, and TB/s
(decode: KV / latent bytes read) or TFLOP/s (prefill, MLA: the causal half). Writes
DIR/sweep_attention_tiles.json and prints the best configuration per shape last.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
import time
import traceback

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch
import triton

from perf import gpu_timing

COMPILE_ONLY = False
FLUSH = None
#: (index, count) of a --compile-only process: it compiles every count-th configuration from index.
SHARD = (0, 1)
ATTEMPTS = 0


def _time(fn, *, graph=False) -> dict:
    if COMPILE_ONLY:
        fn()
        torch.cuda.synchronize()
        return {}
    entry = {"event_us": round(gpu_timing.event_timer(fn, flush=FLUSH, iterations=30).median_us, 2)}
    if graph:
        entry["graph_us"] = round(gpu_timing.graph_timer(fn).median_us, 2)
    return entry


def _pages(batch, length, page_size):
    per = triton.cdiv(length, page_size)
    order = torch.randperm(batch * per, generator=torch.Generator().manual_seed(batch + length)).to(torch.int32)
    return order.view(batch, per).cuda(), batch * per


def _attempt(rows, entry, fn, *, graph=False):
    global ATTEMPTS
    ATTEMPTS += 1
    if COMPILE_ONLY and ATTEMPTS % SHARD[1] != SHARD[0]:
        return  # another --shard process compiles this configuration
    try:
        entry.update(_time(fn, graph=graph))
    except Exception as error:  # a configuration that does not compile (shared memory) is a result too
        entry["error"] = f"{type(error).__name__}: {str(error)[:200]}"
    rows.append(entry)


def sweep_decode():
    from rapid_llm.kernels.ops.attention import decode as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for batch, length in ((64, 4096), (8, 8192), (1, 32768)):
        table, pages = _pages(batch, length, 16)
        values = torch.randn((pages * 16, 16, 128), device="cuda", generator=g)
        q = torch.randn((batch, 32, 128), device="cuda", generator=g).bfloat16()
        lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        for kv in ("bf16", "fp8"):
            if kv == "fp8":
                scale = (values.abs().amax() / 448).reshape(1)
                buffer, scales = (values / scale).to(torch.float8_e4m3fn), (scale, scale)
            else:
                buffer, scales = values.bfloat16(), (None, None)
            nbytes = batch * length * 16 * 128 * buffer.element_size()
            picked = module.launch_config(128, buffer.dtype, q.device)
            if kv == "fp8":
                picked["CVT_ASM"] = True  # decode() adds it on CUDA with a bf16 q
            base = module.num_splits(batch, 8, table.shape[1] * 16, q.device)
            for block_n, warps, stages, split_factor, registers, asm in itertools.product(
                    (32, 64, 128, 256), (4, 8), (2, 3, 4), (0.5, 1, 2), (None, 128, 168), (True, False)):
                splits = max(1, min(module.MAX_SPLITS, int(base * split_factor)))
                config = {"BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
                if kv == "fp8":
                    config["CVT_ASM"] = asm  # the inline-PTX e4m3 -> fp16 conversion, or .to(fp16)
                elif not asm:
                    continue
                if registers:  # a register cap: more programs per SM (ptxas may spill)
                    config["maxnreg"] = registers
                    if kv == "bf16" or warps == 8 or block_n not in (64, 128):
                        continue  # fp8 at 4 warps, 64 / 128 positions: 210 registers at 128 (ncu, 12-01)
                if split_factor != 1 and config != picked:
                    continue  # the split count is swept at the picked tiles only
                if kv == "bf16" and (block_n > 128 or stages > 3):
                    continue  # bf16: the tiles of the 12-01 sweep; fp8 (fp16 products since 12-01 pm) all
                entry = {"batch": batch, "length": length, "kv": kv, "splits": splits, **config,
                         "heuristic": config == picked and split_factor == 1}
                args = (q, buffer, table, lens, 16, 128 ** -0.5, *scales)
                _attempt(rows, entry, lambda: module.decode(*args, splits=splits, config=config), graph=batch == 1)
                if "event_us" in entry:
                    entry["TBps"] = round(nbytes / entry["event_us"] / 1e6, 3)
    return rows


def sweep_mla_decode():
    from rapid_llm.kernels.ops.attention import mla_decode as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for batch, length, heads in ((64, 4096, 128), (64, 4096, 16), (1, 32768, 16), (1, 32768, 128)):
        table, pages = _pages(batch, length, 64)
        cache = torch.randn((pages * 64, 576), device="cuda", generator=g).bfloat16()
        q = torch.randn((batch, heads, 576), device="cuda", generator=g).bfloat16()
        lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        nbytes = batch * length * 576 * 2
        flops = 2 * batch * heads * length * (576 + 512)
        capacity = table.shape[1] * 64
        picked, picked_splits = module.launch_plan(batch, heads, capacity, q.dtype, q.device)
        picked.pop("resident")
        picked_tma = picked.pop("TMA") and module.mla_decode_tma.tma_ready(cache, 64, picked["BLOCK_N"])
        if picked_tma:
            picked.pop("UNMASKED_BODY")  # the TMA kernel takes no such flag
        split_choices = {picked_splits, *MLA_SPLITS.get((batch, heads), ())}
        block_h = 64 if heads >= 64 else 16
        warps = 8 if heads >= 64 else 4
        # (kernel, BLOCK_N, stages): the TMA kernel (mla_decode_tma), the pointer kernel with unmasked whole
        # tiles, and the masked pointer kernel (the reference). Register caps, 16 / 32 head blocks for
        # Hq=128, 4 warps for Hq=128 / 8 for Hq=16 and 4-stage masked tiles lost on 12-01 (that day's
        # sweep_attention_tiles.json), so they are not swept again.
        grid = [(kernel, n, st) for kernel, n, st in itertools.product(("tma", "unmasked"), (32, 64), (2, 3, 4))]
        grid += [("masked", n, st) for n, st in itertools.product((32, 64), (2, 3))]
        for (kernel, block_n, stages), splits in itertools.product(grid, sorted(split_choices)):
            tma = kernel == "tma"
            config = {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
            if kernel == "unmasked":
                config["UNMASKED_BODY"] = True
            entry = {"batch": batch, "length": length, "heads": heads, "splits": splits, "tma": tma, **config,
                     "heuristic": config == picked and splits == picked_splits and tma == picked_tma}
            args = (q, cache, table, lens, 64, 192 ** -0.5)
            _attempt(rows, entry, lambda: module.mla_decode(*args, splits=splits, config=config, tma=tma),
                     graph=batch == 1)
            if "event_us" in entry:
                entry["TBps"] = round(nbytes / entry["event_us"] / 1e6, 3)
                entry["TFLOPs"] = round(flops / entry["event_us"] / 1e6, 1)
    return rows


def sweep_prefill():
    from rapid_llm.kernels.ops.attention import prefill as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(2)
    for batch, length, heads, kv_heads, dim, dim_v in ((4, 4096, 32, 8, 128, 128), (16, 1024, 32, 8, 128, 128),
                                                       (4, 4096, 16, 16, 192, 128)):
        tokens = batch * length
        q = torch.randn((tokens, heads, dim), device="cuda", generator=g).bfloat16()
        k = torch.randn((tokens, kv_heads, dim), device="cuda", generator=g).bfloat16()
        v = torch.randn((tokens, kv_heads, dim_v), device="cuda", generator=g).bfloat16()
        cu = torch.arange(0, tokens + 1, length, dtype=torch.int32, device="cuda")
        flops = 2 * batch * heads * length ** 2 * (dim + dim_v) / 2
        tma_ready = module.prefill_tma.tma_ready(q, k, v)
        picked = (module.prefill_tma if tma_ready else module).launch_config(dim, dim_v, q.dtype, q.device)
        grid = [(True, 128, n, w, st, ws) for n, w, st, ws in itertools.product((64, 128), (4, 8), (2, 3), (0, 1))]
        grid += [(True, 64, 64, 4, 2, 0), (True, 64, 32, 4, 2, 0)]
        if (dim, batch) == (128, 4):  # the pointer kernel (the fallback of odd strides): its 12-01 grid
            grid += [(False, m, n, w, st, 0) for m, n, w, st in itertools.product((64, 128), (32, 64, 128), (4, 8),
                                                                                 (2, 3))]
        for tma, block_m, block_n, warps, stages, specialize in grid:
            config = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
            if specialize:
                config["WARP_SPECIALIZE"] = True
            entry = {"batch": batch, "length": length, "heads": heads, "dim": dim, "tma": tma, **config,
                     "heuristic": config == picked and tma == tma_ready}
            _attempt(rows, entry, lambda: module.prefill(q, k, v, cu, length, dim ** -0.5, True, False,
                                                         config=config, tma=tma))
            if "event_us" in entry:
                entry["TFLOPs"] = round(flops / entry["event_us"] / 1e6, 1)
    return rows


#: Split counts swept beside mla_num_splits()'s (batch, Hq): whole waves of 132 SMs at 1-2 programs each.
MLA_SPLITS = {(64, 16): (2, 4, 8), (64, 128): (1, 2), (1, 16): (128, 256), (1, 128): (33, 66)}

SECTIONS = {"decode": sweep_decode, "mla_decode": sweep_mla_decode, "prefill": sweep_prefill}


def run_sections(sections: dict, names, results: dict, path: str, *, save: bool = True) -> None:
    """Run each named section into results["sections"] (an exception is recorded as that section's result),
    writing `path` after every section when `save`: a run stopped by its time limit keeps what it measured."""
    for name in names:
        started = time.time()
        try:
            results["sections"][name] = sections[name]()
        except Exception:
            results["sections"][name] = {"error": traceback.format_exc()}
        print(f"[{name}] {time.time() - started:.1f} s", flush=True)
        if save:
            with open(path, "w") as handle:
                json.dump(results, handle, indent=1)


def _best(rows, keys, metric="event_us"):
    best = {}
    for row in rows:
        if metric not in row:
            continue
        key = tuple(row.get(k) for k in keys)
        if key not in best or row[metric] < best[key][metric]:
            best[key] = row
    return best


def main(argv=None) -> int:
    global COMPILE_ONLY, FLUSH, SHARD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--shard", default="0/1", help="I/N: with --compile-only, compile every N-th configuration "
                        "from the I-th (N processes share a section)")
    args = parser.parse_args(argv)
    COMPILE_ONLY = args.compile_only
    SHARD = tuple(int(part) for part in args.shard.split("/"))
    os.makedirs(args.out, exist_ok=True)
    FLUSH = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "command": "python -m perf.sweeps.attention_tiles " + " ".join(argv or sys.argv[1:]),
               "sections": {}}
    if not COMPILE_ONLY:
        results["copy"] = gpu_timing.measure_copy_bandwidth()
    suffix = "_" + "_".join(args.only) if args.only else ""
    path = os.path.join(args.out, f"sweep_attention_tiles{suffix}.json")
    run_sections(SECTIONS, args.only or SECTIONS, results, path, save=not COMPILE_ONLY)
    if COMPILE_ONLY:
        return 0
    keys = {"decode": ("batch", "length", "kv"), "mla_decode": ("batch", "length", "heads"),
            "prefill": ("batch", "length", "dim", "tma")}
    for name, rows in results["sections"].items():
        if isinstance(rows, dict):
            print(f"{name}: error\n{rows['error'][-800:]}")
            continue
        picked = {tuple(r.get(k) for k in keys[name]): r for r in rows if r.get("heuristic") and "event_us" in r}
        for key, row in _best(rows, keys[name]).items():
            mine = picked.get(key, {})
            config = {k: row[k] for k in row if k.isupper() or k in ("num_warps", "num_stages", "splits", "maxnreg")}
            print(f"{name} {key}: best {row['event_us']} us {config} | heuristic {mine.get('event_us')} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
