#!/bin/bash
# Device call 52 (on 64dc734 with variants/call52/merge_pdl.diff applied, since removed): the split merge
# launched as a programmatic dependent of the split kernel (decode.MERGE_PDL,
# on in that tree): its GPU test (eager and graph replay against the plain launch), the split-K and
# graph-capture tests of the attention rows, then perf.sweeps.merge_pdl (MERGE_PDL off / on interleaved, 3
# rounds: MLA decode Hq=16 and 128 at B=1 L=32768, Hq=16 B=8 L=32768; bf16 decode B=1 L=32768, B=8 L=8192).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
timeout -s KILL 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "dependent_merge or graph_safe or split_k_merge" > $W/attention_tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
tail -1 $W/attention_tests.log; grep -hE "^(FAILED|ERROR)" $W/attention_tests.log | head -10 | cut -c1-300
timeout -k 10 -s INT 240 python -m perf.sweeps.merge_pdl --out $W --repeat 3 > $W/merge_pdl.log 2>&1
echo "sweep rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
tail -32 $W/merge_pdl.log
tar czf $OUT/r.tar.gz -C $W .
