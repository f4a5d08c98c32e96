"""DeepEP: availability probe. Tested with tokenspeed-deepep 1.2.1.post20251110 (module deep_ep: Buffer) with
torch 2.11 and NCCL 2.28; later builds need NCCL >= 2.29. Its rows belong to the communication family."""

from ...dispatcher.spec import LibraryInfo, LibraryRequirement
from ..probe import probe

#: pip distributions that provide it, and the top-level modules RAPID_LLM_HIDE_LIBS blocks
LIBRARY = LibraryInfo("deep_ep", ("deep-ep", "deep_ep", "tokenspeed-deepep"), ("deep_ep",))
REQUIREMENT = LibraryRequirement("deep_ep", min_version="1.2", below_version="1.3")
MODULE = "deep_ep"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
