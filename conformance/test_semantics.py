"""One semantics per op, whatever row serves it: invalid ids, padding, repeats, scales, checks.

Each test runs the same input through a PlannedOp of every row that runs
here (the reference always; native rows on the GPU or under the
interpreter; the CUDA extension's rows where built) and demands the outcome
the contract states, so no row can differ from another on invalid input.

Value checks (ids past the end, scale signs) run for CPU tensors always and
for CUDA tensors under RAPID_LLM_CHECK_BOUNDS=1; `value_checks(False)`
forces the unchecked path so the CPU exercises what every row does then.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.cases import TORCH_DTYPES
from conformance.rows_here import TABLE, loadable_rows, planner_forcing, torch_device
from conformance.tolerances import tolerance
from rapid_llm.kernels.dispatcher import NoEligibleKernel, Planner, probe_environment
from rapid_llm.kernels.ops.checks import OpInputError, value_checks

DEVICE = torch_device()


def _rows(op, dtype="fp32"):
    return [pytest.param(planned, id=name) for name, planned in loadable_rows(op, dtype)]


# ---------------------------------------------------------------------------
# KV writes (the GQA KV buffer and the MLA latent cache): ids past the end, padding, repeats
# ---------------------------------------------------------------------------


class _KvWrite:
    """update_kv_buffer(_fp8): token data (kv,), a row of the cache is kv[token]."""

    op, fp8_op, scale_count = "kvcache.update_kv_buffer", "kvcache.update_kv_buffer_fp8", 2

    @staticmethod
    def inputs(rows=8, tokens=3, row_width=64):
        generator = torch.Generator().manual_seed(7)
        kv = torch.randn(tokens, 4, row_width // 4, generator=generator).to(DEVICE)
        buffer = torch.randn(rows, 4, row_width // 4, generator=generator).to(DEVICE)
        return (kv,), buffer

    @staticmethod
    def row(data, token):
        return data[0][token]


class _MlaWrite:
    """update_mla_buffer(_fp8): token data (latent, rope), a row of the cache is latent[token] | rope[token]."""

    op, fp8_op, scale_count = "kvcache.update_mla_buffer", "kvcache.update_mla_buffer_fp8", 1

    @staticmethod
    def inputs(rows=8, tokens=3, row_width=64):
        generator = torch.Generator().manual_seed(7)
        rope_dim = row_width // 8
        # latent and rope sliced from one projection output, as engines pass them
        projection = torch.randn(tokens, row_width + 16, generator=generator).to(DEVICE)
        buffer = torch.randn(rows, row_width, generator=generator).to(DEVICE)
        return (projection[:, : row_width - rope_dim], projection[:, row_width - rope_dim : row_width]), buffer

    @staticmethod
    def row(data, token):
        return torch.cat((data[0][token], data[1][token]))


_WRITES = (_KvWrite, _MlaWrite)


def _write_rows(fp8=False):
    """(PlannedOp, write) for every row of the KV writes (fp8: their e4m3 variants) that runs here."""
    return [
        pytest.param(planned, write, id=name)
        for write in _WRITES
        for name, planned in loadable_rows(write.fp8_op if fp8 else write.op)
    ]


def _ids(*values):
    return torch.tensor(values, device=DEVICE)


@pytest.mark.parametrize("planned, write", _write_rows())
def test_kv_write_ids_past_the_end_raise_when_checked(planned, write):
    """Catches a row that writes (or crashes on) slot 8 of an 8-row buffer while another raises."""
    data, buffer = write.inputs()
    before = buffer.clone()
    with value_checks(True), pytest.raises(OpInputError) as info:
        planned(*data, _ids(0, 1, 8), buffer)
    assert info.value.argument == "loc" and "8" in str(info.value)
    assert torch.equal(buffer, before), "a rejected write must leave the buffer untouched"


@pytest.mark.parametrize("planned, write", _write_rows())
def test_kv_write_ids_past_the_end_are_dropped_by_every_row_when_unchecked(planned, write):
    """Catches rows disagreeing on unchecked input: every row writes slots 0 and 1 and drops slot 8."""
    data, buffer = write.inputs()
    expected = buffer.clone()
    expected[0], expected[1] = write.row(data, 0), write.row(data, 1)
    with value_checks(False):
        planned(*data, _ids(0, 1, 8), buffer)
    assert torch.equal(buffer, expected)


@pytest.mark.parametrize("planned, write", _write_rows())
def test_kv_write_negative_slots_are_padding(planned, write):
    """Catches a row writing (or raising on) slot -1: padding tokens of a batch must be skipped."""
    data, buffer = write.inputs()
    expected = buffer.clone()
    expected[5] = write.row(data, 1)
    planned(*data, _ids(-1, 5, -3), buffer)
    assert torch.equal(buffer, expected)


@pytest.mark.parametrize("planned, write", _write_rows())
def test_kv_write_repeated_slot_holds_elements_of_the_tokens_naming_it(planned, write):
    """Pins the contract for a repeated id: each element of the row comes from one of the tokens naming it
    (rows written by several programs may mix them element by element), and no other row changes."""
    data, buffer = write.inputs(rows=8, tokens=4, row_width=2048)  # rows of several blocks or programs
    before = buffer.clone()
    planned(*data, _ids(3, 6, 3, 3), buffer)
    candidates = torch.stack([write.row(data, token) for token in (0, 2, 3)])
    assert ((buffer[3][None] == candidates).any(dim=0)).all(), "an element of row 3 matches no token naming it"
    assert torch.equal(buffer[6], write.row(data, 1))
    others = [r for r in range(8) if r not in (3, 6)]
    assert torch.equal(buffer[others], before[others])


def _fp8_scales(write, bad=None):
    """The write's scales (0.5, then 0.25), the first replaced by a tensor of `bad` if given."""
    values = (0.5, 0.25)[: write.scale_count]
    if bad is not None:
        values = (bad,) + values[1:]
    return tuple(torch.tensor([value], device=DEVICE) for value in values)


@pytest.mark.parametrize("planned, write", _write_rows(fp8=True))
def test_fp8_kv_write_ids_past_the_end_and_padding(planned, write):
    """The fp8 writes share the slot rules: checked ids past the end raise, negative slots are skipped."""
    data, float_buffer = write.inputs()
    buffer = torch.zeros_like(float_buffer, dtype=torch.float8_e4m3fn)
    with value_checks(True), pytest.raises(OpInputError):
        planned(*data, _ids(0, 1, 8), buffer, *_fp8_scales(write))
    with value_checks(False):
        planned(*data, _ids(-1, 2, 8), buffer, *_fp8_scales(write))
    written = buffer.view(torch.uint8).reshape(8, -1).ne(0).any(dim=1).nonzero().flatten().tolist()
    assert written == [2], f"rows written: {written} (expected only slot 2)"


@pytest.mark.parametrize("planned, write", _write_rows(fp8=True))
@pytest.mark.parametrize("bad", [0.0, -0.5, float("inf"), float("nan")])
def test_fp8_kv_write_rejects_non_positive_or_non_finite_scales_when_checked(planned, write, bad):
    """Catches a scale of 0 (inf/NaN codes in the cache) or a negative scale (sign-flipped K) being accepted."""
    data, float_buffer = write.inputs()
    buffer = torch.zeros_like(float_buffer, dtype=torch.float8_e4m3fn)
    with value_checks(True), pytest.raises(OpInputError) as info:
        planned(*data, _ids(0, 1, 2), buffer, *_fp8_scales(write, bad))
    assert info.value.argument in ("k_scale", "scale") and "positive" in str(info.value)


# ---------------------------------------------------------------------------
# Rotary: positions past the cache, padding
# ---------------------------------------------------------------------------


_ROTARY_HEAD_DIM = 64  # a head_dim every rotary row serves (FlashInfer's: 64/128/256)


def _rotary_rows():
    """(PlannedOp, dtype) for every rotary row that runs here: in fp32 where it serves fp32, else in the first
    16-bit dtype it serves (FlashInfer's row is fp16/bf16 only), planned for the inputs below."""
    op = "embedding.rotary"
    shape = {"num_tokens": 3, "num_q_heads": 2, "num_kv_heads": 1, "head_dim": _ROTARY_HEAD_DIM}
    params = []
    for row in TABLE.rows(op):
        dtype = "fp32" if "fp32" in row.dtypes else sorted(row.dtypes)[0]
        try:
            planned = planner_forcing(op, row.name).plan(
                op, dtype=dtype, shape=shape, layout=TABLE.contracts[op].layouts
            )
        except NoEligibleKernel:
            continue
        params.append(pytest.param(planned, dtype, id=f"{row.name}-{dtype}"))
    return params


def _rotary_inputs(dtype, tokens=3):
    generator = torch.Generator().manual_seed(3)
    torch_dtype = TORCH_DTYPES[dtype]
    q = torch.randn(tokens, 2 * _ROTARY_HEAD_DIM, generator=generator).to(torch_dtype).to(DEVICE)
    k = torch.randn(tokens, _ROTARY_HEAD_DIM, generator=generator).to(torch_dtype).to(DEVICE)
    # fp32, rows of random values (no row is an identity rotation), storage past the last row (GPT-J rows)
    cache = torch.randn(17, _ROTARY_HEAD_DIM, generator=generator).to(DEVICE)[:16]
    return q, k, cache


@pytest.mark.parametrize("planned, dtype", _rotary_rows())
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_positions_past_the_cache_raise_when_checked(planned, dtype, is_neox):
    q, k, cache = _rotary_inputs(dtype)
    before = q.clone(), k.clone()
    with value_checks(True), pytest.raises(OpInputError) as info:
        planned(torch.tensor([0, 16, 2], device=DEVICE), q, k, _ROTARY_HEAD_DIM, cache, is_neox)
    assert info.value.argument == "positions" and "16" in str(info.value)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


@pytest.mark.parametrize("planned, dtype", _rotary_rows())
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rotary_padding_and_unchecked_positions_leave_tokens_unrotated_in_every_row(planned, dtype, is_neox):
    """Catches rows disagreeing: token 0 (position -1, padding) and token 2 (position 99, unchecked) stay as
    they were; token 1 is rotated like the reference rotates it. (FlashInfer's kernel indexes the cache
    unchecked: its adapter must route both to its identity row.)"""
    q, k, cache = _rotary_inputs(dtype)
    q_ref, k_ref = q.clone(), k.clone()
    reference = TABLE.reference("embedding.rotary")
    from rapid_llm.kernels.dispatcher import resolve_target

    positions = torch.tensor([-1, 5, 99], device=DEVICE)
    resolve_target(reference.target, None)[0](positions, q_ref, k_ref, _ROTARY_HEAD_DIM, cache, is_neox)
    original = q.clone(), k.clone()
    with value_checks(False):
        planned(positions, q, k, _ROTARY_HEAD_DIM, cache, is_neox)
    for token in (0, 2):
        assert torch.equal(q[token], original[0][token]) and torch.equal(k[token], original[1][token])
    atol, rtol = tolerance("embedding.rotary", dtype, 0)
    torch.testing.assert_close(q[1].float(), q_ref[1].float(), atol=atol, rtol=rtol)
    torch.testing.assert_close(k[1].float(), k_ref[1].float(), atol=atol, rtol=rtol)
    assert not torch.equal(q[1], original[0][1]), "token 1 must be rotated"


# ---------------------------------------------------------------------------
# Vocab embedding: negative ids are padding, empty shards
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("planned", _rows("embedding.vocab_embedding"))
def test_vocab_embedding_negative_ids_give_zero_rows_in_every_row(planned):
    """Catches the reference raising on id -1 while the native row returns zeros (the old split)."""
    table = torch.randn(10, 4, device=DEVICE)
    out = planned(torch.tensor([3, -1, 12, -5], device=DEVICE), table, 0, None)
    assert torch.equal(out[0], table[3])
    assert torch.count_nonzero(out[1:]) == 0


@pytest.mark.parametrize("planned", _rows("embedding.vocab_embedding"))
def test_vocab_embedding_of_an_empty_shard_is_zeros(planned):
    """Catches a raw RuntimeError from index_select on a 0-row table (a shard holding no rows)."""
    out = planned(torch.tensor([0, 7], device=DEVICE), torch.empty(0, 8, device=DEVICE), 4, None)
    assert out.shape == (2, 8) and torch.count_nonzero(out) == 0


# ---------------------------------------------------------------------------
# One check per call
# ---------------------------------------------------------------------------


def test_public_op_runs_its_check_exactly_once_per_call(monkeypatch):
    """Catches the public op checking, then the implementation checking again (twice the host cost)."""
    planner = Planner(probe_environment())
    calls = []
    check = planner.check_for("norm.rms_norm")

    def counted(*args):
        calls.append(1)
        return check(*args)

    planner._checks["norm.rms_norm"] = counted
    from rapid_llm.kernels.dispatcher import plan

    monkeypatch.setattr(plan, "_DEFAULT_PLANNER", planner)
    x, w = torch.randn(3, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    kernels.rms_norm(x, w, 1e-6)
    kernels.rms_norm(x, w, 1e-6)
    assert len(calls) == 2, f"{len(calls)} checks for 2 calls"


def test_planned_op_called_directly_still_rejects_bad_input():
    """Catches a PlannedOp (an engine's cached plan) running its kernel on input nobody checked."""
    planned = Planner(probe_environment()).plan(
        "norm.rms_norm", dtype="fp32", shape={"num_tokens": 4, "hidden": 16}, layout={"x:rows"}
    )
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(4, 16, device=DEVICE), torch.randn(15, device=DEVICE), 1e-6)
    assert info.value.argument == "weight"


def test_row_targets_do_not_check_again():
    """Catches a row target re-running the op's check (the public path would then check twice): a native or
    reference target called with a weight of the wrong length does not raise OpInputError itself."""
    from rapid_llm.kernels.ops.norm import reference

    with pytest.raises(Exception) as info:
        reference.rms_norm(torch.randn(4, 16), torch.randn(15), 1e-6)
    assert not isinstance(info.value, OpInputError)
