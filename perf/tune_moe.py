"""Fill the tuning store for moe.fused_moe's GEMM stages on the GPU: `python -m perf.tune_moe --out FILE.json
[--budget-s 240] [--rows A,B]`.

moe.fused_moe's native pipelines take each GEMM stage's knobs from the GEMM family's tile policy under
"<row>.gate_up" and "<row>.down" (ops/moe/fused/__init__.py), keyed like any GEMM entry by (stage, dtype,
m bucket, n, k) with m the rows an expert gets on average (the slots row: the slots for gate_up, the
tokens for down). For each row at the MoE presets' shapes (perf/test_moe_bench.py FUSED_PRESETS) and the
token counts of TOKENS (one per m bucket) it times the whole pipeline with CUDA events, the L2 flushed,
through the row's launch_override: first the shared BLOCK_M with the gate_up knobs (down at the
heuristic's), then the down knobs with that choice, so a stage is tuned in the pipeline it runs in. The
heuristic's knobs are always a candidate (an entry is never slower than what it replaces in the same run);
the fastest is checked against the reference row and written as two store entries. Bounded: no new shape
starts after --budget-s. Copy the entries into rapid_llm/kernels/ops/gemm/tuning/<model>.json to ship them,
or into $RAPID_LLM_TUNING_DIR to try them.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import torch

from perf.gpu_timing import event_timer
from perf.test_moe_bench import FUSED_PRESETS, _routing, _weights
from perf.tune_gemm import write_store_document
from rapid_llm.kernels.ops.fast_launch import next_power_of_2
from rapid_llm.kernels.ops.gemm import tiles
from rapid_llm.kernels.ops.launch_override import launch_override
from rapid_llm.kernels.ops.moe import reference
from rapid_llm.kernels.ops.moe.fused import expert_rows, pipeline_knobs, slots, sorted as sorted_layout

#: row -> (its entry, the preset dtype it serves, its most tokens)
ROWS = {
    "native/fused_moe": (sorted_layout.fused_moe, "bf16", None),
    "native/fused_moe_fp8_block": (sorted_layout.fused_moe_fp8_block, "fp8_e4m3", None),
    "native/fused_moe_slots": (slots.fused_moe, "bf16", 16),
    "native/fused_moe_slots_fp8_block": (slots.fused_moe_fp8_block, "fp8_e4m3", 16),
}
#: Token counts per preset, one per m bucket of an expert's rows (tokens * top_k / experts).
TOKENS = {
    "qwen3-30b-a3b": (1, 64, 512, 4096, 16384),
    "mixtral-8x7b": (1, 16, 256, 4096),
    "deepseek-v3": (1, 64, 512, 4096),
}


def sorted_candidates(rows: int, fp8: bool) -> tuple[list, list]:
    """(gate_up candidates with the shared BLOCK_M, down candidates) for an expert's average rows: BLOCK_M no
    taller than twice the rows (padding rows cost tensor-core time), BLOCK_N within one 128-row weight scale
    block for fp8 weights, BLOCK_K 128 for fp8 (one scale group per step)."""
    tallest = max(16, 2 * next_power_of_2(rows))
    block_ks = (128,) if fp8 else (64, 128)
    gate_up = [
        {"BLOCK_M": m, "gate_up.BLOCK_N": n, "gate_up.BLOCK_K": k, "gate_up.num_warps": w, "gate_up.num_stages": s}
        for m, n, k, w, s in itertools.product((16, 32, 64, 128), (32, 64, 128), block_ks, (4, 8), (3, 4))
        if m <= tallest and not (w == 8 and m * n < 128 * 64)
    ]
    down = [
        {"down.BLOCK_N": n, "down.BLOCK_K": k, "down.num_warps": w, "down.num_stages": s}
        for n, k, w, s in itertools.product((64, 128, 256), block_ks, (4, 8), (3, 4))
        if not (fp8 and n > 128)
    ]
    return gate_up, down


def slots_candidates(fp8: bool) -> tuple[list, list]:
    """(gate_up, down) candidates of the slots rows: columns per program (fp8: within one 128-row weight
    block) and the K step of the register tile (whole 128-wide scale groups)."""
    widest = 32 if fp8 else 64
    gate_up = [
        {"gate_up.BLOCK_N": n, "gate_up.BLOCK_K": k, "gate_up.num_warps": w}
        for n, k, w in itertools.product((4, 8, 16, 32), (128, 256, 512), (2, 4))
        if n * k <= 8192
    ]
    down = [
        {"down.BLOCK_N": n, "down.BLOCK_K": k, "down.num_warps": w}
        for n, k, w in itertools.product((4, 8, 16, 32, 64), (128, 256, 512), (2, 4))
        if n * k <= 16384 and n <= widest
    ]
    return gate_up, down


def _fastest(row, entry, args, candidates, fixed, flush, log):
    """(us, knobs) of the fastest candidate (each merged over `fixed`) timed as one pipeline call."""
    timings = []
    for knobs in candidates:
        merged = {**fixed, **knobs}
        try:
            with launch_override(row, **merged):
                us = event_timer(lambda: entry(*args), flush=flush, iterations=10).median_us
        except Exception as error:  # a tile Triton cannot compile here (registers, shared memory)
            log.append({"row": row, "knobs": merged, "error": f"{type(error).__name__}: {error}"[:200]})
            continue
        timings.append((us, merged))
    return min(timings, key=lambda item: item[0])


def _flat(stages: dict) -> dict:
    """pipeline_knobs' {stage: knobs} as launch_override's flattened names (BLOCK_M bare)."""
    flat = {}
    for stage, knobs in stages.items():
        for name, value in knobs.items():
            flat[name if name == "BLOCK_M" else f"{stage}.{name}"] = value
    return flat


def tune(budget_s: float, rows=tuple(ROWS), presets=None, token_counts=None) -> tuple[list, list]:
    """Tune `rows` at every preset of their dtype (or those named in `presets`) and each preset's TOKENS (or
    those of them in `token_counts`)."""
    device = torch.device("cuda")
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=device)
    entries, log = [], []
    started = time.perf_counter()
    for row in rows:
        entry, dtype, most_tokens = ROWS[row]
        for preset, hidden, intermediate, experts, top_k, shared, preset_dtype in FUSED_PRESETS:
            if preset_dtype != dtype or (presets is not None and preset not in presets):
                continue
            generator = torch.Generator(device="cuda").manual_seed(hidden + experts)
            w13, w13_scale = _weights(experts + shared, 2 * intermediate, hidden, dtype, generator)
            w2, w2_scale = _weights(experts + shared, hidden, intermediate, dtype, generator)
            for tokens in TOKENS[preset]:
                if most_tokens is not None and tokens > most_tokens:
                    continue
                if token_counts is not None and tokens not in token_counts:
                    continue
                if time.perf_counter() - started > budget_s:
                    log.append({"row": row, "preset": preset, "tokens": tokens, "skipped": "budget spent"})
                    continue
                x = torch.randn((tokens, hidden), device=device, generator=generator).bfloat16()
                topk_weights, topk_ids = _routing(tokens, experts, top_k, seed=tokens)
                args = (x, w13, w2, topk_weights, topk_ids, "silu", w13_scale, w2_scale, shared, None)
                sorted_row = not row.startswith("native/fused_moe_slots")
                if sorted_row:
                    m_up = m_down = expert_rows(tokens, top_k, experts)
                    gate_up, down = sorted_candidates(m_up, fp8=dtype == "fp8_e4m3")
                else:
                    m_up, m_down = tokens * top_k + shared * tokens, tokens
                    gate_up, down = slots_candidates(fp8=dtype == "fp8_e4m3")
                gemms = {"gate_up": (m_up, 2 * intermediate, hidden), "down": (m_down, hidden, intermediate)}
                heuristic = _flat(
                    pipeline_knobs(
                        row,
                        gemms,
                        w13.dtype,
                        device,
                        shared=("BLOCK_M",) if sorted_row else (),
                        block_k_multiple=128 if dtype == "fp8_e4m3" else None,
                    )
                )
                up_keys = {name for name in heuristic if name == "BLOCK_M" or name.startswith("gate_up.")}
                heuristic_up = {name: value for name, value in heuristic.items() if name in up_keys}
                heuristic_down = {name: value for name, value in heuristic.items() if name not in up_keys}
                _, best_up = _fastest(row, entry, args, [heuristic_up, *gate_up], heuristic_down, flush, log)
                us, best = _fastest(row, entry, args, [heuristic_down, *down], best_up, flush, log)
                heuristic_us = event_timer(lambda: entry(*args), flush=flush, iterations=10).median_us
                with launch_override(row, **best):
                    got = entry(*args)
                error = (got.float() - reference.fused_moe(*args).float()).abs().max().item()
                log.append(
                    {
                        "row": row,
                        "preset": preset,
                        "tokens": tokens,
                        "best_us": us,
                        "heuristic_us": heuristic_us,
                        "max_abs_diff": error,
                        "knobs": best,
                    }
                )
                print(f"{row:28s} {preset:14s} T={tokens:6d} {us:9.1f} us (heuristic {heuristic_us:9.1f}) {best}")
                for stage, (m, n, k) in gemms.items():
                    knobs = {
                        name.partition(".")[2] or name: value
                        for name, value in best.items()
                        if name.startswith(stage + ".") or name == "BLOCK_M"
                    }
                    entries.append(tiles.store_entry(f"{row}.{stage}", dtype, m, n, k, knobs, us))
    return entries, log


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows (default: all)")
    parser.add_argument("--presets", default=None, help=f"comma-separated presets (default: all of {sorted(TOKENS)})")
    parser.add_argument("--tokens", default=None, help="comma-separated token counts (default: each preset's TOKENS)")
    args = parser.parse_args(argv)
    rows = tuple(args.rows.split(","))
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; known: {sorted(ROWS)}")
    presets = None if args.presets is None else set(args.presets.split(","))
    if presets is not None and presets - set(TOKENS):
        parser.error(f"unknown presets {sorted(presets - set(TOKENS))}; known: {sorted(TOKENS)}")
    token_counts = None if args.tokens is None else {int(value) for value in args.tokens.split(",")}
    entries, log = tune(args.budget_s, rows, presets, token_counts)
    write_store_document(args.out, "perf.tune_moe", argv, entries, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
