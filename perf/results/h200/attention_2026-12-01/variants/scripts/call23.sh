#!/bin/bash
# Device call 23: prefill_gluon.py's step schedule as bits (FLAGS: 1 rescale between the issues, 2 P carried in
# fp32, 4 softmax in its own block so the value product's wait follows the exponentials, 8 the first warpgroup's
# unseen diagonal tile released unread), each against the call-21 schedule (FLAGS 0) beside SDPA; the Gluon
# prefill tests first.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 150 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "gluon_prefill" > $W/tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
grep -E "passed|failed|FAILED|Error" $W/tests.log | head -12
timeout -k 10 -s INT 240 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call23.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:30].ljust(30), r.get('event_us'), r.get('TFLOPs'), r.get('max_abs_diff'), r.get('error', '')[:200])"
