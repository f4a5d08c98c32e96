#!/bin/bash
# Device call 16: the decode benchmark alone (perf/test_attention_bench.py::test_decode), every decode shape now also
# in graph replay: call15's event timing of native/decode at B=8 L=8192 spread 89-132 us (p20-p80) on its host,
# host-bound. Same tree as call15 otherwise; writes bench_attention_decode.{json,md}.
set -u
W=/tmp/ev; mkdir -p $W
root=$PWD
date > $W/timeline.txt
RAPID_LLM_EVIDENCE_BUILD_EXT=0 RAPID_LLM_EVIDENCE_PACK=0 bash ci/gpu_library_evidence $W/setup > $W/setup.log 2>&1
echo "setup rc=$? $(date)" >> $W/timeline.txt
PYTHONUNBUFFERED=1 PYTHONPATH=$root:$root/.gpu-site FLASHINFER_WORKSPACE_BASE=$root/.jit MAX_JOBS=16 \
  timeout -s INT 240 python perf/gpu_report.py --out $W --name attention_decode --suites perf/test_attention_bench.py::test_decode \
  > $W/bench.log 2>&1
echo "bench rc=$? $(date)" >> $W/timeline.txt
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt; grep -A12 "^attention.decode" $W/bench.log | head -14
