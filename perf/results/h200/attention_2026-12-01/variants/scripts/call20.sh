#!/bin/bash
# Device call 20: prefill_gluon.py (64-key tiles, 4 slots, no turns) is now native/prefill's kernel for head dim 128
# on sm90. Parity of native/prefill with the attention tests (the Gluon tests in 4 configurations among them),
# FlashInfer's prefill JIT warm-up beside them, then the prefill benchmark (every row beside SDPA, FA3, FlashInfer).
set -u
W=/tmp/ev; mkdir -p $W
root=$PWD
export PARITY_LIMIT=420
date > $W/timeline.txt
(
  while [ ! -s $W/setup/environment.txt ]; do sleep 2; done
  echo "setup done $(date)" >> $W/timeline.txt
  PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=10 \
    timeout 280 python -m pytest -q -p no:cacheprovider perf/test_attention_bench.py::test_prefill -k flashinfer \
    --benchmark-disable > $W/flashinfer_warmup.log 2>&1
  echo "flashinfer warm-up rc=$? $(date)" >> $W/timeline.txt
) &
warm=$!
ROWS="native/prefill" SWEEP_COMPILE=0 bash ci/gpu_attention_evidence $W parity
echo "parity done $(date)" >> $W/timeline.txt
wait $warm
PYTHONUNBUFFERED=1 PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 \
  timeout -s INT 200 python perf/gpu_report.py --out $W --name attention_prefill --suites perf/test_attention_bench.py::test_prefill \
  > $W/bench.log 2>&1
echo "bench rc=$? $(date)" >> $W/timeline.txt
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt $W/parity.txt 2>/dev/null
grep -E "passed|failed" $W/attention_tests.log | tail -2; tail -1 $W/flashinfer_warmup.log
grep -A12 "^attention.prefill" $W/bench.log | head -14
