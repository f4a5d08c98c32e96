#!/bin/bash
# Device call 27: prefill_gluon.py with each item's sequence bounds loaded one item ahead (all configs), LEAN
# (first tile unmasked where it may be, the output scaled by a reciprocal) and STORE_TMA (the output rows through
# the warpgroup's Q buffer and one TMA copy) on the GPU for the first time. Their tests, the variants beside
# SDPA, then ncu source counters of LEAN + STORE_TMA at 16 x 1024 and 4 x 4096.
set -u
export PYTHONUNBUFFERED=1
W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 220 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "gluon_prefill and (default or lean or 3_programs)" -x > $W/tests.log 2>&1; echo "tests rc=$? $(date)" | tee -a $W/steps.txt
tail -3 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -5
timeout -k 10 -s INT 150 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call27.json > $W/variants.log 2>&1
echo "variants rc=$? $(date)" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:24].ljust(24), r.get('event_us'), r.get('TFLOPs', ''), r.get('max_abs_diff'), r.get('error', '')[:200])"
for case in prefill_16x1024 prefill; do
  RAPID_LLM_PROFILE_CONFIG='{"GLUON": true, "LEAN": true, "STORE_TMA": true}' timeout -k 10 100 ncu --clock-control none \
    -k regex:_prefill_gluon_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section SourceCounters -o $W/ncu_$case -f \
    python -m perf.profiles.attention_kernels $case > $W/ncu_$case.log 2>&1
  echo "ncu $case rc=$? $(date)" | tee -a $W/steps.txt
  ncu -i $W/ncu_$case.ncu-rep > $W/ncu_$case.txt 2>&1
  ncu -i $W/ncu_$case.ncu-rep --page source --csv --print-source sass > $W/ncu_${case}_source.csv 2>&1 && gzip $W/ncu_${case}_source.csv
  rm -f $W/ncu_$case.ncu-rep
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps" $W/ncu_$case.txt | head -6
done
