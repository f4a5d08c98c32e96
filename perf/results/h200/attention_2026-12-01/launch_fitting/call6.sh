#!/bin/bash
set -u
W=/tmp/w6; mkdir -p $W
export PARITY_LIMIT=270
date > $W/timeline.txt
(PYTHONPATH=$PWD OMP_NUM_THREADS=2 timeout -s INT 250 python -m pytest -q -p no:cacheprovider -rfs conformance/test_launch_fitting.py > $W/launch_fitting_tests.log 2>&1; echo "launch_fitting tests rc=$? $(date)" >> $W/timeline.txt) &
ROWS="native/prefill native/mla_prefill native/prefill_paged native/decode native/decode_fp8 native/mla_decode" SWEEP_COMPILE=0 bash ci/gpu_attention_evidence $W parity > $W/evidence_stdout.log 2>&1
echo "parity done $(date)" >> $W/timeline.txt
wait
tar czf $OUT/r.tar.gz -C $W .
cat $W/timeline.txt $W/steps.txt $W/parity.txt; tail -3 $W/launch_fitting_tests.log
