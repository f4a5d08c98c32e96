"""Launch-knob sweep of the fused norm + fp8 epilogues (quantization/fused_fp8.py's norm kernel) on a GPU.

    python -m perf.sweeps.fused_norm_rows --out DIR

For rms_norm / fused_add_rms_norm + per-token-group (128, row-major scales) or static fp8 at prefill token
counts (4096, 16384, 32768) and hidden 4096 / 7168 in bf16, each (ROWS, num_warps) set goes through the one
sweep hook (rapid_llm.kernels.ops.launch_override) on the row as its public op calls it: outputs compared with
the row's default launch (q, scales, and the residual after one call from the same state: bitwise, or the set
is recorded as wrong and not timed: a warps change reorders the row's sum of squares, which moves some q by
one e4m3 step, so only the default's warps compare), then timed with CUDA events (L2 flushed, median) beside a device copy of
the op's bytes (x read, residual read and written, q and scales written). Writes DIR/sweep_fused_norm_rows.json
and prints each shape's best set beside the default.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys

if not __package__:  # run as a file: the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch
import triton

from perf.gpu_timing import event_timer
from rapid_llm.kernels.ops.launch_override import launch_override
from rapid_llm.kernels.ops.quantization import fused_fp8

OPS = (
    "rms_norm_per_token_group_fp8",
    "fused_add_rms_norm_per_token_group_fp8",
    "rms_norm_static_fp8",
    "fused_add_rms_norm_static_fp8",
)
TOKENS = (4096, 16384, 32768)
HIDDEN = (4096, 7168)
KNOBS = [{"ROWS": rows, "num_warps": warps} for rows, warps in itertools.product((1, 2, 4, 8), (8, 16))]


def _call(op, x, residual, weight, scale):
    """The op's outputs as a tuple (q, scales or nothing)."""
    function = getattr(fused_fp8, op)
    if op.startswith("fused_add"):
        out = function(x, residual, weight, scale, 1e-6) if "static" in op else function(x, residual, weight)
    else:
        out = function(x, weight, scale, 1e-6) if "static" in op else function(x, weight)
    return out if isinstance(out, tuple) else (out,)


def _bytes(op, tokens, hidden):
    element = 2 * tokens * hidden
    moved = element + tokens * hidden  # x read, q written
    if op.startswith("fused_add"):
        moved += 2 * element  # residual read and written
    if "group" in op:
        moved += 4 * tokens * (hidden // 128)
    return moved


def sweep() -> list[dict]:
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    records = []
    for op, tokens, hidden in itertools.product(OPS, TOKENS, HIDDEN):
        gen = torch.Generator(device="cuda").manual_seed(tokens + hidden)
        x = torch.randn((tokens, hidden), device="cuda", generator=gen).bfloat16()
        residual0 = torch.randn((tokens, hidden), device="cuda", generator=gen).bfloat16()
        weight = torch.rand((hidden,), device="cuda", generator=gen).bfloat16() + 0.5
        scale = torch.tensor([0.02], device="cuda")
        row = f"native/{op}"
        residual = residual0.clone()
        want = [t.clone() for t in _call(op, x, residual, weight, scale)] + [residual.clone()]
        source = torch.empty(_bytes(op, tokens, hidden) // 2, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        copy_us = event_timer(lambda: target.copy_(source), flush=flush).median_us
        default = fused_fp8.launch_config(
            hidden // 128, 128, min(triton.next_power_of_2(tokens), 4096), op.startswith("fused_add"), "static" in op
        )
        for knobs in KNOBS:
            record = {"op": op, "tokens": tokens, "hidden": hidden, "knobs": knobs, "copy_us": copy_us}
            record["default"] = all(default[name] == value for name, value in knobs.items())
            with launch_override(row, **knobs):
                residual = residual0.clone()
                got = list(_call(op, x, residual, weight, scale)) + [residual]
                wrong = [
                    i
                    for i, (a, b) in enumerate(zip(got, want))
                    if not torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                ]
                if wrong:
                    record["wrong_outputs"] = wrong
                else:
                    record["us"] = event_timer(lambda: _call(op, x, residual, weight, scale), flush=flush).median_us
                    record["pct_of_copy"] = 100 * copy_us / record["us"]
            records.append(record)
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    records = sweep()
    document = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.date.today().isoformat(),
        "command": " ".join([sys.executable, "-m", "perf.sweeps.fused_norm_rows", *(argv or sys.argv[1:])]),
        "records": records,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sweep_fused_norm_rows.json"), "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1)
    for op, tokens, hidden in itertools.product(OPS, TOKENS, HIDDEN):
        timed = [r for r in records if (r["op"], r["tokens"], r["hidden"]) == (op, tokens, hidden) and "us" in r]
        best = min(timed, key=lambda r: r["us"])
        default = next((r for r in timed if r["default"]), None)
        default_text = f"{default['us']:7.1f} us ({default['pct_of_copy']:4.1f}%)" if default else "-"
        print(
            f"{op:40s} T={tokens:6d} H={hidden:5d} default {default_text}  "
            f"best {best['us']:7.1f} us ({best['pct_of_copy']:4.1f}%) {best['knobs']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
