"""The comm family's shared pieces, below both its rows (ops/comm/) and the library adapters (backends/),
which may not import the ops: the `group` argument as torch.distributed takes it, what comm.ep_dispatch
returns and the layout it leaves for comm.ep_combine.

group: None (the default group), a torch.distributed ProcessGroup, or a group's name (group.group_name, the
string torch's functional collectives and our torch.library custom ops pass, which cannot carry a
ProcessGroup object).

EpHandle, on the dispatching rank (T its tokens, W the group's ranks):
  token_in_rank: bool [T, W]: token t was sent to rank r (one of its top-k experts lives there);
  recv_counts:   int64 [W]: the rows this rank received from each source rank;
  library:       a row's own layout beside those two (DeepEP's handle tuple), or () for rows that need none.
The received rows are ordered by source rank, then by the token's index on its source, so the first two
fields say where every row goes back to: token t's row among those sent to rank r is the number of earlier
tokens sent to r. Every combine row can read them; a row that needs `library` requires the layout tag the
check derives from it (handle:deep_ep), so a handle only reaches a combine row that understands it.

EpDispatch: (x, x_scale, topk_ids, topk_weights, tokens_per_expert, handle), the received rows (contract
comm.ep_dispatch). The torch.library custom ops pass a handle as its tensors (`tensors()`, `from_tensors`):
the two layout tensors only, which every combine row reads.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from .dispatcher.contract import OpInputError


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


#: library name -> the number of tensors its handle tuple holds.
LIBRARY_HANDLE_SIZES = {"deep_ep": 6}


@attrs.frozen(eq=False)
class EpHandle:
    token_in_rank: torch.Tensor
    recv_counts: torch.Tensor
    library_name: str = ""
    library: tuple = ()

    @property
    def num_tokens(self) -> int:
        return self.token_in_rank.shape[0]

    @property
    def world_size(self) -> int:
        return self.token_in_rank.shape[1]

    def tensors(self) -> list:
        """The layout every combine row reads, as the custom ops pass it: [token_in_rank, recv_counts]."""
        return [self.token_in_rank, self.recv_counts]

    @classmethod
    def from_tensors(cls, tensors) -> EpHandle:
        if len(tensors) != 2:
            expected = "the handle's tensors() ([token_in_rank, recv_counts])"
            raise OpInputError("comm.ep_combine", "handle", expected, f"{len(tensors)} tensors")
        token_in_rank, recv_counts = tensors
        return cls(token_in_rank, recv_counts)


class EpDispatch(NamedTuple):
    x: torch.Tensor
    x_scale: torch.Tensor | None
    topk_ids: torch.Tensor
    topk_weights: torch.Tensor
    tokens_per_expert: torch.Tensor
    handle: EpHandle

    def compared(self) -> tuple:
        """The tensors every row gives alike (the library part of the handle is a row's own)."""
        scale = () if self.x_scale is None else (self.x_scale,)
        return (self.x, *scale, self.topk_ids, self.topk_weights, self.tokens_per_expert, *self.handle.tensors())


def tokens_per_local_expert(local_ids, local_experts: int) -> torch.Tensor:
    """int32 [local_experts]: the received rows naming each local expert in at least one slot (ids -1:
    another rank's expert)."""
    named = torch.zeros((local_ids.shape[0], local_experts + 1), dtype=torch.bool, device=local_ids.device)
    named.scatter_(1, torch.where(local_ids >= 0, local_ids.long(), local_experts), True)
    return named[:, :local_experts].sum(dim=0, dtype=torch.int32)
