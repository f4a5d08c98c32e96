"""The availability probe every external library shares: installed, in the tested version range, imports.

    probe(requirement, module, installed_version=..., before_import=None) -> (ok, reason)

`requirement` is the LibraryRequirement the library's adapters were written and
tested for; `module` the module the adapters import. The installed version comes
from the distribution metadata (dispatcher/environment.py), so a version outside
the range is refused without importing anything; an import that raises (an
`undefined symbol` after a torch upgrade, a wheel built for another CUDA) becomes
the reason, with the loader's own message. `before_import` runs first (a
library's import quirk, e.g. a submodule it reads without importing).
"""

from __future__ import annotations

import importlib

_UNSET = object()


def probe(requirement, module: str, *, installed_version=_UNSET, before_import=None) -> tuple[bool, str]:
    if installed_version is _UNSET:
        from ..dispatcher.environment import installed_library_versions

        installed_version = installed_library_versions().get(requirement.name)
    ok, observed = requirement.check(installed_version)
    if not ok:
        tested = requirement.describe()
        return False, f"{requirement.name}: {observed}; the adapters were written and tested for {tested}"
    try:
        if before_import is not None:
            before_import()
        importlib.import_module(module)
    except Exception as error:  # ImportError, OSError (a shared library), anything a broken install raises
        return (
            False,
            f"{requirement.name} {installed_version}: importing {module} failed: {type(error).__name__}: {error}",
        )
    return True, f"{requirement.name} {installed_version}: imports ({module})"
