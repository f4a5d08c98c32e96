#!/bin/bash
# Device call 17: prefill_gluon.py's first GPU run (its tests: every ragged prefill case x fp16/bf16 x 3 configs,
# NaN next sequence), then the prefill variants beside the heuristic and SDPA at 4 x 4096 and 16 x 1024, then
# register-cap / tile variants of the fp8 decode kernel.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs -x conformance/test_attention_native.py \
  -k gluon_prefill > $W/gluon_prefill_tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
tail -30 $W/gluon_prefill_tests.log
timeout -k 10 -s INT 240 python -m perf.sweeps.attention_variants --out $W --only prefill decode_fp8 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call17.json > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:26].ljust(26), r.get('event_us'), r.get('TFLOPs', r.get('TBps')), r.get('max_abs_diff'), r.get('error', '')[:300])"
