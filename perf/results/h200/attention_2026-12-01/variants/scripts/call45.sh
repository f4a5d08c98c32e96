#!/bin/bash
# Device call 45: perf.sweeps.decode_cold_graph (the kernel of call44's commit): the bf16 and fp8-KV decode
# rows in CUDA-graph replay with the captured calls rotating over 4 input sets (the L2 cold for every call)
# beside the warm replay of one set, 2 rounds. jit/ build only (the aot/ one is not built in this call).
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
MAX_JOBS=8 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
timeout -k 10 -s INT 300 python -m perf.sweeps.decode_cold_graph --out $W --sets 4 --repeat 2 > $W/cold_graph.log 2>&1
echo "cold graph rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -v "^{" $W/cold_graph.log | tail -30
tar czf $OUT/r.tar.gz -C $W .
