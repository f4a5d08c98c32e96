#!/bin/bash
# Device call 18: prefill_gluon.py persistent (min(SMs, items) programs, 2 Q slots, the ring across items) with the
# PINGPONG turns and FA3's PIPELINE order: its tests (5 configurations), the variants beside the heuristic and SDPA,
# then ncu of the fp8 decode kernel's heuristic at B=64 L=4096 (where does its time go).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 240 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k gluon_prefill > $W/gluon_prefill_tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
grep -E "passed|failed|FAILED|Error" $W/gluon_prefill_tests.log | head -20
timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call18.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:44].ljust(44), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:300])"
timeout -k 10 90 ncu --clock-control none -k regex:_decode_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  python -m perf.profiles.attention_kernels decode_fp8 > $W/ncu_decode_fp8.txt 2>&1; echo "ncu rc=$?" | tee -a $W/steps.txt
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Eligible Warps|Stall" $W/ncu_decode_fp8.txt | head -20
