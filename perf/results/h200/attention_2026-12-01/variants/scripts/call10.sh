#!/bin/bash
# Device call 10 (evidence of the final tree): parity of native/mla_decode and native/mla_decode_few_heads (every
# case, fp32/fp16/bf16, large ones included), beside the attention tests of the graph-safe rows, split-K and the
# Gluon kernel.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
for row in native/mla_decode native/mla_decode_few_heads; do
  name=${row//\//_}
  OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_$name.json timeout -s INT 200 python -m pytest -q -p no:cacheprovider \
    conformance/test_parity.py -k "$row-" -rfs > $W/parity_$name.log 2>&1 &
done
OMP_NUM_THREADS=2 timeout -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "graph_safe or gluon or split_k or mla" > $W/attention_tests.log 2>&1 &
wait
for f in $W/parity_*.log $W/attention_tests.log; do echo "$(basename $f): $(tail -1 $f)"; done | tee $W/parity.txt
