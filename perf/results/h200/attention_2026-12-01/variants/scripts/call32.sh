#!/bin/bash
# Device call 32 (prepared in the session that wrote csrc/attention/decode_fp8.cu; not yet run): the first GPU
# run of the CUDA extension's fp8-KV decode. A JIT build of csrc/ into a private cache (RAPID_LLM_JIT=1, the
# jit/ rows), its GPU tests (TestFp8DecodeExtensionOnGpu), parity of jit/decode_fp8 over every decode case,
# then the decode_fp8 variants (the Triton fp8 row, the bf16 row, jit/decode_fp8), then the first-call times.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
timeout -k 10 240 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
OMP_NUM_THREADS=4 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_extension.py \
  -k "Fp8Decode and jit" -x > $W/tests.log 2>&1; echo "tests rc=$?" | tee -a $W/steps.txt
tail -3 $W/tests.log
OMP_NUM_THREADS=4 RAPID_LLM_PARITY_REPORT=$W/parity_jit_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "jit/decode_fp8" -rfs > $W/parity.log 2>&1
echo "parity rc=$?" | tee -a $W/steps.txt; tail -2 $W/parity.log
timeout -k 10 -s INT 150 python -m perf.sweeps.attention_variants --out $W --only decode_fp8 > $W/variants.log 2>&1
echo "variants rc=$?" | tee -a $W/steps.txt
grep -o "{\"batch.*" $W/variants.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['batch'], r['length'], r['variant'][:24].ljust(24), r.get('event_us'), r.get('graph_us', ''), r.get('TBps'), r.get('max_abs_diff'), r.get('error', '')[:200])"
# the first call of every native attention kernel in a fresh process (Gluon's compile included since
# prefill_gluon.py and mla_decode_gluon*.py became the sm90 paths) apart from its steady state
timeout -k 10 -s INT 200 python -m perf.profiles.attention_compile_times --out $W > $W/compile_times.log 2>&1
echo "compile times rc=$?" | tee -a $W/steps.txt; tail -12 $W/compile_times.log
tar czf $OUT/r.tar.gz -C $W .
