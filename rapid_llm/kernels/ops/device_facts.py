"""Facts about the device a launch heuristic may key on, read once per device.

multiprocessor_count(device): the SM count of a CUDA device (132 on an H200),
used to tell a grid that fills the GPU from a decode-sized one that does not.
On the CPU (Triton's interpreter) it returns 1: the grid shape does not
matter there.

shared_memory_per_multiprocessor(device): bytes of shared memory an SM holds (228 KiB on an
H200), for a kernel's blocks-per-SM count. 0 off CUDA.
"""

from __future__ import annotations

import functools

import torch


def multiprocessor_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return _cuda_multiprocessors(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def shared_memory_per_multiprocessor(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return _cuda_shared_memory(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_shared_memory(index: int) -> int:
    # torch builds without the property: the sm90 figure (the only GPU the extension rows were measured on)
    return getattr(torch.cuda.get_device_properties(index), "shared_memory_per_multiprocessor", 0) or 228 * 1024
