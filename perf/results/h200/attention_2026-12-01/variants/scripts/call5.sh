#!/bin/bash
# Device call 5: the Gluon MLA decode kernel with its rope columns in the ring (ROPE_RING), tests then timing.
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $W/environment.txt
python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $W/environment.txt
timeout 120 python -m pytest -x -q -p no:cacheprovider conformance/test_attention_native.py -k "gluon" \
  > $W/gpu_tests.log 2>&1; rc=$?; echo "gpu tests rc=$rc" | tee -a $W/steps.txt
tail -15 $W/gpu_tests.log
[ $rc = 0 ] || exit 1
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 150 python -m perf.sweeps.attention_variants --out $W \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call5.json --only mla_decode \
  > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
grep -v '^{' $W/variants.log | tail -30
