#!/bin/bash
# Device call 7: every MLA shape in CUDA-graph replay too (device time without the host's per-call work, which the
# event timing of call 6 included), the Gluon kernel's candidates beside the heuristic and FlashMLA; then the host
# time of one eager call per path (perf/profiles/mla_host_profile.py).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $W/environment.txt
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 150 python -m perf.sweeps.attention_variants --out $W --graph-all \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call7.json --only mla_decode \
  --shapes "64,4096,16;1,32768,16;8,32768,16;64,4096,32" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
timeout 60 python -m perf.profiles.mla_host_profile > $W/host_profile.txt 2>&1; echo "host profile rc=$?" | tee -a $W/steps.txt
grep -o "{'batch.*" $W/variants.log | sed "s/'BLOCK_H.*'GLUON': True, //" | tail -30
grep -E "per eager call|cumtime|mla_decode|launch|run\b|__call__|tensor_desc|descriptor|binder|specializ" $W/host_profile.txt | head -40
