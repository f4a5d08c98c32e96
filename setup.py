"""Build script. A plain install builds a pure-Python package.

The optional CUDA extension `rapid_llm._C` (sources in csrc/) is built only
when RAPID_LLM_BUILD_EXT=1; it honours TORCH_CUDA_ARCH_LIST (e.g. "9.0") and
MAX_JOBS. No extension sources exist yet: the CUDA extension arrives with
its first op, and this hook is where it plugs in.
"""

import os

from setuptools import setup


def extension_modules():
    if os.environ.get("RAPID_LLM_BUILD_EXT") != "1":
        return {}
    sources = sorted(
        os.path.join(root, name)
        for root, _, names in os.walk("csrc")
        for name in names
        if name.endswith((".cu", ".cc", ".cpp"))
    )
    if not sources:
        raise SystemExit("RAPID_LLM_BUILD_EXT=1 but csrc/ has no sources to build")
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    extension = CUDAExtension(
        name="rapid_llm._C",
        sources=sources,
        include_dirs=[os.path.abspath("csrc/include")],
        extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
    )
    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildExtension}}


setup(**extension_modules())
