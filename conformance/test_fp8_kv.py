"""The fp8 KV-cache writes (kvcache.update_kv_buffer_fp8, kvcache.update_mla_buffer_fp8): bad input and
the dequantization bound, for every row eligible here and the public ops.

Catches: an fp8 write that accepts a buffer of the wrong dtype (silently writing
bf16 bytes into an fp8 cache or the reverse), scales that are not one-element
fp32 device tensors (a Python float would force a sync or a recompile per
value), K and V scales swapped, and quantized rows that do not dequantize back
to their inputs within half an e4m3 step.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import loadable_rows, torch_device
from rapid_llm.kernels.ops.checks import OpInputError

OP = "kvcache.update_kv_buffer_fp8"
MLA_OP = "kvcache.update_mla_buffer_fp8"


def _kv_args(tokens=4, rows=10, heads=4, head_dim=8, k_scale=0.05, v_scale=0.02):
    device = torch_device()
    return (
        torch.randn(tokens, heads, head_dim, device=device),
        torch.randperm(rows, device=device)[:tokens].to(torch.int32),
        torch.zeros(rows, heads, head_dim, device=device).to(torch.float8_e4m3fn),
        torch.tensor([k_scale], device=device),
        torch.tensor([v_scale], device=device),
    )


def _mla_args(tokens=4, rows=10, rank=24, rope_dim=8, scale=0.05):
    device = torch_device()
    projection = torch.randn(tokens, rank + rope_dim + 8, device=device)  # latent and rope: slices of one output
    return (
        projection[:, :rank],
        projection[:, rank : rank + rope_dim],
        torch.randperm(rows, device=device)[:tokens].to(torch.int32),
        torch.zeros(rows, rank + rope_dim, device=device).to(torch.float8_e4m3fn),
        torch.tensor([scale], device=device),
    )


#: op -> (argument names in contract order, a builder of valid arguments, the public function)
WRITES = {
    OP: (("kv", "loc", "buffer", "k_scale", "v_scale"), _kv_args, kernels.update_kv_buffer_fp8),
    MLA_OP: (("latent", "rope", "loc", "buffer", "scale"), _mla_args, kernels.update_mla_buffer_fp8),
}
ROWS = [
    pytest.param(op, fn, id=name)
    for op, (_, _, public) in WRITES.items()
    for name, fn in loadable_rows(op) + [(f"public-{op}", public)]
]


def _call_with(op, fn, **replaced):
    """Call fn with the op's valid arguments, some replaced by name; returns the arguments used."""
    names, make, _ = WRITES[op]
    args = dict(zip(names, make()))
    args.update({name: value(args[name]) if callable(value) else value for name, value in replaced.items()})
    fn(*args.values())
    return args


def _expect(info, op, argument, words):
    error = info.value
    assert error.op == op and error.argument == argument, (error.op, error.argument)
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


@pytest.mark.parametrize("op, fn", ROWS)
class TestBadInput:
    def test_buffer_in_the_input_dtype_is_rejected(self, op, fn):
        with pytest.raises(OpInputError) as info:
            _call_with(op, fn, buffer=lambda buffer: buffer.float())
        _expect(info, op, "buffer", ["float8_e4m3fn", "torch.float32"])

    def test_python_float_scale_is_rejected(self, op, fn):
        first_scale = WRITES[op][0][3]
        with pytest.raises(OpInputError) as info:
            _call_with(op, fn, **{first_scale: 0.05})
        _expect(info, op, first_scale, ["torch.Tensor", "float"])

    def test_per_head_scales_are_rejected(self, op, fn):
        last_scale = WRITES[op][0][-1]
        with pytest.raises(OpInputError) as info:
            _call_with(op, fn, **{last_scale: lambda scale: torch.ones(2, device=scale.device)})
        _expect(info, op, last_scale, ["one-element", "2 elements"])

    def test_half_precision_scale_is_rejected(self, op, fn):
        last_scale = WRITES[op][0][-1]
        with pytest.raises(OpInputError) as info:
            _call_with(op, fn, **{last_scale: lambda scale: scale.half()})
        _expect(info, op, last_scale, ["torch.float32", "torch.float16"])


@pytest.mark.parametrize("op, fn", [param for param in ROWS if param.values[0] == OP])
def test_kv_with_odd_heads_is_rejected(op, fn):
    with pytest.raises(OpInputError) as info:
        _call_with(op, fn, kv=lambda kv: kv[:, :3], buffer=lambda buffer: buffer[:, :3])
    _expect(info, op, "kv", ["2*Hk"])


@pytest.mark.parametrize("op, fn", [param for param in ROWS if param.values[0] == MLA_OP])
def test_mla_rope_wider_than_the_buffer_leaves_is_rejected(op, fn):
    """Catches rope columns written past the end of the cache row (24 + 16 into rows of 32)."""
    with pytest.raises(OpInputError) as info:
        _call_with(op, fn, rope=lambda rope: torch.randn(rope.shape[0], 16, device=rope.device))
    _expect(info, op, "buffer", ["[rows, 40]", "[10, 32]"])


def _assert_written_within_half_a_step(buffer, loc, source, scales):
    """buffer's rows loc dequantize (times scales) to source within half an e4m3 step; other rows stay zero."""
    back = buffer[loc.long()].float() * scales
    bound = torch.maximum(source.abs() * 2.0**-4, scales * 2.0**-10)
    assert ((back - source).abs() <= bound * (1 + 1e-6)).all(), "a written value is off by more than half an e4m3 step"
    untouched = torch.ones(buffer.shape[0], dtype=torch.bool, device=buffer.device)
    untouched[loc.long()] = False
    assert torch.count_nonzero(buffer[untouched].float()) == 0, "a row not named in loc was written"


@pytest.mark.parametrize("op, fn", [param for param in ROWS if param.values[0] == OP])
def test_written_rows_dequantize_within_half_a_step_with_their_own_scale(op, fn):
    """K heads must use k_scale and V heads v_scale (scales 10x apart: swapping them breaks the bound);
    rows not in loc stay zero. |kv| < 448 * scale, so nothing saturates."""
    generator = torch.Generator().manual_seed(3)
    kv, loc, buffer, k_scale, v_scale = _kv_args(tokens=6, rows=16, heads=8, head_dim=64, k_scale=0.05, v_scale=0.5)
    kv = (torch.randn(kv.shape, generator=generator) * 2).to(kv.device)
    fn(kv, loc, buffer, k_scale, v_scale)
    scales = torch.tensor([0.05] * 4 + [0.5] * 4, device=kv.device)[None, :, None]
    _assert_written_within_half_a_step(buffer, loc, kv, scales)


@pytest.mark.parametrize("op, fn", [param for param in ROWS if param.values[0] == MLA_OP])
def test_mla_rows_dequantize_within_half_a_step_latent_then_rope(op, fn):
    """Every written element, latent and rope part, dequantizes to its input; the rope part lands after the
    latent (rope values 100x smaller than latent's: a swapped or shifted part breaks the bound)."""
    generator = torch.Generator().manual_seed(3)
    latent, rope, loc, buffer, scale = _mla_args(tokens=6, rows=16, rank=512, rope_dim=64, scale=0.05)
    latent = (torch.randn(latent.shape, generator=generator) * 2).to(latent.device)
    rope = (torch.randn(rope.shape, generator=generator) / 50).to(rope.device)
    fn(latent, rope, loc, buffer, scale)
    _assert_written_within_half_a_step(buffer, loc, torch.cat((latent, rope), dim=1), scale)


@pytest.mark.parametrize("op", WRITES)
def test_row_ids_outside_the_buffer_raise_on_cpu_tensors(op):
    """CPU tensors are always value-checked (no device sync): an id past the buffer is an error, not a wild write."""
    names, make, public = WRITES[op]
    args = dict(zip(names, (t.cpu() for t in make(tokens=2))))
    before = args["buffer"].view(torch.uint8).clone()
    args["loc"] = torch.tensor([3, 10], dtype=torch.int32)
    with pytest.raises(OpInputError) as info:
        public(*args.values())
    _expect(info, op, "loc", ["< 10", "10"])
    assert torch.equal(args["buffer"].view(torch.uint8), before), "a rejected write must leave the buffer untouched"
