"""FlashMLA: availability probe. Tested with sgl-flash-mla 1.0.0 (module flash_mla: dense MLA decode through
flash_mla_with_kvcache(..., use_legacy=True)) on the H200."""

from ...dispatcher.spec import LibraryRequirement
from ..probe import probe

REQUIREMENT = LibraryRequirement("flash_mla", min_version="1.0", below_version="1.1")
MODULE = "flash_mla"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
