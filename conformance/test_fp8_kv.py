"""kvcache.update_kv_buffer_fp8: bad input and the dequantization bound, for every row eligible here.

Catches: an fp8 write that accepts a buffer of the wrong dtype (silently writing
bf16 bytes into an fp8 cache or the reverse), scales that are not one-element
fp32 device tensors (a Python float would force a sync or a recompile per
value), K and V scales swapped, and quantized rows that do not dequantize back
to kv within half an e4m3 step.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import loadable_rows, torch_device
from rapid_llm.kernels.ops.checks import OpInputError

OP = "kvcache.update_kv_buffer_fp8"
ROWS = [pytest.param(fn, id=name) for name, fn in loadable_rows(OP)] + [
    pytest.param(kernels.update_kv_buffer_fp8, id="public")]


def _args(tokens=4, rows=10, heads=4, head_dim=8, k_scale=0.05, v_scale=0.02):
    device = torch_device()
    return (torch.randn(tokens, heads, head_dim, device=device),
            torch.randperm(rows, device=device)[:tokens].to(torch.int32),
            torch.zeros(rows, heads, head_dim, device=device).to(torch.float8_e4m3fn),
            torch.tensor([k_scale], device=device), torch.tensor([v_scale], device=device))


def _expect(info, argument, words):
    error = info.value
    assert error.op == OP and error.argument == argument, (error.op, error.argument)
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


@pytest.mark.parametrize("fn", ROWS)
class TestBadInput:
    def test_buffer_in_kv_dtype_is_rejected(self, fn):
        kv, loc, buffer, k_scale, v_scale = _args()
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer.float(), k_scale, v_scale)
        _expect(info, "buffer", ["float8_e4m3fn", "torch.float32"])

    def test_python_float_scale_is_rejected(self, fn):
        kv, loc, buffer, _, v_scale = _args()
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer, 0.05, v_scale)
        _expect(info, "k_scale", ["torch.Tensor", "float"])

    def test_per_head_scales_are_rejected(self, fn):
        kv, loc, buffer, k_scale, _ = _args()
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer, k_scale, torch.ones(2, device=kv.device))
        _expect(info, "v_scale", ["one-element", "2 elements"])

    def test_half_precision_scale_is_rejected(self, fn):
        kv, loc, buffer, k_scale, v_scale = _args()
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer, k_scale, v_scale.half())
        _expect(info, "v_scale", ["torch.float32", "torch.float16"])

    def test_kv_with_odd_heads_is_rejected(self, fn):
        kv, loc, buffer, k_scale, v_scale = _args()
        with pytest.raises(OpInputError) as info:
            fn(kv[:, :3], loc, buffer[:, :3], k_scale, v_scale)
        _expect(info, "kv", ["2*Hk"])


@pytest.mark.parametrize("fn", ROWS)
def test_written_rows_dequantize_within_half_a_step_with_their_own_scale(fn):
    """K heads must use k_scale and V heads v_scale (scales 10x apart: swapping them breaks the bound);
    rows not in loc stay zero. |kv| < 448 * scale, so nothing saturates."""
    generator = torch.Generator().manual_seed(3)
    kv, loc, buffer, k_scale, v_scale = _args(tokens=6, rows=16, heads=8, head_dim=64, k_scale=0.05, v_scale=0.5)
    kv = (torch.randn(kv.shape, generator=generator) * 2).to(kv.device)
    fn(kv, loc, buffer, k_scale, v_scale)
    scales = torch.tensor([0.05] * 4 + [0.5] * 4, device=kv.device)[None, :, None]
    back = buffer[loc.long()].float() * scales
    bound = torch.maximum(kv.abs() * 2.0 ** -4, scales * 2.0 ** -10)
    assert ((back - kv).abs() <= bound * (1 + 1e-6)).all(), "a written value is off by more than half an e4m3 step"
    untouched = torch.ones(16, dtype=torch.bool, device=kv.device)
    untouched[loc.long()] = False
    assert torch.count_nonzero(buffer[untouched].float()) == 0, "a row not named in loc was written"


def test_row_ids_outside_the_buffer_raise_on_cpu_tensors():
    """CPU tensors are always value-checked (no device sync): an id past the buffer is an error, not a wild write."""
    from rapid_llm.kernels import update_kv_buffer_fp8

    kv, _, buffer, k_scale, v_scale = _args(tokens=2)
    if kv.is_cuda:
        kv, buffer, k_scale, v_scale = kv.cpu(), buffer.cpu(), k_scale.cpu(), v_scale.cpu()
    before = buffer.view(torch.uint8).clone()
    with pytest.raises(OpInputError) as info:
        update_kv_buffer_fp8(kv, torch.tensor([3, 10], dtype=torch.int32), buffer, k_scale, v_scale)
    _expect(info, "loc", ["< 10", "10"])
    assert torch.equal(buffer.view(torch.uint8), before), "a rejected write must leave the buffer untouched"
