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

Sources: every .cu/.cc/.cpp under csrc/ but csrc/host/ (the JIT build in
rapid_llm/kernels/jit.py compiles the same set); headers in csrc/include.

The host replay module `rapid_llm._host` (csrc/host/, C++ only, no nvcc) is
built with it, or alone with RAPID_LLM_BUILD_EXT=host (a build of seconds):
it replays the native rows' recorded launches without their Python
(rapid_llm/kernels/ops/host_replay.py).
The ops register in torch.ops.rapid_llm (RAPID_LLM_OP_NAMESPACE=rapid_llm):
exactly rapid_llm.kernels.aot.extension_ops(), schemas outputs first (see
csrc/README.md). A stale build whose schemas are not outputs first is
refused by the aot/ rows' probe (explain() says "rebuild"): re-run the
command above.
"""

import os

from setuptools import setup

CSRC = "csrc"
HOST = os.path.join(CSRC, "host")
SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")


def extension_sources():
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(CSRC)
        if not (root + os.sep).startswith(HOST + os.sep)
        for name in names
        if name.endswith(SOURCE_SUFFIXES)
    )


def host_module():
    from torch.utils.cpp_extension import CUDAExtension

    sources = sorted(os.path.join(HOST, name) for name in os.listdir(HOST) if name.endswith(SOURCE_SUFFIXES))
    # C++ only: CUDAExtension for the CUDA include and library paths (c10_cuda), not for nvcc
    return CUDAExtension(name="rapid_llm._host", sources=sources, extra_compile_args={"cxx": ["-O3"]})


def extension_modules():
    build = os.environ.get("RAPID_LLM_BUILD_EXT")
    if build not in ("1", "host"):
        return {}
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    if build == "host":
        return {"ext_modules": [host_module()], "cmdclass": {"build_ext": BuildExtension}}
    sources = extension_sources()
    if not sources:
        raise SystemExit("RAPID_LLM_BUILD_EXT=1 but csrc/ has no sources to build")

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
    return {"ext_modules": [extension, host_module()], "cmdclass": {"build_ext": BuildExtension}}


setup(**extension_modules())
