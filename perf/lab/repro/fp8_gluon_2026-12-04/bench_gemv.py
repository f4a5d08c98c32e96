"""H200: native/fp8_block_mm_gemv (one token, CUDA cores) beside native/fp8_block_mm_splitk and DeepGEMM at
DeepSeek-V3's projections, each checked against the reference, timed as CUDA-graph replays (L2 flushed);
a table on stdout, JSON to argv[1]. Knob sets of the gemv kernel beside its heuristic tiles.

    PYTHONPATH=$PWD:$PWD/.gpu-site python perf/lab/repro/fp8_gluon_2026-12-04/bench_gemv.py OUT.json
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab_bench import time_arms, write

from perf.test_gemm_bench import _activations, _weights
from rapid_llm.kernels.ops.gemm.fp8 import block_scales, gemv, splitk
from rapid_llm.kernels.ops.gemm.reference import fp8_block_mm as reference

SHAPES = [(1, n, k) for n, k in ((7168, 7168), (2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168))]
KNOBS = [{"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": 3}
         for bn, bk, w in ((4, 1024, 4), (8, 1024, 4), (8, 512, 4), (16, 512, 8), (4, 2048, 8), (32, 256, 4))]  # fmt: skip
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
    scales = block_scales(a_scale, b_scale)
    arms = {
        "native/fp8_block_mm_gemv (heuristic)": lambda: gemv.fp8_block_mm_gemv(a, a_scale, b, b_scale, out),
        "native/fp8_block_mm_splitk": lambda: splitk.fp8_block_mm(a, a_scale, b, b_scale, out),
    }
    if deep_gemm is not None:
        arms["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out) or out
    for knobs in KNOBS:
        arms["gemv " + " ".join(f"{key}={value}" for key, value in knobs.items())] = (
            lambda knobs=knobs: gemv.launch(a, b, scales, None, out, {"BLOCK_M": 1, **knobs}) or out
        )
    time_arms(records, m, n, k, arms, want, flush, before=lambda: out.fill_(float("nan")), graph=True)
write(records)
