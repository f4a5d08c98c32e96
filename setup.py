"""Build script. A plain install builds a pure-Python package (no compiler, no CUDA).

The optional CUDA extension `rapid_llm._C` is built from csrc/ only when
RAPID_LLM_BUILD_EXT=1, against the torch already installed (hence
--no-build-isolation):

    RAPID_LLM_BUILD_EXT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 \\
        python -m pip install --no-deps --no-build-isolation -e .

TORCH_CUDA_ARCH_LIST  compute capabilities to compile for ("9.0" = H100/H200,
                      "8.0;9.0" = A100 and H100, a "+PTX" suffix adds PTX for
                      newer GPUs). Unset: torch's default, the archs of the GPUs
                      visible at build time, or every arch this CUDA supports
                      when none is visible (a much longer build).
MAX_JOBS              parallel compile jobs (ninja). Each nvcc job can take
                      several GB of RAM: lower it if the build is killed (OOM).

Sources: every .cu/.cc/.cpp under csrc/ (the JIT build in
rapid_llm/kernels/jit.py compiles the same set); headers in csrc/include.
The ops register in torch.ops.rapid_llm (RAPID_LLM_OP_NAMESPACE=rapid_llm):
exactly rapid_llm.kernels.aot.extension_ops(), schemas outputs first (see
csrc/README.md). A stale build whose schemas are not outputs first is
refused by the aot/ rows' probe (explain() says "rebuild"): re-run the
command above.
"""

import os

from setuptools import setup

CSRC = "csrc"
SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")


def extension_sources():
    return sorted(
        os.path.join(root, name) for root, _, names in os.walk(CSRC) for name in names if name.endswith(SOURCE_SUFFIXES)
    )


def extension_modules():
    if os.environ.get("RAPID_LLM_BUILD_EXT") != "1":
        return {}
    sources = extension_sources()
    if not sources:
        raise SystemExit("RAPID_LLM_BUILD_EXT=1 but csrc/ has no sources to build")
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        print(
            "rapid_llm: TORCH_CUDA_ARCH_LIST is not set: torch picks the archs (visible GPUs, else all); "
            "set e.g. TORCH_CUDA_ARCH_LIST=9.0 for an H100/H200-only build"
        )
    define = "-DRAPID_LLM_OP_NAMESPACE=rapid_llm"
    extension = CUDAExtension(
        name="rapid_llm._C",
        sources=sources,
        include_dirs=[os.path.abspath(os.path.join(CSRC, "include"))],
        extra_compile_args={"cxx": ["-O3", define], "nvcc": ["-O3", define]},
    )
    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildExtension}}


setup(**extension_modules())
