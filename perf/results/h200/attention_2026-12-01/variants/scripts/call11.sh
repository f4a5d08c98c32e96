#!/bin/bash
# Device call 11: first GPU run of mla_decode_gluon_wide.py (Hq >= 64): its parity test against the pointer kernel,
# then graph-replay timing at Hq=128 (B=64 L=4096, B=1 L=32768, B=8 L=32768) and Hq=64 beside FlashMLA and the
# Triton TMA kernel that serves Hq >= 64 today.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
timeout -s INT 150 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py -k gluon_wide \
  > $W/gluon_wide_test.log 2>&1; echo "gluon_wide test rc=$?" | tee -a $W/steps.txt
tail -15 $W/gluon_wide_test.log
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 200 python -m perf.sweeps.attention_variants --out $W --graph-all \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call11.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:120])"
