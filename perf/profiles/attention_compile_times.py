"""First-call (compile) time of each native attention kernel apart from its steady-state time.

    python -m perf.profiles.attention_compile_times --out DIR

Each case of perf/profiles/attention_kernels.py runs in a fresh process with an empty Triton cache
(TRITON_CACHE_DIR in a new temporary directory): the first call's wall time (host, synchronized) is
Triton's JIT compile of every kernel the call launches plus one execution; then 20 calls give the
steady-state median (wall, synchronized; the benchmarks' CUDA-event times are in bench_attention.json).
Writes DIR/attention_compile_times.json and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def _measure(case: str) -> dict:
    from perf.profiles.attention_kernels import CASES

    call = CASES[case]()
    torch.cuda.synchronize()
    started = time.perf_counter()
    call()
    torch.cuda.synchronize()
    first = time.perf_counter() - started
    times = []
    for _ in range(20):
        started = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return {"case": case, "first_call_s": round(first, 3), "steady_us": round(statistics.median(times) * 1e6, 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--case", help="measure one case in this process (the parent runs each in its own)")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(_measure(args.case)))
        return 0
    from perf.profiles.attention_kernels import CASES

    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            done = subprocess.run(
                [sys.executable, "-m", "perf.profiles.attention_compile_times", "--case", case],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode:
                rows.append({"case": case, "error": done.stderr[-500:]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "command": "python -m perf.profiles.attention_compile_times",
        "cases": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "attention_compile_times.json"), "w") as handle:
        json.dump(result, handle, indent=1)
    for row in rows:
        print(
            f"{row['case']:>12}: first call {row.get('first_call_s')} s, steady {row.get('steady_us')} us "
            f"{row.get('error', '')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
