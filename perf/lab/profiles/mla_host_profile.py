"""Host time of one eager attention.mla_decode call (B=1, L=32768, Hq=16, page 64) per kernel path, and where it goes.

    python -m perf.profiles.mla_host_profile

For the heuristic path and the Gluon kernel: wall time per call over 200 back-to-back eager calls (the GPU work
is ~15-20 us, so the host's enqueue time is what the wall clock measures), then cProfile's top functions of 200
calls by cumulative time. Event-timed benchmarks include this host time wherever it outlasts the L2 flush that
precedes each timed call.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch

from perf.sweeps.attention_tiles import _pages


def main() -> int:
    from rapid_llm.kernels.ops.attention import mla_decode

    g = torch.Generator(device="cuda").manual_seed(1)
    table, pages = _pages(1, 32768, 64)
    cache = torch.randn((pages * 64, 576), device="cuda", generator=g).bfloat16()
    q = torch.randn((1, 16, 576), device="cuda", generator=g).bfloat16()
    lens = torch.full((1,), 32768, dtype=torch.int32, device="cuda")
    args = (q, cache, table, lens, 64, 192 ** -0.5)
    paths = {"heuristic": {}, "gluon": {"splits": 128, "config": {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4,
                                                                    "num_stages": 2, "ROPE_RING": True,
                                                                    "GLUON": True}}}
    for name, kwargs in paths.items():
        call = lambda: mla_decode.mla_decode(*args, **kwargs)
        for _ in range(20):
            call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            call()
        torch.cuda.synchronize()
        print(f"{name}: {(time.perf_counter() - start) / 200 * 1e6:.1f} us per eager call (wall)")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            call()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(22)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
