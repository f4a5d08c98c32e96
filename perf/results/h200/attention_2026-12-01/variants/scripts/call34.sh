#!/bin/bash
# Device call 34: the cp.async decode_fp8.cu (call 33) with the one-wave split rule (decode_cuda.py:
# splits.one_wave_splits at 2 blocks per SM). Correctness first, several suites at once (timing-insensitive):
# the extension's GPU tests and parity of jit/decode_fp8 (and of aot/decode_fp8 after the AOT build), parity of native/prefill
# (after 411770d's epilogue refactor); then, alone on the GPU, the compile-time variants x split counts
# (perf.sweeps.decode_fp8_builds, graph replay beside events), the decode_fp8 variants, the decode benchmark
# (carry .whl) and ncu of one launch.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=6
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
root=$PWD
# in the background: the library site (.whl carried: FlashInfer for the decode benchmark's peer) and the
# ahead-of-time build (rapid_llm._C, the aot/ rows), as the decode benchmark of call16 set up; every process
# here imports the package from the working directory
( RAPID_LLM_EVIDENCE_PACK=0 MAX_JOBS=4 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
  echo "setup + aot build rc=$? $(( $(date +%s) - start )) s" >> $W/steps.txt ) &
AOT=$!
MAX_JOBS=3 timeout -k 10 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds S2M2,S3M2,S2M3 --build-only \
  > $W/builds.log 2>&1 &
BUILDS=$!
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_native_prefill.json timeout -k 5 -s INT 240 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "native/prefill-" -rfs > $W/parity_native_prefill.log 2>&1 &
P1=$!
timeout -k 10 240 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
OMP_NUM_THREADS=2 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_extension.py \
  -k "Fp8Decode and jit" > $W/tests.log 2>&1; echo "extension tests rc=$?" | tee -a $W/steps.txt
tail -1 $W/tests.log; grep -E "^(FAILED|E  )" $W/tests.log | head -20
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_jit_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "jit/decode_fp8" -rfs > $W/parity.log 2>&1
echo "parity jit/decode_fp8 rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity.log; grep -E "^FAILED" $W/parity.log | head
wait $AOT; tail -1 $W/steps.txt
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_aot_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "aot/decode_fp8" -rfs > $W/parity_aot.log 2>&1
echo "parity aot/decode_fp8 rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity_aot.log; grep -E "^FAILED" $W/parity_aot.log | head
wait $P1; echo "parity native/prefill rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity_native_prefill.log
wait $BUILDS; echo "builds rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt; grep "^build " $W/builds.log
timeout -k 10 -s INT 200 python -m perf.sweeps.decode_fp8_builds --out $W --builds S2M2,S3M2,S2M3 --repeat 2 \
  > $W/builds_sweep.log 2>&1; echo "builds sweep rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -v "^{" $W/builds_sweep.log | head -80
timeout -k 10 -s INT 120 python -m perf.sweeps.attention_variants --out $W --only decode_fp8 > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:24].ljust(24), r.get('event_us'), r.get('graph_us', ''), r.get('TBps'), r.get('max_abs_diff'), r.get('error', '')[:200])"
# the decode benchmark (every row of attention.decode, the aot/ and jit/ rows included, FlashInfer planned as the
# peer), as call16 ran it
PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 timeout -s INT 150 \
  python perf/gpu_report.py --out $W --name attention_decode --suites perf/test_attention_bench.py::test_decode \
  > $W/bench.log 2>&1; echo "decode bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A16 "^attention.decode" $W/bench.log | head -24
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
if [ -n "$NCU" ]; then
  cat > $W/probe.py <<'PY'
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
  PYTHONPATH=$PWD timeout -k 10 120 $NCU --kernel-name regex:decode_fp8 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats python $W/probe.py > $W/ncu.txt 2>&1; echo "ncu rc=$?" | tee -a $W/steps.txt
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|SM Frequency" $W/ncu.txt | head -12
else
  echo "no ncu" | tee -a $W/steps.txt
fi
tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' \
  --exclude='builds/*/*.cuda.o' .
