"""Launch-knob sweeps of the native attention rows on a GPU: each row's kernel under knob sets, checked, then timed.

    python -m perf.sweeps.attention_tiles --out DIR [--only decode mla_decode prefill] [--compile-only --shard I/N]

Every row is called as dispatch serves it (a planner forcing the row); knob sets go through the one sweep
hook, rapid_llm.kernels.ops.launch_override, so the rows' targets and signatures stay as they serve. At each
benchmark shape (ANCHORS.md: Llama-3-8B GQA 32/8 d128 page 16; DeepSeek-V3 MLA page 64) the row's default
launch runs first; each knob set's output is compared with it (max |diff|; a wrong or NaN set is recorded and
not timed), then timed with CUDA events (L2 flushed, median; decode at B=1 also in CUDA-graph replay). A set
that does not compile (shared memory, registers) is recorded with its error. Writes
DIR/sweep_attention_tiles[_<sections>].json and prints the best set per (row, shape) beside the default.
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
#: (index, count) of a --compile-only process: it compiles every count-th knob set from index.
SHARD = (0, 1)
ATTEMPTS = 0


def _planned(op, row, args):
    """The PlannedOp forcing `row` for these arguments (None where the row does not serve them)."""
    import attrs

    from rapid_llm.kernels.dispatcher import NoEligibleKernel, Planner, probe_environment

    env = probe_environment()
    planner = Planner(attrs.evolve(env, force={**dict(env.force), op: row}))
    _, layout, dims = planner.check_for(op)(*args)
    try:
        return planner.plan(
            op, dtype={torch.bfloat16: "bf16", torch.float16: "fp16"}[args[0].dtype], shape=dict(dims), layout=layout
        )
    except NoEligibleKernel as error:
        print(f"  {row}: not eligible: {str(error).splitlines()[0]}", flush=True)
        return None


def _pages(batch, length, page_size):
    per = triton.cdiv(length, page_size)
    order = torch.randperm(batch * per, generator=torch.Generator().manual_seed(batch + length)).to(torch.int32)
    return order.view(batch, per).cuda(), batch * per


def _sweep(op, row, args, grid, shape, *, graph=False, work=None):
    """The default launch and every knob set of `grid` for one row at one shape."""
    from rapid_llm.kernels.ops.launch_override import launch_override

    global ATTEMPTS
    planned = _planned(op, row, args)
    if planned is None:
        return []
    want = planned(*args)
    want = want[0] if isinstance(want, tuple) else want
    results = []
    for knobs in [{}, *grid]:
        ATTEMPTS += 1
        if COMPILE_ONLY and ATTEMPTS % SHARD[1] != SHARD[0]:
            continue
        entry = {"row": row, **shape, "knobs": knobs, "default": not knobs}
        try:
            with launch_override(row, **knobs):
                got = planned(*args)
                got = got[0] if isinstance(got, tuple) else got
                torch.cuda.synchronize()
                if not COMPILE_ONLY:
                    entry["max_abs_diff"] = float((got.float() - want.float()).abs().max())
                    if not torch.isfinite(got).all() or entry["max_abs_diff"] > 0.05:
                        entry["wrong"] = True
                    else:
                        timing = gpu_timing.event_timer(lambda: planned(*args), flush=FLUSH, iterations=30)
                        entry["event_us"] = round(timing.median_us, 2)
                        if graph:
                            entry["graph_us"] = round(gpu_timing.graph_timer(lambda: planned(*args)).median_us, 2)
                        if work:
                            entry.update(
                                {name: round(amount / entry["event_us"] / 1e6, 3) for name, amount in work.items()}
                            )
        except Exception as error:  # a knob set that does not compile (shared memory) is a result too
            entry["error"] = f"{type(error).__name__}: {str(error)[:200]}"
        results.append(entry)
        print(f"  {row} {shape} {knobs}: {entry.get('event_us', entry.get('error', 'wrong'))}", flush=True)
    return results


def sweep_decode():
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for batch, length in ((64, 4096), (8, 8192), (1, 32768)):
        table, pages = _pages(batch, length, 16)
        values = torch.randn((pages * 16, 16, 128), device="cuda", generator=g)
        q = torch.randn((batch, 32, 128), device="cuda", generator=g).bfloat16()
        lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        scale = (values.abs().amax() / 448).reshape(1)
        shape = {"batch": batch, "length": length}
        for row, buffer, scales in (
            ("native/decode", values.bfloat16(), ()),
            ("native/decode_fp8", (values / scale).to(torch.float8_e4m3fn), (scale, scale)),
        ):
            grid = [
                {"BLOCK_N": n, "num_warps": w, "num_stages": s}
                for n, w, s in itertools.product((32, 64, 128), (4, 8), (2, 3))
            ]
            grid += [{"splits": s} for s in (1, 2, 4, 8, 16, 33, 66, 132) if s > 1 or batch < 64]
            nbytes = batch * length * 16 * 128 * buffer.element_size()
            rows += _sweep(
                "attention.decode",
                row,
                (q, buffer, table, lens, 16, 128**-0.5, *scales),
                grid,
                shape,
                graph=batch == 1,
                work={"TBps": nbytes},
            )
    return rows


def sweep_mla_decode():
    rows = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for batch, length, heads in ((64, 4096, 128), (64, 4096, 16), (1, 32768, 16), (1, 32768, 128), (8, 32768, 128)):
        table, pages = _pages(batch, length, 64)
        cache = torch.randn((pages * 64, 576), device="cuda", generator=g).bfloat16()
        q = torch.randn((batch, heads, 576), device="cuda", generator=g).bfloat16()
        lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        work = {"TBps": batch * length * 576 * 2, "TFLOPs": 2 * batch * heads * length * (576 + 512)}
        shape = {"batch": batch, "length": length, "heads": heads}
        splits = [{"splits": s} for s in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
        grids = {
            "native/mla_decode": splits,
            "native/mla_decode_tma": splits,
            "native/mla_decode_gluon": splits + [{"STAGES": 3, "ROPE_RING": False}],
            "native/mla_decode_gluon_pingpong": splits,
        }
        for row, grid in grids.items():
            rows += _sweep(
                "attention.mla_decode", row, (q, cache, table, lens, 64, 192**-0.5), grid, shape, graph=True, work=work
            )
    return rows


def sweep_prefill():
    rows = []
    g = torch.Generator(device="cuda").manual_seed(2)
    for batch, length in ((4, 4096), (16, 1024), (32, 512), (1, 8192)):
        tokens = batch * length
        q = torch.randn((tokens, 32, 128), device="cuda", generator=g).bfloat16()
        k, v = (torch.randn((tokens, 8, 128), device="cuda", generator=g).bfloat16() for _ in range(2))
        cu = torch.arange(0, tokens + 1, length, dtype=torch.int32, device="cuda")
        shape = {"batch": batch, "length": length}
        work = {"TFLOPs": 2 * batch * 32 * length**2 * 256 / 2}
        tiles = [
            {"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "num_stages": s}
            for m, n, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3))
        ]
        gluon = [
            {"CONSUMERS": 3, "BLOCK_N": 64, "STAGES": 4},
            {"BLOCK_N": 64, "STAGES": 4},
            {"BLOCK_N": 128, "STAGES": 3, "Q_SLOTS": 1},
            {"PINGPONG": True},
        ]
        for row, grid in (("native/prefill", tiles), ("native/prefill_tma", tiles), ("native/prefill_gluon", gluon)):
            rows += _sweep(
                "attention.prefill", row, (q, k, v, cu, length, 128**-0.5, True, False), grid, shape, work=work
            )
    return rows


SECTIONS = {"decode": sweep_decode, "mla_decode": sweep_mla_decode, "prefill": sweep_prefill}


def main(argv=None) -> int:
    global COMPILE_ONLY, FLUSH, SHARD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument(
        "--shard",
        default="0/1",
        help="I/N: with --compile-only, compile every N-th knob set from the I-th (N processes share a section)",
    )
    args = parser.parse_args(argv)
    COMPILE_ONLY = args.compile_only
    SHARD = tuple(int(part) for part in args.shard.split("/"))
    os.makedirs(args.out, exist_ok=True)
    FLUSH = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": "python -m perf.sweeps.attention_tiles " + " ".join(argv or sys.argv[1:]),
        "sections": {},
    }
    if not COMPILE_ONLY:
        results["copy"] = gpu_timing.measure_copy_bandwidth()
    suffix = "_" + "_".join(args.only) if args.only else ""
    path = os.path.join(args.out, f"sweep_attention_tiles{suffix}.json")
    for name in args.only or SECTIONS:
        started = time.time()
        try:
            results["sections"][name] = SECTIONS[name]()
        except Exception:
            results["sections"][name] = {"error": traceback.format_exc()}
        print(f"[{name}] {time.time() - started:.1f} s", flush=True)
        if not COMPILE_ONLY:  # after every section: a run stopped by its time limit keeps what it measured
            with open(path, "w") as handle:
                json.dump(results, handle, indent=1)
    if COMPILE_ONLY:
        return 0
    for name, entries in results["sections"].items():
        if isinstance(entries, dict):
            print(f"{name}: error\n{entries['error'][-800:]}")
            continue
        best = {}
        for entry in (e for e in entries if "event_us" in e):
            key = (entry["row"], *(entry[k] for k in ("batch", "length", "heads") if k in entry))
            if key not in best or entry["event_us"] < best[key]["event_us"]:
                best[key] = entry
        for key, entry in best.items():
            default = next(
                (
                    e
                    for e in entries
                    if e["default"]
                    and e["row"] == key[0]
                    and "event_us" in e
                    and all(e.get(k) == entry.get(k) for k in ("batch", "length", "heads"))
                ),
                {},
            )
            print(f"{name} {key}: best {entry['event_us']} us {entry['knobs']} | default {default.get('event_us')} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
