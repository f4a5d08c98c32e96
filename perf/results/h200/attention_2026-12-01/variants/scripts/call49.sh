#!/bin/bash
# Device call 49: mla_decode_gluon_pingpong.py (two warp-specialised warpgroups on alternate tiles, FlashMLA's
# schedule), opt-in: its GPU tests, then beside the wide kernel (rope columns of Q now in registers) and
# FlashMLA, twice each interleaved in graph replay.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
root=$PWD
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
rm -rf .gpu-site && mkdir -p .gpu-site
python -c "import tarfile; tarfile.open('.whl/gpu_site_all.tar.xz').extractall('.gpu-site')"
start=$(date +%s)
timeout -s KILL 240 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py -k "gluon_pingpong or gluon_wide_mla_decode_kernel_equals and early_next_lean" \
  > $W/gluon_wide_test.log 2>&1; echo "gluon tests rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
tail -15 $W/gluon_wide_test.log | cut -c1-400
PYTHONPATH=$root:$root/.gpu-site timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --graph-all --repeat 2 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call49.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64" > $W/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:150])"
tar czf $OUT/r.tar.gz -C $W .
