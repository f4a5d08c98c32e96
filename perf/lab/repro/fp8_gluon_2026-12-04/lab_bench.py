"""The two lab benches' shared loop: each arm checked once against the reference, then timed (L2 flushed)."""

import json
import sys

import torch

from perf.gpu_timing import event_timer


def time_arms(records: list, m: int, n: int, k: int, arms: dict, want: torch.Tensor, flush, before=None,
              graph: bool = False) -> None:
    """arms: name -> fn() returning its output. `before()` runs ahead of the checked call (e.g. a NaN fill of
    a shared out=, so an unwritten element shows); a knob set that cannot launch is recorded, not fatal.
    graph: time replays of a CUDA graph of the call (decode sizes, where the host's launch path would
    otherwise outlast the flush and show in the event time)."""
    for name, fn in arms.items():
        if before is not None:
            before()
        try:
            got = fn()
            torch.cuda.synchronize()
            diff = (got.float() - want).abs().max().item()
            timed = fn
            if graph:
                captured = torch.cuda.CUDAGraph()
                with torch.cuda.graph(captured):
                    fn()
                timed = captured.replay
            us = event_timer(timed, flush=flush, iterations=10).median_us
        except Exception as error:
            diff, us = None, None
            name += f" ({type(error).__name__}: {str(error)[:80]})"
        tflops = None if us is None else round(2 * m * n * k / us / 1e6, 1)
        records.append({"m": m, "n": n, "k": k, "arm": name, "us": us, "tflops": tflops, "max_abs_diff": diff})
        shown = us if us is None else round(us, 1)
        print(f"{m:6d} {n:6d} {k:6d}  {name:60s} {shown!s:>9} us {tflops} TFLOP/s  diff {diff}", flush=True)


def write(records: list) -> None:
    """The records as JSON at argv[1], with the device and torch version."""
    document = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "records": records}
    with open(sys.argv[1], "w") as handle:
        json.dump(document, handle, indent=1)
