"""H200: the lab Gluon fp8_mm (gluon_fp8_mm.py) beside torch._scaled_mm (row-wise scales) and native/fp8_mm,
interleaved per shape, each checked against the reference; a table on stdout, JSON to argv[1].

    PYTHONPATH=$PWD python perf/lab/repro/fp8_gluon_2026-12-04/bench_fp8_mm.py OUT.json
"""

import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gluon_fp8_mm as lab  # noqa: E402

from lab_bench import time_arms, write  # noqa: E402
from perf.test_gemm_bench import channel_weights  # noqa: E402
from rapid_llm.kernels import per_token_fp8  # noqa: E402
from rapid_llm.kernels.ops.gemm.fp8.tiled import fp8_mm as native_fp8_mm  # noqa: E402
from rapid_llm.kernels.ops.gemm.reference import fp8_mm as reference  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 7168, 7168), (4096, 28672, 4096)]
KNOBS = [dict(BLOCK_N=bn, GROUP_M=g, num_stages=s, PRODUCER_WARPS=w)
         for (bn, s), g, w in itertools.product(((256, 3), (256, 4), (128, 5), (128, 6)), (8,), (1, 4))]  # fmt: skip
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
records = []
for m, n, k in SHAPES:
    a, a_scale = per_token_fp8(torch.randn((m, k), device="cuda").bfloat16())
    b, b_scale = channel_weights(n, k, seed=n + k)
    want = reference(a, a_scale, b, b_scale).float()
    arms = {
        "torch._scaled_mm": lambda: torch._scaled_mm(
            a, b.t(), a_scale, b_scale.reshape(1, -1).contiguous(), out_dtype=torch.bfloat16, use_fast_accum=False
        ),
        "native/fp8_mm": lambda: native_fp8_mm(a, a_scale, b, b_scale),
    }
    for knobs in KNOBS:
        arms["lab " + " ".join(f"{key}={value}" for key, value in knobs.items())] = (
            lambda knobs=knobs: lab.fp8_mm(a, a_scale, b, b_scale, knobs)
        )
    time_arms(records, m, n, k, arms, want, flush)
write(records)
