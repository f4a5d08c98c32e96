#!/bin/bash
# Device call 50: the committed heuristic (mla_decode_gluon_pingpong.py for Hq >= 64 on sm90). The parity matrices of
# native/mla_decode and native/mla_decode_few_heads beside the attention tests of every MLA row and Gluon kernel (the wide kernel's every
# schedule, the ping-pong kernel, graph capture of the MLA rows); the heuristic beside the wide kernel and FlashMLA
# twice each interleaved in graph replay; then the MLA decode benchmark alone with FlashMLA (sgl-flash-mla 1.0.0
# from the carried site) in the same run; the FlashInfer MLA rows are deselected (their JIT build would take most
# of the call).
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
for row in native/mla_decode native/mla_decode_few_heads; do
  name=${row//\//_}
  OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_$name.json timeout -s KILL 220 python -m pytest -q -p no:cacheprovider \
    conformance/test_parity.py -k "$row-" -rfs > $W/parity_$name.log 2>&1 &
done
OMP_NUM_THREADS=2 timeout -s KILL 220 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "gluon or mla" > $W/attention_tests.log 2>&1 &
wait
for f in $W/parity_*.log $W/attention_tests.log; do echo "$(basename $f): $(tail -1 $f)"; done | tee $W/parity.txt
grep -hE "^(FAILED|ERROR)" $W/parity_*.log $W/attention_tests.log | head -20 | cut -c1-300
echo "tests $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
PYTHONPATH=$root:$root/.gpu-site timeout -k 10 -s INT 130 python -m perf.sweeps.attention_variants --out $W --graph-all --repeat 2 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call50.json --only mla_decode \
  --shapes "64,4096,128;1,32768,128;8,32768,128;64,4096,64" > $W/variants.log 2>&1
echo "variants rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
PYTHONPATH=$root:$root/.gpu-site timeout -k 10 -s INT 200 python perf/gpu_report.py --out $W --name attention_mla_decode \
  --suites perf/test_attention_bench.py::test_mla_decode -- -k "not flashinfer" > $W/bench.log 2>&1
echo "mla bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A12 "^attention.mla_decode$" $W/bench.log | awk -F'  +' '{print $1" | "$2" | "$3" | "$4" | "$5}' | cut -c1-300
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['heads'], r['variant'][:34].ljust(34), r.get('splits'), r.get('graph_us'), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:150])"
tar czf $OUT/r.tar.gz -C $W .
