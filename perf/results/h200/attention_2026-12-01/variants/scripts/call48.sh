#!/bin/bash
# Device call 48: mla_decode_gluon_wide.py with one TMA copy for a tile's value columns and one for its rope columns
# (each on its own barrier: 7 -> 4 CTA barriers a tile) and two new operand switches, HALF_PER_WARPGROUP (each
# warpgroup one value half: m64n256 products) and Q_ROPE_IN_REGISTERS (the rope logits' A operand from registers).
# The GPU tests of every schedule first, then the four variants twice each interleaved in graph replay beside
# FlashMLA; then the MLA benchmark (heuristic unchanged: EARLY_NEXT + LEAN).
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
timeout -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py -k gluon_wide \
  > $W/gluon_wide_test.log 2>&1; echo "gluon_wide test rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
tail -3 $W/gluon_wide_test.log
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 200 python -m perf.sweeps.attention_variants --out $W --graph-all --repeat 2 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call48.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64" > $W/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:150])"
tar czf $OUT/r.tar.gz -C $W .
