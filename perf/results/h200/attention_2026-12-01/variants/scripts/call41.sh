#!/bin/bash
# Device call 41: FUSED_MERGE (the last block of a head's splits to count itself in split_counters merges the
# splits, in place of the merge kernel) on by default. First, alone on the GPU: perf.sweeps.decode_fp8_builds,
# call40's kernel (S3M2ewpxlrf: FUSED_MERGE off) beside it on (S3M2ewpxlrfu), 2 interleaved rounds; then the
# correctness suites (the extension's tests include the fused merge's and the per-stream counters' tests) and
# the decode benchmark as call40 ran them. The results archive is rewritten after each phase.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
root=$PWD
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
( RAPID_LLM_EVIDENCE_PACK=0 MAX_JOBS=6 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
  echo "setup + aot build rc=$? $(( $(date +%s) - start )) s" >> $W/steps.txt ) &
AOT=$!
MAX_JOBS=6 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
BUILDS=S3M2ewpxlrf,S3M2ewpxlrfu
MAX_JOBS=4 timeout -k 10 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --build-only \
  > $W/builds.log 2>&1; echo "builds rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt; grep "^build " $W/builds.log
wait $AOT; tail -1 $W/steps.txt
timeout -k 10 -s INT 200 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --repeat 2 \
  > $W/builds_sweep.log 2>&1; echo "builds sweep rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
python - <<'PY'
import json, collections
d = json.load(open("/tmp/ev/decode_fp8_builds.json"))
t = collections.defaultdict(list)
for r in d["rows"]:
    t[(r["batch"], r["variant"], r.get("splits"))].append(r.get("graph_us", r.get("error", "")))
    if r.get("max_abs_diff", 0) > 1e-2 or not r.get("finite", True): print("MISMATCH", r)
for k, v in sorted(t.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2] or 0)): print(k, v)
PY
pack() { tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' \
  --exclude='builds/*/*.cuda.o' --exclude='setup/*.tar.xz' --exclude='setup/.gpu-site*' . ; }
pack
OMP_NUM_THREADS=2 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_extension.py \
  -k "Fp8Decode" > $W/tests.log 2>&1 &
T1=$!
OMP_NUM_THREADS=2 timeout -k 10 -s INT 200 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "graph_safe and decode" > $W/graph_tests.log 2>&1 &
T2=$!
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_jit_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "jit/decode_fp8" -rfs > $W/parity.log 2>&1 &
P1=$!
OMP_NUM_THREADS=2 RAPID_LLM_PARITY_REPORT=$W/parity_aot_decode_fp8.json timeout -k 10 -s INT 200 python -m pytest -q \
  -p no:cacheprovider conformance/test_parity.py -k "aot/decode_fp8" -rfs > $W/parity_aot.log 2>&1 &
P2=$!
wait $T1; echo "extension tests rc=$?" | tee -a $W/steps.txt; tail -1 $W/tests.log; grep -E "^(FAILED|E  )" $W/tests.log | head -20
wait $T2; echo "graph tests rc=$?" | tee -a $W/steps.txt; tail -1 $W/graph_tests.log; grep -E "^(FAILED|E  )" $W/graph_tests.log | head
wait $P1; echo "parity jit/decode_fp8 rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity.log; grep -E "^FAILED" $W/parity.log | head
wait $P2; echo "parity aot/decode_fp8 rc=$?" | tee -a $W/steps.txt; tail -1 $W/parity_aot.log; grep -E "^FAILED" $W/parity_aot.log | head
echo "correctness done $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
pack
PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 timeout -s INT 200 \
  python perf/gpu_report.py --out $W --name attention_decode --suites perf/test_attention_bench.py::test_decode \
  > $W/bench.log 2>&1; echo "decode bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A16 "^attention.decode" $W/bench.log | head -24
tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' \
  --exclude='builds/*/*.cuda.o' --exclude='setup/*.tar.xz' .
