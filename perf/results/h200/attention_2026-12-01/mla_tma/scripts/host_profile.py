"""Host time per call of mla_decode at B=1 (TMA vs pointer) and where it goes."""
import cProfile, pstats, time, io, sys
import torch, triton
sys.path.insert(0, '.')
from rapid_llm.kernels.ops.attention import mla_decode as m
from rapid_llm.kernels.ops.attention import mla_decode_tma as mt
torch.manual_seed(0)
B, L, H = 1, 32768, 16
table = torch.randperm(L // 64, dtype=torch.int32).view(1, -1).cuda()
cache = torch.randn(L, 576, device='cuda').bfloat16()
q = torch.randn(B, H, 576, device='cuda').bfloat16()
lens = torch.full((B,), L, dtype=torch.int32, device='cuda')
def run(tma): return m.mla_decode(q, cache, table, lens, 64, 192 ** -0.5, tma=tma)
for tma in (False, True):
    for _ in range(20): run(tma)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(500): run(tma)
    host = (time.perf_counter() - t) / 500 * 1e6
    torch.cuda.synchronize()
    print(f"tma={tma}: host {host:.1f} us per call (enqueue only)")
pr = cProfile.Profile(); pr.enable()
for _ in range(300): run(True)
pr.disable(); torch.cuda.synchronize()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats('tottime').print_stats(22); print(s.getvalue()[:5000])
# descriptor pieces alone
t = time.perf_counter()
for _ in range(1000): mt.descriptors(cache, 32)
print("descriptors()", (time.perf_counter() - t) * 1e3, "us per call")
t = time.perf_counter()
for _ in range(1000): mt.tma_ready(cache, 64, 32)
print("tma_ready()", (time.perf_counter() - t) * 1e3, "us per call")
