#!/bin/bash
# Device call 2 of the variants session: GPU tests of the new kernels, then the variants sweep.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $W/environment.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $W/environment.txt
git -C $root log -1 --format=%H >> $W/environment.txt 2>/dev/null
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 330 python -m perf.sweeps.attention_variants --out $W \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call2.json --only decode_fp8 prefill \
  > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
grep -v '^{' $W/variants.log | tail -60
