"""FlashAttention-3 (forward): availability probe. Tested with the fa3-fwd 0.0.3 wheel (module
fa3_fwd_interface: varlen forward, paged KV) on the H200."""

from ...dispatcher.spec import LibraryRequirement
from ..probe import probe

REQUIREMENT = LibraryRequirement("flash_attn", min_version="0.0.3", below_version="0.1")
MODULE = "fa3_fwd_interface"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
