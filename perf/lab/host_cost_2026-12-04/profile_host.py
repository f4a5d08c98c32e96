import cProfile, pstats, io, time, torch
import rapid_llm.kernels as kernels
from rapid_llm.kernels.dispatcher import default_planner
from perf.host_path import case_args
for name, op, fn in (("rms_norm", "norm.rms_norm", "rms_norm"), ("decode", "attention.decode", "decode")):
    args = case_args(name, torch, "cuda")
    public = getattr(kernels, fn)
    planned = default_planner().plan_for(op, *args)
    for _ in range(200): public(*args)
    torch.cuda.synchronize()
    t = time.perf_counter(); [torch.empty(4096, device="cuda") for _ in range(2000)]; print(name, "torch.empty us", (time.perf_counter() - t) / 2000 * 1e6)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): planned.impl(*args)
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); print(name, "impl profile"); print(s.getvalue()[-3500:])
