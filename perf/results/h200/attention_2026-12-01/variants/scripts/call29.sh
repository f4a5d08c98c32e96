#!/bin/bash
# Device call 29: Q_REGS (two consumers' query rows in registers: the logits read only K from shared memory) on
# the GPU for the first time: its Gluon prefill tests, then the variants beside SDPA (two consumers with 128-key
# tiles, with and without Q_REGS; the default three times). Files packed into one archive.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "gluon_prefill and (q_regs or default)" -x > $W/tests.log 2>&1; echo "tests rc=$? $(date)" | tee -a $W/steps.txt
tail -2 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -5
timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --only prefill \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call29.json > $W/variants.log 2>&1
echo "variants rc=$? $(date)" | tee -a $W/steps.txt
tar czf $OUT/r.tar.gz -C $W .
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:26].ljust(26), r.get('event_us'), r.get('TFLOPs', ''), r.get('max_abs_diff'), r.get('error', '')[:200])"
