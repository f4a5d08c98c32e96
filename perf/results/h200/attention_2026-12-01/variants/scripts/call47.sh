#!/bin/bash
# Device call 47: after the review's refactor of decode_fp8.cu's two launch configurations into one helper
# (launch_config; no behaviour change intended), the extension's GPU tests and graph capture of the decode rows
# (jit/ build) once more.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
MAX_JOBS=8 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$?" | tee -a $W/steps.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_extension.py \
  -k "Fp8Decode" > $W/tests.log 2>&1; echo "extension tests rc=$?" | tee -a $W/steps.txt; tail -1 $W/tests.log
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "graph_safe and decode" > $W/graph_tests.log 2>&1; echo "graph tests rc=$?" | tee -a $W/steps.txt; tail -1 $W/graph_tests.log
tar czf $OUT/r.tar.gz -C $W .
