#!/usr/bin/env bash
# Compile CUDA extension sources for sm90 on a machine without a GPU: registers, spills and shared memory per
# kernel (ptxas -v), and SASS with --sass (cuobjdump from Triton's wheel). Needs nvcc and torch's headers; the
# CPU torch wheel lacks the CUDA math libraries' headers that ATen/cuda/CUDAContext.h includes, so this script
# stands in typedef-only headers for them (nothing is linked).
#   bash perf/profiles/sm90_compile_cu.sh csrc/gemm/w4a16_mma.cu [--sass]
set -eu
source=$1
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
echo 'typedef struct cusparseContext* cusparseHandle_t; typedef int cusparseStatus_t;' > "$stubs/cusparse.h"
echo 'typedef struct cublasContext* cublasHandle_t; typedef int cublasStatus_t;' > "$stubs/cublas_v2.h"
echo 'typedef struct cublasLtContext* cublasLtHandle_t;' > "$stubs/cublasLt.h"
echo 'typedef struct cusolverDnContext* cusolverDnHandle_t;' > "$stubs/cusolverDn.h"
echo 'typedef int cusolverStatus_t;' > "$stubs/cusolver_common.h"
mkdir -p "$stubs/c10/cuda/impl" && echo '' > "$stubs/c10/cuda/impl/cuda_cmake_macros.h"
torch_include=$(python -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
cubin="$stubs/out.cubin"
nvcc -std=c++17 -O3 -arch=sm_90 -cubin -o "$cubin" -I csrc/include -I "$torch_include" \
  -I "$torch_include/torch/csrc/api/include" -I "$stubs" -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ \
  -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -diag-suppress 3306 \
  -Xptxas -v "$source" 2>&1 | grep -E "error|Compiling entry|registers|spill" || true
if [ "${2:-}" = "--sass" ]; then
  cuobjdump=$(python -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))")
  "$cuobjdump" -sass "$cubin"
fi
