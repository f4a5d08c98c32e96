"""Just-in-time build of the CUDA extension from csrc/ (opt-in: RAPID_LLM_JIT=1).

    available() -> (ok, reason)   the `available=` probe of every `jit/*` row; never compiles
    op(name)                      torch.ops.rapid_llm_jit.<name>, building the library on first use
    load_library()                build (or reuse) the library in its cache directory and load it
    cache_directory()             that directory: <base>/<key>

The JIT build compiles the SAME sources as the ahead-of-time `rapid_llm._C`
(every .cu/.cc/.cpp under csrc/, include dir csrc/include) with
torch.utils.cpp_extension.load(..., is_python_module=False), which loads the
shared library with torch.ops.load_library so its TORCH_LIBRARY_FRAGMENT
registrations land in torch.ops. It is compiled with
-DRAPID_LLM_OP_NAMESPACE=rapid_llm_jit, so its ops are
torch.ops.rapid_llm_jit.* (the ops of aot.extension_ops(), with the same
schemas, outputs first) and it can live in one process next to
rapid_llm._C (torch.ops.rapid_llm.*): two libraries defining the same
schema in one namespace would make the second load fail.

Cache: <base>/<key>, base = $RAPID_LLM_JIT_CACHE or ~/.cache/rapid_llm/jit.
The key is a readable prefix (torch, CUDA, archs, Python) and the first 16
hex digits of a sha256 over the CONTENT of every file under csrc/ but
documentation (*.md) with its relative path, the compile flags,
rapid_llm.__version__, the torch version, torch's CUDA version and the
toolkit's, the target archs and the Python version (build_key()). No
modification times: a directory only ever holds the build of one set of
inputs, so reusing its library is safe, and any change of a source byte, a
header, a flag or a version selects another directory (a fresh build).
torch.utils.cpp_extension.load still runs ninja in each process's first
load, which rebuilds what it sees changed, and torch's file lock in the
directory makes concurrent processes wait for one build, so a second
process reuses the first one's library. Old directories are never read
again and can be deleted. Archs: TORCH_CUDA_ARCH_LIST when set (e.g.
"9.0"), else the visible GPUs' (torch's default).

Trust: the library in the cache is loaded into this process, so whoever can
write the cache directory can run code here. Before building into or
loading from it (and in available()), every existing directory from the
base down to <key> must be a directory owned by this user and writable by
no one else (no group/other write bit), as ssh requires of its key files;
otherwise the build is refused with a one-line reason (available() returns
it, so explain() shows it as the row's rejection). Missing directories are
created with mode 0o700. Directories above the base are not checked: pick a
base whose parents only you (or root) can write (a fresh `mktemp -d` is
fine; a shared /tmp/<name> that someone else may have created first is
refused, not trusted).

A compile is logged at WARNING (it stalls the first call for about a
minute), a cache hit at INFO, both on the "rapid_llm.kernels.jit" logger
with the elapsed time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

from .aot import extension_ops, registered_ops

ENABLE_VARIABLE = "RAPID_LLM_JIT"
CACHE_VARIABLE = "RAPID_LLM_JIT_CACHE"
NAMESPACE = "rapid_llm_jit"
LIBRARY_NAME = "rapid_llm_jit_ext"
SOURCE_SUFFIXES = (".cu", ".cc", ".cpp")
#: Files under csrc/ that do not enter the build (and so not the cache key).
DOCUMENTATION_SUFFIXES = (".md",)
#: Hex digits of the sha256 kept in the cache key (64 bits).
KEY_DIGITS = 16
#: Mode of the cache directories this module creates.
DIRECTORY_MODE = 0o700

logger = logging.getLogger(__name__)
_BUILD_LOCK = threading.Lock()


def source_root() -> Path:
    """csrc/ of the source checkout this package runs from (an editable install or the repo itself)."""
    return Path(__file__).resolve().parents[2] / "csrc"


def sources(root: Path | None = None) -> list[str]:
    """Every .cu/.cc/.cpp under csrc/ but csrc/host/ (rapid_llm._host), sorted: the same rule as setup.py's
    AOT build."""
    root = source_root() if root is None else root
    host = root / "host"
    return sorted(str(path) for path in root.rglob("*") if path.suffix in SOURCE_SUFFIXES and host not in path.parents)


def compile_flags() -> dict[str, tuple[str, ...]]:
    """The flags of the JIT build: {"cxx": host compiler flags, "nvcc": CUDA compiler flags}."""
    define = f"-DRAPID_LLM_OP_NAMESPACE={NAMESPACE}"
    return {"cxx": ("-O3", define), "nvcc": ("-O3", define)}


# ---------------------------------------------------------------------------
# The cache key: a content hash (pure functions of the files and the values given)
# ---------------------------------------------------------------------------


def key_files(root: Path) -> list[Path]:
    """Every file under `root` that can change the build (all but *.md), sorted by relative path."""
    files = [path for path in root.rglob("*") if path.is_file() and path.suffix not in DOCUMENTATION_SUFFIXES]
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def build_key(root: Path, flags: Mapping[str, Sequence[str]], environment: Mapping[str, str]) -> str:
    """The cache directory's name for building the files under `root` with `flags` in `environment`.

    flags: {"cxx": [...], "nvcc": [...]} (compile_flags()); environment: name -> version text
    (build_environment(): rapid_llm, torch, cuda, cuda_toolkit, archs, python, python_abi; every
    entry given enters the hash). The name is `torch<v>-cuda<v>-<archs>-<python>-<16 hex digits>`,
    the digits from a sha256 over each key file's relative path and bytes, each compiler's flags and
    each environment entry, every field length-prefixed (no two different inputs hash the same
    text). File modification times are not read.
    """
    digest = hashlib.sha256()

    def add(label: str, value: bytes) -> None:
        for part in (label.encode(), value):
            digest.update(b"%d:" % len(part))
            digest.update(part)

    for path in key_files(root):
        add("file " + path.relative_to(root).as_posix(), path.read_bytes())
    for compiler in sorted(flags):
        add("flags " + compiler, "\0".join(flags[compiler]).encode())
    for name in sorted(environment):
        add("environment " + name, str(environment[name]).encode())
    readable = (
        f"torch{environment.get('torch')}-cuda{environment.get('cuda')}-{environment.get('archs')}-"
        f"{environment.get('python')}"
    )
    return re.sub(r"[^A-Za-z0-9._+-]", "_", readable) + "-" + digest.hexdigest()[:KEY_DIGITS]


def build_environment() -> dict[str, str]:
    """What besides csrc/ and the flags decides the build: versions of rapid_llm, torch, CUDA, Python; archs."""
    import torch
    from torch.utils import cpp_extension

    from .. import __version__

    return {
        "rapid_llm": __version__,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "cuda_toolkit": _toolkit_version(cpp_extension.CUDA_HOME),
        "archs": _target_archs(),
        "python": f"py{sys.version_info.major}{sys.version_info.minor}",
        "python_abi": sys.implementation.cache_tag or sys.implementation.name,
    }


def _toolkit_version(home: str | None) -> str:
    """The CUDA toolkit's version (its version.json; CUDA 11.1+) and location: nvcc changes rebuild."""
    if home is None:
        return "none"
    version = "unknown"
    try:
        with open(os.path.join(home, "version.json")) as handle:
            version = json.load(handle)["cuda"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return f"{version} at {home}"


def _target_archs() -> str:
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if archs:
        return archs
    import torch

    return "+".join(
        sorted({"sm%d%d" % torch.cuda.get_device_capability(index) for index in range(torch.cuda.device_count())})
    )


def cache_base() -> Path:
    """$RAPID_LLM_JIT_CACHE or ~/.cache/rapid_llm/jit, symlinks resolved (so a link swapped later is not followed)."""
    base = os.environ.get(CACHE_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "rapid_llm", "jit")
    return Path(os.path.realpath(base))


def cache_directory() -> Path:
    """<base>/<key>: where the JIT build of this csrc/, these flags and this environment lives."""
    return cache_base() / build_key(source_root(), compile_flags(), build_environment())


# ---------------------------------------------------------------------------
# Cache trust: owned by us, writable by no one else
# ---------------------------------------------------------------------------


def cache_trust_problem(directory: Path, base: Path, *, uid: int | None = None) -> str | None:
    """None when every existing directory from `base` down to `directory` is trusted; else one line why not.

    Trusted: a directory owned by `uid` (default: this process's effective uid, the owner of what it
    creates) with neither the group nor the other write bit. The walk stops at the first missing
    directory: those are created by prepare_cache_directory() with mode 0o700. `directory` must be
    `base` or under it.
    """
    base, directory = Path(os.path.abspath(base)), Path(os.path.abspath(directory))
    if directory != base and base not in directory.parents:
        raise ValueError(f"{directory} is not under the JIT cache base {base}")
    uid = os.geteuid() if uid is None else uid
    chain = [base]
    for part in directory.relative_to(base).parts:
        chain.append(chain[-1] / part)
    for path in chain:
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as error:  # NotADirectoryError (a file above it), PermissionError...
            return f"refusing the JIT cache directory {path}: {type(error).__name__}: {error.strerror}"
        if not stat.S_ISDIR(status.st_mode):
            return f"refusing the JIT cache directory {path}: it is not a directory"
        if status.st_uid != uid:
            return (
                f"refusing the JIT cache directory {path}: it is owned by uid {status.st_uid}, not by this "
                f"user (uid {uid}), so its owner could plant a library this process would load; set "
                f"{CACHE_VARIABLE} to a directory of your own"
            )
        if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (
                f"refusing the JIT cache directory {path}: it is group/other-writable (mode "
                f"{oct(stat.S_IMODE(status.st_mode))}), so another user could plant a library this process "
                f"would load; run `chmod go-w {path}` or set {CACHE_VARIABLE} to a private directory"
            )
    return None


def prepare_cache_directory(directory: Path, base: Path) -> Path:
    """Check `base` .. `directory`, create what is missing with mode 0o700, check again; return `directory`.

    A RuntimeError with cache_trust_problem()'s one-line reason when a directory is not trusted, before
    or after creating (a directory someone else created in between is caught by the second check).
    """
    directory = Path(directory)
    problem = cache_trust_problem(directory, base)
    if problem is None:
        for path in (*reversed(directory.parents), directory):
            if path.is_dir():
                continue
            try:
                os.mkdir(path, DIRECTORY_MODE)
            except FileExistsError:
                pass  # created meanwhile (or a file): the check below judges it
            except OSError as error:
                raise RuntimeError(
                    f"rapid_llm: cannot create the JIT cache directory {path}: {type(error).__name__}: {error.strerror}"
                ) from None
        problem = cache_trust_problem(directory, base)
    if problem is not None:
        raise RuntimeError(f"rapid_llm: {problem}")
    return directory


# ---------------------------------------------------------------------------
# Probe and build
# ---------------------------------------------------------------------------


def available() -> tuple[bool, str]:
    """(True, "") when a JIT build can run here; else (False, why). Compiles nothing.

    Checked in order: the opt-in variable, a CUDA device visible to torch,
    a CUDA build of torch with a toolkit (nvcc and headers) under CUDA_HOME,
    ninja, the csrc/ sources, and the cache directory's trust
    (cache_trust_problem(); a few stat calls, no directory is created).
    """
    if os.environ.get(ENABLE_VARIABLE) != "1":
        return False, f"{ENABLE_VARIABLE}=1 is not set (JIT builds of the CUDA extension are opt-in)"
    from .aot import extension_hidden

    hidden = extension_hidden()
    if hidden:
        return False, hidden
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as error:
        return False, f"torch.utils.cpp_extension is not importable: {error}"
    if not torch.cuda.is_available():
        return False, (
            f"{ENABLE_VARIABLE}=1 but torch sees no CUDA device "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"
        )
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
    base = cache_base()
    problem = cache_trust_problem(cache_directory(), base)
    if problem is not None:
        return False, problem
    return True, ""


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
    flags = compile_flags()
    base = cache_base()
    directory = prepare_cache_directory(base / build_key(source_root(), flags, build_environment()), base)
    library = directory / f"{LIBRARY_NAME}.so"
    # The directory is keyed on the inputs' content: a library in it was built from exactly these
    # sources, flags and versions (ninja, below, still rebuilds whatever it finds out of date).
    cached = library.exists()
    if cached:
        logger.info("rapid_llm: loading the CUDA extension from the JIT cache %s", directory)
    else:
        logger.warning(
            "rapid_llm: compiling the CUDA extension (first use) from %s into %s; this takes about a minute",
            source_root(),
            directory,
        )
    started = time.perf_counter()
    cpp_extension.load(
        name=LIBRARY_NAME,
        sources=sources(),
        extra_cflags=list(flags["cxx"]),
        extra_cuda_cflags=list(flags["nvcc"]),
        extra_include_paths=[str(source_root() / "include")],
        build_directory=str(directory),
        is_python_module=False,
        verbose=False,
    )
    elapsed = time.perf_counter() - started
    if cached:
        logger.info("rapid_llm: CUDA extension loaded from the JIT cache in %.2f s", elapsed)
    else:
        logger.warning("rapid_llm: CUDA extension compiled in %.1f s (cached in %s)", elapsed, directory)
    ok, reason = registered_ops(NAMESPACE, extension_ops(), built_by=f"the JIT build {library}")
    if not ok:
        raise RuntimeError(f"rapid_llm: {reason}")
    return library
