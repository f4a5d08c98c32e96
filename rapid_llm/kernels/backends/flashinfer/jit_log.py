"""Log FlashInfer's first call per kernel module: which module, and how long the call took.

FlashInfer 0.6.0 JIT-compiles each kernel module on its first use (our rows'
first calls took seconds to minutes on the H200; evidence h200.libraries.probe);
a later process loads it from FlashInfer's cache when its
ninja dependency log is intact, or from its AOT directory. An engine that stalls for a minute at its first
step should say why, so every FlashInfer adapter wraps its library call:

    with first_call_logged("flashinfer module 'norm'"):
        flashinfer.norm.rmsnorm(...)

The first call with a given key logs (logger "rapid_llm.backends.flashinfer",
INFO) one line before it starts ("may JIT-compile") and one with the elapsed
wall time after it returns; a first call that raises logs a WARNING with the
error and is not counted, so the next call is logged as the first again. Every
later call with that key gets a shared no-op context manager: one set lookup.

Keys are free-form strings naming what compiles (the FlashInfer module, and
for the attention adapters the variant: dtype, head_dim, causal). The time is
host wall time without a device sync: compile + load + launch, not the kernel's
run time. Two threads making the first call at once may both log; the count is
still one per key.
"""

from __future__ import annotations

import contextlib
import logging
import time

logger = logging.getLogger("rapid_llm.backends.flashinfer")

_DONE: set[str] = set()
_ALREADY_DONE = contextlib.nullcontext()


class _FirstCall:
    __slots__ = ("key", "start")

    def __init__(self, key: str):
        self.key = key
        self.start = 0.0

    def __enter__(self):
        logger.info("%s: first call in this process (FlashInfer may JIT-compile the module now)", self.key)
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        elapsed = time.perf_counter() - self.start
        if exc_type is not None:
            logger.warning("%s: first call failed after %.2f s: %s: %s", self.key, elapsed, exc_type.__name__, exc)
        elif self.key not in _DONE:
            _DONE.add(self.key)
            logger.info("%s: first call took %.2f s (JIT compile or cache load, plus the launch)", self.key, elapsed)
        return False


def first_call_logged(key: str):
    """A context manager around one FlashInfer call: logs the first successful call per `key` (module doc)."""
    if key in _DONE:
        return _ALREADY_DONE
    return _FirstCall(key)


def logged_keys() -> frozenset[str]:
    """The keys whose first call has completed in this process (for `rapid-llm doctor` and tests)."""
    return frozenset(_DONE)
