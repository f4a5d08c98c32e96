#!/bin/bash
set -u
W=/tmp/work; mkdir -p $W
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
date > $W/started.txt
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt 2>&1
for sec in mla_decode:0/6 mla_decode:1/6 mla_decode:2/6 mla_decode:3/6 mla_decode:4/6 mla_decode:5/6 prefill:0/4 prefill:1/4 prefill:2/4 prefill:3/4; do
  OMP_NUM_THREADS=1 timeout 250 python -m perf.sweeps.attention_tiles --out $W --compile-only --only ${sec%:*} --shard ${sec#*:} > $W/compile_${sec//[:\/]/_}.log 2>&1 &
done
OMP_NUM_THREADS=2 timeout -s INT 250 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py > $W/attention_native.log 2>&1 &
wait
echo "compile done $(date)" >> $W/started.txt
timeout -s INT 200 python -m perf.sweeps.attention_tiles --out $W --only mla_decode prefill > $W/sweep.log 2>&1
echo "sweep done $(date)" >> $W/started.txt
tar czf $OUT/r.tar.gz -C $W .
tail -n 3 $W/attention_native.log
tail -12 $W/sweep.log
