"""FlashInfer: availability probe. Tested with flashinfer-python 0.6.0 (+ apache-tvm-ffi 0.1.15) on the H200.

FlashInfer JIT-compiles each kernel module on its first call (jit_log.py); its 0.6.0 JIT reads
`tvm_ffi.libinfo` without importing that submodule, so the probe imports it first.
"""

from ...dispatcher.spec import LibraryInfo, LibraryRequirement
from ..probe import probe

#: pip distributions that provide it, and the top-level modules RAPID_LLM_HIDE_LIBS blocks
LIBRARY = LibraryInfo("flashinfer", ("flashinfer-python", "flashinfer"), ("flashinfer",))
REQUIREMENT = LibraryRequirement("flashinfer", min_version="0.6", below_version="0.7")
MODULE = "flashinfer"


def _import_tvm_ffi_libinfo():
    import importlib

    importlib.import_module("tvm_ffi.libinfo")


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE, before_import=_import_tvm_ffi_libinfo)
