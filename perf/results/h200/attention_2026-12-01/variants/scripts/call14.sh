#!/bin/bash
# Device call 14: launch_config now takes mla_decode_gluon_wide.py (EARLY_NEXT with its last tile peeled off, LEAN)
# for Hq >= 64 on sm90. The heuristic beside FlashMLA and the two single changes, twice each interleaved, graph
# replay; then parity of native/mla_decode and native/mla_decode_few_heads (every case and dtype) beside the
# Gluon / graph-safety / split-K attention tests.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 200 python -m perf.sweeps.attention_variants --out $W --graph-all --repeat 2 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call14.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64;64,4096,16" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
for row in native/mla_decode native/mla_decode_few_heads; do
  name=${row//\//_}
  OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_$name.json timeout -s INT 240 python -m pytest -q -p no:cacheprovider \
    conformance/test_parity.py -k "$row-" -rfs > $W/parity_$name.log 2>&1 &
done
OMP_NUM_THREADS=2 timeout -s INT 240 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "graph_safe or gluon or split_k or mla" > $W/attention_tests.log 2>&1 &
wait
for f in $W/parity_*.log $W/attention_tests.log; do echo "$(basename $f): $(tail -1 $f)"; done | tee $W/parity.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:120])"
