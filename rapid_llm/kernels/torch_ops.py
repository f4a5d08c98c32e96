"""Every public op as a torch.library custom op, for models that torch.compile traces.

    from rapid_llm.kernels import torch_ops

    ops = torch_ops.register()  # idempotent; returns torch.ops.rapid_llm_ops

    @torch.compile(fullgraph=True)
    def mlp_in(x, weight, eps):
        return ops.silu_and_mul(ops.rms_norm(x, weight, eps))

Each op is one opaque node in the graph (no graph break): its real
implementation is the public op (`rapid_llm.kernels.<name>`: the op's check,
the planned row, its kernel), run when the compiled graph runs; its fake
implementation gives the outputs' shapes, dtypes and strides from the inputs'
alone, as the op's contract states them (one size depends on tensor values:
ep_dispatch's received row count, an unbacked size), so tracing never runs a
kernel. Registration is explicit: importing
`rapid_llm.kernels` stays torch-free, and importing this module registers
nothing until `register()`.

Names: namespace `rapid_llm_ops`, one op per public function, named like it
(the op part of the contract's id: `norm.rms_norm` -> `rapid_llm_ops::rms_norm`).
Not the namespace `rapid_llm`: the optional CUDA extension (csrc/, loaded by
aot.py) defines `rapid_llm::scale`, `rapid_llm::update_kv_buffer` and
`rapid_llm::decode` there with its own outputs-first schemas, and a second
definition of a name in one namespace fails at whichever registers second.

Schemas: the public function's parameters, in order, with its names and
defaults (`None` defaults are `Tensor?` / `int?`). A custom op may not return
an input or a view of one, so an op returns only the tensors it allocates:

- the fused-add quantizers (`fused_add_rms_norm_per_token_group_fp8`,
  `fused_add_rms_norm_static_fp8`) declare `residual` written and return
  only what they allocate (q, and the scales).
- the comm ops take their process group by name (`group.group_name`, or None
  for the default group), as torch's functional collectives do: a custom op
  cannot take a ProcessGroup object. `all_reduce` declares x written (its
  `inplace=True` form) and returns a new tensor: the sum, or with
  `inplace=True` a copy of x (x's strides) after x holds the sum.
- in-place ops declare what they write and return None: `fused_add_rms_norm`
  and `all_reduce_add_rms_norm` (x, residual), `rotary` (q, k),
  `update_kv_buffer`, `update_kv_buffer_fp8`, `update_mla_buffer`,
  `update_mla_buffer_fp8` (buffer). The public op returns
  those same tensors; the caller already holds them.
- an op with `out=` (`silu_and_mul`, `gelu_tanh_and_mul`, the fp8 GEMMs) is two
  ops: `<name>(...)` without `out`, returning a new tensor, and
  `<name>_out(..., out)`, which writes `out` and returns None.
- `prefill`, `mla_prefill`, `prefill_paged` and `decode` return a list (one
  return type for both forms): `[out]`, or `[out, lse]` with `return_lse=True`;
  `merge_states` returns `[v, s]`.

In an engine's compiled model, in-place ops are called for their effect,
and the list of prefill is unpacked:

    ops.fused_add_rms_norm(hidden, residual, weight, eps)  # hidden, residual updated
    ops.update_kv_buffer(kv, loc, kv_buffer)
    (out,) = ops.prefill(q, k, v, cu_seqlens, max_seqlen, sm_scale, True, False)
    (attended,) = ops.decode(q, kv_buffer, page_table, seq_lens, page_size, sm_scale)

Python ints become `SymInt` in the schemas (torch's inference; a compiled
graph may pass them symbolically, the real implementation gets ints). No
autograd formula is registered: these are inference ops (a backward through
one raises).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from .. import kernels
from .ops.attention import MLA_VALUE_DIM
from .ops.fp8 import group_scale_storage

NAMESPACE = "rapid_llm_ops"
#: The suffix of the op that writes a caller's `out=` tensor (`silu_and_mul_out`).
OUT_SUFFIX = "_out"


class CustomOp(NamedTuple):
    """One custom op: its name in NAMESPACE, the real implementation (whose annotations are the schema),
    the fake implementation, and the arguments it writes."""

    name: str
    real: Callable
    fake: Callable
    writes: tuple[str, ...] = ()


def _new(shape, like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """A new contiguous tensor on like's device (like's dtype unless given): the contracts' fresh outputs."""
    return torch.empty(tuple(shape), dtype=dtype or like.dtype, device=like.device)


def _writes_only(*args, **kwargs) -> None:
    """The fake of an op that only writes its arguments: nothing to allocate."""


# --- elementwise, norm, activation ------------------------------------------------------------------------------


def _scale(x: Tensor, factor: float) -> Tensor:
    return kernels.scale(x, factor)


def _rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return kernels.rms_norm(x, weight, eps)


def _fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6) -> None:
    kernels.fused_add_rms_norm(x, residual, weight, eps)


def _same_shape_fake(x, *args, **kwargs) -> Tensor:
    """A new tensor of the first argument's shape and dtype: scale, rms_norm, and decode (out [B, Hq, D] = q's)."""
    return _new(x.shape, x)


def _silu_and_mul(x: Tensor) -> Tensor:
    return kernels.silu_and_mul(x)


def _silu_and_mul_out(x: Tensor, out: Tensor) -> None:
    kernels.silu_and_mul(x, out)


def _gelu_tanh_and_mul(x: Tensor) -> Tensor:
    return kernels.gelu_tanh_and_mul(x)


def _gelu_tanh_and_mul_out(x: Tensor, out: Tensor) -> None:
    kernels.gelu_tanh_and_mul(x, out)


def _gated_fake(x) -> Tensor:
    """x = gate | up along the last dim: out [..., d] for x [..., 2*d]."""
    return _new((*x.shape[:-1], x.shape[-1] // 2), x)


# --- embedding, kvcache ------------------------------------------------------------------------------------------


def _vocab_embedding(ids: Tensor, table: Tensor, vocab_start: int = 0, vocab_end: int | None = None) -> Tensor:
    return kernels.vocab_embedding(ids, table, vocab_start, vocab_end)


def _vocab_embedding_fake(ids, table, *args, **kwargs) -> Tensor:
    return _new((*ids.shape, table.shape[1]), table)


def _rotary(positions: Tensor, q: Tensor, k: Tensor, head_dim: int, cos_sin_cache: Tensor, is_neox: bool) -> None:
    kernels.rotary(positions, q, k, head_dim, cos_sin_cache, is_neox)


def _update_kv_buffer(kv: Tensor, loc: Tensor, buffer: Tensor) -> None:
    kernels.update_kv_buffer(kv, loc, buffer)


def _update_kv_buffer_fp8(kv: Tensor, loc: Tensor, buffer: Tensor, k_scale: Tensor, v_scale: Tensor) -> None:
    kernels.update_kv_buffer_fp8(kv, loc, buffer, k_scale, v_scale)


def _update_mla_buffer(latent: Tensor, rope: Tensor, loc: Tensor, buffer: Tensor) -> None:
    kernels.update_mla_buffer(latent, rope, loc, buffer)


def _update_mla_buffer_fp8(latent: Tensor, rope: Tensor, loc: Tensor, buffer: Tensor, scale: Tensor) -> None:
    kernels.update_mla_buffer_fp8(latent, rope, loc, buffer, scale)


# --- quantization ------------------------------------------------------------------------------------------------


def _per_token_fp8(x: Tensor) -> tuple[Tensor, Tensor]:
    return kernels.per_token_fp8(x)


def _per_token_fp8_fake(x) -> tuple[Tensor, Tensor]:
    return _new(x.shape, x, torch.float8_e4m3fn), _new((x.shape[0], 1), x, torch.float32)


def _per_token_group_fp8(x: Tensor, group_size: int = 128, column_major_scales: bool = False) -> tuple[Tensor, Tensor]:
    return kernels.per_token_group_fp8(x, group_size, column_major_scales)


def _per_token_group_fp8_fake(x, group_size=128, column_major_scales=False) -> tuple[Tensor, Tensor]:
    tokens, hidden = x.shape
    scales = group_scale_storage(tokens, hidden // group_size, column_major_scales, x.device)
    return _new(x.shape, x, torch.float8_e4m3fn), scales


def _group_fp8_fake(tokens: int, width: int, group_size: int, column_major_scales: bool, like: Tensor):
    """(q e4m3 [tokens, width], fp32 scales in the layout the op returns)."""
    scales = group_scale_storage(tokens, width // group_size, column_major_scales, like.device)
    return _new((tokens, width), like, torch.float8_e4m3fn), scales


def _rms_norm_per_token_group_fp8(
    x: Tensor, weight: Tensor, eps: float = 1e-6, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    return kernels.rms_norm_per_token_group_fp8(x, weight, eps, group_size, column_major_scales)


def _rms_norm_per_token_group_fp8_fake(x, weight, eps=1e-6, group_size=128, column_major_scales=False):
    return _group_fp8_fake(x.shape[0], x.shape[1], group_size, column_major_scales, x)


def _fused_add_rms_norm_per_token_group_fp8(
    x: Tensor,
    residual: Tensor,
    weight: Tensor,
    eps: float = 1e-6,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor]:
    return kernels.fused_add_rms_norm_per_token_group_fp8(x, residual, weight, eps, group_size, column_major_scales)


def _fused_add_rms_norm_per_token_group_fp8_fake(
    x, residual, weight, eps=1e-6, group_size=128, column_major_scales=False
):
    return _group_fp8_fake(x.shape[0], x.shape[1], group_size, column_major_scales, x)


def _rms_norm_static_fp8(x: Tensor, weight: Tensor, scale: Tensor, eps: float = 1e-6) -> Tensor:
    return kernels.rms_norm_static_fp8(x, weight, scale, eps)


def _fused_add_rms_norm_static_fp8(
    x: Tensor, residual: Tensor, weight: Tensor, scale: Tensor, eps: float = 1e-6
) -> Tensor:
    return kernels.fused_add_rms_norm_static_fp8(x, residual, weight, scale, eps)


def _static_fp8_fake(x, *args) -> Tensor:
    """q e4m3 of x's shape (rms_norm_static_fp8 and its fused-add form)."""
    return _new(x.shape, x, torch.float8_e4m3fn)


def _silu_and_mul_per_token_group_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    return kernels.silu_and_mul_per_token_group_fp8(x, group_size, column_major_scales)


def _silu_and_mul_per_token_group_fp8_fake(x, group_size=128, column_major_scales=False):
    return _group_fp8_fake(x.shape[0], x.shape[1] // 2, group_size, column_major_scales, x)


# --- attention ---------------------------------------------------------------------------------------------------


def _with_lse(result, return_lse: bool) -> list[Tensor]:
    return list(result) if return_lse else [result]


def _prefill(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: Tensor,
    max_seqlen: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks: Tensor | None = None,
) -> list[Tensor]:
    args = (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap, sinks)
    return _with_lse(kernels.prefill(*args), return_lse)


def _mla_prefill(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens: Tensor,
    max_seqlen: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
) -> list[Tensor]:
    args = (q, k, v, cu_seqlens, max_seqlen, sm_scale, causal, return_lse, window_left, logits_soft_cap)
    return _with_lse(kernels.mla_prefill(*args), return_lse)


def _ragged_fake(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen,
    sm_scale,
    causal=True,
    return_lse=False,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
) -> list[Tensor]:
    """out [T, Hq, Dv] of q's dtype, then lse [T, Hq] fp32 with return_lse."""
    tokens, heads = q.shape[0], q.shape[1]
    out = _new((tokens, heads, v.shape[-1]), q)
    return [out, _new((tokens, heads), q, torch.float32)] if return_lse else [out]


def _prefill_paged(
    q: Tensor,
    kv_buffer: Tensor,
    page_table: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    max_seqlen_q: int,
    page_size: int,
    sm_scale: float,
    causal: bool = True,
    return_lse: bool = False,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks: Tensor | None = None,
    custom_mask: Tensor | None = None,
    mask_indptr: Tensor | None = None,
) -> list[Tensor]:
    args = (q, kv_buffer, page_table, cu_seqlens_q, seq_lens, max_seqlen_q, page_size, sm_scale, causal, return_lse)
    features = (window_left, logits_soft_cap, sinks, custom_mask, mask_indptr)
    return _with_lse(kernels.prefill_paged(*args, *features), return_lse)


def _prefill_paged_fake(
    q,
    kv_buffer,
    page_table,
    cu_seqlens_q,
    seq_lens,
    max_seqlen_q,
    page_size,
    sm_scale,
    causal=True,
    return_lse=False,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    custom_mask=None,
    mask_indptr=None,
) -> list[Tensor]:
    """out [T, Hq, D] of q's dtype, then lse [T, Hq] fp32 with return_lse."""
    out = _new(q.shape, q)
    return [out, _new(q.shape[:2], q, torch.float32)] if return_lse else [out]


def _decode(
    q: Tensor,
    kv_buffer: Tensor,
    page_table: Tensor,
    seq_lens: Tensor,
    page_size: int,
    sm_scale: float,
    k_scale: Tensor | None = None,
    v_scale: Tensor | None = None,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    sinks: Tensor | None = None,
    return_lse: bool = False,
    num_q_tokens: int = 1,
) -> list[Tensor]:
    args = (q, kv_buffer, page_table, seq_lens, page_size, sm_scale, k_scale, v_scale, window_left, logits_soft_cap)
    return _with_lse(kernels.decode(*args, sinks, return_lse, num_q_tokens), return_lse)


def _decode_fake(
    q,
    kv_buffer,
    page_table,
    seq_lens,
    page_size,
    sm_scale,
    k_scale=None,
    v_scale=None,
    window_left=-1,
    logits_soft_cap=0.0,
    sinks=None,
    return_lse=False,
    num_q_tokens=1,
) -> list[Tensor]:
    """out [B * num_q_tokens, Hq, D] of q's dtype (q's shape), then lse [B * num_q_tokens, Hq] fp32 with
    return_lse."""
    out = _new(q.shape, q)
    return [out, _new(q.shape[:2], q, torch.float32)] if return_lse else [out]


def _merge_states(v_a: Tensor, s_a: Tensor, v_b: Tensor, s_b: Tensor) -> list[Tensor]:
    return list(kernels.merge_states(v_a, s_a, v_b, s_b))


def _merge_states_fake(v_a, s_a, v_b, s_b) -> list[Tensor]:
    """v [N, H, D] of v_a's dtype, s [N, H] fp32."""
    return [_new(v_a.shape, v_a), _new(v_a.shape[:2], v_a, torch.float32)]


def _mla_decode(
    q: Tensor,
    latent_cache: Tensor,
    page_table: Tensor,
    seq_lens: Tensor,
    page_size: int,
    sm_scale: float,
    window_left: int = -1,
    logits_soft_cap: float = 0.0,
    num_q_tokens: int = 1,
    latent_scale: Tensor | None = None,
) -> Tensor:
    args = (q, latent_cache, page_table, seq_lens, page_size, sm_scale, window_left, logits_soft_cap)
    return kernels.mla_decode(*args, num_q_tokens, latent_scale)


def _mla_decode_fake(q, *args, **kwargs) -> Tensor:
    return _new((q.shape[0], q.shape[1], MLA_VALUE_DIM), q)


# --- comm ------------------------------------------------------------------------------------------------------


def _all_reduce(x: Tensor, group: str | None = None, inplace: bool = False) -> Tensor:
    out = kernels.all_reduce(x, group, inplace)
    if not inplace:
        return out
    # in place: x holds the sum (declared written); the op returns a copy with x's strides (not x itself)
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)


def _all_reduce_fake(x, group=None, inplace=False) -> Tensor:
    """A new tensor of x's shape: contiguous out of place, with x's strides in place (a copy of x)."""
    if inplace:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return _new(x.shape, x)


def _all_reduce_add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6, group: str | None = None
) -> None:
    kernels.all_reduce_add_rms_norm(x, residual, weight, eps, group)


def _ep_dispatch(
    x: Tensor,
    topk_ids: Tensor,
    topk_weights: Tensor,
    num_experts: int,
    group: str | None = None,
    x_scale: Tensor | None = None,
) -> list[Tensor]:
    return list(kernels.ep_dispatch(x, topk_ids, topk_weights, num_experts, group, x_scale).compared())


def _ep_dispatch_fake(x, topk_ids, topk_weights, num_experts, group=None, x_scale=None) -> list[Tensor]:
    """The received row count is known only after the counts exchange: a data-dependent size."""
    from .collectives import resolve_group

    import torch.distributed as dist

    world = dist.get_world_size(resolve_group(group))
    received = torch.library.get_ctx().new_dynamic_size()
    hidden, top_k = x.shape[1], topk_ids.shape[1]
    scale = [] if x_scale is None else [_new((received, x_scale.shape[1]), x_scale)]
    return [
        _new((received, hidden), x),
        *scale,
        _new((received, top_k), topk_ids),
        _new((received, top_k), topk_weights, torch.float32),
        _new((num_experts // world,), x, torch.int32),
        _new((x.shape[0], world), x, torch.bool),
        _new((world,), x, torch.int64),
    ]


def _ep_combine(y: Tensor, handle: list[Tensor], group: str | None = None) -> Tensor:
    from .collectives import EpHandle

    return kernels.ep_combine(y, EpHandle.from_tensors(handle), group)


def _ep_combine_fake(y, handle, group=None) -> Tensor:
    return _new((handle[0].shape[0], y.shape[1]), y)


# --- gemm ------------------------------------------------------------------------------------------------------


def _mm(x: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    return kernels.mm(x, w, bias)


def _mm_fake(x, w, bias=None) -> Tensor:
    return _new((*x.shape[:-1], w.shape[0]), x)


def _w8a16_mm(x: Tensor, w_q: Tensor, w_scale: Tensor, bias: Tensor | None = None) -> Tensor:
    return kernels.w8a16_mm(x, w_q, w_scale, bias)


def _w8a16_mm_fake(x, w_q, w_scale, bias=None) -> Tensor:
    return _new((*x.shape[:-1], w_q.shape[0]), x)


def _w4a16_mm(
    x: Tensor,
    qweight: Tensor,
    scales: Tensor,
    qzeros: Tensor,
    group_size: int,
    packing: str,
    bias: Tensor | None = None,
) -> Tensor:
    return kernels.w4a16_mm(x, qweight, scales, qzeros, group_size, packing, bias)


def _w4a16_mm_fake(x, qweight, scales, qzeros, group_size, packing, bias=None) -> Tensor:
    return _new((*x.shape[:-1], scales.shape[1]), x)


# bf16 outputs of fp8 operands


def _fp8_block_mm(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor) -> Tensor:
    return kernels.fp8_block_mm(a, a_scale, b, b_scale)


def _fp8_block_mm_out(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, out: Tensor) -> None:
    kernels.fp8_block_mm(a, a_scale, b, b_scale, out)


def _fp8_block_mm_fake(a, a_scale, b, b_scale) -> Tensor:
    return _new((a.shape[0], b.shape[0]), a, torch.bfloat16)


def _fp8_mm(
    a: Tensor,
    a_scale: Tensor,
    b: Tensor,
    b_scale: Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    bias: Tensor | None = None,
) -> Tensor:
    return kernels.fp8_mm(a, a_scale, b, b_scale, out_dtype, bias)


def _fp8_mm_fake(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None) -> Tensor:
    return _new((a.shape[0], b.shape[0]), a, out_dtype)


def _fp8_grouped_mm_contiguous(a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, m_indices: Tensor) -> Tensor:
    return kernels.fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices)


def _fp8_grouped_mm_contiguous_out(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, m_indices: Tensor, out: Tensor
) -> None:
    kernels.fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out)


def _fp8_grouped_mm_contiguous_fake(a, a_scale, b, b_scale, m_indices) -> Tensor:
    return _new((a.shape[0], b.shape[1]), a, torch.bfloat16)


def _fp8_grouped_mm_masked(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, masked_m: Tensor, expected_m: int
) -> Tensor:
    return kernels.fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m)


def _fp8_grouped_mm_masked_out(
    a: Tensor, a_scale: Tensor, b: Tensor, b_scale: Tensor, masked_m: Tensor, expected_m: int, out: Tensor
) -> None:
    kernels.fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m, out)


def _fp8_grouped_mm_masked_fake(a, a_scale, b, b_scale, masked_m, expected_m) -> Tensor:
    return _new((a.shape[0], a.shape[1], b.shape[1]), a, torch.bfloat16)


def _topk_routing(
    logits: Tensor,
    top_k: int,
    renormalize: bool = True,
    scoring: str = "softmax",
    correction_bias: Tensor | None = None,
    num_expert_groups: int = 1,
    topk_groups: int = 1,
    routed_scaling_factor: float = 1.0,
) -> tuple[Tensor, Tensor]:
    return kernels.topk_routing(
        logits, top_k, renormalize, scoring, correction_bias, num_expert_groups, topk_groups, routed_scaling_factor
    )


def _topk_routing_fake(logits, top_k, *args, **kwargs) -> tuple[Tensor, Tensor]:
    tokens = logits.shape[0]
    return _new((tokens, top_k), logits, torch.float32), _new((tokens, top_k), logits, torch.int32)


def _align(
    topk_ids: Tensor, num_experts: int, block_size: int, expert_start: int = 0, num_local_experts: int | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return kernels.align(topk_ids, num_experts, block_size, expert_start, num_local_experts)


def _align_fake(topk_ids, num_experts, block_size, expert_start=0, num_local_experts=None):
    """The sizes follow from the shapes and the ints alone (moe.align's contract)."""
    from .ops.moe.checks import local_range
    from .ops.moe.reference import align_capacity

    local = local_range(num_experts, expert_start, num_local_experts)
    capacity = align_capacity(topk_ids.numel(), local, block_size)
    return (
        _new((capacity,), topk_ids, torch.int32),
        _new((capacity // block_size,), topk_ids, torch.int32),
        _new((1,), topk_ids, torch.int32),
        _new((local,), topk_ids, torch.int32),
    )


def _fused_moe(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    activation: str = "silu",
    w13_scale: Tensor | None = None,
    w2_scale: Tensor | None = None,
    num_shared_experts: int = 0,
) -> Tensor:
    return kernels.fused_moe(x, w13, w2, topk_weights, topk_ids, activation, w13_scale, w2_scale, num_shared_experts)


def _fused_moe_out(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    activation: str,
    w13_scale: Tensor | None,
    w2_scale: Tensor | None,
    num_shared_experts: int,
    out: Tensor,
) -> None:
    kernels.fused_moe(x, w13, w2, topk_weights, topk_ids, activation, w13_scale, w2_scale, num_shared_experts, out)


def _fused_moe_fake(x, *args, **kwargs) -> Tensor:
    return _new(tuple(x.shape), x)


def custom_op_arguments(args: tuple) -> tuple:
    """A custom op's arguments for the public op call `args`: the same, but an EpHandle passed as its tensors
    (a custom op takes tensors, not Python objects)."""
    from .collectives import EpHandle

    return tuple(arg.tensors() if isinstance(arg, EpHandle) else arg for arg in args)


#: Every custom op (conformance/test_custom_ops.py checks that each public op has its ops here).
CUSTOM_OPS = (
    CustomOp("scale", _scale, _same_shape_fake),
    CustomOp("rms_norm", _rms_norm, _same_shape_fake),
    CustomOp("all_reduce", _all_reduce, _all_reduce_fake, ("x",)),
    CustomOp("all_reduce_add_rms_norm", _all_reduce_add_rms_norm, _writes_only, ("x", "residual")),
    CustomOp("ep_dispatch", _ep_dispatch, _ep_dispatch_fake),
    CustomOp("ep_combine", _ep_combine, _ep_combine_fake),
    CustomOp("fused_add_rms_norm", _fused_add_rms_norm, _writes_only, ("x", "residual")),
    CustomOp("silu_and_mul", _silu_and_mul, _gated_fake),
    CustomOp("silu_and_mul_out", _silu_and_mul_out, _writes_only, ("out",)),
    CustomOp("gelu_tanh_and_mul", _gelu_tanh_and_mul, _gated_fake),
    CustomOp("gelu_tanh_and_mul_out", _gelu_tanh_and_mul_out, _writes_only, ("out",)),
    CustomOp("vocab_embedding", _vocab_embedding, _vocab_embedding_fake),
    CustomOp("rotary", _rotary, _writes_only, ("q", "k")),
    CustomOp("update_kv_buffer", _update_kv_buffer, _writes_only, ("buffer",)),
    CustomOp("update_kv_buffer_fp8", _update_kv_buffer_fp8, _writes_only, ("buffer",)),
    CustomOp("update_mla_buffer", _update_mla_buffer, _writes_only, ("buffer",)),
    CustomOp("update_mla_buffer_fp8", _update_mla_buffer_fp8, _writes_only, ("buffer",)),
    CustomOp("per_token_fp8", _per_token_fp8, _per_token_fp8_fake),
    CustomOp("per_token_group_fp8", _per_token_group_fp8, _per_token_group_fp8_fake),
    CustomOp("rms_norm_per_token_group_fp8", _rms_norm_per_token_group_fp8, _rms_norm_per_token_group_fp8_fake),
    CustomOp(
        "fused_add_rms_norm_per_token_group_fp8",
        _fused_add_rms_norm_per_token_group_fp8,
        _fused_add_rms_norm_per_token_group_fp8_fake,
        ("residual",),
    ),
    CustomOp("rms_norm_static_fp8", _rms_norm_static_fp8, _static_fp8_fake),
    CustomOp("fused_add_rms_norm_static_fp8", _fused_add_rms_norm_static_fp8, _static_fp8_fake, ("residual",)),
    CustomOp(
        "silu_and_mul_per_token_group_fp8", _silu_and_mul_per_token_group_fp8, _silu_and_mul_per_token_group_fp8_fake
    ),
    CustomOp("prefill", _prefill, _ragged_fake),
    CustomOp("mla_prefill", _mla_prefill, _ragged_fake),
    CustomOp("prefill_paged", _prefill_paged, _prefill_paged_fake),
    CustomOp("decode", _decode, _decode_fake),
    CustomOp("merge_states", _merge_states, _merge_states_fake),
    CustomOp("mla_decode", _mla_decode, _mla_decode_fake),
    CustomOp("mm", _mm, _mm_fake),
    CustomOp("w8a16_mm", _w8a16_mm, _w8a16_mm_fake),
    CustomOp("fp8_mm", _fp8_mm, _fp8_mm_fake),
    CustomOp("w4a16_mm", _w4a16_mm, _w4a16_mm_fake),
    CustomOp("fp8_block_mm", _fp8_block_mm, _fp8_block_mm_fake),
    CustomOp("fp8_block_mm_out", _fp8_block_mm_out, _writes_only, ("out",)),
    CustomOp("fp8_grouped_mm_contiguous", _fp8_grouped_mm_contiguous, _fp8_grouped_mm_contiguous_fake),
    CustomOp("fp8_grouped_mm_contiguous_out", _fp8_grouped_mm_contiguous_out, _writes_only, ("out",)),
    CustomOp("fp8_grouped_mm_masked", _fp8_grouped_mm_masked, _fp8_grouped_mm_masked_fake),
    CustomOp("fp8_grouped_mm_masked_out", _fp8_grouped_mm_masked_out, _writes_only, ("out",)),
    CustomOp("topk_routing", _topk_routing, _topk_routing_fake),
    CustomOp("align", _align, _align_fake),
    CustomOp("fused_moe", _fused_moe, _fused_moe_fake),
    CustomOp("fused_moe_out", _fused_moe_out, _writes_only, ("out",)),
)


@functools.cache
def register():
    """Define every op of CUSTOM_OPS in torch.ops.rapid_llm_ops (once per process) and return that namespace."""
    for op in CUSTOM_OPS:
        torch.library.custom_op(f"{NAMESPACE}::{op.name}", op.real, mutates_args=op.writes).register_fake(op.fake)
    return getattr(torch.ops, NAMESPACE)
