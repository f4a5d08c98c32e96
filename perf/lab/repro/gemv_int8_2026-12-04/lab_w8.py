"""Lab: one-token int8 GEMV variants (labk.py) against a read-only kernel and bf16 cuBLAS, cold and graph-timed."""
import json, os, sys, torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from labk import k_cvt, k_magic, k_magic3, k_read  # noqa: E402


def bench(fn, iters=200):
    for _ in range(10): fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    g.replay(); torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); [g.replay() for _ in range(iters // 20)]; b.record(); torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / iters)
    return best


flushbuf = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
def cold(fn, reps=50):
    ts = []
    for _ in range(reps):
        flushbuf.zero_()
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort(); return ts[len(ts) // 2]

res = []
for N, K in [(8192, 8192), (28672, 4096), (4096, 14336)]:
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    wq = torch.randint(-128, 128, (N, K), device="cuda", dtype=torch.int8)
    sc = torch.rand(N, device="cuda") / 64
    wb = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    ref = (x.float() @ wq.float().T) * sc
    out = torch.empty(1, N, device="cuda", dtype=torch.bfloat16)
    w32 = wq.view(torch.int32); o32 = torch.empty(N, device="cuda")
    row = {"N": N, "K": K, "cublas_bf16": (cold(lambda: F.linear(x, wb)), bench(lambda: F.linear(x, wb)))}
    for bn in (4, 8, 16, 32):
        for bk in (512, 1024, 2048):
            for nw in (4, 8):
                if bn * bk > 32768: continue
                bw = bk // 4
                for name, kern in (("magic", k_magic),):
                    f = lambda: kern[(N // bn,)](x, w32, sc, out, N, K, BLOCK_N=bn, BLOCK_W=bw, num_warps=nw)
                    f(); e = (out.float() - ref).abs().max().item() / ref.abs().max().item()
                    assert e < 0.01, (name, e)
                    row[f"{name} bn{bn} bk{bk} w{nw}"] = (cold(f), bench(f))
                f = lambda: k_magic3[(N // bn,)](x, wq, sc, out, N, K, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
                f(); e = (out.float() - ref).abs().max().item() / ref.abs().max().item(); assert e < 0.01, e
                row[f"magic3 bn{bn} bk{bk} w{nw}"] = (cold(f), bench(f))
                f = lambda: k_cvt[(N // bn,)](x, wq, sc, out, N, K, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw)
                row[f"cvt bn{bn} bk{bk} w{nw}"] = (cold(f), bench(f))
                f = lambda: k_read[(N // bn,)](w32, o32, N, K, BLOCK_N=bn, BLOCK_W=bw, num_warps=nw)
                row[f"read bn{bn} bk{bk} w{nw}"] = (cold(f), bench(f))
    res.append(row)
    for p in ("cvt", "magic ", "magic3", "read"):
        c = min((v[0], k) for k, v in row.items() if k.startswith(p)); g = min((v[1], k) for k, v in row.items() if k.startswith(p))
        print(N, K, p, "cold", round(c[0], 1), c[1], "graph", round(g[0], 1), g[1], flush=True)
    print(N, K, "cublas cold/graph", [round(v, 1) for v in row["cublas_bf16"]], flush=True)
json.dump(res, open(os.environ["OUT"] + "/lab_w8.json", "w"), indent=1)
