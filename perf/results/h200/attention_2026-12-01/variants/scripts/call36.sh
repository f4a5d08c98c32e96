#!/bin/bash
# Device call 36 (prepared; not yet run: the session's device time ran out): Nsight Compute of the CUDA extension's fp8 decode at B=1 L=32768 with 16 and 33 splits (the
# B=1 case that streams at 2.8 TB/s against 3.9 at B=64, call35), beside B=64 L=4096 with 1 split: warp states,
# scheduler, occupancy and memory sections of one launch each (perf.profiles.decode_fp8_extension).
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $W/environment.txt
timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library()" > $W/jit_build.log 2>&1
echo "jit build rc=$?" | tee -a $W/steps.txt
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for shape in "1 32768 16" "1 32768 33" "64 4096 1"; do
  name=ncu_$(echo $shape | tr ' ' '_').txt
  PYTHONPATH=$PWD timeout -k 10 60 $NCU -k regex:decode_fp8_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" python -m perf.profiles.decode_fp8_extension $shape > $W/$name 2>&1
  echo "$name rc=$?" | tee -a $W/steps.txt
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|No Eligible" $W/$name | head -6
  grep -E "issue_stalled" $W/$name | sort -k3 -n -r | head -5
done
tar czf $OUT/r.tar.gz -C $W .
