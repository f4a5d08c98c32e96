#!/bin/bash
# Device call 46: the MLA decode benchmark alone (perf/test_attention_bench.py::test_mla_decode) on commit b4dcab1,
# FlashMLA (sgl-flash-mla 1.0.0 from the carried site) as the peer in the same run; the FlashInfer MLA rows are
# deselected (their JIT build would take most of the call). A fresh reading of the Hq=128 B=64 ratio.
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
PYTHONPATH=$root:$root/.gpu-site timeout -s INT 360 python perf/gpu_report.py --out $W --name attention_mla_decode \
  --suites perf/test_attention_bench.py::test_mla_decode -- -k "not flashinfer" > $W/bench.log 2>&1
echo "mla bench rc=$? $(( $(date +%s) - start )) s" | tee -a $W/steps.txt
grep -A12 "^attention.mla_decode$" $W/bench.log | awk -F'  +' '{print $1" | "$2" | "$3" | "$4" | "$5}' | cut -c1-300
tar czf $OUT/r.tar.gz -C $W .
