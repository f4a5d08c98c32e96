"""Availability probe of the ahead-of-time CUDA extension `rapid_llm._C`.

    available() -> (ok, reason)     the `available=` probe of every `aot/*` row
    op(name)                        torch.ops.rapid_llm.<name>, after available() said yes
    extension_ops()                 the ops the extension must register: derived from the aot/ and jit/ rows
    registered_ops(ns, ops, ...)    whether each op is in torch.ops.<ns> with a CUDA kernel (used by jit.py too)

extension_ops() is the one list of the extension's ops: the op part of each
`aot/*` or `jit/*` row's op id (`elementwise.scale` -> `scale`).
csrc/common_extension.cc defines exactly these schemas, outputs first
(`scale(Tensor! out, Tensor input, float factor) -> ()`,
`update_kv_buffer(Tensor! buffer, Tensor kv, Tensor loc) -> ()`), which
conformance/test_extension.py checks by parsing that file. The rows'
targets (ops/<family>/<op>_cuda.py) are unchecked kernels calling
`op(name)(outputs..., inputs...)`: the op's argument check ran before them.

`rapid_llm._C` is built from csrc/ only under RAPID_LLM_BUILD_EXT=1 (see
setup.py). It is never imported at package import: the first `load()` of an
`aot/*` row calls this probe, which imports it, then checks that every op
the rows call is registered in `torch.ops.rapid_llm` with a CUDA kernel.
A failure is a reason in explain(), never a crash:

  - not built: "rapid_llm._C is not built ...";
  - built but unloadable (an `undefined symbol` after a torch upgrade, a
    CUDA runtime that does not match): the loader's own message;
  - loaded but an op missing (a stale .so from before the op was added, or
    a build registering another namespace): the op's name;
  - loaded but a schema with its outputs not first (a stale .so from before
    the outputs-first order): the schema.

The result is cached: a shared library loads once per process, so a second
answer could not differ. Importing this module imports neither torch nor
the extension.
"""

from __future__ import annotations

import functools
import importlib

MODULE = "rapid_llm._C"
NAMESPACE = "rapid_llm"
#: The backends whose rows call the CUDA extension.
EXTENSION_BACKENDS = ("aot", "jit")
BUILD_HINT = (
    "RAPID_LLM_BUILD_EXT=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 "
    "python -m pip install --no-deps --no-build-isolation -e ."
)


def extension_ops() -> tuple[str, ...]:
    """Every op the CUDA extension registers, by name: the op part of each aot/ or jit/ row's op id
    (`elementwise.scale` -> `scale`). The one list; csrc/common_extension.cc registers exactly these."""
    from .dispatcher.table import default_table

    rows = default_table().rows_by_name.values()
    return tuple(sorted({row.op.partition(".")[2] for row in rows if row.backend in EXTENSION_BACKENDS}))


def available() -> tuple[bool, str]:
    """(True, "") when rapid_llm._C loads and registers every op of extension_ops(); else (False, why)."""
    return _probe()


@functools.lru_cache(maxsize=None)
def op(name: str):
    """torch.ops.rapid_llm.<name>; a RuntimeError with the probe's reason when the extension is unusable."""
    ok, reason = available()
    if not ok:
        raise RuntimeError(f"aot/{name}: {reason}")
    import torch

    return getattr(torch.ops.rapid_llm, name)


@functools.lru_cache(maxsize=None)
def _probe() -> tuple[bool, str]:
    hidden = extension_hidden()
    if hidden:
        return False, hidden
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
        return False, (
            f"{MODULE} failed to load: {type(error).__name__}: {error} "
            f"(built against another torch/CUDA? rebuild with: {BUILD_HINT})"
        )
    return registered_ops(NAMESPACE, extension_ops(), built_by=f"{MODULE} ({_module_file()})")


def extension_hidden() -> str:
    """The rejection reason when the probed environment hides the CUDA extension (RAPID_LLM_HIDE_LIBS=
    cuda_extension: its absence cell), else ""."""
    from .dispatcher.environment import probe_environment

    if "cuda_extension" in probe_environment().hidden_libs:
        return "the CUDA extension is hidden (RAPID_LLM_HIDE_LIBS=cuda_extension)"
    return ""


def registered_ops(namespace: str, ops, *, built_by: str) -> tuple[bool, str]:
    """(ok, reason): whether each op of `ops` exists as torch.ops.<namespace>.<op> with a CUDA kernel
    and a schema that lists its outputs (`Tensor!` arguments) first, as csrc/common_extension.cc does:
    a library built before that order (update_kv_buffer(Tensor kv, Tensor loc, Tensor! buffer)) would
    take the rows' (buffer, kv, loc) in the wrong places."""
    import torch

    missing, without_cuda, misordered = [], [], []
    for op in ops:
        qualified = f"{namespace}::{op}"
        if not _has_schema(namespace, op):
            missing.append(qualified)
        elif not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CUDA"):
            without_cuda.append(qualified)
        else:
            schema = _schema(namespace, op)
            if schema is not None and not outputs_first(schema):
                misordered.append(str(schema))
    if missing:
        return False, (
            f"{built_by} loaded but does not register {', '.join(missing)} "
            "(a stale build from before the op existed, or one built for another op namespace: rebuild)"
        )
    if without_cuda:
        return False, f"{built_by} registers {', '.join(without_cuda)} without a CUDA kernel"
    if misordered:
        return False, (
            f"{built_by} registers {'; '.join(misordered)}: outputs are not first "
            "(a stale build from before the outputs-first argument order: rebuild)"
        )
    return True, ""


def outputs_first(schema) -> bool:
    """Whether a torch FunctionSchema lists every argument it writes (`Tensor!`, `Tensor(a!)`) before the others."""
    writes = [argument.alias_info is not None and argument.alias_info.is_write for argument in schema.arguments]
    return all(writes[: sum(writes)])


def _schema(namespace: str, op: str):
    import torch

    try:
        return getattr(getattr(torch.ops, namespace), op).default._schema
    except (AttributeError, RuntimeError):
        return None


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
