#!/bin/bash
set -u
W=/tmp/ev; mkdir -p $W
root=$PWD
export PARITY_LIMIT=280 BENCH_LIMIT=300 SWEEP_LIMIT=120
date > $W/timeline.txt
# FlashInfer's JIT warm-up and the MLA sweep's compile, once setup has unpacked the libraries
(
  while [ ! -s $W/setup/environment.txt ]; do sleep 2; done
  echo "setup done $(date)" >> $W/timeline.txt
  for shard in 0/3 1/3 2/3; do
    PYTHONPATH=$root OMP_NUM_THREADS=1 timeout 250 python -m perf.sweeps.attention_tiles --out $W --compile-only --only mla_decode --shard $shard > $W/sweep_compile_mla_${shard/\//_}.log 2>&1 &
  done
  PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=10 \
    timeout 280 python -m pytest -q -p no:cacheprovider perf/test_attention_bench.py -k flashinfer --benchmark-disable > $W/flashinfer_warmup.log 2>&1
  echo "flashinfer warm-up rc=$? $(date)" >> $W/timeline.txt
  wait
) &
warm=$!
ROWS="native/mla_decode" SWEEP_COMPILE=0 bash ci/gpu_attention_evidence $W parity
echo "parity done $(date)" >> $W/timeline.txt
wait $warm
PYTHONPATH=$root timeout -s INT 120 python -m perf.sweeps.attention_tiles --out $W --only mla_decode > $W/sweep_mla.log 2>&1
echo "sweep done $(date)" >> $W/timeline.txt
bash ci/gpu_attention_evidence $W bench
echo "bench done $(date)" >> $W/timeline.txt
timeout 60 python scratch/host_profile.py > $W/host_profile.txt 2>&1
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt $W/steps.txt $W/parity.txt
tail -3 $W/flashinfer_warmup.log
tail -6 $W/sweep_mla.log
head -3 $W/host_profile.txt
