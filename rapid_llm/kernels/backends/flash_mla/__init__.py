"""FlashMLA: availability probe. Tested with sgl-flash-mla 1.0.0 (module flash_mla: dense MLA decode through
flash_mla_with_kvcache(..., use_legacy=True)) on the H200."""

from ...dispatcher.spec import LibraryInfo, LibraryRequirement
from ..probe import probe

#: pip distributions that provide it, and the top-level modules RAPID_LLM_HIDE_LIBS blocks
LIBRARY = LibraryInfo("flash_mla", ("flash-mla", "flash_mla", "sgl-flash-mla"), ("flash_mla",))
REQUIREMENT = LibraryRequirement("flash_mla", min_version="1.0", below_version="1.1")
MODULE = "flash_mla"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
