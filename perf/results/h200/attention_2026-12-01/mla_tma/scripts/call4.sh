#!/bin/bash
set -u
W=/tmp/w4; mkdir -p $W
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date > $W/timeline.txt
for shard in 0/8 1/8 2/8 3/8 4/8 5/8 6/8 7/8; do
  OMP_NUM_THREADS=1 timeout 240 python -m perf.sweeps.attention_tiles --out $W --compile-only --only decode --shard $shard > $W/compile_${shard/\//_}.log 2>&1 &
done
timeout 60 python scratch/host_profile.py > $W/host_profile.txt 2>&1
for v in asm bits; do
  if [ $v = bits ]; then cfg='{"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "maxnreg": 128, "CVT_BITS": true}'; else cfg='{}'; fi
  RAPID_LLM_PROFILE_CONFIG="$cfg" timeout 120 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section InstructionStats --section WarpStateStats --section Occupancy -k 'regex:decode_kernel' --launch-skip 1 --launch-count 1 \
    python -m perf.profiles.attention_kernels decode_fp8 > $W/ncu_fp8_$v.txt 2>&1
  echo "ncu $v rc=$? $(date)" >> $W/timeline.txt
done
wait
echo "compile done $(date)" >> $W/timeline.txt
timeout -s INT 150 python -m perf.sweeps.attention_tiles --out $W --only decode > $W/sweep.log 2>&1
echo "sweep done $(date)" >> $W/timeline.txt
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt; head -8 $W/host_profile.txt; tail -3 $W/host_profile.txt; tail -8 $W/sweep.log
grep -h "Duration\|Registers Per\|Issue Slots Busy\|Executed Ipc A\|DRAM Throughput" $W/ncu_fp8_*.txt
