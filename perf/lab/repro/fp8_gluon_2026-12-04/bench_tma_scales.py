"""H200: the TMA-scales lab variant (gluon_tma_scales.py) beside native/fp8_block_mm_gluon (shipped tiles) and
DeepGEMM, interleaved per shape, each checked against the reference; a table on stdout, JSON to argv[1].

    PYTHONPATH=$PWD:$PWD/.gpu-site python perf/lab/repro/fp8_gluon_2026-12-04/bench_tma_scales.py OUT.json
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gluon_tma_scales as lab  # noqa: E402

from lab_bench import time_arms, write  # noqa: E402
from perf.test_gemm_bench import _activations, _weights  # noqa: E402
from rapid_llm.kernels.ops.gemm.fp8.gluon import fp8_block_mm_gluon  # noqa: E402
from rapid_llm.kernels.ops.gemm.reference import fp8_block_mm as reference  # noqa: E402

SHAPES = [(4096, 7168, 16384), (4096, 7168, 7168), (4096, 4096, 7168), (4096, 2112, 7168), (4096, 24576, 1536),
          (16384, 7168, 7168), (2048, 7168, 7168), (512, 4096, 7168)]  # fmt: skip
# PIPELINE False: 128-row tiles in DeepGEMM's order (each step's product waited for, then scaled)
KNOBS = [dict(BLOCK_M=128, GROUP_M=g, num_stages=s, PRODUCER_WARPS=w, PIPELINE=False)
         for g, s, w in ((8, 6, 1), (8, 5, 1), (8, 4, 1), (8, 6, 4), (16, 6, 1), (4, 6, 1))]  # fmt: skip
KNOBS.append(dict(BLOCK_M=256, GROUP_M=8, num_stages=3, PRODUCER_WARPS=1))
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
try:
    import deep_gemm
except ImportError:
    deep_gemm = None
records = []
for m, n, k in SHAPES:
    a, a_scale = _activations(m, k, seed=m + k)
    b, b_scale = _weights(n, k, seed=n + k)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    want = reference(a, a_scale, b, b_scale).float()
    arms = {"row": lambda: fp8_block_mm_gluon(a, a_scale, b, b_scale, out)}
    if deep_gemm is not None:
        arms["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out) or out
    for knobs in KNOBS:
        arms["lab " + " ".join(f"{key}={value}" for key, value in knobs.items())] = (
            lambda knobs=knobs: lab.launch(a, a_scale, b, b_scale, out, knobs) or out
        )
    time_arms(records, m, n, k, arms, want, flush, before=lambda: out.fill_(float("nan")))
write(records)
