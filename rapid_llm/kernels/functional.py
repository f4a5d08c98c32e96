"""Public functional ops. Each call goes through the default planner's cache.

    y = rms_norm(x, weight, eps)   # same table, same plans as Planner(env).plan(...)

The planner resolves (op, device, dtype, layout, shape bucket) once; later
calls look the plan up and call the loaded target. Arguments are checked
first (the op's shared check, which every implementation also runs), so bad
input fails with an OpInputError naming the argument rather than a dispatch
miss. The call site derives the layout tags it can provide from the tensors
(cheap stride checks).
"""

from __future__ import annotations

from .dispatcher.plan import default_planner
from .ops.activation.checks import GELU_TANH_AND_MUL, SILU_AND_MUL, check_gated_args
from .ops.checks import rows_view_ok
from .ops.embedding.checks import VOCAB_EMBEDDING, check_vocab_embedding_args
from .ops.embedding.rotary_checks import ROTARY, check_rotary_args
from .ops.kvcache.checks import (
    UPDATE_KV_BUFFER,
    UPDATE_KV_BUFFER_FP8,
    check_update_kv_buffer_args,
    check_update_kv_buffer_fp8_args,
)
from .ops.elementwise.checks import SCALE, check_scale_args
from .ops.quantization.checks import (
    PER_TOKEN_FP8,
    PER_TOKEN_GROUP_FP8,
    check_per_token_fp8_args,
    check_per_token_group_fp8_args,
)
from .ops.norm.checks import FUSED_ADD_RMS_NORM, RMS_NORM, check_fused_add_rms_norm_args, check_rms_norm_args

_CONTIGUOUS = frozenset({"x:contiguous"})
_ROWS = frozenset({"x:rows"})
_RESIDUAL_ROWS = frozenset({"residual:rows"})
_BOTH_ROWS = frozenset({"x:rows", "residual:rows"})
_OUT_ROWS = frozenset({"out:rows"})
_X_AND_OUT_ROWS = frozenset({"x:rows", "out:rows"})
_TABLE_ROWS = frozenset({"table:rows"})
_KV_TAGS = {(True, True): frozenset({"kv:rows", "buffer:rows"}), (True, False): frozenset({"kv:rows"}),
            (False, True): frozenset({"buffer:rows"}), (False, False): frozenset()}
_QK_ROWS = frozenset({"qk:rows"})
_NONE = frozenset()


def scale(x, factor: float):
    """x * factor (fp32 math, x's dtype out). Contract: ops/interfaces.py, elementwise.scale."""
    check_scale_args(x, factor)
    layout = _CONTIGUOUS if x.is_contiguous() else _NONE
    return default_planner().for_tensor(SCALE, x, layout, num_elements=x.numel())(x, factor)


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x**2, -1) + eps) * weight. Contract: ops/interfaces.py, norm.rms_norm."""
    num_tokens, hidden = check_rms_norm_args(x, weight, eps)
    layout = _ROWS if rows_view_ok(x) else _NONE
    planned = default_planner().for_tensor(RMS_NORM, x, layout, num_tokens=num_tokens, hidden=hidden)
    return planned(x, weight, eps)


def fused_add_rms_norm(x, residual, weight, eps: float = 1e-6):
    """In place: residual += x; x = rms_norm(residual). Contract: ops/interfaces.py, norm.fused_add_rms_norm."""
    num_tokens, hidden = check_fused_add_rms_norm_args(x, residual, weight, eps)
    x_rows, residual_rows = rows_view_ok(x), rows_view_ok(residual)
    layout = _BOTH_ROWS if x_rows and residual_rows else _ROWS if x_rows else _RESIDUAL_ROWS if residual_rows else _NONE
    planned = default_planner().for_tensor(FUSED_ADD_RMS_NORM, x, layout, num_tokens=num_tokens, hidden=hidden)
    return planned(x, residual, weight, eps)


def _gated(op, x, out):
    num_tokens, intermediate = check_gated_args(op, x, out)
    x_rows, out_rows = rows_view_ok(x), out is None or rows_view_ok(out)
    layout = _X_AND_OUT_ROWS if x_rows and out_rows else _ROWS if x_rows else _OUT_ROWS if out_rows else _NONE
    return default_planner().for_tensor(op, x, layout, num_tokens=num_tokens, intermediate=intermediate)(x, out)


def silu_and_mul(x, out=None):
    """silu(x[..., :d]) * x[..., d:]. Contract: ops/interfaces.py, activation.silu_and_mul."""
    return _gated(SILU_AND_MUL, x, out)


def gelu_tanh_and_mul(x, out=None):
    """gelu_tanh(x[..., :d]) * x[..., d:]. Contract: ops/interfaces.py, activation.gelu_tanh_and_mul."""
    return _gated(GELU_TANH_AND_MUL, x, out)


def vocab_embedding(ids, table, vocab_start: int = 0, vocab_end: int | None = None):
    """table[ids - vocab_start], zero rows outside [vocab_start, vocab_end). Contract: ops/interfaces.py."""
    _, _, hidden = check_vocab_embedding_args(ids, table, vocab_start, vocab_end)
    layout = _TABLE_ROWS if hidden == 1 or table.stride(1) == 1 else _NONE
    planned = default_planner().for_tensor(VOCAB_EMBEDDING, table, layout, num_tokens=ids.numel(), hidden=hidden)
    return planned(ids, table, vocab_start, vocab_end)


def _packed_token_rows(t) -> bool:
    """[T, H, D] with each token's H*D elements contiguous (views as [T, H*D] without a copy)."""
    return (t.shape[2] == 1 or t.stride(2) == 1) and (t.shape[1] == 1 or t.stride(1) == t.shape[2])


def update_kv_buffer(kv, loc, buffer):
    """buffer[loc[i]] = kv[i], in place; returns buffer. Contract: ops/interfaces.py, kvcache.update_kv_buffer."""
    num_tokens, heads, head_dim = check_update_kv_buffer_args(kv, loc, buffer)
    layout = _KV_TAGS[(_packed_token_rows(kv), _packed_token_rows(buffer))]
    planned = default_planner().for_tensor(UPDATE_KV_BUFFER, kv, layout, num_tokens=num_tokens,
                                           num_kv_heads=heads // 2, head_dim=head_dim)
    return planned(kv, loc, buffer)


def update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale):
    """buffer[loc[i]] = e4m3(kv[i] / scale), in place; returns buffer. Contract: ops/interfaces.py,
    kvcache.update_kv_buffer_fp8."""
    num_tokens, heads, head_dim = check_update_kv_buffer_fp8_args(kv, loc, buffer, k_scale, v_scale)
    layout = _KV_TAGS[(_packed_token_rows(kv), _packed_token_rows(buffer))]
    planned = default_planner().for_tensor(UPDATE_KV_BUFFER_FP8, kv, layout, num_tokens=num_tokens,
                                           num_kv_heads=heads // 2, head_dim=head_dim)
    return planned(kv, loc, buffer, k_scale, v_scale)


def rotary(positions, q, k, head_dim: int, cos_sin_cache, is_neox: bool):
    """Rotary embedding in place on q and k; returns (q, k). Contract: ops/interfaces.py, embedding.rotary."""
    tokens, q_heads, k_heads, _ = check_rotary_args(positions, q, k, head_dim, cos_sin_cache, is_neox)
    unit = all(t.shape[1] == 1 or t.stride(1) == 1 for t in (q, k, cos_sin_cache))
    planned = default_planner().for_tensor(ROTARY, q, _QK_ROWS if unit else _NONE, num_tokens=tokens,
                                           num_q_heads=q_heads, num_kv_heads=k_heads, head_dim=head_dim)
    return planned(positions, q, k, head_dim, cos_sin_cache, is_neox)


def per_token_fp8(x):
    """(q e4m3 [T, H], scale fp32 [T, 1]). Contract: ops/interfaces.py, quantization.per_token_fp8."""
    tokens, hidden = check_per_token_fp8_args(PER_TOKEN_FP8, x)
    layout = _ROWS if rows_view_ok(x) else _NONE
    return default_planner().for_tensor(PER_TOKEN_FP8, x, layout, num_tokens=tokens, hidden=hidden)(x)


def per_token_group_fp8(x, group_size: int = 128, column_major_scales: bool = False):
    """(q e4m3 [T, H], scale fp32 [T, H/g]). Contract: ops/interfaces.py, quantization.per_token_group_fp8."""
    tokens, hidden = check_per_token_group_fp8_args(x, group_size, column_major_scales)
    layout = _ROWS if rows_view_ok(x) else _NONE
    planned = default_planner().for_tensor(PER_TOKEN_GROUP_FP8, x, layout, num_tokens=tokens, hidden=hidden)
    return planned(x, group_size, column_major_scales)
