"""Interpreter smoke test of the fp8 Triton kernels (their rows are GPU-only).

The native fp8 rows need sm89+ and are not offered under Triton's CPU
interpreter, because the interpreter's fp32 -> e4m3 cast is wrong: it drops
the carry when rounding up a mantissa (127.99 becomes 64 instead of 128).
Their bitwise parity is proven on the H200 (perf/results/h200/parity_*.json).
This test still runs the kernels here, so CPU CI catches indexing, masking,
stride and scale-layout bugs: the scales (no fp8 cast involved) must equal the
reference bitwise, and every q value must have the reference's sign and be
within the interpreter's error (at most half the reference value, plus one
subnormal step). A value written to the wrong place, or not written, fails.
"""

from __future__ import annotations

import pytest
import torch


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:  # not installed, or hidden by RAPID_LLM_HIDE_LIBS (the absence matrix)
        return False
    return True


def _under_interpreter() -> bool:
    from rapid_llm.kernels.dispatcher import probe_environment

    device = probe_environment().device  # sets TRITON_INTERPRET=1 when the process opted in
    return device.kind == "cpu" and device.triton_interpreter


pytestmark = [
    pytest.mark.skipif(
        not _under_interpreter(),
        reason="runs the fp8 kernels under Triton's CPU interpreter only "
        "(RAPID_LLM_TRITON_INTERPRET=1, no GPU); on a GPU the parity suite covers them",
    ),
    pytest.mark.skipif(not _triton_importable(), reason="triton does not import here (not installed or hidden)"),
]


def _assert_close_under_interpreter(q, q_reference):
    got, want = q.float(), q_reference.float()
    beyond_one_step = want.abs() > 2.0**-9  # the interpreter may round the smallest subnormal to zero
    assert torch.equal(got[beyond_one_step].sign(), want[beyond_one_step].sign()), "a q value has the wrong sign"
    assert ((got - want).abs() <= want.abs() / 2 + 2.0**-9).all(), "q differs beyond the interpreter's cast error"


@pytest.mark.parametrize(
    "tokens, hidden, group_size, column_major",
    [(5, 256, 128, False), (7, 384, 128, True), (9, 512, 64, True), (3, 1000, None, False), (2, 20000, None, False)],
)
def test_fp8_quantization_kernels_index_like_the_reference(tokens, hidden, group_size, column_major):
    from rapid_llm.kernels.ops.quantization import fp8_quant, reference

    x = torch.randn(tokens, hidden + 3, generator=torch.Generator().manual_seed(tokens))[:, :hidden] * 3
    if group_size is None:
        (q, scale), (q_ref, scale_ref) = fp8_quant.per_token_fp8(x), reference.per_token_fp8(x)
    else:
        q, scale = fp8_quant.per_token_group_fp8(x, group_size, column_major)
        q_ref, scale_ref = reference.per_token_group_fp8(x, group_size, column_major)
    assert scale.stride() == scale_ref.stride() and torch.equal(scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)


def _fused_inputs(tokens, hidden, seed):
    """x [tokens, hidden] with a token stride of its own, a stride-2 weight, a residual, a gate | up x."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden + 3, generator=generator)[:, :hidden] * 3
    weight = torch.randn(2 * hidden, generator=generator)[::2]
    residual = torch.randn(tokens, hidden, generator=generator)
    gated = torch.randn(tokens, 2 * hidden + 5, generator=generator)[:, : 2 * hidden]
    return x, weight, residual, gated


def _assert_same_scales(scale, scale_reference):
    """Same layout; values within a few fp32 ulps (the row's sum of squares adds in another order)."""
    assert scale.stride() == scale_reference.stride()
    torch.testing.assert_close(scale, scale_reference, rtol=2e-6, atol=0)


@pytest.mark.parametrize(
    "tokens, hidden, group_size, column_major",
    # one pass; column-major scales; groups of 64 and 32 (padded tiles); a row of two passes (256 groups)
    [(3, 256, 128, False), (5, 384, 128, True), (4, 512, 64, True), (3, 96, 32, False), (2, 32768, 128, True)],
)
def test_fused_group_quantization_kernels_index_like_the_reference(tokens, hidden, group_size, column_major):
    """Catches the fused epilogues reading or writing the wrong columns, groups, residual or scale slots."""
    from rapid_llm.kernels.ops.quantization import fused_fp8, reference

    x, weight, residual, gated = _fused_inputs(tokens, hidden, tokens + hidden)
    q, scale = fused_fp8.rms_norm_per_token_group_fp8(x, weight, 1e-6, group_size, column_major)
    q_ref, scale_ref = reference.rms_norm_per_token_group_fp8(x, weight, 1e-6, group_size, column_major)
    _assert_same_scales(scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)

    residual_ref = residual.clone()
    q, scale = fused_fp8.fused_add_rms_norm_per_token_group_fp8(x, residual, weight, 1e-6, group_size, column_major)
    q_ref, scale_ref = reference.fused_add_rms_norm_per_token_group_fp8(
        x, residual_ref, weight, 1e-6, group_size, column_major
    )
    assert torch.equal(residual, residual_ref), "the residual was not updated as the reference updates it"
    _assert_same_scales(scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)

    q, scale = fused_fp8.silu_and_mul_per_token_group_fp8(gated, group_size, column_major)
    q_ref, scale_ref = reference.silu_and_mul_per_token_group_fp8(gated, group_size, column_major)
    _assert_same_scales(scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)


@pytest.mark.parametrize("tokens, hidden", [(3, 1000), (2, 20000)])  # one pass; two passes over 5 groups of 4000
def test_fused_static_quantization_kernels_index_like_the_reference(tokens, hidden):
    """Catches the static epilogues misreading the one scale (a strided one-element view) or the row."""
    from rapid_llm.kernels.ops.quantization import fused_fp8, reference

    x, weight, residual, _ = _fused_inputs(tokens, hidden, tokens + hidden)
    scale = torch.tensor([7.0, 0.05])[1:]
    _assert_close_under_interpreter(
        fused_fp8.rms_norm_static_fp8(x, weight, scale, 1e-6), reference.rms_norm_static_fp8(x, weight, scale, 1e-6)
    )
    residual_ref = residual.clone()
    q = fused_fp8.fused_add_rms_norm_static_fp8(x, residual, weight, scale, 1e-6)
    q_ref = reference.fused_add_rms_norm_static_fp8(x, residual_ref, weight, scale, 1e-6)
    assert torch.equal(residual, residual_ref), "the residual was not updated as the reference updates it"
    _assert_close_under_interpreter(q, q_ref)


@pytest.mark.parametrize("rows", [2, 4])
def test_fused_norm_kernels_take_several_rows_per_program(rows):
    """Catches the prefill launch (several rows per program under one weight read) skipping or repeating a
    row, above all the last program's partial share: 7 tokens in programs of 2 or 4 rows; the fused-add ops
    must update the residual exactly once."""
    from rapid_llm.kernels.ops.launch_override import launch_override
    from rapid_llm.kernels.ops.quantization import fused_fp8, reference

    x, weight, residual, _ = _fused_inputs(7, 384, 11)
    scale = torch.tensor([0.05])
    with launch_override("native/rms_norm_per_token_group_fp8", ROWS=rows):
        q, group_scale = fused_fp8.rms_norm_per_token_group_fp8(x, weight, 1e-6, 128, True)
    q_ref, scale_ref = reference.rms_norm_per_token_group_fp8(x, weight, 1e-6, 128, True)
    _assert_same_scales(group_scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)
    residual_ref = residual.clone()
    with launch_override("native/fused_add_rms_norm_per_token_group_fp8", ROWS=rows):
        q, group_scale = fused_fp8.fused_add_rms_norm_per_token_group_fp8(x, residual, weight, 1e-6, 128, False)
    q_ref, scale_ref = reference.fused_add_rms_norm_per_token_group_fp8(x, residual_ref, weight, 1e-6, 128, False)
    assert torch.equal(residual, residual_ref), "a row's residual was added zero times or twice"
    _assert_same_scales(group_scale, scale_ref)
    _assert_close_under_interpreter(q, q_ref)
    with launch_override("native/rms_norm_static_fp8", ROWS=rows):
        q = fused_fp8.rms_norm_static_fp8(x, weight, scale, 1e-6)
    _assert_close_under_interpreter(q, reference.rms_norm_static_fp8(x, weight, scale, 1e-6))
    residual_ref = residual.clone()
    with launch_override("native/fused_add_rms_norm_static_fp8", ROWS=rows):
        q = fused_fp8.fused_add_rms_norm_static_fp8(x, residual, weight, scale, 1e-6)
    q_ref = reference.fused_add_rms_norm_static_fp8(x, residual_ref, weight, scale, 1e-6)
    assert torch.equal(residual, residual_ref), "a row's residual was added zero times or twice"
    _assert_close_under_interpreter(q, q_ref)


def _kv_write_inputs(generator):
    """(token data, loc, buffer, scales) of update_kv_buffer_fp8: 9 tokens of 8 heads x 72 into 40 rows."""
    kv = torch.randn(9, 8, 72, generator=generator)
    loc = torch.randperm(40, generator=generator)[:9].to(torch.int32)
    buffer = torch.randn(40, 8, 72, generator=generator).to(torch.float8_e4m3fn)
    return (kv,), loc, buffer, (torch.tensor([0.01]), torch.tensor([0.05]))


def _mla_write_inputs(generator):
    """(token data, loc, buffer, scales) of update_mla_buffer_fp8: latent 37 and rope 11 wide (off every block
    size), slices of one projection output, strided loc with padding, into 40 rows in wider storage."""
    projection = torch.randn(9, 37 + 11 + 6, generator=generator)
    pairs = torch.full((9, 2), -7, dtype=torch.int64)
    pairs[:, 0] = torch.randperm(40, generator=generator)[:9]
    pairs[::4, 0] = -1
    buffer = torch.randn(40, 37 + 11 + 3, generator=generator).to(torch.float8_e4m3fn)[:, :48]
    return (projection[:, :37], projection[:, 37:48]), pairs[:, 0], buffer, (torch.tensor([0.02]),)


def _copy_keeping_strides(t):
    """A copy of t with t's strides (clone() packs a strided view: the kernel would see no row stride)."""
    copy = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    copy.view(torch.uint8).copy_(t.view(torch.uint8))
    return copy


@pytest.mark.parametrize(
    "write, inputs", [("update_kv_buffer_fp8", _kv_write_inputs), ("update_mla_buffer_fp8", _mla_write_inputs)]
)
def test_fp8_kv_write_kernels_index_like_the_reference(write, inputs):
    import importlib

    from rapid_llm.kernels.ops.kvcache import reference

    kernel = getattr(importlib.import_module(f"rapid_llm.kernels.ops.kvcache.{write}"), write)
    data, loc, buffer, scales = inputs(torch.Generator().manual_seed(0))
    got = kernel(*data, loc, _copy_keeping_strides(buffer), *scales)
    want = getattr(reference, write)(*data, loc, _copy_keeping_strides(buffer), *scales)
    written = loc[loc >= 0].long()
    untouched = torch.ones(buffer.shape[0], dtype=torch.bool)
    untouched[written] = False
    assert torch.equal(got[untouched].view(torch.uint8), buffer[untouched].view(torch.uint8))
    _assert_close_under_interpreter(got[written], want[written])
