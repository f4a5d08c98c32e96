#!/bin/bash
# Device call 53: the decode benchmark alone (perf/test_attention_bench.py::test_decode) with a new peer arm,
# FlashInfer planned in its CUDA-graph mode ("peer/flashinfer.decode(graph)": fixed page-list buffers, run()
# captured), so that decode per call in graph replay is stated beside FlashInfer's; its output is checked
# against the plain planned wrapper's first. The CUDA extension's fp8 rows are built as in call44 (aot/ by
# ci/gpu_library_evidence's setup, jit/ on first use) so the run replaces bench_attention_decode.json whole.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
root=$PWD
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
( RAPID_LLM_EVIDENCE_PACK=0 MAX_JOBS=8 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
  echo "setup + aot build rc=$? $(( $(date +%s) - start )) s" >> $W/steps.txt ) &
AOT=$!
MAX_JOBS=8 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
wait $AOT; tail -1 $W/steps.txt
PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 timeout -s INT 300 \
  python perf/gpu_report.py --out $W --name attention_decode --suites perf/test_attention_bench.py::test_decode \
  > $W/bench.log 2>&1; echo "decode bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A16 "^attention.decode" $W/bench.log | head -24 | cut -c1-400
grep -E "^(FAILED|ERROR)|Error" $W/bench.log | head -10 | cut -c1-300
tar czf $OUT/r.tar.gz -C $W --exclude='setup/*.tar.xz' --exclude='setup/.gpu-site*' .
