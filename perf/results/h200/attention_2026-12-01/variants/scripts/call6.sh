#!/bin/bash
# Device call 6: the Gluon MLA decode variants three times each, interleaved (run-to-run spread), then ncu of the
# Gluon kernel at B=64 Hq=16 with 2 and 4 splits (where 128 and 256 programs ran 1.7-1.9x slower than 64).
set -u
export PYTHONUNBUFFERED=1
root=$PWD; W=$OUT
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --target $root/.gpu-site .whl_mla/*.whl >> $W/install.log 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv > $W/environment.txt
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 150 python -m perf.sweeps.attention_variants --out $W --repeat 3 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call6.json --only mla_decode \
  --shapes "64,4096,16;1,32768,16;8,32768,16;64,4096,32" > $W/variants.log 2>&1; echo "variants rc=$?" | tee -a $W/steps.txt
for splits in 1 2 4; do
  RAPID_LLM_PROFILE_CONFIG="{\"splits\": $splits, \"BLOCK_H\": 16, \"BLOCK_N\": 64, \"num_warps\": 4, \"num_stages\": 3, \"GLUON\": true}" \
    timeout 60 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats -k regex:gluon --launch-skip 1 --launch-count 1 \
    python -m perf.profiles.attention_kernels mla_16 > $W/ncu_gluon_splits$splits.txt 2>&1
  echo "ncu splits=$splits rc=$?" | tee -a $W/steps.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >> $W/environment.txt
grep -v '^{' $W/variants.log | grep -o "{'batch.*" | sed 's/BLOCK_H.*GLUON.: True, //' | tail -45
grep -E "Duration|DRAM Throughput|Stall|stalled|Warp Cycles Per Issued" $W/ncu_gluon_splits*.txt | head -30
