"""Facts about the device a launch heuristic may key on, read once per device.

multiprocessor_count(device): the SM count of a CUDA device (132 on an H200),
used to tell a grid that fills the GPU from a decode-sized one that does not.
On the CPU (Triton's interpreter) it returns 1: the grid shape does not
matter there. compute_capability(device): (major, minor) of a CUDA device,
the SM tier tile tables key on; (0, 0) on the CPU.
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


def compute_capability(device: torch.device) -> tuple[int, int]:
    if device.type != "cuda":
        return (0, 0)
    return _cuda_capability(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_capability(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))
