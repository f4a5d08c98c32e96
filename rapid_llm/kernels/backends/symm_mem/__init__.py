"""torch's symmetric-memory collectives (torch.ops.symm_mem, CUDA builds of torch): no library of its own to
install; available where torch was built with CUDA and defines the ops the comm rows call. Its rows are
external rows (torch's kernels, ranked against NCCL's by measurement), distinct from the torch.distributed
reference rows. The adapters are in all_reduce.py."""

from __future__ import annotations

#: The torch.ops.symm_mem ops the rows call.
OPS = ("one_shot_all_reduce_copy", "two_shot_all_reduce_out")


def available() -> tuple[bool, str]:
    import torch

    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is built without CUDA (no symmetric memory)"
    try:
        import torch.distributed._symmetric_memory
    except ImportError as error:
        return False, f"torch.distributed._symmetric_memory does not import: {error}"
    missing = [name for name in OPS if not hasattr(torch.ops.symm_mem, name)]
    if missing:
        return False, f"torch {torch.__version__} lacks torch.ops.symm_mem.{', '.join(missing)}"
    return True, ""
