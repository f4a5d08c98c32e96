#!/bin/bash
# Device call 30: call29's identical configs drifted 898 -> 924 -> 972 us across one run at 4 x 4096, so this
# call interleaves SDPA, the default and two-consumer 128-key tiles with and without Q_REGS, 4 rounds, with the
# SM clock, power and temperature sampled every 100 ms beside them (clocks.csv).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total,power.limit --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 \
  > $W/clocks.csv 2>&1 &
smi=$!
timeout -k 10 -s INT 200 python -m perf.sweeps.attention_variants --out $W --only prefill --repeat 4 \
  --variants perf/results/h200/attention_2026-12-01/variants/scripts/variants_call30.json > $W/variants.log 2>&1
echo "variants rc=$? $(date)" | tee -a $W/steps.txt
kill $smi
tar czf $OUT/r.tar.gz -C $W .
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json, collections
times = collections.defaultdict(list)
for l in sys.stdin:
    r = json.loads(l); times[(r['batch'], r['length'], r['variant'])].append(r.get('event_us'))
for key, values in times.items(): print(*key, values)"
awk -F, 'NR > 1 {print $2, $3, $4, $5}' $W/clocks.csv | sort | uniq -c | sort -rn | head -8
