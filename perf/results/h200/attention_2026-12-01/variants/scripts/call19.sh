#!/bin/bash
# Device call 19: prefill_gluon.py persistent, FA3's loop order only (the serial order gave wrong results in call18),
# row maximum on the raw logits (one FFMA per exponent): its tests (4 configurations), the variants beside the
# heuristic and SDPA, then ncu of the kernel at 4 x 4096 (64-key tiles, 4 slots; and 128-key tiles).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs -x conformance/test_attention_native.py \
  -k gluon_prefill > $W/gluon_prefill_tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
grep -E "passed|failed|FAILED|Error" $W/gluon_prefill_tests.log | head -8
timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call19.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:30].ljust(30), r.get('event_us'), r.get('TFLOPs'), r.get('max_abs_diff'), r.get('error', '')[:200])"
for cfg in '{"GLUON": true, "BLOCK_N": 64, "STAGES": 4}' '{"GLUON": true}'; do
  tag=$(echo "$cfg" | tr -dc '0-9'); tag=${tag:-128}
  RAPID_LLM_PROFILE_CONFIG="$cfg" timeout -k 10 120 ncu --clock-control none -k regex:_prefill_gluon_kernel --launch-skip 1 \
    --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section SourceCounters python -m perf.profiles.attention_kernels prefill > $W/ncu_prefill_gluon_$tag.txt 2>&1
  echo "ncu $tag rc=$?" | tee -a $W/steps.txt
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Eligible Warps|Stall" $W/ncu_prefill_gluon_$tag.txt | head -12
done
