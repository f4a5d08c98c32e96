"""Run each bad direct call of test_direct_op_calls_fail_the_torch_checks in its own process."""
import subprocess, sys
CASES = [
 "(torch.empty(64, 32, dtype=torch.bfloat16), x.cpu())",
 "(torch.empty(64, 32, dtype=torch.bfloat16), x)",
 "(torch.empty(64, 31, device='cuda', dtype=torch.bfloat16), x)",
 "(torch.empty(64, 32, device='cuda', dtype=torch.float16), x)",
 "(torch.empty(64, 32, device='cuda', dtype=torch.float64), x.double())",
 "(torch.empty(32, 64, device='cuda', dtype=torch.bfloat16).t(), x)",
 "(torch.empty(64, 32, device='cuda', dtype=torch.bfloat16), x.t().contiguous().t())",
 "(x, x)",
]
for which in ("aot", "jit"):
    for case in CASES:
        op = "torch.ops.rapid_llm.scale" if which == "aot" else "jit.op('scale')"
        code = (f"import torch, rapid_llm._C\nfrom rapid_llm.kernels import jit\nx = torch.randn(64, 32, device='cuda', dtype=torch.bfloat16)\n"
                f"out, src = {case}\ntry:\n    {op}(out, src, 2.0); print('NO ERROR')\nexcept Exception as e:\n    print(type(e).__name__, str(e).splitlines()[0][:150])")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        print(which, case, "rc", r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:] if (r.stdout + r.stderr).strip() else "")
