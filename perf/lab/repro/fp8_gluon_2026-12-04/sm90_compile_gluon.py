# the first Gluon row (commit c4ba6b8): check that commit out to rerun. usage: python sm90_compile_gluon.py STAGES BLOCK_M
import sys, torch
from perf.profiles.sm90_compile import compile_sm90, summary
from rapid_llm.kernels.ops.gemm.fp8 import gluon as g, block_scales
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
m, n, k = 4096, 7168, 7168
a = torch.empty((m, k), dtype=torch.float8_e4m3fn); b = torch.empty((n, k), dtype=torch.float8_e4m3fn)
a_scale = torch.empty((k // 128, m), dtype=torch.float32).t(); b_scale = torch.empty((n // 128, k // 128), dtype=torch.float32)
out = torch.empty((m, n), dtype=torch.bfloat16)
scales = block_scales(a_scale, b_scale)
stages = int(sys.argv[1]) if len(sys.argv) > 1 else 5
a_desc = TensorDescriptor(a, [m, k], [a.stride(0), 1], [64, 128], g._operand_layout(64))
b_desc = TensorDescriptor(b, [n, k], [b.stride(0), 1], [128, 128], g._operand_layout(128))
kernel = getattr(g._fp8_block_mm_gluon_kernel, "fn", g._fp8_block_mm_gluon_kernel)
report = compile_sm90(kernel, a_desc, b_desc, scales.a, scales.b, out, m, n, k, *scales.a_strides, *scales.b_strides, *out.stride(), 2,
                      NUM_PROGRAMS=132, GROUP_M=8, STAGES=stages, BLOCK_M=int(sys.argv[2]) if len(sys.argv) > 2 else 128, num_warps=4, maxnreg=g.MAX_REGISTERS)
print(summary(report))
open("/tmp/ws.ttgir", "w").write(report["ttgir"]); open("/tmp/ws.sass", "w").write(report["sass"])
