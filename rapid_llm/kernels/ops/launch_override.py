"""The one hook that overrides a kernel's launch policy: for sweeps and tests, never for serving.

    with launch_override("native/mla_decode_gluon", splits=4, STAGES=3):
        out = rapid_llm.kernels.mla_decode(q, ...)     # that row's kernel launches with these knobs

A kernel's launch policy (`ops/<family>/<op>/launch.py` where an op has several kernels, else the kernel
module's `launch_config`) builds its knobs (block sizes, warps, stages,
split count) from the call's sizes and the device, then passes them through `apply(row, knobs)`: the
knobs given to an active `launch_override` for that row replace its own. A knob the policy does not
have raises ValueError naming the row, so a sweep cannot silently time the default. Overrides live in
a context variable: they end with the `with` block and never cross threads.
"""

from __future__ import annotations

import contextlib
import contextvars
from types import MappingProxyType

_EMPTY = MappingProxyType({})
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("rapid_llm_launch_override", default=_EMPTY)


#: Context-manager factories entered while any override is active: host_replay registers its suspension
#: (a replayed call would repeat the launches it recorded without the override).
WHILE_ACTIVE: list = []


@contextlib.contextmanager
def launch_override(row: str, **knobs):
    """Within the block, `row`'s kernel launches with `knobs` in place of its policy's values."""
    current = _ACTIVE.get()
    merged = dict(current)
    merged[row] = MappingProxyType({**current.get(row, {}), **knobs})
    token = _ACTIVE.set(MappingProxyType(merged))
    try:
        with contextlib.ExitStack() as stack:
            for enter in WHILE_ACTIVE:
                stack.enter_context(enter())
            yield
    finally:
        _ACTIVE.reset(token)


def active() -> bool:
    """Whether any override is active (cached launch policies are bypassed while one is)."""
    return bool(_ACTIVE.get())


def apply(row: str, knobs: dict) -> dict:
    """`knobs` (a policy's fresh dict) with the active overrides of `row` applied."""
    override = _ACTIVE.get().get(row)
    if not override:
        return knobs
    unknown = sorted(set(override) - set(knobs))
    if unknown:
        raise ValueError(f"launch_override({row!r}): unknown knobs {unknown}; its policy has {sorted(knobs)}")
    knobs.update(override)
    return knobs
