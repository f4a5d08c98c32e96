"""FlashAttention-3 (forward): availability probe. Tested with the fa3-fwd 0.0.3 wheel (module
fa3_fwd_interface: varlen forward, paged KV) on the H200."""

from ...dispatcher.spec import LibraryInfo, LibraryRequirement
from ..probe import probe

#: pip distributions that provide it, and the top-level modules RAPID_LLM_HIDE_LIBS blocks
LIBRARY = LibraryInfo(
    "flash_attn", ("flash-attn", "flash_attn_3", "fa3-fwd"), ("flash_attn", "flash_attn_interface", "fa3_fwd_interface")
)
REQUIREMENT = LibraryRequirement("flash_attn", min_version="0.0.3", below_version="0.1")
MODULE = "fa3_fwd_interface"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
