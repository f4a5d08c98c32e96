"""Compile-time variants of the CUDA extension's fp8-KV decode (csrc/attention/decode_fp8.cu), checked and timed.

    python -m perf.sweeps.decode_fp8_builds --out DIR [--builds S3M2,S2M3,...] [--repeat N] [--build-only]
                                            [--lengths L,L,...]

The kernel's sweep knobs are preprocessor defines (RAPID_LLM_DECODE_FP8_STAGES: ring slots per warp;
RAPID_LLM_DECODE_FP8_MIN_BLOCKS: the blocks per SM of __launch_bounds__; the switches EARLY_COPIES, OVERLAP,
MERGE_WARPS, PDL, PEEL, SKIP_ROWS, PREFETCH and CHAIN, described in decode_fp8.cu, on by default). A build tag
SxMy[e][x][w][p][l][r][f][c] compiles every source of csrc/ with STAGES=x, MIN_BLOCKS=y and each lettered switch
on (e EARLY_COPIES, x OVERLAP, w MERGE_WARPS, p PDL, l PEEL, r SKIP_ROWS, f PREFETCH, c CHAIN; a switch not
named is off) into its own library and op namespace (rapid_llm_fp8_<tag>, so the builds load side by side), the
builds running in parallel processes. (Calls 37-38 also built t, o and L128 / L256 switches, call41 u, since
removed: decode_fp8.cu's comment on the switches says what they did.) Each build's `decode` op is then called
directly with every split count of SPLITS at the issue's shapes (GQA 32/8 d128, page 16, fp8 KV: B=64 L=4096,
B=8 L=8192, B=1 L=32768), beside the Triton fp8 and bf16 rows: every output is first compared with the
Triton fp8 row's (max |diff|; a mismatch is recorded and not timed), then timed (CUDA events, L2 flushed,
median; and in CUDA-graph replay, the device time without the host's enqueue: call33's event timings at B=8 and B=1
ran 2-4x over the replays when this host was slow), the entries interleaved --repeat times. --lengths replaces the
shapes with B=1 at those lengths and split counts 1, 16 and 33 (as the page table's reach allows): the fixed cost of
a call beside its per-position cost.

Writes DIR/decode_fp8_builds.json; prints one line per entry and a table last.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch

#: Split counts timed per shape (batch -> counts); 2 blocks per SM x 132 SMs = 264 block slots on the H200:
#: one wave is 4 splits at B=8 (64 KV heads), 33 at B=1 (32 of them non-empty: splits are whole 32-position
#: chunks); at 1 block per SM (6 slots a warp) 2 and 16. (call36 also timed 8 at B=8 and 24 at B=1: slower.)
SPLITS = {64: (1,), 8: (2, 4), 1: (16, 32, 33)}
SHAPES = ((64, 4096), (8, 8192), (1, 32768))
DEFAULT_BUILDS = "S3M2ewpxlrf,S3M2ewpxlrfc"


#: A build tag's letters and the switches they turn on (decode_fp8.cu's RAPID_LLM_DECODE_FP8_<switch>).
SWITCHES = {"e": "EARLY_COPIES", "x": "OVERLAP", "w": "MERGE_WARPS", "p": "PDL", "l": "PEEL", "r": "SKIP_ROWS",
            "f": "PREFETCH", "c": "CHAIN"}


def _defines(tag: str) -> list[str]:
    match = re.fullmatch(r"S(\d+)M(\d+)([exwplrfc]*)", tag)
    if match is None:
        raise SystemExit(f"decode_fp8_builds: build tag {tag!r} is not SxMy[e][x][w][p][l][r][f][c] (x stages, y blocks per SM, "
                         f"then the switches {SWITCHES})")
    return [f"-DRAPID_LLM_DECODE_FP8_STAGES={match[1]}", f"-DRAPID_LLM_DECODE_FP8_MIN_BLOCKS={match[2]}",
            *(f"-DRAPID_LLM_DECODE_FP8_{SWITCHES[letter]}={int(letter in match[3])}" for letter in SWITCHES)]


def build_one(tag: str, directory: Path) -> Path:
    """Compile csrc/ with the tag's defines into directory/<tag>; return the library's path."""
    from torch.utils import cpp_extension

    from rapid_llm.kernels import jit

    name = f"rapid_llm_fp8_{tag}"
    flags = ["-O3", f"-DRAPID_LLM_OP_NAMESPACE={name}", *_defines(tag)]
    build = directory / tag
    build.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name=name, sources=jit.sources(), extra_cflags=flags, extra_cuda_cflags=flags + ["-Xptxas=-v"],
                       extra_include_paths=[str(jit.source_root() / "include")], build_directory=str(build),
                       is_python_module=False, verbose=True)
    return build / f"{name}.so"


def _build_all(tags: list[str], directory: Path) -> dict[str, str]:
    """Every tag's build in its own process (in parallel); tag -> library path, or the error's last lines."""
    def run(tag):
        library = directory / tag / f"rapid_llm_fp8_{tag}.so"
        if library.exists():  # built by an earlier --build-only run (its log is build_<tag>.log)
            return tag, str(library)
        started = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "perf.sweeps.decode_fp8_builds", "--build-one", tag,
                                 "--out", str(directory.parent)], capture_output=True, text=True, timeout=400)
        log = result.stdout + result.stderr
        (directory / f"build_{tag}.log").write_text(log)
        registers = sorted(set(re.findall(r"Used (\d+) registers", log)))
        spills = sorted(set(re.findall(r"(\d+) bytes spill stores", log)))
        print(f"build {tag}: rc={result.returncode} {time.perf_counter() - started:.0f} s registers {registers} "
              f"spill stores {spills}", flush=True)
        return tag, (log.strip().splitlines()[-1] if result.returncode == 0 else "ERROR " + log[-800:])

    with concurrent.futures.ThreadPoolExecutor(len(tags)) as pool:
        return dict(pool.map(run, tags))


def _call(op, q, fp8, table, lens, scale, splits):
    out = torch.empty_like(q)
    shape = (q.shape[0], q.shape[1], splits) if splits > 1 else (0, 0, 0)
    partial = torch.empty((*shape, 128), dtype=torch.float32, device=q.device)
    partial_lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    return lambda: (op(out, partial, partial_lse, q, fp8, table, lens, scale, scale, 16, 128 ** -0.5, splits), out)[1]


def _split_counts(batch: int, length: int, scan: bool) -> tuple[int, ...]:
    if not scan:
        return SPLITS[batch]
    return tuple(sorted({min(count, max(1, length // 256)) for count in (1, 16, 33)}))


def sweep(tags: list[str], directory: Path, repeat: int, shapes=SHAPES, scan: bool = False) -> list[dict]:
    from perf.sweeps.attention_variants import _check_and_time, decode_fp8_inputs
    from rapid_llm.kernels.ops.attention import decode as module

    ops = {}
    for tag in tags:
        library = directory / tag / f"rapid_llm_fp8_{tag}.so"
        if library.exists():
            torch.ops.load_library(str(library))
            ops[tag] = getattr(torch.ops, f"rapid_llm_fp8_{tag}").decode
        else:
            print(f"{tag}: no library (see build_{tag}.log)", flush=True)
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for batch, length in shapes:
        q, fp8, bf16, table, lens, scale, nbytes = decode_fp8_inputs(batch, length, g)
        base = {"batch": batch, "length": length}
        want = module.decode(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale)
        for round_ in range(repeat):
            _check_and_time(rows, {**base, "variant": "triton bf16", "round": round_},
                            lambda: module.decode(q, bf16, table, lens, 16, 128 ** -0.5), want, graph=True,
                            tolerance=6e-2)
            _check_and_time(rows, {**base, "variant": "triton fp8", "round": round_},
                            lambda: module.decode(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale), want,
                            graph=True)
            for tag, op in ops.items():
                for splits in _split_counts(batch, length, scan):
                    _check_and_time(rows, {**base, "variant": f"cuda {tag}", "splits": splits, "round": round_},
                                    _call(op, q, fp8, table, lens, scale, splits), want, graph=True)
        for row in rows:
            if row.get("batch") == batch and "event_us" in row:
                factor = 2 if "bf16" in row["variant"] else 1
                row["TBps"] = round(nbytes * factor / row["event_us"] / 1e6, 3)
                if "graph_us" in row:
                    row["graph_TBps"] = round(nbytes * factor / row["graph_us"] / 1e6, 3)
        fp8 = bf16 = None
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--builds", default=DEFAULT_BUILDS, help="comma-separated SxMy tags")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--build-only", action="store_true", help="build the libraries, time nothing (a later run "
                        "without it reuses them)")
    parser.add_argument("--lengths", help="B=1 at these comma-separated lengths instead of SHAPES")
    parser.add_argument("--build-one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory = args.out / "builds"
    if args.build_one:
        print(build_one(args.build_one, directory))
        return 0
    tags = args.builds.split(",")
    directory.mkdir(parents=True, exist_ok=True)
    builds = _build_all(tags, directory)
    if args.build_only:
        return 0
    if args.lengths:
        rows = sweep(tags, directory, args.repeat, [(1, int(n)) for n in args.lengths.split(",")], scan=True)
    else:
        rows = sweep(tags, directory, args.repeat)
    document = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m perf.sweeps.decode_fp8_builds " + " ".join(argv if argv is not None else sys.argv[1:]),
        "shapes": "GQA 32/8 d128 page 16 fp8 e4m3 KV, bf16 q; random page order", "builds": builds, "rows": rows,
    }
    (args.out / "decode_fp8_builds.json").write_text(json.dumps(document, indent=1))
    print(f"{'B':>3} {'L':>6} {'variant':<14} {'splits':>6} {'event_us':>9} {'graph_us':>9} {'TB/s':>6}")
    for row in rows:
        print(f"{row['batch']:>3} {row['length']:>6} {row['variant']:<14} {str(row.get('splits', '')):>6} "
              f"{str(row.get('event_us', row.get('error', '')))[:40]:>9} {str(row.get('graph_us', '')):>9} "
              f"{str(row.get('TBps', '')):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
