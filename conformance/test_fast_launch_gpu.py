"""fast_launch on a CUDA device: a cached launch gives bit-identical results to Triton's own launch.

Each case runs an op's native row twice with Triton's binder (the fast path switched off, as for a Triton
whose launch API this module does not know), then twice through the cache, and compares the outputs
bit for bit; the cached calls must have taken the cached path (the kernel's Launcher holds an entry and
Triton's binder is not called). Catches a cached launch that passes different arguments (a dropped or
reordered constexpr, a stale descriptor, another device's function) or that silently never engages.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="fast_launch wraps Triton's launches; Triton is absent in this cell")

from triton.runtime.jit import JITFunction  # noqa: E402

from perf.host_path import CASES, GPU_CASES, case_args  # noqa: E402
from rapid_llm.kernels.dispatcher import default_planner  # noqa: E402
from rapid_llm.kernels.ops import fast_launch  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or fast_launch._interpreting(), reason="needs a CUDA device (no interpreter)"
)


def _outputs(result):
    return [t.clone() for t in (result if isinstance(result, tuple) else (result,)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", sorted([*CASES, *GPU_CASES]))
def test_a_cached_launch_matches_tritons_launch_bit_for_bit(name, monkeypatch):
    op, _, _ = {**CASES, **GPU_CASES}[name]
    make = lambda: case_args(name, torch, "cuda")  # noqa: E731  fresh inputs per run: some ops write in place
    planned = default_planner().plan_for(op, *make())
    if not planned.row.name.startswith("native/"):
        pytest.skip(f"{op} selects {planned.row.name} here, not a Triton row")
    binder_calls = []
    real_run = JITFunction.run

    def counting_run(self, *args, **kwargs):
        binder_calls.append(self)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", counting_run)
    monkeypatch.setitem(fast_launch._state, "api", False)  # Triton's own launch for every call
    slow = [_outputs(planned.kernel(*make())) for _ in range(2)]
    monkeypatch.setitem(fast_launch._state, "api", True)
    planned.kernel(*make())  # primes the cache for these arguments' specialisation
    before = len(binder_calls)
    fast = [_outputs(planned.kernel(*make())) for _ in range(2)]
    torch.cuda.synchronize()
    assert len(binder_calls) == before, f"{name}: the cached calls went through JITFunction.run"
    for got, expected in zip(fast, slow):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert torch.equal(a, b), f"{name}: the cached launch's output differs from Triton's launch"
