"""A comm op's `group` argument as torch.distributed takes it.

group: None (the default group), a torch.distributed ProcessGroup, or a group's name (group.group_name, the
string torch's functional collectives and our torch.library custom ops pass, which cannot carry a
ProcessGroup object).
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed import distributed_c10d


def resolve_group(group):
    """The ProcessGroup `group` names (None stays None: the default group). Raises ValueError for a name no
    group of this process has."""
    if isinstance(group, str):
        try:
            return distributed_c10d._resolve_process_group(group)
        except (KeyError, RuntimeError, ValueError) as error:
            raise ValueError(f"no process group named {group!r} in this process") from error
    return group


def is_process_group(value) -> bool:
    return value is None or isinstance(value, (str, dist.ProcessGroup))
