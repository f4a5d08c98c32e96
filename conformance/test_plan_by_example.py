"""Planning by example arguments: Planner.plan_for(op, *args) plans what the op's own check derives.

Catches an engine that plans from the tensors it holds getting another row than the public op would give
the same tensors (a layout tag lost on the way: the reference planned silently), a promise the op does not
define accepted, and a promise that never reaches dispatch.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from rapid_llm.kernels.dispatcher import Planner, dispatch, probe_environment
from rapid_llm.kernels.dispatcher.environment import device_of
from rapid_llm.kernels.ops.attention import DECODE, FINITE, PREFILL, checks


def _decode_args():
    generator = torch.Generator().manual_seed(3)
    page_table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    seq_lens = torch.tensor([7, 5], dtype=torch.int32)
    q = torch.randn(2, 4, 64, generator=generator)
    buffer = torch.randn(4 * 4, 4, 64, generator=generator)
    return (q, buffer, page_table, seq_lens, 4, 64**-0.5, None, None)


def _prefill_args():
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(9, 2, 64, generator=generator) for _ in range(3))
    return (q, k, v, torch.tensor([0, 4, 9], dtype=torch.int32), 5, 64**-0.5, True, False)


def test_planning_by_example_selects_what_the_public_op_would():
    """Catches plan_for dropping the layout tags or dims the check derives (the row the public op's path would
    select on the same tensors differs), and a plan whose output differs from the public op's."""
    env = probe_environment()
    args = _decode_args()
    planned = Planner(env).plan_for(DECODE, *args)
    anchor, layout, dims = checks.check_decode(*args)
    expected = dispatch(
        DECODE,
        device=device_of(anchor.device, env.triton_interpret),
        dtype="fp32",
        shape=dict(dims),
        layout=layout,
        libs=env.libs,
    )
    assert planned.row.name == expected.row.name
    torch.testing.assert_close(planned(*args), kernels.decode(*args), rtol=0, atol=0)


def test_a_promise_the_op_does_not_define_is_refused_naming_it():
    """Catches a typo in a promise accepted silently (the rows needing the real one never selected)."""
    with pytest.raises(ValueError, match=r"attention.decode: \['qkv:finite'\] are not promises"):
        Planner(probe_environment()).plan_for(DECODE, *_decode_args(), promises={FINITE})


def test_a_promise_reaches_dispatch():
    """Catches plan_for planning without the caller's promise: the explanation of the plan's query lists it."""
    planner = Planner(probe_environment())
    promised = planner.plan_for(PREFILL, *_prefill_args(), promises={FINITE})
    checked = planner.plan_for(PREFILL, *_prefill_args())
    assert FINITE in promised.explain().splitlines()[0]
    assert FINITE not in checked.explain().splitlines()[0]
