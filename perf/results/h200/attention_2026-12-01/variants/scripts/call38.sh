#!/bin/bash
# Device call 38: decode_fp8.cu after call37 (TABLE_AHEAD off again: slower there), with each split a run of
# whole 32-position chunks as even as whole chunks allow (33 splits of a 32k context: none empty, where call37's
# rounding left the 33rd empty), the merge's loads issued in batches of 16 a warp, and the copies' L2 prefetch
# hint (L2_PREFETCH 256: the 256-byte block around each 128-byte row) on by default. First, alone on the GPU:
# perf.sweeps.decode_fp8_builds, the new default (S3M2expoL256) beside no hint (S3M2expo), the 128-byte hint
# and call36's best switches (S3M2ewpx), 3 interleaved rounds. Then correctness, several suites at once: the
# extension's GPU tests of both builds (jit/ and aot/, a CUDA-graph replay with splits among them) and graph
# capture of the attention decode rows, parity of jit/decode_fp8 and aot/decode_fp8. Last, alone: the decode
# benchmark (carry .whl: FlashInfer as the peer), as call34 ran it.
set -u
export PYTHONUNBUFFERED=1 RAPID_LLM_JIT=1 TORCH_CUDA_ARCH_LIST=9.0
export RAPID_LLM_JIT_CACHE=$(mktemp -d /tmp/rapid_llm_jit.XXXXXX)
W=/tmp/ev; mkdir -p $W
root=$PWD
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
start=$(date +%s)
BUILDS=S3M2ewpx,S3M2expo,S3M2expoL128,S3M2expoL256
# in the background: the library site and the ahead-of-time build (rapid_llm._C, the aot/ rows)
( RAPID_LLM_EVIDENCE_PACK=0 MAX_JOBS=4 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
  echo "setup + aot build rc=$? $(( $(date +%s) - start )) s" >> $W/steps.txt ) &
AOT=$!
MAX_JOBS=3 timeout -k 10 300 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --build-only \
  > $W/builds.log 2>&1; echo "builds rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt; grep "^build " $W/builds.log
MAX_JOBS=4 timeout -k 10 200 python -c "from rapid_llm.kernels import jit; jit.load_library(); print(jit.available())" \
  > $W/jit_build.log 2>&1; echo "jit build rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
wait $AOT; tail -1 $W/steps.txt
timeout -k 10 -s INT 240 python -m perf.sweeps.decode_fp8_builds --out $W --builds $BUILDS --repeat 3 \
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
PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 timeout -s INT 200 \
  python perf/gpu_report.py --out $W --name attention_decode --suites perf/test_attention_bench.py::test_decode \
  > $W/bench.log 2>&1; echo "decode bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A16 "^attention.decode" $W/bench.log | head -24
tar czf $OUT/r.tar.gz -C $W --exclude='builds/*/*.o' --exclude='builds/*/*.so' --exclude='builds/*/.ninja*' \
  --exclude='builds/*/*.cuda.o' --exclude='setup/*.tar.xz' .
