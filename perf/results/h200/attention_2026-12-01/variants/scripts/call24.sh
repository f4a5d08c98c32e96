#!/bin/bash
# Device call 24: prefill_gluon.py with three consumer warpgroups (192-row items: each key/value tile serves 192
# query rows; a warpgroup skips the tiles it sees no key of, and all of an item whose rows lie past the
# sequence's end) as the default, against two consumers (the call-21 kernel) beside SDPA; then the Gluon
# prefill tests (five configurations).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
timeout -k 10 -s INT 150 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call24.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:30].ljust(30), r.get('event_us'), r.get('TFLOPs'), r.get('max_abs_diff'), r.get('error', '')[:200])"
tail -3 $W/variants.log | cut -c1-300
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs -x conformance/test_attention_native.py \
  -k "gluon_prefill" > $W/tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
grep -E "passed|failed|FAILED|Error" $W/tests.log | head -12
