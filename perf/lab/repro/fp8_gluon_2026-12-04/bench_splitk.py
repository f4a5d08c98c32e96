"""H200: the split-K Gluon lab kernel (gluon_splitk.py) at decode m beside native/fp8_block_mm_splitk (its
shipped tiles), the Gluon row (m > 128) and DeepGEMM, interleaved per shape, each checked against the
reference, then timed as CUDA-graph replays; a table on stdout, JSON to argv[1].

    PYTHONPATH=$PWD:$PWD/.gpu-site python perf/lab/repro/fp8_gluon_2026-12-04/bench_splitk.py OUT.json
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gluon_splitk as lab
from lab_bench import time_arms, write

from perf.test_gemm_bench import _activations, _weights
from rapid_llm.kernels.ops.gemm.fp8 import splitk
from rapid_llm.kernels.ops.gemm.fp8.gluon import fp8_block_mm_gluon
from rapid_llm.kernels.ops.gemm.reference import fp8_block_mm as reference

SHAPES = [(m, n, k) for n, k in ((7168, 7168), (2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168))
          for m in (1, 16, 64)] + [(128, 7168, 7168), (256, 7168, 7168), (256, 2112, 7168)]  # fmt: skip
KNOBS = [{"SPLIT_K": s, "num_stages": 5} for s in (1, 2, 4, 6)]
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
    arms = {"native/fp8_block_mm_splitk": lambda: splitk.fp8_block_mm(a, a_scale, b, b_scale, out)}
    if m > 128:
        arms["native/fp8_block_mm_gluon"] = lambda: fp8_block_mm_gluon(a, a_scale, b, b_scale, out)
    if deep_gemm is not None:
        arms["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out) or out
    for knobs in KNOBS:
        arms["lab " + " ".join(f"{key}={value}" for key, value in knobs.items())] = (
            lambda knobs=knobs: lab.launch(a, a_scale, b, b_scale, out, knobs)
        )
    time_arms(records, m, n, k, arms, want, flush, before=lambda: out.fill_(float("nan")), graph=True)
write(records)
