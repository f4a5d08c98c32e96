"""The optional libraries the product knows: its own and those its backend packages declare (torch-free).

    known_libraries() -> {name: LibraryInfo}

The product's own libraries (Triton, the CUDA extension) are spec.CORE_LIBRARIES. Each external library is
declared by its backend package, beside its version range and probe: backends/<name>/__init__.py defines
LIBRARY = LibraryInfo(name, distributions, modules); backends/__init__.py lists the packages
(LIBRARY_PROBES). Adding a library touches its backend package and that list, nothing in the dispatcher.
Read once per process: the probe (RAPID_LLM_HIDE_LIBS' import blocker, installed versions), the CLI's
--lib names and build_tables()' check of every row's library requirements use it.
"""

from __future__ import annotations

import functools
import importlib
from types import MappingProxyType

from .spec import CORE_LIBRARIES


@functools.lru_cache(maxsize=None)
def known_libraries() -> MappingProxyType:
    """{name: LibraryInfo}: the product's own libraries, then every backend package's LIBRARY. A backend whose
    LIBRARY or REQUIREMENT names another library, or a name declared twice, is a ValueError naming both."""
    from ..backends import LIBRARY_PROBES

    libraries = dict(CORE_LIBRARIES)
    for name, package in LIBRARY_PROBES.items():
        module = importlib.import_module(package)
        info = module.LIBRARY
        if info.name != name or module.REQUIREMENT.name != name:
            raise ValueError(
                f"{package} is listed for library {name!r} but declares LIBRARY {info.name!r} and "
                f"REQUIREMENT {module.REQUIREMENT.name!r}"
            )
        if name in libraries:
            raise ValueError(f"library {name!r} is declared twice ({package} and the product's own libraries)")
        libraries[name] = info
    return MappingProxyType(libraries)
