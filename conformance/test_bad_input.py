"""Bad input gets an OpInputError naming the op, the argument and what was expected.

Run against every row eligible here (the reference always; native Triton
rows on the GPU or under the interpreter) and against the public ops, so no
implementation crashes inside a kernel or returns a silent wrong answer.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import loadable_rows
from rapid_llm.kernels.dispatcher import resolve_target
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


def test_native_rms_norm_refuses_cpu_tensors_without_the_interpreter(monkeypatch):
    """Catches a Triton kernel handed host memory (a segfault or an opaque Triton error)."""
    fn, reason = resolve_target("rapid_llm.kernels.ops.norm.rms_norm:rms_norm", None)
    if fn is None:
        pytest.skip(f"native rms_norm does not load here: {reason}")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(OpInputError) as info:
        fn(torch.randn(2, 8), torch.ones(8), 1e-6)
    _expect(info, "x", ["CUDA tensor"])


def test_native_rms_norm_refuses_non_unit_hidden_stride(env):
    """Catches the kernel reading a transposed x as if hidden were contiguous (silent wrong answer)."""
    fn, reason = resolve_target("rapid_llm.kernels.ops.norm.rms_norm:rms_norm", None)
    if fn is None:
        pytest.skip(f"native rms_norm does not load here: {reason}")
    if env.device.kind == "cpu" and not env.device.triton_interpreter:
        pytest.skip("native rms_norm runs only on CUDA or under RAPID_LLM_TRITON_INTERPRET=1")
    x = torch.randn(8, 4, device=_device(env)).t()
    with pytest.raises(OpInputError) as info:
        fn(x, torch.ones(8, device=_device(env)), 1e-6)
    _expect(info, "x", ["x:rows"])


def test_native_scale_refuses_non_contiguous_x(env):
    """Catches a flat kernel walking a strided tensor's storage in the wrong order."""
    fn, reason = resolve_target("rapid_llm.kernels.ops.elementwise.scale:scale", None)
    if fn is None:
        pytest.skip(f"native scale does not load here: {reason}")
    if env.device.kind == "cpu" and not env.device.triton_interpreter:
        pytest.skip("native scale runs only on CUDA or under RAPID_LLM_TRITON_INTERPRET=1")
    x = torch.randn(8, 4, device=_device(env)).t()
    with pytest.raises(OpInputError) as info:
        fn(x, 2.0)
    _expect(info, "x", ["contiguous"])


FUSED_ROWS = _loadable_rows("norm.fused_add_rms_norm", _env()) + [
    pytest.param("public", kernels.fused_add_rms_norm, id="public")]


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
        _expect(info, "residual", ["distinct"])

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
    for op, public in (("activation.silu_and_mul", kernels.silu_and_mul),
                       ("activation.gelu_tanh_and_mul", kernels.gelu_tanh_and_mul))
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


EMBEDDING_ROWS = _loadable_rows("embedding.vocab_embedding", _env()) + [
    pytest.param("public", kernels.vocab_embedding, id="public")]


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


def test_reference_embedding_raises_on_negative_ids():
    """The reference path validates ids on the host (documented): a negative id is an error, not row -1."""
    from rapid_llm.kernels.ops.embedding.reference import vocab_embedding

    with pytest.raises(OpInputError) as info:
        vocab_embedding(torch.tensor([3, -2, 1]), torch.randn(10, 4))
    _expect(info, "ids", [">= 0", "-2"])


def test_native_embedding_gives_zero_rows_for_ids_outside_the_table(env):
    """The documented kernel-path behaviour (no host sync): out-of-range ids read nothing, zero rows."""
    fn, reason = resolve_target("rapid_llm.kernels.ops.embedding.vocab_embedding:vocab_embedding", None)
    if fn is None:
        pytest.skip(f"native vocab_embedding does not load here: {reason}")
    if env.device.kind == "cpu" and not env.device.triton_interpreter:
        pytest.skip("native vocab_embedding runs only on CUDA or under RAPID_LLM_TRITON_INTERPRET=1")
    table = torch.randn(10, 4, device=_device(env))
    out = fn(torch.tensor([3, -2, 10, 99], device=_device(env)), table)
    assert torch.equal(out[0], table[3])
    assert torch.count_nonzero(out[1:]) == 0


KV_ROWS = _loadable_rows("kvcache.update_kv_buffer", _env()) + [
    pytest.param("public", kernels.update_kv_buffer, id="public")]


@pytest.mark.parametrize("name, fn", KV_ROWS)
class TestUpdateKvBufferBadInput:
    def _args(self, env, tokens=4, rows=10):
        device = _device(env)
        return (torch.randn(tokens, 4, 8, device=device), torch.arange(tokens, dtype=torch.int32, device=device),
                torch.randn(rows, 4, 8, device=device))

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


def test_reference_kv_write_raises_on_row_ids_outside_the_buffer():
    """The reference validates row ids on the host: an id past the buffer is an error, not a wild write."""
    from rapid_llm.kernels.ops.kvcache.reference import update_kv_buffer

    buffer = torch.randn(10, 4, 8)
    before = buffer.clone()
    with pytest.raises(OpInputError) as info:
        update_kv_buffer(torch.randn(2, 4, 8), torch.tensor([3, 10], dtype=torch.int32), buffer)
    _expect(info, "loc", ["[0, 10)", "10"])
    assert torch.equal(buffer, before), "a rejected write must leave the buffer untouched"


def test_native_kv_write_skips_row_ids_outside_the_buffer(env):
    """The documented kernel-path behaviour (no host sync): out-of-range ids write nothing."""
    fn, reason = resolve_target("rapid_llm.kernels.ops.kvcache.update_kv_buffer:update_kv_buffer", None)
    if fn is None:
        pytest.skip(f"native update_kv_buffer does not load here: {reason}")
    if env.device.kind == "cpu" and not env.device.triton_interpreter:
        pytest.skip("native update_kv_buffer runs only on CUDA or under RAPID_LLM_TRITON_INTERPRET=1")
    device = _device(env)
    buffer = torch.randn(10, 4, 8, device=device)
    before = buffer.clone()
    kv = torch.randn(3, 4, 8, device=device)
    fn(kv, torch.tensor([2, -1, 10], dtype=torch.int32, device=device), buffer)
    assert torch.equal(buffer[2], kv[0])
    mask = torch.ones(10, dtype=torch.bool, device=device)
    mask[2] = False
    assert torch.equal(buffer[mask], before[mask])


ROTARY_ROWS = _loadable_rows("embedding.rotary", _env()) + [pytest.param("public", kernels.rotary, id="public")]


@pytest.mark.parametrize("name, fn", ROTARY_ROWS)
class TestRotaryBadInput:
    def _args(self, env, tokens=3):
        device = _device(env)
        cache = torch.randn(16, 8, device=device)
        return (torch.arange(tokens, device=device), torch.randn(tokens, 2 * 8, device=device),
                torch.randn(tokens, 8, device=device), 8, cache, True)

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
        _expect(info, "k", ["distinct"])


def test_reference_rotary_raises_on_positions_beyond_the_cache():
    """The reference validates positions on the host: a position past the cache is an error."""
    from rapid_llm.kernels.ops.embedding.reference import rotary

    q, k = torch.randn(2, 16), torch.randn(2, 8)
    before = (q.clone(), k.clone())
    with pytest.raises(OpInputError) as info:
        rotary(torch.tensor([3, 16]), q, k, 8, torch.randn(16, 8), True)
    _expect(info, "positions", ["[0, 16)", "16"])
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])
