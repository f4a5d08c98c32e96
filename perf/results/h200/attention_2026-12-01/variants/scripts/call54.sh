#!/bin/bash
# Device call 54: Nsight Compute of one launch of the warp-specialised MLA decode kernel (the sm90 heuristic for
# Hq >= 64, mla_decode_gluon_pingpong.py) at Hq=128 B=64 L=4096 page 64, the sections call13 read for the wide
# kernel (SpeedOfLight, WarpStateStats, ComputeWorkloadAnalysis, SchedulerStats, MemoryWorkloadAnalysis), for
# the next step on it: where its time goes beside the wide kernel's (call13: 171.2 us, tensor pipe 44-47%).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
  --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:pingpong --launch-skip 1 --launch-count 1 \
  python -m perf.profiles.attention_kernels mla_128 > $W/ncu_pingpong_mla_128.txt 2>&1
echo "ncu rc=$?" | tee -a $W/steps.txt
grep -E "Duration|SM Frequency|Issue Slots Busy|Tensor|Pipe|Throughput|Warp Cycles Per Issued|Stall|Registers|Achieved Occupancy" \
  $W/ncu_pingpong_mla_128.txt | head -40
tar czf $OUT/r.tar.gz -C $W .
