"""The comm family's EP contracts on one rank: bad input, unchecked ids, and the handle's own checks.

Runs against the public functions over a one-rank group (conformance/cases/comm.py's: gloo on the CPU, NCCL
on a GPU): each bad argument raises OpInputError naming the op, the argument and the expectation before any
exchange. The cross-rank checks (a mismatch, a rank failing alone) run across processes in
test_comm_distributed.py. With value checks off (`value_checks(False)`), an expert id outside [-1, E) is
left out as -1 on every row that runs here.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases.comm import one_rank_group
from conformance.rows_here import planner_forcing, torch_device
from rapid_llm import kernels
from rapid_llm.kernels.collectives import EpHandle
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.checks import OpInputError, value_checks
from rapid_llm.kernels.ops.comm import EP_DISPATCH

DEVICE = torch_device()


@pytest.fixture(autouse=True)
def _world():
    one_rank_group("default")


def _inputs(tokens=4, hidden=256, top_k=2):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(tokens, hidden, generator=generator).to(DEVICE)
    ids = torch.tensor([[0, 1], [2, 3], [1, -1], [3, 0]], device=DEVICE)[:tokens, :top_k]
    weights = torch.rand(tokens, top_k, generator=generator).to(DEVICE)
    return x, ids, weights


def _raises(call, argument, *words):
    with value_checks(True), pytest.raises(OpInputError) as info:  # id ranges and row counts: value checks
        call()
    error = info.value
    assert error.argument == argument, f"error names {error.argument!r}, expected {argument!r}: {error}"
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


def test_dispatch_bad_input_names_the_argument():
    """Catches a bad argument reaching the exchange (a collective of garbage sizes, or a crash inside it)."""
    x, ids, weights = _inputs()
    _raises(lambda: kernels.ep_dispatch(x.int(), ids, weights, 4), "x", "float32, float16 or bfloat16")
    _raises(lambda: kernels.ep_dispatch(x[0], ids, weights, 4), "x", "[T, hidden]")
    _raises(lambda: kernels.ep_dispatch(x, ids.float(), weights, 4), "topk_ids", "int32/int64")
    _raises(lambda: kernels.ep_dispatch(x, ids[:3], weights, 4), "topk_ids", "4 rows")
    _raises(lambda: kernels.ep_dispatch(x, ids, weights.half(), 4), "topk_weights", "float32")
    _raises(lambda: kernels.ep_dispatch(x, ids, weights, 0), "num_experts", "positive int")
    _raises(lambda: kernels.ep_dispatch(x, ids + 4, weights, 4), "topk_ids", "[0, 4) or -1", "4 at [0, 0]")
    _raises(lambda: kernels.ep_dispatch(x, ids - 2, weights, 4), "topk_ids", "-2 at [0, 0]")
    _raises(lambda: kernels.ep_dispatch(x, ids, weights, 4, x_scale=weights), "x_scale", "None for torch.float32")
    fp8 = x.to(torch.float8_e4m3fn)
    _raises(lambda: kernels.ep_dispatch(fp8, ids, weights, 4), "x_scale", "float32 tensor [4, 2]")
    _raises(lambda: kernels.ep_dispatch(fp8[:, :200], ids, weights, 4, x_scale=weights), "x", "multiple of 128")
    _raises(lambda: kernels.ep_dispatch(x, ids, weights, 4, group=3), "group", "ProcessGroup")


def test_combine_bad_input_names_the_argument():
    """Catches a combine reading a handle it cannot use (another op's object, another world's layout) or rows
    the dispatch did not receive."""
    x, ids, weights = _inputs()
    sent = kernels.ep_dispatch(x, ids, weights, 4)
    _raises(lambda: kernels.ep_combine(sent.x.int(), sent.handle), "y", "float32, float16 or bfloat16")
    _raises(lambda: kernels.ep_combine(sent.x[1:], sent.handle), "y", "4 rows")
    _raises(lambda: kernels.ep_combine(sent.x, sent.handle.tensors()), "handle", "EpHandle")
    two_ranks = EpHandle(sent.handle.token_in_rank.repeat(1, 2), sent.handle.recv_counts.repeat(2))
    _raises(lambda: kernels.ep_combine(sent.x, two_ranks), "handle", "a group of 1 ranks", "2 ranks")
    lopsided = EpHandle(sent.handle.token_in_rank, sent.handle.recv_counts, "deep_ep", ())
    _raises(lambda: kernels.ep_combine(sent.x, lopsided), "handle", "library part")
    _raises(lambda: EpHandle.from_tensors([sent.handle.token_in_rank]), "handle", "1 tensors")


@pytest.mark.parametrize("row", ["torch/ep_dispatch", "native/ep_dispatch"])
def test_unchecked_ids_outside_the_experts_are_left_out(row):
    """With value checks off, an id past the expert count (or below -1) sends nothing, like -1, on every row
    that runs here. Catches a row indexing the owner table out of bounds or localising a bad id into a real
    expert's slot."""
    x, ids, weights = _inputs()
    bad = ids.clone()
    bad[0, 0], bad[3, 1] = 7, -5
    clean = torch.where((bad >= 0) & (bad < 4), bad, -1)
    try:
        plan = planner_forcing(EP_DISPATCH, row).plan(
            EP_DISPATCH, dtype="fp32", shape={"num_tokens": 4, "hidden": 256, "top_k": 2, "num_experts": 4,
                                               "world_size": 1}, layout=frozenset(),
        )  # fmt: skip
    except NoEligibleKernel as error:
        pytest.skip(f"{row} not eligible here: {str(error).splitlines()[0]}")
    with value_checks(False):
        got = plan(x, bad, weights, 4, None, None)
    want = kernels.ep_dispatch(x, clean, weights, 4)
    for name, a, b in zip(
        ("x", "ids", "weights", "counts", "token_in_rank", "recv_counts"), got.compared(), want.compared()
    ):
        assert torch.equal(a, b), name
