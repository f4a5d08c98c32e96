"""Just-in-time build of the CUDA extension from csrc/ (opt-in: RAPID_LLM_JIT=1).

    available() -> (ok, reason)   the `available=` probe of every `jit/*` row; never compiles
    op(name)                      torch.ops.rapid_llm_jit.<name>, building the library on first use

The JIT build compiles the SAME sources as the ahead-of-time `rapid_llm._C`
(every .cu/.cc/.cpp under csrc/, include dir csrc/include) with
torch.utils.cpp_extension.load(..., is_python_module=False), which loads the
shared library with torch.ops.load_library so its TORCH_LIBRARY_FRAGMENT
registrations land in torch.ops. It is compiled with
-DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit, so its ops are
torch.ops.rapid_llm_jit.* and it can live in one process next to
rapid_llm._C (torch.ops.rapid_llm.*): two libraries defining the same
schema in one namespace would make the second load fail.

Cache: <base>/<key>, base = $RAPID_LLM_JIT_CACHE or ~/.cache/rapid_llm/jit,
key = torch version, CUDA version, target archs, Python version (a build is
only valid for that combination). Ninja rebuilds only what changed, and
torch's file lock in the directory makes concurrent processes wait for one
build, so a second process reuses the first one's library. Archs:
TORCH_CUDA_ARCH_LIST when set (e.g. "9.0"), else the visible GPUs' (torch's
default). A compile is logged at WARNING (it stalls the first call for
about a minute), a cache hit at INFO, both on the "rapid_llm.kernels.jit"
logger with the elapsed time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path

from .aot import registered_ops

ENABLE_VARIABLE = "RAPID_LLM_JIT"
CACHE_VARIABLE = "RAPID_LLM_JIT_CACHE"
NAMESPACE = "rapid_llm_jit"
LIBRARY_NAME = "rapid_llm_jit_ext"
#: Every op that a `jit/*` row's wrapper calls: torch.ops.rapid_llm_jit.<op>.
OPS = ("scale", "update_kv_buffer")
SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")

logger = logging.getLogger(__name__)
_BUILD_LOCK = threading.Lock()


def source_root() -> Path:
    """csrc/ of the source checkout this package runs from (an editable install or the repo itself)."""
    return Path(__file__).resolve().parents[2] / "csrc"


def sources(root: Path | None = None) -> list[str]:
    """Every .cu/.cc/.cpp under csrc/, sorted: the same rule as setup.py's AOT build."""
    root = source_root() if root is None else root
    return sorted(str(path) for path in root.rglob("*") if path.suffix in SOURCE_SUFFIXES)


def available() -> tuple[bool, str]:
    """(True, "") when a JIT build can run here; else (False, why). Compiles nothing.

    Checked in order: the opt-in variable, a CUDA device visible to torch,
    a CUDA build of torch with a toolkit (nvcc and headers) under CUDA_HOME,
    ninja, and the csrc/ sources.
    """
    if os.environ.get(ENABLE_VARIABLE) != "1":
        return False, f"{ENABLE_VARIABLE}=1 is not set (JIT builds of the CUDA extension are opt-in)"
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as error:
        return False, f"torch.utils.cpp_extension is not importable: {error}"
    if not torch.cuda.is_available():
        return False, (f"{ENABLE_VARIABLE}=1 but torch sees no CUDA device "
                       f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    home = cpp_extension.CUDA_HOME
    if home is None:
        return False, "no CUDA toolkit found: nvcc is not on PATH and CUDA_HOME is not set"
    nvcc = Path(home) / "bin" / "nvcc"
    if not nvcc.exists():
        return False, f"nvcc not found at {nvcc} (CUDA_HOME={home}); set CUDA_HOME to a CUDA toolkit"
    header = Path(home) / "include" / "cuda_runtime.h"
    if not header.exists():
        return False, f"CUDA headers not found ({header} is missing); install the CUDA toolkit's headers"
    if not cpp_extension.is_ninja_available():
        return False, "ninja not found (torch.utils.cpp_extension.load needs it: pip install ninja)"
    if not sources():
        return False, f"no CUDA sources at {source_root()} (JIT builds need a source checkout of rapid_llm)"
    return True, ""


def cache_directory() -> Path:
    base = os.environ.get(CACHE_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "rapid_llm", "jit")
    return Path(base) / _build_key()


def _build_key() -> str:
    import torch

    archs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if not archs:
        archs = "+".join(sorted({"sm%d%d" % torch.cuda.get_device_capability(index)
                                 for index in range(torch.cuda.device_count())}))
    key = (f"torch{torch.__version__}-cuda{torch.version.cuda}-{archs}-"
           f"py{sys.version_info.major}{sys.version_info.minor}")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", key)


@functools.lru_cache(maxsize=None)
def op(name: str):
    """torch.ops.rapid_llm_jit.<name>; the first call in a process builds (or loads) the library."""
    import torch

    load_library()
    return getattr(getattr(torch.ops, NAMESPACE), name)


def load_library() -> Path:
    """Build (or reuse) the JIT library in the cache directory and load it into this process; return its path."""
    with _BUILD_LOCK:
        return _load_library_once()


@functools.lru_cache(maxsize=1)
def _load_library_once() -> Path:
    from torch.utils import cpp_extension

    ok, reason = available()
    if not ok:
        raise RuntimeError(f"rapid_llm: cannot JIT-build the CUDA extension: {reason}")
    directory = cache_directory()
    directory.mkdir(parents=True, exist_ok=True)
    source_files = sources()
    include = source_root() / "include"
    library = directory / f"{LIBRARY_NAME}.so"
    newest_input = max(os.path.getmtime(path) for path in [*source_files, *map(str, include.glob("*.h"))])
    cached = library.exists() and library.stat().st_mtime >= newest_input
    if cached:
        logger.info("rapid_llm: loading the CUDA extension from the JIT cache %s", directory)
    else:
        logger.warning("rapid_llm: compiling the CUDA extension (first use) from %s into %s; "
                       "this takes about a minute", source_root(), directory)
    define = f"-DRAPID_LLM_OP_NAMESPACE={NAMESPACE}"
    started = time.perf_counter()
    cpp_extension.load(
        name=LIBRARY_NAME,
        sources=source_files,
        extra_cflags=["-O3", define],
        extra_cuda_cflags=["-O3", define],
        extra_include_paths=[str(include)],
        build_directory=str(directory),
        is_python_module=False,
        verbose=False,
    )
    elapsed = time.perf_counter() - started
    if cached:
        logger.info("rapid_llm: CUDA extension loaded from the JIT cache in %.2f s", elapsed)
    else:
        logger.warning("rapid_llm: CUDA extension compiled in %.1f s (cached in %s)", elapsed, directory)
    ok, reason = registered_ops(NAMESPACE, OPS, built_by=f"the JIT build {library}")
    if not ok:
        raise RuntimeError(f"rapid_llm: {reason}")
    return library
