#!/bin/bash
# Device call 12: mla_decode_gluon_wide.py with EARLY_NEXT (tile t+1's logits issued behind tile t's value products)
# against the plain wide kernel, twice each interleaved, graph replay; the early_next parity test; ncu of both at
# Hq=128 B=64 L=4096 (tensor pipe, stall reasons).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
timeout -s INT 150 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py -k gluon_wide \
  > $W/gluon_wide_test.log 2>&1; echo "gluon_wide test rc=$?" | tee -a $W/steps.txt
tail -3 $W/gluon_wide_test.log
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 200 python -m perf.sweeps.attention_variants --out $W --graph-all --repeat 2 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call12.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
for early in false true; do
  RAPID_LLM_PROFILE_CONFIG="{\"splits\": 1, \"BLOCK_H\": 64, \"BLOCK_N\": 64, \"num_warps\": 8, \"num_stages\": 2, \"GLUON_WIDE\": true, \"EARLY_NEXT\": $early}" \
    timeout 90 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:gluon --launch-skip 1 --launch-count 1 \
    python -m perf.profiles.attention_kernels mla_128 > $W/ncu_wide_early_$early.txt 2>&1
  echo "ncu early=$early rc=$?" | tee -a $W/steps.txt
done
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:120])"
grep -E "Duration|Stall|stalled|Warp Cycles Per Issued|Issue Slots Busy|Tensor|Pipe" $W/ncu_wide_early_*.txt | head -40
