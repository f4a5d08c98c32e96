#!/bin/bash
# Device call 22: prefill_gluon.py's step with the value product's wait after the softmax (SASS: the wait now
# follows all 34 exponentials; the softmax sits in a block of its own, the rescale and the P conversion between
# the two products' issues) and the first warpgroup releasing its unseen diagonal tile unread; fp8 decode's
# PACKED_V on the GPU for the first time. Tests of both, the variants (prefill beside SDPA, fp8 decode beside
# bf16), then ncu (source counters) of the new prefill kernel at 4 x 4096.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "prefill or packed" > $W/tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
grep -E "passed|failed|FAILED|Error" $W/tests.log | head -12
timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --only prefill decode_fp8 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call22.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:30].ljust(30), r.get('event_us'), r.get('graph_us', ''), r.get('TFLOPs', r.get('TBps')), r.get('max_abs_diff'), r.get('error', '')[:200])"
RAPID_LLM_PROFILE_CONFIG='{"GLUON": true}' timeout -k 10 150 ncu --clock-control none -k regex:_prefill_gluon_kernel --launch-skip 1 \
  --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section SourceCounters -o $W/ncu_prefill -f python -m perf.profiles.attention_kernels prefill > $W/ncu_prefill.log 2>&1
echo "ncu rc=$?" | tee -a $W/steps.txt
ncu -i $W/ncu_prefill.ncu-rep > $W/ncu_prefill.txt 2>&1
ncu -i $W/ncu_prefill.ncu-rep --page source --csv --print-source sass > $W/ncu_prefill_source.csv 2>&1; echo "source rc=$?" | tee -a $W/steps.txt
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps" $W/ncu_prefill.txt | head -8
