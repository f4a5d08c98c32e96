"""DeepGEMM: availability probe. Tested with tokenspeed-deepgemm 2.5.0.post20260424 (module deep_gemm:
fp8_gemm_nt, the m-grouped GEMMs) with torch 2.11; later builds need torch 2.14 and fail to load there,
which this probe reports with the loader's message. The gemm family's adapters are in gemm.py."""

from ...dispatcher.spec import LibraryInfo, LibraryRequirement
from ..probe import probe

#: pip distributions that provide it, and the top-level modules RAPID_LLM_HIDE_LIBS blocks
LIBRARY = LibraryInfo("deep_gemm", ("deep-gemm", "deep_gemm", "tokenspeed-deepgemm", "sgl-deep-gemm"), ("deep_gemm",))
REQUIREMENT = LibraryRequirement("deep_gemm", min_version="2.5", below_version="2.6")
MODULE = "deep_gemm"


def available() -> tuple[bool, str]:
    return probe(REQUIREMENT, MODULE)
