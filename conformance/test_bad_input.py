"""Bad input gets an OpInputError naming the op, the argument and what was expected.

Run against a PlannedOp of every row eligible here (the reference always;
native Triton rows on the GPU or under the interpreter) and against the
public ops, so no implementation crashes inside a kernel or returns a silent
wrong answer. Each op checks its arguments in one place (its contract's
check); a PlannedOp called directly runs it too, then confirms the planned
row accepts the call (device, dtype, layout tags).
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import TABLE, loadable_rows, planner_forcing, skip_reason
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops.checks import OpInputError


def _loadable_rows(op, env):
    """Rows of `op` that can run on this machine, as pytest params (name, fn)."""
    return [pytest.param(name, fn, id=name) for name, fn in loadable_rows(op)]


def _device(env):
    return "cuda" if env.device.kind == "cuda" else "cpu"


def _env():
    from rapid_llm.kernels.dispatcher import probe_environment

    return probe_environment()


RMS_ROWS = _loadable_rows("norm.rms_norm", _env()) + [pytest.param("public", kernels.rms_norm, id="public")]
SCALE_ROWS = _loadable_rows("elementwise.scale", _env()) + [pytest.param("public", kernels.scale, id="public")]


def _expect(error_info, argument, words):
    error = error_info.value
    assert error.argument == argument, f"error names argument {error.argument!r}, expected {argument!r}"
    assert error.op in str(error) and argument in str(error)
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


@pytest.mark.parametrize("name, fn", RMS_ROWS)
class TestRmsNormBadInput:
    def test_non_tensor_x_is_named(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn([1.0, 2.0], torch.ones(2), 1e-6)
        _expect(info, "x", ["torch.Tensor", "list"])

    def test_integer_x_is_rejected_not_truncated(self, name, fn, env):
        x = torch.ones(2, 8, dtype=torch.int32, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(8, device=_device(env)), 1e-6)
        _expect(info, "x", ["float32", "torch.int32"])

    def test_weight_of_wrong_length_is_rejected(self, name, fn, env):
        x = torch.randn(2, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(7, device=_device(env)), 1e-6)
        _expect(info, "weight", ["[8]", "[7]"])

    def test_weight_of_other_half_dtype_is_rejected(self, name, fn, env):
        x = torch.randn(2, 8, device=_device(env)).half()
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(8, device=_device(env), dtype=torch.bfloat16), 1e-6)
        _expect(info, "weight", ["torch.float32", "torch.bfloat16"])

    def test_negative_eps_is_rejected(self, name, fn, env):
        x = torch.randn(2, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(8, device=_device(env)), -1.0)
        _expect(info, "eps", [">= 0"])

    def test_tensor_eps_is_rejected(self, name, fn, env):
        x = torch.randn(2, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(8, device=_device(env)), torch.tensor(1e-6))
        _expect(info, "eps", ["real number", "Tensor"])

    def test_zero_dim_x_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.tensor(1.0, device=_device(env)), torch.ones(1, device=_device(env)), 1e-6)
        _expect(info, "x", ["hidden"])

    def test_zero_hidden_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.ones(4, 0, device=_device(env)), torch.ones(0, device=_device(env)), 1e-6)
        _expect(info, "x", ["hidden"])

    def test_weight_on_another_device_is_rejected(self, name, fn, env):
        if env.device.kind != "cuda":
            pytest.skip("needs a CUDA device to put weight on another device than x")
        x = torch.randn(2, 8, device="cuda")
        with pytest.raises(OpInputError) as info:
            fn(x, torch.ones(8), 1e-6)
        _expect(info, "weight", ["device"])


@pytest.mark.parametrize("name, fn", SCALE_ROWS)
class TestScaleBadInput:
    def test_integer_x_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.ones(4, dtype=torch.int64, device=_device(env)), 2.0)
        _expect(info, "x", ["torch.int64"])

    @pytest.mark.parametrize("factor", ["2", True, None, 1j])
    def test_non_real_factor_is_rejected(self, name, fn, env, factor):
        with pytest.raises(OpInputError) as info:
            fn(torch.ones(4, device=_device(env)), factor)
        _expect(info, "factor", ["real number"])


def _native(op, row, env):
    """The PlannedOp of a native row, or skip with the row's explain() reason."""
    from conformance.rows_here import planned_row

    planned, reason = planned_row(op, row, env=env)
    if planned is None:
        pytest.skip(reason)
    return planned


def test_planned_native_rms_norm_refuses_a_call_on_another_device(env):
    """Catches a Triton kernel handed memory of a device it was not planned for (a crash or garbage)."""
    planned = _native("norm.rms_norm", "native/rms_norm", env)
    if env.device.kind != "cuda":
        pytest.skip("needs a CUDA plan to call with CPU tensors")
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(2, 8), torch.ones(8), 1e-6)
    _expect(info, "device", ["plan again"])


def test_planned_native_rms_norm_refuses_non_unit_hidden_stride(env):
    """Catches the kernel reading a transposed x as if hidden were contiguous (silent wrong answer)."""
    planned = _native("norm.rms_norm", "native/rms_norm", env)
    x = torch.randn(8, 4, device=_device(env)).t()
    with pytest.raises(OpInputError) as info:
        planned(x, torch.ones(8, device=_device(env)), 1e-6)
    _expect(info, "x", ["x:rows", "native/rms_norm"])


def test_planned_native_scale_refuses_non_contiguous_x(env):
    """Catches a flat kernel walking a strided tensor's storage in the wrong order."""
    planned = _native("elementwise.scale", "native/scale", env)
    x = torch.randn(8, 4, device=_device(env)).t()
    with pytest.raises(OpInputError) as info:
        planned(x, 2.0)
    _expect(info, "x", ["x:contiguous"])


def test_public_ops_route_unsupported_layouts_to_the_reference(env):
    """Catches the public op failing (or a native row misreading memory) on a layout only the reference serves."""
    x = torch.randn(8, 4, device=_device(env)).t()
    assert torch.equal(kernels.scale(x, 2.0), x * 2.0)


FUSED_ROWS = _loadable_rows("norm.fused_add_rms_norm", _env()) + [
    pytest.param("public", kernels.fused_add_rms_norm, id="public")
]


@pytest.mark.parametrize("name, fn", FUSED_ROWS)
class TestFusedAddRmsNormBadInput:
    def test_residual_of_another_shape_is_rejected(self, name, fn, env):
        x = torch.randn(4, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.randn(4, 9, device=_device(env)), torch.ones(8, device=_device(env)), 1e-6)
        _expect(info, "residual", ["[4, 8]", "[4, 9]"])

    def test_residual_of_another_dtype_is_rejected(self, name, fn, env):
        x = torch.randn(4, 8, device=_device(env)).half()
        with pytest.raises(OpInputError) as info:
            fn(x, torch.randn(4, 8, device=_device(env)), torch.ones(8, device=_device(env)).half(), 1e-6)
        _expect(info, "residual", ["torch.float16", "torch.float32"])

    def test_residual_aliasing_x_is_rejected(self, name, fn, env):
        """Catches the add reading values it already overwrote (x and residual are both written)."""
        x = torch.randn(4, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, x, torch.ones(8, device=_device(env)), 1e-6)
        _expect(info, "residual", ["overlapping"])

    def test_residual_partly_overlapping_x_is_rejected(self, name, fn, env):
        """Catches x and residual views shifted by one row: each row's add reads a row another program wrote."""
        storage = torch.randn(5, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(storage[:4], storage[1:], torch.ones(8, device=_device(env)), 1e-6)
        _expect(info, "residual", ["overlapping"])

    def test_weight_inside_x_is_rejected(self, name, fn, env):
        """Catches weight read after the kernel overwrote it (weight a row of x)."""
        x = torch.randn(4, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.randn(4, 8, device=_device(env)), x[0], 1e-6)
        _expect(info, "weight", ["overlapping"])

    def test_bad_weight_is_named_under_this_op(self, name, fn, env):
        x = torch.randn(4, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, torch.randn(4, 8, device=_device(env)), torch.ones(3, device=_device(env)), 1e-6)
        _expect(info, "weight", ["[8]"])
        assert info.value.op == "norm.fused_add_rms_norm"

    def test_inputs_are_untouched_when_rejected(self, name, fn, env):
        """Catches a partial write (residual already added) before a late check fails."""
        x = torch.randn(4, 8, device=_device(env))
        residual = torch.randn(4, 8, device=_device(env))
        before = (x.clone(), residual.clone())
        with pytest.raises(OpInputError):
            fn(x, residual, torch.ones(8, device=_device(env)), -1.0)
        assert torch.equal(x, before[0]) and torch.equal(residual, before[1])


GATED_ROWS = [
    param
    for op, public in (
        ("activation.silu_and_mul", kernels.silu_and_mul),
        ("activation.gelu_tanh_and_mul", kernels.gelu_tanh_and_mul),
    )
    for param in _loadable_rows(op, _env()) + [pytest.param(f"public:{op}", public, id=f"public-{op}")]
]


@pytest.mark.parametrize("name, fn", GATED_ROWS)
class TestGatedActivationBadInput:
    def test_odd_last_dim_is_rejected(self, name, fn, env):
        """Catches gate | up split at the wrong column (a silent wrong answer)."""
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 7, device=_device(env)))
        _expect(info, "x", ["2*d", "[4, 7]"])

    def test_out_of_wrong_shape_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 8, device=_device(env)), torch.empty(4, 8, device=_device(env)))
        _expect(info, "out", ["[4, 4]", "[4, 8]"])

    def test_out_of_other_dtype_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 8, device=_device(env)), torch.empty(4, 4, device=_device(env)).half())
        _expect(info, "out", ["torch.float32", "torch.float16"])

    def test_out_overlapping_x_is_rejected(self, name, fn, env):
        """Catches an out= aliasing the gate half: columns read after being overwritten."""
        x = torch.randn(4, 8, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, x[:, :4])
        _expect(info, "out", ["overlapping"])

    def test_integer_x_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.ones(4, 8, dtype=torch.int32, device=_device(env)))
        _expect(info, "x", ["torch.int32"])


def _fused_quant_rows(op, public):
    return _loadable_rows(op, _env()) + [pytest.param(f"public:{op}", public, id=f"public-{op}")]


NORM_GROUP_FP8_ROWS = _fused_quant_rows(
    "quantization.rms_norm_per_token_group_fp8", kernels.rms_norm_per_token_group_fp8
)
FUSED_ADD_GROUP_FP8_ROWS = _fused_quant_rows(
    "quantization.fused_add_rms_norm_per_token_group_fp8", kernels.fused_add_rms_norm_per_token_group_fp8
)
NORM_STATIC_FP8_ROWS = _fused_quant_rows("quantization.rms_norm_static_fp8", kernels.rms_norm_static_fp8)
FUSED_ADD_STATIC_FP8_ROWS = _fused_quant_rows(
    "quantization.fused_add_rms_norm_static_fp8", kernels.fused_add_rms_norm_static_fp8
)
SILU_GROUP_FP8_ROWS = _fused_quant_rows(
    "quantization.silu_and_mul_per_token_group_fp8", kernels.silu_and_mul_per_token_group_fp8
)


@pytest.mark.parametrize("name, fn", NORM_GROUP_FP8_ROWS)
class TestRmsNormGroupFp8BadInput:
    def test_group_size_not_dividing_hidden_is_rejected(self, name, fn, env):
        """Catches a last group reading past the row (or scales of the wrong count)."""
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 256, device=device), torch.ones(256, device=device), 1e-6, 96, False)
        _expect(info, "group_size", ["divisor of H = 256", "96"])
        assert info.value.op == "quantization.rms_norm_per_token_group_fp8"

    def test_three_dimensional_x_is_rejected(self, name, fn, env):
        """Catches [B, S, H] activations given scales of the wrong rank."""
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 3, 256, device=device), torch.ones(256, device=device))
        _expect(info, "x", ["[T, H]", "[2, 3, 256]"])

    def test_weight_of_another_length_is_rejected(self, name, fn, env):
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 256, device=device), torch.ones(128, device=device))
        _expect(info, "weight", ["[256]", "[128]"])

    def test_non_bool_column_major_scales_is_rejected(self, name, fn, env):
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 256, device=device), torch.ones(256, device=device), 1e-6, 128, 1)
        _expect(info, "column_major_scales", ["a bool", "int"])


@pytest.mark.parametrize("name, fn", FUSED_ADD_GROUP_FP8_ROWS)
class TestFusedAddRmsNormGroupFp8BadInput:
    def test_residual_aliasing_x_is_rejected(self, name, fn, env):
        """Catches the add reading a residual it already overwrote."""
        x = torch.randn(4, 256, device=_device(env))
        with pytest.raises(OpInputError) as info:
            fn(x, x, torch.ones(256, device=_device(env)))
        _expect(info, "residual", ["overlapping"])
        assert info.value.op == "quantization.fused_add_rms_norm_per_token_group_fp8"

    def test_residual_of_another_dtype_is_rejected(self, name, fn, env):
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(
                torch.randn(4, 256, device=device),
                torch.randn(4, 256, device=device).half(),
                torch.ones(256, device=device),
            )
        _expect(info, "residual", ["torch.float32", "torch.float16"])

    def test_residual_is_untouched_when_the_group_size_is_rejected(self, name, fn, env):
        """Catches a residual added in place before a late check fails."""
        device = _device(env)
        x, residual = torch.randn(4, 256, device=device), torch.randn(4, 256, device=device)
        before = residual.clone()
        with pytest.raises(OpInputError) as info:
            fn(x, residual, torch.ones(256, device=device), 1e-6, 100, False)
        _expect(info, "group_size", ["divisor"])
        assert torch.equal(residual, before)


@pytest.mark.parametrize("name, fn", NORM_STATIC_FP8_ROWS)
class TestRmsNormStaticFp8BadInput:
    def test_scale_of_another_dtype_is_rejected(self, name, fn, env):
        """Catches a bf16 or fp16 scale read as fp32 bits."""
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 64, device=device), torch.ones(64, device=device), torch.ones(1, device=device).half())
        _expect(info, "scale", ["one-element torch.float32", "torch.float16"])
        assert info.value.op == "quantization.rms_norm_static_fp8"

    def test_scale_of_several_elements_is_rejected(self, name, fn, env):
        """Catches per-channel scales given to a per-tensor op (only the first would be used)."""
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 64, device=device), torch.ones(64, device=device), torch.ones(64, device=device))
        _expect(info, "scale", ["one-element", "[64]"])

    def test_python_float_scale_is_rejected(self, name, fn, env):
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(2, 64, device=device), torch.ones(64, device=device), 0.5)
        _expect(info, "scale", ["torch.Tensor", "float"])


@pytest.mark.parametrize("name, fn", FUSED_ADD_STATIC_FP8_ROWS)
class TestFusedAddRmsNormStaticFp8BadInput:
    def test_scale_inside_residual_is_rejected(self, name, fn, env):
        """Catches the scale read after the residual add overwrote it."""
        device = _device(env)
        residual = torch.randn(4, 64, device=device)
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 64, device=device), residual, torch.ones(64, device=device), residual[0, :1])
        _expect(info, "scale", ["overlapping"])
        assert info.value.op == "quantization.fused_add_rms_norm_static_fp8"

    def test_residual_of_another_shape_is_rejected(self, name, fn, env):
        device = _device(env)
        with pytest.raises(OpInputError) as info:
            fn(
                torch.randn(4, 64, device=device),
                torch.randn(4, 32, device=device),
                torch.ones(64, device=device),
                torch.ones(1, device=device),
            )
        _expect(info, "residual", ["[4, 64]", "[4, 32]"])


@pytest.mark.parametrize("name, fn", SILU_GROUP_FP8_ROWS)
class TestSiluAndMulGroupFp8BadInput:
    def test_odd_last_dim_is_rejected(self, name, fn, env):
        """Catches gate | up split at the wrong column."""
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 257, device=_device(env)))
        _expect(info, "x", ["2*d", "[4, 257]"])
        assert info.value.op == "quantization.silu_and_mul_per_token_group_fp8"

    def test_group_size_not_dividing_d_is_rejected(self, name, fn, env):
        """Catches groups of the full width 2*d checked instead of the output width d."""
        with pytest.raises(OpInputError) as info:
            fn(torch.randn(4, 256, device=_device(env)), 256, False)
        _expect(info, "group_size", ["divisor of d = 128", "256"])


EMBEDDING_ROWS = _loadable_rows("embedding.vocab_embedding", _env()) + [
    pytest.param("public", kernels.vocab_embedding, id="public")
]


@pytest.mark.parametrize("name, fn", EMBEDDING_ROWS)
class TestVocabEmbeddingBadInput:
    def test_float_ids_are_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.ones(3, device=_device(env)), torch.randn(10, 4, device=_device(env)))
        _expect(info, "ids", ["torch.int32", "torch.float32"])

    def test_table_must_be_two_dimensional(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(3, dtype=torch.long, device=_device(env)), torch.randn(10, device=_device(env)))
        _expect(info, "table", ["[rows, hidden]"])

    def test_vocab_end_past_the_table_is_rejected(self, name, fn, env):
        """Catches a shard range that would read past the table's last row."""
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(3, dtype=torch.long, device=_device(env)), torch.randn(10, 4, device=_device(env)), 5, 16)
        _expect(info, "vocab_end", ["[5, 15]", "16"])

    def test_negative_vocab_start_is_rejected(self, name, fn, env):
        with pytest.raises(OpInputError) as info:
            fn(torch.zeros(3, dtype=torch.long, device=_device(env)), torch.randn(10, 4, device=_device(env)), -1)
        _expect(info, "vocab_start", [">= 0"])


KV_ROWS = _loadable_rows("kvcache.update_kv_buffer", _env()) + [
    pytest.param("public", kernels.update_kv_buffer, id="public")
]


@pytest.mark.parametrize("name, fn", KV_ROWS)
class TestUpdateKvBufferBadInput:
    def _args(self, env, tokens=4, rows=10):
        device = _device(env)
        return (
            torch.randn(tokens, 4, 8, device=device),
            torch.arange(tokens, dtype=torch.int32, device=device),
            torch.randn(rows, 4, 8, device=device),
        )

    def test_odd_head_count_is_rejected(self, name, fn, env):
        kv, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(kv[:, :3], loc, buffer[:, :3])
        _expect(info, "kv", ["2*Hk"])

    def test_float_loc_is_rejected(self, name, fn, env):
        kv, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(kv, loc.float(), buffer)
        _expect(info, "loc", ["torch.int32", "torch.float32"])

    def test_loc_of_wrong_length_is_rejected(self, name, fn, env):
        kv, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(kv, loc[:3], buffer)
        _expect(info, "loc", ["[4]", "[3]"])

    def test_buffer_with_other_heads_is_rejected(self, name, fn, env):
        kv, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer[:, :2])
        _expect(info, "buffer", ["[rows, 4, 8]"])

    def test_buffer_of_other_dtype_is_rejected(self, name, fn, env):
        kv, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(kv, loc, buffer.half())
        _expect(info, "buffer", ["torch.float32", "torch.float16"])


MLA_ROWS = _loadable_rows("kvcache.update_mla_buffer", _env()) + [
    pytest.param("public", kernels.update_mla_buffer, id="public")
]


@pytest.mark.parametrize("name, fn", MLA_ROWS)
class TestUpdateMlaBufferBadInput:
    def _args(self, env, tokens=4, rows=10, rank=24, rope_dim=8):
        device = _device(env)
        return (
            torch.randn(tokens, rank, device=device),
            torch.randn(tokens, rope_dim, device=device),
            torch.arange(tokens, dtype=torch.int32, device=device),
            torch.randn(rows, rank + rope_dim, device=device),
        )

    def test_buffer_narrower_than_latent_and_rope_is_rejected(self, name, fn, env):
        """Catches a buffer of the attention's head width (no rope columns) taking a write past its rows' end."""
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope, loc, buffer[:, :24])
        _expect(info, "buffer", ["[rows, 32]", "kv_lora_rank 24", "rope_dim 8", "[10, 24]"])

    def test_rope_of_other_width_than_the_buffer_leaves_is_rejected(self, name, fn, env):
        """Catches rope and latent split at another column than the buffer's (rope 16 wide, buffer 24 + 8)."""
        latent, _, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, torch.randn(4, 16, device=_device(env)), loc, buffer)
        _expect(info, "buffer", ["[rows, 40]", "[10, 32]"])

    def test_rope_of_other_dtype_is_rejected(self, name, fn, env):
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope.half(), loc, buffer)
        _expect(info, "rope", ["torch.float32", "torch.float16"])

    def test_rope_of_other_token_count_is_rejected(self, name, fn, env):
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope[:3], loc, buffer)
        _expect(info, "rope", ["[4, rope_dim]", "[3, 8]"])

    def test_zero_width_rope_is_rejected(self, name, fn, env):
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope[:, :0], loc, buffer[:, :24])
        _expect(info, "rope", ["rope_dim >= 1"])

    def test_latent_of_heads_shape_is_rejected(self, name, fn, env):
        """Catches SGLang's [T, 1, 512] latent read as if it were [T, 512]."""
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent[:, None], rope, loc, buffer)
        _expect(info, "latent", ["[T, kv_lora_rank]", "[4, 1, 24]"])

    def test_buffer_of_other_dtype_is_rejected(self, name, fn, env):
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope, loc, buffer.bfloat16())
        _expect(info, "buffer", ["latent's dtype torch.float32", "torch.bfloat16"])

    def test_float_loc_is_rejected(self, name, fn, env):
        latent, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(latent, rope, loc.float(), buffer)
        _expect(info, "loc", ["torch.int32", "torch.float32"])

    def test_latent_aliasing_the_buffer_is_rejected(self, name, fn, env):
        """Catches a latent read from cache rows the same call overwrites."""
        _, rope, loc, buffer = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(buffer[:4, :24], rope, loc, buffer)
        _expect(info, "latent", ["overlapping"])


ROTARY_ROWS = _loadable_rows("embedding.rotary", _env()) + [pytest.param("public", kernels.rotary, id="public")]


@pytest.mark.parametrize("name, fn", ROTARY_ROWS)
class TestRotaryBadInput:
    def _args(self, env, tokens=3):
        device = _device(env)
        cache = torch.randn(16, 8, device=device)
        return (
            torch.arange(tokens, device=device),
            torch.randn(tokens, 2 * 8, device=device),
            torch.randn(tokens, 8, device=device),
            8,
            cache,
            True,
        )

    def test_q_not_a_multiple_of_head_dim_is_rejected(self, name, fn, env):
        positions, q, k, head_dim, cache, neox = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions, q[:, :12], k, head_dim, cache, neox)
        _expect(info, "q", ["heads * 8"])

    def test_rotary_dim_wider_than_head_dim_is_rejected(self, name, fn, env):
        positions, q, k, _, _, neox = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions, q, k, 8, torch.randn(16, 10, device=_device(env)), neox)
        _expect(info, "cos_sin_cache", ["<= 8"])

    def test_positions_of_other_length_are_rejected(self, name, fn, env):
        positions, q, k, head_dim, cache, neox = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions[:2], q, k, head_dim, cache, neox)
        _expect(info, "q", ["[2, heads * 8]"])

    def test_non_bool_is_neox_is_rejected(self, name, fn, env):
        positions, q, k, head_dim, cache, _ = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions, q, k, head_dim, cache, 1)
        _expect(info, "is_neox", ["a bool"])

    def test_k_aliasing_q_is_rejected(self, name, fn, env):
        positions, q, _, head_dim, cache, neox = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions, q, q, head_dim, cache, neox)
        _expect(info, "k", ["overlapping"])

    def test_k_inside_q_is_rejected(self, name, fn, env):
        """Catches k aliasing part of q: heads rotated twice."""
        positions, q, _, head_dim, cache, neox = self._args(env)
        with pytest.raises(OpInputError) as info:
            fn(positions, q, q[:, 8:], head_dim, cache, neox)
        _expect(info, "k", ["overlapping"])

    def test_q_and_k_sliced_from_one_qkv_are_accepted(self, name, fn, env):
        """Catches a conservative overlap test rejecting the fused-qkv views every engine passes."""
        positions, _, _, head_dim, cache, neox = self._args(env)
        qkv = torch.randn(3, 2 * 8 + 8 + 8, device=_device(env))
        q, k = qkv[:, :16], qkv[:, 16:24]
        fn(positions, q, k, head_dim, cache, neox)


def test_dtype_messages_name_each_allowed_dtype_once(env):
    """Catches 'expected dtype torch.float32 (x's) or torch.float32': a message repeating itself."""
    x = torch.randn(2, 8, device=_device(env))
    with pytest.raises(OpInputError) as info:
        kernels.rms_norm(x, torch.ones(8, device=_device(env), dtype=torch.float16), 1e-6)
    assert str(info.value).count("torch.float32") == 1, str(info.value)


def _mm_plan(row, env=None):
    """The PlannedOp forcing `row` for gemm.mm in fp16 at 4 tokens (native/mm_splitk serves m <= 16 only)."""
    return planner_forcing("gemm.mm", row, env).plan(
        "gemm.mm", dtype="fp16", shape={"num_tokens": 4}, layout=TABLE.contracts["gemm.mm"].tags
    )


def _mm_rows():
    """A PlannedOp of every gemm.mm row that runs here, and the public op."""
    rows = []
    for row in TABLE.rows("gemm.mm"):
        try:
            rows.append(pytest.param(row.name, _mm_plan(row.name), id=row.name))
        except NoEligibleKernel:
            continue
    return rows + [pytest.param("public", kernels.mm, id="public")]


@pytest.mark.parametrize("name, fn", _mm_rows())
class TestMmBadInput:
    def _args(self, env, n=8, k=16):
        device = _device(env)
        return (
            torch.randn(4, k, device=device).half(),
            torch.randn(n, k, device=device).half(),
            torch.randn(n, device=device).half(),
        )

    def _rejects(self, fn, args, argument, words):
        with pytest.raises(OpInputError) as info:
            fn(*args)
        _expect(info, argument, words)
        assert info.value.op == "gemm.mm", info.value

    def test_w_of_another_dtype_is_rejected(self, name, fn, env):
        """Catches fp32 weights read with fp16 loads (half their bytes: a silent wrong answer)."""
        x, w, bias = self._args(env)
        self._rejects(fn, (x, w.float(), bias), "w", ["torch.float16", "torch.float32"])

    def test_w_of_another_k_is_rejected(self, name, fn, env):
        """Catches w [N, K'] with K' != x's K: x's K columns read against w's rows (past their end, or
        dropping columns)."""
        x, _, bias = self._args(env)
        self._rejects(fn, (x, torch.randn(8, 17, device=_device(env)).half(), bias), "w", ["[N, 16]", "[8, 17]"])

    def test_one_dimensional_w_is_rejected(self, name, fn, env):
        """Catches a [K] weight taken for [1, K] or read with a row stride it does not have."""
        x, _, _ = self._args(env)
        self._rejects(fn, (x, torch.randn(16, device=_device(env)).half()), "w", ["[N, 16]", "[16]"])

    def test_zero_rows_of_w_are_rejected(self, name, fn, env):
        """Catches N = 0 reaching a kernel whose clamped column index (N - 1) is -1: a read before w."""
        x, _, _ = self._args(env)
        self._rejects(fn, (x, torch.randn(0, 16, device=_device(env)).half()), "w", ["N >= 1", "[0, 16]"])

    def test_bias_of_wrong_length_is_rejected(self, name, fn, env):
        """Catches a bias of N + 1 elements (another layer's) added without error."""
        x, w, _ = self._args(env)
        self._rejects(fn, (x, w, torch.randn(9, device=_device(env)).half()), "bias", ["[8]", "[9]"])

    def test_bias_of_another_dtype_is_rejected(self, name, fn, env):
        """Catches an fp32 bias read with fp16 loads (wrong values, no error)."""
        x, w, bias = self._args(env)
        self._rejects(fn, (x, w, bias.float()), "bias", ["torch.float16", "torch.float32"])

    def test_zero_dim_x_is_rejected(self, name, fn, env):
        _, w, _ = self._args(env)
        self._rejects(fn, (torch.tensor(1.0, device=_device(env)).half(), w), "x", ["[..., K]", "0-d"])

    def test_zero_k_is_rejected(self, name, fn, env):
        """Catches K = 0 passing silently (an output of zeros or of the bias alone)."""
        device = _device(env)
        x, w = torch.randn(4, 0, device=device).half(), torch.randn(8, 0, device=device).half()
        self._rejects(fn, (x, w), "x", ["K", ">= 1", "[4, 0]"])

    def test_integer_x_is_rejected(self, name, fn, env):
        x, w, _ = self._args(env)
        self._rejects(fn, (x.to(torch.int32), w), "x", ["torch.int32"])

    def test_w_on_another_device_is_rejected(self, name, fn, env):
        if env.device.kind != "cuda":
            pytest.skip("needs a CUDA device to put w on another device than x")
        x, w, bias = self._args(env)
        self._rejects(fn, (x, w.cpu(), bias), "w", ["device"])

    def test_bias_on_another_device_is_rejected(self, name, fn, env):
        if env.device.kind != "cuda":
            pytest.skip("needs a CUDA device to put bias on another device than x")
        x, w, bias = self._args(env)
        self._rejects(fn, (x, w, bias.cpu()), "bias", ["device"])


def _native_mm(row, env):
    """The PlannedOp of a native gemm.mm row, or skip with the row's explain() reason."""
    try:
        return _mm_plan(row, env)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


@pytest.mark.parametrize("row", ["native/mm", "native/mm_splitk"])
def test_planned_native_mm_refuses_x_without_unit_k_stride(row, env):
    """Catches a native GEMM reading a transposed x as rows (its kernel assumes unit stride along K)."""
    planned = _native_mm(row, env)
    x = torch.randn(16, 4, device=_device(env)).half().t()
    with pytest.raises(OpInputError) as info:
        planned(x, torch.randn(8, 16, device=_device(env)).half())
    _expect(info, "x", ["x:rows", row])


@pytest.mark.parametrize("row", ["native/mm", "native/mm_splitk"])
def test_planned_native_mm_refuses_transposed_w(row, env):
    """Catches a native GEMM reading w stored transposed (w = buffer.t()) as if its rows were contiguous."""
    planned = _native_mm(row, env)
    w = torch.randn(16, 8, device=_device(env)).half().t()
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(4, 16, device=_device(env)).half(), w)
    _expect(info, "w", ["w:rows", row])


def test_planned_native_mm_splitk_refuses_more_than_16_tokens(env):
    """Catches native/mm_splitk handed 17 rows: its one 16-row tile would leave row 17 unwritten."""
    planned = _native_mm("native/mm_splitk", env)
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(17, 16, device=_device(env)).half(), torch.randn(8, 16, device=_device(env)).half())
    _expect(info, "num_tokens", ["<=16", "17"])


def _w8a16_plan(row, env=None):
    """The PlannedOp forcing `row` for gemm.w8a16_mm in fp16 at 4 tokens (native/w8a16_mm_splitk serves m <= 16)."""
    return planner_forcing("gemm.w8a16_mm", row, env).plan(
        "gemm.w8a16_mm", dtype="fp16", shape={"num_tokens": 4}, layout=TABLE.contracts["gemm.w8a16_mm"].tags
    )


def _w8a16_rows():
    """A PlannedOp of every gemm.w8a16_mm row that runs here, and the public op."""
    rows = []
    for row in TABLE.rows("gemm.w8a16_mm"):
        try:
            rows.append(pytest.param(row.name, _w8a16_plan(row.name), id=row.name))
        except NoEligibleKernel:
            continue
    return rows + [pytest.param("public", kernels.w8a16_mm, id="public")]


def _int8(shape, device):
    return torch.randint(-127, 128, shape, dtype=torch.int8, device=device)


@pytest.mark.parametrize("name, fn", _w8a16_rows())
class TestW8a16MmBadInput:
    def _args(self, env, n=8, k=16):
        device = _device(env)
        return (
            torch.randn(4, k, device=device).half(),
            _int8((n, k), device),
            torch.rand(n, 1, device=device) / 100,
            torch.randn(n, device=device).half(),
        )

    def _rejects(self, fn, args, argument, words):
        with pytest.raises(OpInputError) as info:
            fn(*args)
        _expect(info, argument, words)
        assert info.value.op == "gemm.w8a16_mm", info.value

    def test_fp32_x_is_rejected(self, name, fn, env):
        """Catches fp32 activations read with fp16 loads (the contract has no fp32: half their bytes)."""
        x, w_q, w_scale, bias = self._args(env)
        self._rejects(fn, (x.float(), w_q, w_scale, bias.float()), "x", ["float16 or bfloat16", "torch.float32"])

    @pytest.mark.parametrize("dtype", [torch.int32, torch.float16])
    def test_w_q_not_int8_is_rejected(self, name, fn, env, dtype):
        """Catches int32 weights read as 4 int8 each, or fp16 (unquantized) weights scaled again."""
        x, w_q, w_scale, bias = self._args(env)
        self._rejects(fn, (x, w_q.to(dtype), w_scale, bias), "w_q", ["int8", str(dtype)])

    def test_w_q_of_another_k_is_rejected(self, name, fn, env):
        """Catches w_q [N, K'] with K' != x's K: x's K columns read against w_q's rows."""
        x, _, w_scale, bias = self._args(env)
        self._rejects(fn, (x, _int8((8, 17), _device(env)), w_scale, bias), "w_q", ["[N, 16]", "[8, 17]"])

    def test_one_dimensional_w_q_is_rejected(self, name, fn, env):
        """Catches a [K] weight taken for [1, K] or read with a row stride it does not have."""
        x, _, _, _ = self._args(env)
        device = _device(env)
        self._rejects(fn, (x, _int8((16,), device), torch.ones(1, device=device)), "w_q", ["[N, 16]", "[16]"])

    def test_zero_rows_of_w_q_are_rejected(self, name, fn, env):
        """Catches N = 0 reaching a kernel whose clamped column index (N - 1) is -1: a read before w_q."""
        x, _, _, _ = self._args(env)
        device = _device(env)
        self._rejects(fn, (x, _int8((0, 16), device), torch.ones(0, device=device)), "w_q", ["N >= 1", "[0, 16]"])

    @pytest.mark.parametrize("shape", [(8, 2), (9,), (9, 1), (1,)])
    def test_w_scale_of_wrong_shape_is_rejected(self, name, fn, env, shape):
        """Catches per-group scales [N, G] read as per-channel, another layer's scales, or a per-tensor scale
        [1] broadcast silently (not this contract's)."""
        x, w_q, _, bias = self._args(env)
        w_scale = torch.ones(shape, device=_device(env))
        self._rejects(fn, (x, w_q, w_scale, bias), "w_scale", ["[8] or [8, 1]", str(list(shape))])

    @pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bfloat16])
    def test_w_scale_of_another_dtype_is_rejected(self, name, fn, env, dtype):
        """Catches float64 scales read as pairs of fp32, integer scales, and bf16 scales read with fp16 x's
        loads (only fp32 or x's dtype)."""
        x, w_q, w_scale, bias = self._args(env)
        self._rejects(fn, (x, w_q, w_scale.to(dtype), bias), "w_scale", ["float32", "torch.float16", str(dtype)])

    def test_non_tensor_w_scale_is_rejected(self, name, fn, env):
        x, w_q, _, bias = self._args(env)
        self._rejects(fn, (x, w_q, 0.01, bias), "w_scale", ["torch.Tensor", "float"])

    def test_bias_of_wrong_length_is_rejected(self, name, fn, env):
        """Catches a bias of N + 1 elements (another layer's) added without error."""
        x, w_q, w_scale, _ = self._args(env)
        self._rejects(fn, (x, w_q, w_scale, torch.randn(9, device=_device(env)).half()), "bias", ["[8]", "[9]"])

    def test_two_dimensional_bias_is_rejected(self, name, fn, env):
        x, w_q, w_scale, bias = self._args(env)
        self._rejects(fn, (x, w_q, w_scale, bias.unsqueeze(1)), "bias", ["[8]", "[8, 1]"])

    def test_bias_of_another_dtype_is_rejected(self, name, fn, env):
        """Catches an fp32 bias read with fp16 loads (wrong values, no error)."""
        x, w_q, w_scale, bias = self._args(env)
        self._rejects(fn, (x, w_q, w_scale, bias.float()), "bias", ["torch.float16", "torch.float32"])

    def test_zero_dim_x_is_rejected(self, name, fn, env):
        _, w_q, w_scale, _ = self._args(env)
        self._rejects(fn, (torch.tensor(1.0, device=_device(env)).half(), w_q, w_scale), "x", ["[..., K]", "[]"])

    def test_zero_k_is_rejected(self, name, fn, env):
        """Catches K = 0 passing silently (an output of zeros or of the bias alone)."""
        device = _device(env)
        x, w_q = torch.randn(4, 0, device=device).half(), _int8((8, 0), device)
        self._rejects(fn, (x, w_q, torch.ones(8, device=device)), "x", ["K >= 1", "[4, 0]"])

    def test_integer_x_is_rejected(self, name, fn, env):
        """Catches int8 activations (w8a8) taken for this op's fp16/bf16 ones."""
        x, w_q, w_scale, _ = self._args(env)
        self._rejects(fn, (x.to(torch.int8), w_q, w_scale), "x", ["torch.int8"])

    @pytest.mark.parametrize("argument", ["w_q", "w_scale", "bias"])
    def test_argument_on_another_device_is_rejected(self, name, fn, env, argument):
        if env.device.kind != "cuda":
            pytest.skip(f"needs a CUDA device to put {argument} on another device than x")
        args = list(self._args(env))
        index = {"w_q": 1, "w_scale": 2, "bias": 3}[argument]
        args[index] = args[index].cpu()
        self._rejects(fn, tuple(args), argument, ["device"])


def _native_w8a16(row, env):
    """The PlannedOp of a native gemm.w8a16_mm row, or skip with the row's explain() reason."""
    try:
        return _w8a16_plan(row, env)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


_W8A16_NATIVE = ["native/w8a16_mm", "native/w8a16_mm_splitk"]


@pytest.mark.parametrize("row", _W8A16_NATIVE)
def test_planned_native_w8a16_mm_refuses_x_without_unit_k_stride(row, env):
    """Catches a native GEMM reading a transposed x as rows (its kernel assumes unit stride along K)."""
    planned = _native_w8a16(row, env)
    device = _device(env)
    x = torch.randn(16, 4, device=device).half().t()
    with pytest.raises(OpInputError) as info:
        planned(x, _int8((8, 16), device), torch.ones(8, device=device))
    _expect(info, "x", ["x:rows", row])


@pytest.mark.parametrize("row", _W8A16_NATIVE)
def test_planned_native_w8a16_mm_refuses_transposed_w_q(row, env):
    """Catches a native GEMM reading w_q stored transposed (w_q = buffer.t()) as if its rows were contiguous.
    The error names the layout tag's argument, "w" (gemm's tag w:rows, which w8a16_mm's w_q carries)."""
    planned = _native_w8a16(row, env)
    device = _device(env)
    w_q = _int8((16, 8), device).t()
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(4, 16, device=device).half(), w_q, torch.ones(8, device=device))
    _expect(info, "w", ["w:rows", row])
    assert info.value.op == "gemm.w8a16_mm", info.value


def test_planned_native_w8a16_mm_splitk_refuses_more_than_16_tokens(env):
    """Catches native/w8a16_mm_splitk handed 17 rows: its one 16-row tile would leave row 17 unwritten."""
    planned = _native_w8a16("native/w8a16_mm_splitk", env)
    device = _device(env)
    with pytest.raises(OpInputError) as info:
        planned(torch.randn(17, 16, device=device).half(), _int8((8, 16), device), torch.ones(8, device=device))
    _expect(info, "num_tokens", ["<=16", "17"])


def _w4a16_plan(row, env=None):
    """The PlannedOp forcing `row` for gemm.w4a16_mm in fp16 at 1 token (every row serves it)."""
    return planner_forcing("gemm.w4a16_mm", row, env).plan(
        "gemm.w4a16_mm", dtype="fp16", shape={"num_tokens": 1}, layout=TABLE.contracts["gemm.w4a16_mm"].tags
    )


def _w4a16_rows():
    """A PlannedOp of every gemm.w4a16_mm row that runs here, and the public op."""
    rows = []
    for row in TABLE.rows("gemm.w4a16_mm"):
        try:
            rows.append(pytest.param(row.name, _w4a16_plan(row.name), id=row.name))
        except NoEligibleKernel:
            continue
    return rows + [pytest.param("public", kernels.w4a16_mm, id="public")]


def _int32(shape, device):
    return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device=device)


@pytest.mark.parametrize("name, fn", _w4a16_rows())
class TestW4a16MmBadInput:
    """A GPTQ layer of K = 128, N = 16, group 64: qweight [16, 16], scales [2, 16], qzeros [2, 2]."""

    def _args(self, env, packing="gptq"):
        device = _device(env)
        qweight = _int32((16, 16) if packing == "gptq" else (128, 2), device)
        return [
            torch.randn(1, 128, device=device).half(),
            qweight,
            torch.rand(2, 16, device=device).half() / 100,
            _int32((2, 2), device),
            64,
            packing,
            torch.randn(16, device=device).half(),
        ]

    def _rejects(self, fn, args, argument, words):
        with pytest.raises(OpInputError) as info:
            fn(*args)
        _expect(info, argument, words)
        assert info.value.op == "gemm.w4a16_mm", info.value

    def _with(self, env, index, value, packing="gptq"):
        args = self._args(env, packing)
        args[index] = value
        return args

    def test_fp32_x_is_rejected(self, name, fn, env):
        """Catches fp32 activations read with fp16 loads."""
        args = self._args(env)
        args[0], args[6] = args[0].float(), args[6].float()
        self._rejects(fn, args, "x", ["float16 or bfloat16", "torch.float32"])

    @pytest.mark.parametrize("packing", ["GPTQ", "marlin", "awq_v2", None])
    def test_unknown_packing_is_rejected(self, name, fn, env, packing):
        """Catches a packing this op does not read (Marlin's tiles, a misspelt name) taken for one it reads."""
        self._rejects(fn, self._with(env, 5, packing), "packing", ['"gptq", "gptq_v2" or "awq"', repr(packing)])

    @pytest.mark.parametrize("group", [32, 100, 256, -1, 64.0, True])
    def test_unsupported_group_size_is_rejected(self, name, fn, env, group):
        """Catches a group size the kernels do not serve (32, channel-wise -1) or a float / bool group."""
        self._rejects(fn, self._with(env, 4, group), "group_size", ["64 or 128", repr(group)])

    def test_k_not_a_multiple_of_the_group_is_rejected(self, name, fn, env):
        """Catches K = 96 with group 64: the last group half read past the weight."""
        device = _device(env)
        args = self._args(env)
        args[0] = torch.randn(1, 96, device=device).half()
        self._rejects(fn, args, "x", ["multiple of group_size 64", "[1, 96]"])

    def test_k_not_a_multiple_of_8_is_rejected(self, name, fn, env):
        """Catches K = 100: GPTQ's words along K would hold half a word of another row."""
        args = self._args(env)
        args[0] = torch.randn(1, 100, device=_device(env)).half()
        self._rejects(fn, args, "x", ["multiple of group_size", "[1, 100]"])

    def test_zero_k_is_rejected(self, name, fn, env):
        """Catches K = 0 passing silently (an output of zeros or of the bias alone)."""
        args = self._args(env)
        args[0] = torch.randn(1, 0, device=_device(env)).half()
        self._rejects(fn, args, "x", ["K >= 1", "[1, 0]"])

    @pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int8, torch.float16])
    def test_qweight_not_int32_is_rejected(self, name, fn, env, dtype):
        """Catches int64 words (two words read as one), unpacked uint8 / int8 weights, an unquantized weight."""
        args = self._args(env)
        args[1] = args[1].to(dtype)
        self._rejects(fn, args, "qweight", ["torch.int32", str(dtype)])

    def test_awq_qweight_with_gptq_packing_is_rejected(self, name, fn, env):
        """Catches an AWQ qweight [K, N/8] passed with packing="gptq" (the packing decides the layout)."""
        self._rejects(fn, self._with(env, 1, _int32((128, 2), _device(env))), "qweight", ["[K/8 = 16, N]", "[128, 2]"])

    def test_gptq_qweight_with_awq_packing_is_rejected(self, name, fn, env):
        """Catches a GPTQ qweight [K/8, N] passed with packing="awq"."""
        args = self._with(env, 1, _int32((16, 16), _device(env)), "awq")
        self._rejects(fn, args, "qweight", ["[K = 128, N/8]", "[16, 16]"])

    def test_one_dimensional_qweight_is_rejected(self, name, fn, env):
        self._rejects(fn, self._with(env, 1, _int32((16,), _device(env))), "qweight", ["2-d", "[16]"])

    def test_n_not_a_multiple_of_8_is_rejected(self, name, fn, env):
        """Catches N = 12 in GPTQ: qzeros pack 8 columns a word, so the last word would cover 4 absent ones."""
        device = _device(env)
        args = self._args(env)
        args[1], args[2], args[6] = _int32((16, 12), device), args[2][:, :12], None
        self._rejects(fn, args, "qweight", ["N % 8 == 0", "N = 12"])

    @pytest.mark.parametrize("shape", [(3, 2), (1, 2), (2, 3), (2, 16), (2,)])
    def test_qzeros_of_wrong_shape_are_rejected(self, name, fn, env, shape):
        """Catches zeros with a group too many or too few, a word too many, unpacked zeros [K/g, N], 1-d zeros."""
        self._rejects(fn, self._with(env, 3, _int32(shape, _device(env))), "qzeros", ["[2, 2]", str(list(shape))])

    def test_qzeros_not_int32_are_rejected(self, name, fn, env):
        """Catches float zeros (AutoGPTQ's unpacked zeros) read as packed words."""
        self._rejects(fn, self._with(env, 3, torch.ones(2, 2, device=_device(env))), "qzeros", ["torch.int32"])

    @pytest.mark.parametrize("shape", [(3, 16), (1, 16), (2, 15), (2, 17), (16,)])
    def test_scales_of_wrong_shape_are_rejected(self, name, fn, env, shape):
        """Catches scales off by one group or column, and per-channel scales [N] taken for per-group ones."""
        args = self._with(env, 2, torch.ones(shape, device=_device(env)).half())
        self._rejects(fn, args, "scales", ["[2, 16]", str(list(shape))])

    @pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
    def test_scales_of_another_dtype_are_rejected(self, name, fn, env, dtype):
        """Catches float64 scales read as pairs of fp32, and integer scales."""
        args = self._args(env)
        args[2] = args[2].to(dtype)
        self._rejects(fn, args, "scales", ["float16, bfloat16 or float32", str(dtype)])

    def test_bias_of_wrong_length_is_rejected(self, name, fn, env):
        """Catches a bias of N + 1 elements (another layer's) added without error."""
        self._rejects(fn, self._with(env, 6, torch.randn(17, device=_device(env)).half()), "bias", ["[16]", "[17]"])

    def test_bias_of_another_dtype_is_rejected(self, name, fn, env):
        """Catches an fp32 bias read with fp16 loads."""
        self._rejects(fn, self._with(env, 6, torch.randn(16, device=_device(env))), "bias", ["torch.float16"])

    @pytest.mark.parametrize("argument", ["qweight", "scales", "qzeros", "bias"])
    def test_argument_on_another_device_is_rejected(self, name, fn, env, argument):
        if env.device.kind != "cuda":
            pytest.skip(f"needs a CUDA device to put {argument} on another device than x")
        args = self._args(env)
        index = {"qweight": 1, "scales": 2, "qzeros": 3, "bias": 6}[argument]
        args[index] = args[index].cpu()
        self._rejects(fn, args, argument, ["device"])


def _native_w4a16(row, env):
    """The PlannedOp of a native gemm.w4a16_mm row, or skip with the row's explain() reason."""
    try:
        return _w4a16_plan(row, env)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))


@pytest.mark.parametrize("row", ["native/w4a16_mm", "native/w4a16_mm_gemv"])
def test_planned_native_w4a16_mm_refuses_x_without_unit_k_stride(row, env):
    """Catches a native int4 GEMM reading a transposed x as rows (its kernels assume unit stride along K)."""
    planned = _native_w4a16(row, env)
    device = _device(env)
    x = torch.randn(128, 2, device=device).half().t()[:1]  # [1, 128] with stride 2 along K
    with pytest.raises(OpInputError) as info:
        planned(
            x, _int32((16, 16), device), torch.ones(2, 16, device=device).half(), _int32((2, 2), device), 64, "gptq"
        )
    _expect(info, "x", ["x:rows", row])


def test_planned_native_w4a16_mm_gemv_refuses_two_tokens(env):
    """Catches native/w4a16_mm_gemv handed 2 rows: it computes row 0 only, leaving row 1 unwritten."""
    planned = _native_w4a16("native/w4a16_mm_gemv", env)
    device = _device(env)
    with pytest.raises(OpInputError) as info:
        planned(
            torch.randn(2, 128, device=device).half(),
            _int32((16, 16), device),
            torch.ones(2, 16, device=device).half(),
            _int32((2, 2), device),
            64,
            "gptq",
        )
    _expect(info, "num_tokens", ["<=1", "2"])
