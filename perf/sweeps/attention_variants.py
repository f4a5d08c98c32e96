"""Kernel variants of the native attention rows side by side on a GPU: each checked, then timed.

    python -m perf.sweeps.attention_variants --out DIR [--only SECTION ...]

Where perf/sweeps/attention_tiles.py sweeps the tile knobs of one kernel, this script compares kernel
variants (another product orientation, a software-pipelined loop, another operand path) against the
current launch heuristic, at the issue's benchmark shapes. Every variant's output is first compared
with the heuristic's on the same random inputs (max |diff|, NaN check: a variant that is wrong is
recorded as such and not timed), then timed as attention_tiles.py times (CUDA events, L2 flushed,
median; B=1 decode also in CUDA-graph replay).

  mla_decode   page 64, Hq=16 B=64 L=4096, Hq=16 B=1 L=32768, Hq=32 B=64 L=4096, Hq=16 B=8 L=32768 (--shapes
               replaces them): the heuristic and FlashMLA (where installed) against the --variants configs
  prefill      causal GQA 32/8 d128, 4 x 4096 and 16 x 1024 tokens: the heuristic and torch SDPA against the
               --variants configs (SDPA and the variants interleaved --repeat times)
  decode_fp8   GQA 32/8 d128 page 16 fp8 KV, B=64 L=4096, B=8 L=8192, B=1 L=32768: the fp8 and bf16 heuristics
               and the CUDA extension's fp8 row (where a build loads) against the --variants configs

Writes DIR/attention_variants.json; prints one line per entry as it runs and a summary line per entry last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch
import triton

from perf import gpu_timing
from perf.sweeps import attention_tiles

#: Extra variants a section runs, as (name, config-overrides) lists; main() can replace them from --variants.
EXTRA: dict = {}
#: Times each extra variant runs, interleaved (A B A B ...): the run-to-run spread beside the differences.
REPEAT = 1
#: Whether every MLA shape is also timed in CUDA-graph replay (--graph-all): device time without the host's
#: per-call work, which event timing includes where it outlasts the L2 flush before the call.
GRAPH_ALL = False


def _check_and_time(rows, entry, fn, want, *, graph=False, tolerance=3e-2):
    """Run fn once, compare with `want` (the heuristic's output); time it only if it matches."""
    try:
        got = fn()
        torch.cuda.synchronize()
        got = got[0] if isinstance(got, tuple) else got
        finite = bool(torch.isfinite(got).all())
        diff = float((got.float() - want.float()).abs().max())
        entry.update({"finite": finite, "max_abs_diff": round(diff, 6)})
        if not finite or diff > tolerance:
            entry["error"] = "mismatch"
        else:
            entry.update(attention_tiles._time(fn, graph=graph))
    except Exception as error:
        entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    rows.append(entry)
    print(json.dumps(entry), flush=True)


#: (batch, length, query heads) of the MLA section.
SHAPES_MLA = ((64, 4096, 16), (1, 32768, 16), (64, 4096, 32), (8, 32768, 16))


def section_mla_decode():
    from rapid_llm.kernels.ops.attention import mla_decode as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for batch, length, heads in SHAPES_MLA:
        table, pages = attention_tiles._pages(batch, length, 64)
        cache = torch.randn((pages * 64, 576), device="cuda", generator=g).bfloat16()
        q = torch.randn((batch, heads, 576), device="cuda", generator=g).bfloat16()
        lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        nbytes = batch * length * 576 * 2
        args = (q, cache, table, lens, 64, 192 ** -0.5)
        want = module.mla_decode(*args)
        base = {"batch": batch, "length": length, "heads": heads}
        _check_and_time(rows, {**base, "variant": "heuristic"}, lambda: module.mla_decode(*args), want,
                        graph=batch == 1 or GRAPH_ALL)
        try:  # the peer in the same run, where the library is installed
            from rapid_llm.kernels.backends.flash_mla.attention import mla_decode as flash_mla
            _check_and_time(rows, {**base, "variant": "peer/flash_mla"}, lambda: flash_mla(*args), want,
                            graph=batch == 1 or GRAPH_ALL)
        except ImportError as error:
            print(f"flash_mla not timed: {error}", flush=True)
        for name, config in EXTRA.get("mla_decode", []) * REPEAT:  # {"splits": {batch: count}, **config}
            config = dict(config)
            splits = config.pop("splits", {}).get(str(batch))
            entry = {**base, "variant": name, "splits": splits, **config}
            _check_and_time(rows, entry, lambda: module.mla_decode(*args, splits=splits, config=dict(config)), want,
                            graph=batch == 1 or GRAPH_ALL)
        for row in rows:
            if row.get("batch") == batch and row.get("heads") == heads and "event_us" in row:
                row["TBps"] = round(nbytes / row["event_us"] / 1e6, 3)
    return rows


def section_prefill():
    from rapid_llm.kernels.ops.attention import prefill as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(2)
    for batch, length in ((4, 4096), (16, 1024)):
        tokens = batch * length
        q = torch.randn((tokens, 32, 128), device="cuda", generator=g).bfloat16()
        k = torch.randn((tokens, 8, 128), device="cuda", generator=g).bfloat16()
        v = torch.randn((tokens, 8, 128), device="cuda", generator=g).bfloat16()
        cu = torch.arange(0, tokens + 1, length, dtype=torch.int32, device="cuda")
        flops = 2 * batch * 32 * length ** 2 * 256 / 2
        call = lambda config=None: module.prefill(q, k, v, cu, length, 128 ** -0.5, True, False, config=config)
        want = call()
        base = {"batch": batch, "length": length}
        _check_and_time(rows, {**base, "variant": "heuristic"}, call, want)
        variants = EXTRA.get("prefill", [])
        sdpa_q = q.view(batch, length, 32, 128).transpose(1, 2)
        sdpa_k = k.view(batch, length, 8, 128).transpose(1, 2)
        sdpa_v = v.view(batch, length, 8, 128).transpose(1, 2)
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(sdpa_q, sdpa_k, sdpa_v, is_causal=True,
                                                                        enable_gqa=True)
        for round_ in range(REPEAT):  # SDPA and the variants interleaved, REPEAT rounds: the drift beside them
            entry = {**base, "variant": "peer/torch.sdpa", "round": round_}
            try:
                entry.update(attention_tiles._time(sdpa))
            except Exception as error:
                entry["error"] = f"{type(error).__name__}: {str(error)[:300]}"
            rows.append(entry)
            print(json.dumps(entry), flush=True)
            for name, config in variants:
                entry = {**base, "variant": name, "round": round_, **config}
                _check_and_time(rows, entry, lambda: call(dict(config)), want)
        for row in rows:
            if row.get("batch") == batch and "event_us" in row:
                row["TFLOPs"] = round(flops / row["event_us"] / 1e6, 1)
    return rows


def _extension_decode(backend: str):
    """The aot/ or jit/decode_fp8 row's function, or None (printed why) where that build does not load."""
    from rapid_llm.kernels import aot, jit
    from rapid_llm.kernels.ops.attention import decode_cuda

    ok, reason = (aot if backend == "aot" else jit).available()
    if not ok:
        print(f"{backend}/decode_fp8 not timed: {reason}", flush=True)
        return None
    return decode_cuda.decode_aot if backend == "aot" else decode_cuda.decode_jit


def decode_fp8_inputs(batch, length, generator):
    """(q, fp8 buffer, bf16 buffer, page table, seq_lens, scale, KV bytes of the fp8 buffer): GQA 32/8 d128 page 16,
    pages in random order, the fp8 buffer the bf16 one quantized with one per-tensor scale."""
    table, pages = attention_tiles._pages(batch, length, 16)
    values = torch.randn((pages * 16, 16, 128), device="cuda", generator=generator)
    q = torch.randn((batch, 32, 128), device="cuda", generator=generator).bfloat16()
    lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    scale = (values.abs().amax() / 448).reshape(1)
    return q, (values / scale).to(torch.float8_e4m3fn), values.bfloat16(), table, lens, scale, batch * length * 16 * 128


def section_decode_fp8():
    from rapid_llm.kernels.ops.attention import decode as module

    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for batch, length in ((64, 4096), (8, 8192), (1, 32768)):
        q, fp8, bf16, table, lens, scale, nbytes = decode_fp8_inputs(batch, length, g)
        base = {"batch": batch, "length": length}
        want = module.decode(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale)
        bf16_call = lambda: module.decode(q, bf16, table, lens, 16, 128 ** -0.5)
        _check_and_time(rows, {**base, "variant": "bf16 heuristic"}, bf16_call, want, graph=batch == 1,
                        tolerance=6e-2)
        _check_and_time(rows, {**base, "variant": "heuristic"},
                        lambda: module.decode(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale), want,
                        graph=batch == 1)
        for backend in ("jit", "aot"):  # the CUDA extension's row, where that build loads (RAPID_LLM_JIT=1 ...)
            extension = _extension_decode(backend)
            if extension is not None:
                _check_and_time(rows, {**base, "variant": f"{backend}/decode_fp8"},
                                lambda: extension(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale), want,
                                graph=batch == 1)
        for name, config in EXTRA.get("decode_fp8", []):
            entry = {**base, "variant": name, **config}
            _check_and_time(rows, entry, lambda: module.decode(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale,
                                                               config=dict(config)), want, graph=batch == 1)
        for row in rows:
            if row.get("batch") == batch and "event_us" in row:
                row["TBps"] = round(nbytes * (2 if row["variant"].startswith("bf16") else 1) / row["event_us"] / 1e6, 3)
        fp8 = bf16 = None  # the next shape allocates its own
    return rows


SECTIONS = {"mla_decode": section_mla_decode, "prefill": section_prefill, "decode_fp8": section_decode_fp8}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    parser.add_argument("--variants", help="JSON file: {section: [[name, config], ...]} of extra variants")
    parser.add_argument("--repeat", type=int, default=1,
                        help="mla_decode, prefill: run the extra variants (prefill: and SDPA) N times, interleaved")
    parser.add_argument("--graph-all", action="store_true", help="mla_decode: CUDA-graph replay for every shape")
    parser.add_argument("--shapes", help="mla_decode: B,L,H;B,L,H... instead of SHAPES_MLA")
    args = parser.parse_args(argv)
    global REPEAT, SHAPES_MLA, GRAPH_ALL
    REPEAT = args.repeat
    GRAPH_ALL = args.graph_all
    if args.shapes:
        SHAPES_MLA = tuple(tuple(int(x) for x in shape.split(",")) for shape in args.shapes.split(";"))
    if args.variants:
        EXTRA.update(json.load(open(args.variants)))
    os.makedirs(args.out, exist_ok=True)
    attention_tiles.FLUSH = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "command": "python -m perf.sweeps.attention_variants " + " ".join(argv or sys.argv[1:]),
               "variants": EXTRA, "copy": gpu_timing.measure_copy_bandwidth(), "sections": {}}
    path = os.path.join(args.out, "attention_variants.json")
    attention_tiles.run_sections(SECTIONS, args.only or SECTIONS, results, path)
    for name, rows in results["sections"].items():
        if isinstance(rows, dict):
            print(f"{name}: error\n{rows['error'][-800:]}")
            continue
        for row in rows:
            shape = {k: row[k] for k in ("batch", "length", "heads") if k in row}
            knobs = {k: v for k, v in row.items() if k not in shape and k not in ("finite", "max_abs_diff")}
            print(f"{name} {shape} {knobs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
