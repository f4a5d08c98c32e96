#!/bin/bash
# Device call 51: the GPU tests that call50's 220-second limit cut off (that call ran them beside two parity
# processes, and "-k 'gluon or mla'" also selected the 224 Gluon prefill cases): every MLA test of
# test_attention_native.py (the ping-pong kernel's 30 cases, the wide kernel's 80, the few-heads kernel's 60,
# the TMA and unmasked-body checks, the Gluon-config fallback) and graph capture of every graph-safe attention
# row, then the contract tests; explain() of mla_decode at the benchmark's head counts on this GPU with and
# without FlashMLA; then the MLA decode benchmark alone (a second reading beside call50's), FlashMLA in the
# same run, FlashInfer's MLA rows deselected (their JIT build).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ev; mkdir -p $W
root=$PWD
pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $W/environment.txt
rm -rf .gpu-site && mkdir -p .gpu-site
python -c "import tarfile; tarfile.open('.whl/gpu_site_all.tar.xz').extractall('.gpu-site')"
start=$(date +%s)
timeout -s KILL 330 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_native.py \
  -k "mla or graph_safe" > $W/attention_tests.log 2>&1
echo "mla + graph tests rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
timeout -s KILL 60 python -m pytest -q -p no:cacheprovider -rfs conformance/test_attention_contracts.py > $W/contract_tests.log 2>&1
echo "contract tests rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
for f in $W/attention_tests.log $W/contract_tests.log; do echo "$(basename $f): $(tail -1 $f)"; done
grep -hE "^(FAILED|ERROR)" $W/attention_tests.log $W/contract_tests.log | head -20 | cut -c1-300
{ for heads in 128 16; do
    echo "== Hq=$heads, FlashMLA installed"
    PYTHONPATH=$root:$root/.gpu-site rapid-llm explain attention.mla_decode --dtype bf16 \
      --shape num_tokens=64,num_q_heads=$heads,page_size=64
    echo "== Hq=$heads, FlashMLA absent (this machine's libraries without the carried site)"
    rapid-llm explain attention.mla_decode --dtype bf16 --shape num_tokens=64,num_q_heads=$heads,page_size=64
  done; } > $W/explain.txt 2>&1
PYTHONPATH=$root:$root/.gpu-site timeout -k 10 -s INT 200 python perf/gpu_report.py --out $W --name attention_mla_decode \
  --suites perf/test_attention_bench.py::test_mla_decode -- -k "not flashinfer" > $W/bench.log 2>&1
echo "mla bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A12 "^attention.mla_decode$" $W/bench.log | awk -F'  +' '{print $1" | "$2" | "$3" | "$4" | "$5}' | cut -c1-300
grep -B1 -A3 "selected" $W/explain.txt | head -30
tar czf $OUT/r.tar.gz -C $W .
