#!/bin/bash
# Device call 35: the fixed cost of one fp8-KV decode call at B=1 beside its per-position cost: the default build
# of decode_fp8.cu (S3M2) at B=1 L=256 / 1024 / 4096 / 16384 / 32768 with 1, 16 and 33 splits, beside the Triton
# bf16 and fp8 rows, by CUDA events and in graph replay (perf.sweeps.decode_fp8_builds --lengths).
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
timeout -k 10 -s INT 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds S3M2 --repeat 2 \
  --lengths 256,1024,4096,16384,32768 > $W/builds_sweep.log 2>&1; echo "lengths sweep rc=$?" | tee -a $W/steps.txt
grep -v "^{" $W/builds_sweep.log | head -60
tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' .
