"""cuBLAS through torch (torch.nn.functional.linear on CUDA tensors): no library of its own to install,
available wherever torch was built with CUDA. Its rows are external rows (another library's kernels,
ranked against ours by measurement), distinct from the torch reference rows (fp32 products)."""

from __future__ import annotations


def available() -> tuple[bool, str]:
    import torch

    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is built without CUDA (no cuBLAS)"
    return True, ""
