"""Lab: product native/w8a16_mm_gemv entry vs the lab kernel at 8192^2 m=1, same timers; host cost per call."""
import json, os, sys, time, torch, triton, triton.language as tl
import torch.nn.functional as F
sys.path.insert(0, ".gpu")
from labk import k_magic3  # run from perf/lab/repro/gemv_int8_2026-12-04 (the .gpu/ copy at the time)
from perf.gpu_timing import event_timer
from rapid_llm.kernels.ops.gemm.mm import gemv
import rapid_llm.kernels as K
from rapid_llm.kernels.dispatcher import Planner, probe_environment
flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
def ev(fn):
    r = event_timer(fn, flush=flush)
    return r if isinstance(r, float) else getattr(r, "median_us", r)
res = {}
N = Kd = 8192
x = torch.randn(1, Kd, device="cuda", dtype=torch.bfloat16)
wq = torch.randint(-128, 128, (N, Kd), device="cuda", dtype=torch.int8)
sc = (torch.rand(N, device="cuda") / 64).to(torch.bfloat16)
sc32 = sc.float()
wb = torch.randn(N, Kd, device="cuda", dtype=torch.bfloat16)
out = torch.empty(1, N, device="cuda", dtype=torch.bfloat16)
res["cublas"] = ev(lambda: F.linear(x, wb))
for bn, bk, nw in ((16, 512, 8), (8, 1024, 4), (16, 512, 4), (8, 512, 4), (4, 2048, 8)):
    knobs = {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": nw, "num_stages": 3}
    res[f"product {knobs}"] = ev(lambda: gemv.launch(x, wq, None, out, knobs, scale=sc))
    res[f"lab {knobs}"] = ev(lambda: k_magic3[(N // bn,)](x, wq, sc32, out, N, Kd, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw))
res["public w8a16_mm"] = ev(lambda: K.w8a16_mm(x, wq, sc.view(N, 1) if False else sc))
for k_, v in res.items(): print(f"{v if isinstance(v, float) else v}  {k_}", flush=True)
# host cost per call (no sync), dispatched rows
p = Planner(probe_environment())
host = {}
for m, n, k in [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096)]:
    xx = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); ww = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    pl = p.plan_for("gemm.mm", xx, ww)
    row = {"row": pl.row.name}
    for name, fn in [("F.linear", lambda: F.linear(xx, ww)), ("planned.impl", lambda: pl.impl(xx, ww)),
                     ("plan_for", lambda: p.plan_for("gemm.mm", xx, ww)), ("public mm", lambda: K.mm(xx, ww))]:
        for _ in range(50): fn()
        torch.cuda.synchronize(); best = 1e9
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(200): fn()
            best = min(best, (time.perf_counter() - t) / 200 * 1e6)
            torch.cuda.synchronize()
        row[name] = round(best, 2)
    host[f"m{m}"] = row; print(m, row, flush=True)
json.dump({"device": res, "host": host}, open(os.environ["OUT"] + "/lab_w8b.json", "w"), indent=1, default=str)
