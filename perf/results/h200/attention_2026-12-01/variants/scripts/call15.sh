#!/bin/bash
# Device call 15 (evidence of the final tree): parity of native/mla_decode (the wide Gluon kernel now its sm90 path for
# Hq >= 64) and native/mla_decode_few_heads with the attention tests, FlashInfer's JIT warm-up beside them, then the
# attention benchmark (every row beside the peers).
set -u
W=/tmp/ev; mkdir -p $W
root=$PWD
export PARITY_LIMIT=240 BENCH_LIMIT=300
date > $W/timeline.txt
(
  while [ ! -s $W/setup/environment.txt ]; do sleep 2; done
  echo "setup done $(date)" >> $W/timeline.txt
  PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=10 \
    timeout 280 python -m pytest -q -p no:cacheprovider perf/test_attention_bench.py -k flashinfer --benchmark-disable \
    > $W/flashinfer_warmup.log 2>&1
  echo "flashinfer warm-up rc=$? $(date)" >> $W/timeline.txt
) &
warm=$!
ROWS="native/mla_decode native/mla_decode_few_heads" SWEEP_COMPILE=0 bash ci/gpu_attention_evidence $W parity
echo "parity done $(date)" >> $W/timeline.txt
wait $warm
bash ci/gpu_attention_evidence $W bench
echo "bench done $(date)" >> $W/timeline.txt
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt $W/steps.txt $W/parity.txt 2>/dev/null
tail -3 $W/attention_tests.log; tail -2 $W/flashinfer_warmup.log
grep -A9 "### attention.mla_decode" $W/bench_attention.md
