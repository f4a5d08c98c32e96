#!/bin/bash
# Device call 33: decode_fp8.cu with a cp.async ring per warp (K/V chunks copied kStages - 1 chunks ahead into
# shared memory, fragments read from there) in place of call 32's register prefetch. The default build (JIT)
# through its GPU tests and parity, then the compile-time variants (perf.sweeps.decode_fp8_builds: stages x
# blocks per SM, split counts), the decode_fp8 variants, and an ncu probe of the default build at B=64.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
# the sweep's builds in the background while the default build is tested (timed later, alone on the GPU)
MAX_JOBS=4 timeout -k 10 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds S2M2,S3M2,S2M3 --build-only \
  > $W/builds.log 2>&1 &
SWEEP=$!
timeout -k 10 240 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_extension.py \
  -k "Fp8Decode and jit" > $W/tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
tail -3 $W/tests.log; grep -E "^(FAILED|E  )" $W/tests.log | head -20
OMP_NUM_THREADS=4 RAPID_LLM_PARITY_REPORT=$W/parity_jit_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "jit/decode_fp8" -rfs > $W/parity.log 2>&1
echo "parity rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity.log; grep -E "^FAILED" $W/parity.log | head
wait $SWEEP; echo "builds rc=$?" | tee -a $W/steps.txt; grep "^build " $W/builds.log
timeout -k 10 -s INT 240 python -m perf.sweeps.decode_fp8_builds --out $W --builds S2M2,S3M2,S2M3 --repeat 2 \
  > $W/builds_sweep.log 2>&1; echo "builds sweep rc=$?" | tee -a $W/steps.txt
sed -n '/^  B      L/,$p' $W/builds_sweep.log
timeout -k 10 -s INT 150 python -m perf.sweeps.attention_variants --out $W --only decode_fp8 > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:24].ljust(24), r.get('event_us'), r.get('graph_us', ''), r.get('TBps'), r.get('max_abs_diff'), r.get('error', '')[:200])"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
  cat > /tmp/probe.py <<'PY'
import torch
from perf.sweeps import attention_tiles
from rapid_llm.kernels.ops.attention import decode_cuda
table, pages = attention_tiles._pages(64, 4096, 16)
fp8 = torch.randn((pages * 16, 16, 128), device="cuda").to(torch.float8_e4m3fn)
q = torch.randn((64, 32, 128), device="cuda").bfloat16()
lens = torch.full((64,), 4096, dtype=torch.int32, device="cuda")
scale = torch.ones(1, device="cuda")
for _ in range(3):
    decode_cuda.decode_jit(q, fp8, table, lens, 16, 128 ** -0.5, scale, scale)
torch.cuda.synchronize()
PY
  timeout -k 10 120 $NCU --kernel-name regex:decode_fp8 --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats python /tmp/probe.py > $W/ncu.txt 2>&1; echo "ncu rc=$?" | tee -a $W/steps.txt
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|L1/TEX Hit|L2 Hit" $W/ncu.txt | head -30
else
  echo "no ncu" | tee -a $W/steps.txt
fi
tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' .
