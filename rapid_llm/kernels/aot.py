"""Availability probe of the ahead-of-time CUDA extension `rapid_llm._C`.

    available() -> (ok, reason)     the `available=` probe of every `aot/*` row

`rapid_llm._C` is built from csrc/ only under RAPID_LLM_BUILD_EXT=1 (see
setup.py). It is never imported at package import: the first `load()` of an
`aot/*` row calls this probe, which imports it, then checks that every op
the rows call is registered in `torch.ops.rapid_llm` with a CUDA kernel.
A failure is a reason in explain(), never a crash:

  - not built: "rapid_llm._C is not built ...";
  - built but unloadable (an `undefined symbol` after a torch upgrade, a
    CUDA runtime that does not match): the loader's own message;
  - loaded but an op missing (a stale .so from before the op was added, or
    a build registering another namespace): the op's name.

The result is cached: a shared library loads once per process, so a second
answer could not differ. Importing this module imports neither torch nor
the extension.
"""

from __future__ import annotations

import functools
import importlib

MODULE = "rapid_llm._C"
NAMESPACE = "rapid_llm"
#: Every op that an `aot/*` row's wrapper calls: torch.ops.rapid_llm.<op>.
OPS = ("scale", "update_kv_buffer")
BUILD_HINT = ("RAPID_LLM_BUILD_EXT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 "
              "pip install --no-deps --no-build-isolation -e .")


def available() -> tuple[bool, str]:
    """(True, "") when rapid_llm._C loads and registers every op in OPS; else (False, why)."""
    return _probe()


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[bool, str]:
    # torch first: it loads libc10/libtorch into the process, which the extension links against
    # without an rpath ("libc10.so: cannot open shared object file" otherwise).
    import torch  # noqa: F401

    try:
        importlib.import_module(MODULE)
    except ModuleNotFoundError as error:
        if error.name in (MODULE, "rapid_llm"):
            return False, f"{MODULE} is not built (build it with: {BUILD_HINT})"
        return False, f"{MODULE} failed to load: {type(error).__name__}: {error}"
    except (ImportError, OSError) as error:
        # e.g. "undefined symbol: _ZN3c10..." when the .so was built against another torch.
        return False, (f"{MODULE} failed to load: {type(error).__name__}: {error} "
                       f"(built against another torch/CUDA? rebuild with: {BUILD_HINT})")
    return registered_ops(NAMESPACE, OPS, built_by=f"{MODULE} ({_module_file()})")


def registered_ops(namespace: str, ops, *, built_by: str) -> tuple[bool, str]:
    """(ok, reason): whether each op of `ops` exists as torch.ops.<namespace>.<op> with a CUDA kernel."""
    import torch

    missing, without_cuda = [], []
    for op in ops:
        qualified = f"{namespace}::{op}"
        if not _has_schema(namespace, op):
            missing.append(qualified)
        elif not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CUDA"):
            without_cuda.append(qualified)
    if missing:
        return False, (f"{built_by} loaded but does not register {', '.join(missing)} "
                       "(a stale build from before the op existed, or one built for another op namespace: rebuild)")
    if without_cuda:
        return False, f"{built_by} registers {', '.join(without_cuda)} without a CUDA kernel"
    return True, ""


def _has_schema(namespace: str, op: str) -> bool:
    import torch

    try:
        getattr(getattr(torch.ops, namespace), op)
    except (AttributeError, RuntimeError):
        return False
    return True


def _module_file() -> str:
    import sys

    return getattr(sys.modules.get(MODULE), "__file__", None) or "unknown path"
