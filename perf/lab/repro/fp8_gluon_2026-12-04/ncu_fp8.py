"""One fp8_block_mm row at 4096x7168x16384, two launches (the second is profiled by ncu -s 1 -c 1).
usage: python .gpu/ncu_fp8.py ROW [KNOBS]"""
import json, sys
import torch
from perf.test_gemm_bench import BLOCK_MM, _activations, _weights
from perf.gpu_cases import load_row
m, n, k = 4096, 7168, 16384
arm = sys.argv[1]
a, a_scale = _activations(m, k, seed=1)
b, b_scale = _weights(n, k, seed=2)
out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
if len(sys.argv) > 2:
    from rapid_llm.kernels.ops.gemm.fp8 import gluon, block_scales
    knobs = json.loads(sys.argv[2])
    fn = lambda: gluon.launch(a, b, block_scales(a_scale, b_scale), None, out, knobs)
else:
    planned, _ = load_row(BLOCK_MM, arm, dtype="fp8_e4m3", shape={"num_tokens": m, "n": n, "k": k},
                          layout=frozenset({"a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense"}))
    fn = lambda: planned.impl(a, a_scale, b, b_scale, out)
fn(); torch.cuda.synchronize(); fn(); torch.cuda.synchronize()
