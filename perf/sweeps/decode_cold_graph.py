"""attention.decode per call in CUDA-graph replay with the L2 cold: the bf16 and fp8-KV rows side by side.

    python -m perf.sweeps.decode_cold_graph --out DIR [--sets 4] [--repeat 2]

Why: perf.gpu_timing.graph_timer replays calls on one input set, so whatever of the KV the L2 keeps between
calls is read from the L2. At B=1 L=32768 the fp8 buffer is 67 MB and the bf16 one 134 MB: if more of the
smaller one stayed, the warm replay would flatter the fp8 row more than the bf16 row (H200, call45: it does
not; cold and warm replays agree within 2%). In an engine's decode step
every layer reads its own KV, which no earlier call has touched. Here the captured calls rotate over --sets
independent input sets (q, buffers, page table, lengths; at least 4 x 60 MB of KV in all per row), so each
call reads KV that 3 other calls' reads have since evicted: the per-call time without launch gaps and
without L2 reuse. Beside it, the warm replay of one set (graph_timer as the benchmark runs it).

Rows (called as the benchmark calls them, through their targets): Triton bf16 (native/decode, the bf16
buffer), Triton fp8 (native/decode_fp8) and the CUDA extension's fp8 row (jit/ and aot/decode_fp8, where
each build loads). GQA 32/8 d128 page 16, bf16 q, pages in random order: B=64 L=4096, B=8 L=8192, B=1
L=32768. Every row's output on set 0 is first compared with the Triton fp8 row's (max |diff|).

Writes DIR/decode_cold_graph.json; prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
from pathlib import Path

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch

from perf import gpu_timing

SHAPES = ((64, 4096), (8, 8192), (1, 32768))
SCALE = 128 ** -0.5


def _rows():
    """(name, f(set) -> output, reads the bf16 buffer) of every row that loads here."""
    from perf.sweeps.attention_variants import _extension_decode
    from rapid_llm.kernels.ops.attention import decode

    rows = [("native/decode (bf16)", lambda s: decode.decode(s[0], s[2], s[3], s[4], 16, SCALE), True),
            ("native/decode_fp8", lambda s: decode.decode(s[0], s[1], s[3], s[4], 16, SCALE, s[5], s[5]), False)]
    for backend in ("jit", "aot"):
        extension = _extension_decode(backend)
        if extension is not None:
            rows.append((f"{backend}/decode_fp8",
                         lambda s, f=extension: f(s[0], s[1], s[3], s[4], 16, SCALE, s[5], s[5]), False))
    return rows


def _rotating(call, sets):
    """fn() calling `call` on the next set each time: a graph of N such calls rotates over the sets."""
    counter = itertools.count()
    return lambda: call(sets[next(counter) % len(sets)])


def sweep(set_count: int, repeat: int) -> list[dict]:
    from perf.sweeps.attention_variants import decode_fp8_inputs

    rows = _rows()
    results = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for batch, length in SHAPES:
        sets = [decode_fp8_inputs(batch, length, g) for _ in range(set_count)]
        fp8_bytes = sets[0][6]
        want = rows[1][1](sets[0])
        for round_, (name, call, bf16) in itertools.product(range(repeat), rows):
            entry = {"batch": batch, "length": length, "row": name, "round": round_, "sets": set_count,
                     "kv_bytes": fp8_bytes * (2 if bf16 else 1),
                     "kv_bytes_all_sets": fp8_bytes * (2 if bf16 else 1) * set_count}
            got = call(sets[0])
            torch.cuda.synchronize()
            entry["max_abs_diff"] = round(float((got.float() - want.float()).abs().max()), 6)
            if not bool(torch.isfinite(got).all()) or entry["max_abs_diff"] > 6e-2:
                entry["error"] = "mismatch"
            else:
                entry["graph_warm_us"] = round(gpu_timing.graph_timer(lambda: call(sets[0])).median_us, 2)
                entry["graph_cold_us"] = round(gpu_timing.graph_timer(_rotating(call, sets)).median_us, 2)
                entry["graph_cold_TBps"] = round(entry["kv_bytes"] / entry["graph_cold_us"] / 1e6, 3)
            results.append(entry)
            print(json.dumps(entry), flush=True)
        sets = None
        torch.cuda.empty_cache()
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sets", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    rows = sweep(args.sets, args.repeat)
    document = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m perf.sweeps.decode_cold_graph " + " ".join(argv if argv is not None else sys.argv[1:]),
        "shapes": "GQA 32/8 d128 page 16, bf16 q, random page order", "graph_calls": gpu_timing.GRAPH_CALLS,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode_cold_graph.json").write_text(json.dumps(document, indent=1))
    print(f"{'B':>3} {'L':>6} {'row':<22} {'warm_us':>8} {'cold_us':>8} {'cold TB/s':>9}")
    for row in rows:
        print(f"{row['batch']:>3} {row['length']:>6} {row['row']:<22} {str(row.get('graph_warm_us', row.get('error'))):>8} "
              f"{str(row.get('graph_cold_us', '')):>8} {str(row.get('graph_cold_TBps', '')):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
