#!/bin/bash
# Device call 36: the fp8 decode's new switches (decode_fp8.cu: EARLY_COPIES, OVERLAP, MERGE_WARPS, PDL) as
# builds of perf.sweeps.decode_fp8_builds beside the current kernel (S3M2), each checked against the Triton fp8
# row and timed at the shapes with several split counts (graph replay beside events); then Nsight
# Compute (at the clocks the GPU runs: --clock-control none; the decode and merge kernels of one call) of the
# current kernel at B=1 L=32768 with 1, 16 and 32 splits and at B=64 L=4096, and of the all-switches build at
# B=1 with 32 splits (perf.profiles.decode_fp8_extension); the jit build's SASS last.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
BUILDS=S3M2,S3M2wp,S3M2ewp,S3M2x,S3M2ewpx,S6M1ewpx
MAX_JOBS=2 timeout -k 10 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --build-only \
  > $W/builds.log 2>&1 &
B=$!
MAX_JOBS=4 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library()" > $W/jit_build.log 2>&1
echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
wait $B; echo "builds rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt; grep "^build " $W/builds.log
timeout -k 10 -s INT 240 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --repeat 2 \
  > $W/builds_sweep.log 2>&1; echo "builds sweep rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -v "^{" $W/builds_sweep.log | tail -70
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for shape in "1 32768 1" "1 32768 16" "1 32768 32" "64 4096 1" "1 32768 32 $W/builds/S3M2ewpx/rapid_llm_fp8_S3M2ewpx.so"; do
  name=ncu_$(echo $shape | cut -d' ' -f1-3 | tr ' ' '_')$( [ -n "$(echo $shape | cut -d' ' -f4)" ] && echo _ewpx).txt
  PYTHONPATH=$PWD timeout -k 10 90 $NCU --clock-control none -k regex:"decode_fp8_kernel|merge_kernel" --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" python -m perf.profiles.decode_fp8_extension $shape > $W/$name 2>&1
  echo "$name rc=$?" | tee -a $W/steps.txt
  grep -E "decode_fp8_kernel<|merge_kernel<|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible" $W/$name | cut -c1-110 | head -14
  grep -E "issue_stalled" $W/$name | sort -k3 -n -r | head -5
done
# the compiled kernels' SASS, for instruction counts
cuobjdump -sass $(find $RAPID_LLM_JIT_CACHE -name "*.so" | head -1) 2>&1 | gzip > $W/sass.txt.gz
echo "done $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
tar czf $OUT/r.tar.gz -C $W .
