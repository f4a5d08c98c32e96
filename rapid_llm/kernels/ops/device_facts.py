"""Facts about the device a launch heuristic may key on, read once per device.

multiprocessor_count(device): the SM count of a CUDA device (132 on an H200),
used to tell a grid that fills the GPU from a decode-sized one that does not.
On the CPU (Triton's interpreter) it returns 1: the grid shape does not
matter there.
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
