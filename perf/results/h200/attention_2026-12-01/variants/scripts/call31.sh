#!/bin/bash
# Device call 31: two consumer warpgroups with 128-key tiles in 2 slots as the default (call30). The variants
# first (SDPA, the default and three consumers interleaved, 3 rounds), then parity of native/prefill, the prefill
# tests of test_attention_native.py and the FlashInfer warm-up side by side, then the prefill benchmark (FA3,
# FlashInfer, SDPA beside it).
set -u
W=/tmp/ev; mkdir -p $W
root=$PWD
date > $W/timeline.txt
RAPID_LLM_EVIDENCE_BUILD_EXT=0 RAPID_LLM_EVIDENCE_PACK=0 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
echo "setup rc=$? $(date)" >> $W/timeline.txt
export PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit PYTHONUNBUFFERED=1
timeout -k 5 -s INT 150 python -m perf.sweeps.attention_variants --out $W --only prefill --repeat 3 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call31.json > $W/variants.log 2>&1
echo "variants rc=$? $(date)" >> $W/timeline.txt
( TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=10 timeout 200 python -m pytest -q -p no:cacheprovider \
    perf/test_attention_bench.py::test_prefill -k flashinfer --benchmark-disable > $W/flashinfer_warmup.log 2>&1
  echo "flashinfer warm-up rc=$? $(date)" >> $W/timeline.txt ) &
warm=$!
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_native_prefill.json timeout -k 5 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "native/prefill-" -rfs --durations=10 > $W/parity_native_prefill.log 2>&1 &
p1=$!
OMP_NUM_THREADS=2 timeout -k 5 -s INT 330 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k prefill -x > $W/attention_prefill_tests.log 2>&1 &
p2=$!
wait $p1; echo "parity rc=$? $(date)" >> $W/timeline.txt
wait $p2; echo "tests rc=$? $(date)" >> $W/timeline.txt
wait $warm
timeout -s INT 80 python perf/gpu_report.py --out $W --name attention_prefill --suites perf/test_attention_bench.py::test_prefill \
  > $W/bench.log 2>&1
echo "bench rc=$? $(date)" >> $W/timeline.txt
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt; tail -1 $W/parity_native_prefill.log; tail -1 $W/attention_prefill_tests.log
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:24].ljust(24), r.get('event_us'), r.get('max_abs_diff'), r.get('error', '')[:200])"
grep -A4 "^attention.prefill" $W/bench.log | head -5
