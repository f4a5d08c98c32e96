#!/bin/bash
# Device call 9: after mla_num_splits rounds to whole chunks (no empty split): the heuristic in graph replay beside
# FlashMLA and the explicit 128-split Gluon config, then native/mla_decode parity in bf16/fp16 (large cases included).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $W/environment.txt
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 100 python -m perf.sweeps.attention_variants --out $W --graph-all \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call9.json --only mla_decode \
  --shapes "64,4096,16;1,32768,16;8,32768,16;64,4096,32" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
RAPID_LLM_PARITY_REPORT=$W/parity_native_mla_decode_bf16_fp16.json timeout -s INT 170 python -m pytest -q -p no:cacheprovider \
  conformance/test_parity.py -k "native/mla_decode- and not fp32" -rfs > $W/parity.log 2>&1; echo "parity rc=$?" | tee -a $W/steps.txt
tail -2 $W/parity.log
grep -o "{'batch.*" $W/variants.log | sed "s/'BLOCK_H.*'GLUON': True, //" | tail -12
