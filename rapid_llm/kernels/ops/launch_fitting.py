"""Launch a pipelined Triton kernel with as many stages as the device's shared memory holds.

The launch heuristics (each kernel's launch policy) are tables measured on one tier (sm90: 227 KiB
of shared memory per block). A GPU with less shared memory per block (sm80: 163 KiB, sm89 and
sm120: 99 KiB) would make such a configuration fail at its first launch, when Triton compiles it
and finds its shared memory larger than the device's (triton.runtime.errors.OutOfResources).
`launch_fitting` launches with the configuration's num_stages and, on that error, recompiles with
one stage fewer, down to 1 (fewer tiles in flight, the same tiles and grid, so the same results);
the number that fits is remembered per (kernel, configuration, device), so later calls launch
directly. A configuration that does not fit even at one stage raises KernelResourceError naming
the kernel, the configuration and both sizes. Triton's CPU interpreter never raises the error.

The steady state is one dictionary lookup: the fitted launch is kept per (kernel, device, configuration
as passed) and, for a `fast_launch.cached` kernel, launches through its cached Launcher.
"""

from __future__ import annotations

import torch

from .fast_launch import CachedKernel

try:
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - every triton this package supports has it
    OutOfResources = RuntimeError

#: (kernel name, configuration, device) -> the num_stages that compiled within the device's shared memory.
_FITTED: dict[tuple, int] = {}
#: (kernel, device, configuration items as passed) -> (num_stages, launch(grid, *args)): the steady state.
_READY: dict[tuple, tuple] = {}


class KernelResourceError(RuntimeError):
    """A kernel configuration needs more shared memory than the device has, even with one stage."""


def _key(kernel, device: torch.device, config: dict) -> tuple:
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    return getattr(kernel, "__name__", repr(kernel)), tuple(sorted(config.items())), device.type, index


def launch_fitting(kernel, grid, device: torch.device, *args, **config) -> int:
    """kernel[grid](*args, **config) with config["num_stages"] lowered until it fits the device's shared
    memory (see the module docstring). `config` holds the kernel's keyword arguments: constexprs and
    launch options, all hashable. Returns the num_stages launched."""
    ready_key = (kernel, device, tuple(config.items()))
    ready = _READY.get(ready_key)
    if ready is not None:
        ready[1](grid, *args)
        return ready[0]
    key = _key(kernel, device, config)
    first = max(1, _FITTED.get(key, int(config.get("num_stages", 1))))
    for stages in range(first, 0, -1):
        try:
            kernel[grid](*args, **{**config, "num_stages": stages})
        except OutOfResources as error:
            if "shared memory" not in str(error):
                raise
            last_error = error
            continue
        _FITTED[key] = stages
        _READY[ready_key] = (stages, _launcher(kernel, {**config, "num_stages": stages}))
        return stages
    raise KernelResourceError(
        f"{key[0]} with {dict(config)} needs more shared memory than {device} has even at one stage: {last_error}"
    ) from last_error


def _launcher(kernel, config: dict):
    """launch(grid, *args) = kernel[grid](*args, **config), through the kernel's cached Launcher where it has one."""
    if isinstance(kernel, CachedKernel):
        return kernel.launcher(config)
    return lambda grid, *args: kernel[grid](*args, **config)


def forget() -> None:
    """Forget every fitted stage count (tests: the next launch of each configuration fits again)."""
    _FITTED.clear()
    _READY.clear()


def fitted(kernel) -> list[tuple[dict, int]]:
    """(configuration as launched, num_stages that fit) of every configuration of `kernel` launched so far
    (tests and reports)."""
    name = getattr(kernel, "__name__", repr(kernel))
    return [(dict(items), stages) for (kernel_name, items, _, _), stages in _FITTED.items() if kernel_name == name]


__all__ = ["KernelResourceError", "fitted", "forget", "launch_fitting"]
