"""native/merge_states: attention.merge_states in one Triton kernel.

    s = log(e^s_a + e^s_b),  v = v_a e^(s_a - s) + v_b e^(s_b - s)        (fp32, natural log)

v_a, v_b [N, H, D] any strides, s_a, s_b fp32 [N, H] any strides; out v [N, H, D] of v_a's dtype and s
[N, H] fp32, new and contiguous. One program per (token, head): the two log-sum-exps, both parts' rows
(BLOCK_D = D rounded up to a power of two) and one exp each; memory-bound (reads 2 N H D elements).
Both parts empty (-inf): v 0, s -inf; a NaN s gives NaN. Grid (N, H): N on axis 0 (up to 2**31 - 1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..fast_launch import next_power_of_2
from ..launch_fitting import launch_fitting
from ..launch_override import apply


def launch_knobs(dim: int) -> dict:
    """The kernel's knobs (after launch_override's hook): the whole row in one block, 4 warps from 512 columns
    (one warp streams a 128-wide bf16 row)."""
    return apply("native/merge_states", {"BLOCK_D": next_power_of_2(dim), "num_warps": 4 if dim >= 512 else 1})


def merge_states(v_a, s_a, v_b, s_b):
    """native/merge_states (unchecked kernel entry: the op's check ran)."""
    tokens, heads, dim = v_a.shape
    v = torch.empty(v_a.shape, dtype=v_a.dtype, device=v_a.device)
    s = torch.empty((tokens, heads), dtype=torch.float32, device=v_a.device)
    if v.numel() == 0:
        return v, s
    launch_fitting(
        _merge_states_kernel,
        (tokens, heads),
        v_a.device,
        v_a,
        s_a,
        v_b,
        s_b,
        v,
        s,
        *v_a.stride(),
        *s_a.stride(),
        *v_b.stride(),
        *s_b.stride(),
        heads,
        dim,
        **launch_knobs(dim),
    )
    return v, s


@triton.jit
def _merge_states_kernel(
    v_a_ptr,
    s_a_ptr,
    v_b_ptr,
    s_b_ptr,
    v_ptr,
    s_ptr,
    stride_at,
    stride_ah,
    stride_ad,
    stride_sat,
    stride_sah,
    stride_bt,
    stride_bh,
    stride_bd,
    stride_sbt,
    stride_sbh,
    heads,
    dim,
    BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s_a = tl.load(s_a_ptr + token * stride_sat + head * stride_sah)
    s_b = tl.load(s_b_ptr + token * stride_sbt + head * stride_sbh)
    top = tl.maximum(s_a, s_b)
    safe = tl.where(top == float("-inf"), 0.0, top)  # both parts empty: weights 0, not e^(-inf + inf)
    weight_a = tl.exp(s_a - safe)
    weight_b = tl.exp(s_b - safe)
    total = weight_a + weight_b
    columns = tl.arange(0, BLOCK_D)
    mask = columns < dim
    v_a = tl.load(v_a_ptr + token * stride_at + head * stride_ah + columns * stride_ad, mask=mask, other=0.0)
    v_b = tl.load(v_b_ptr + token * stride_bt + head * stride_bh + columns * stride_bd, mask=mask, other=0.0)
    merged = (v_a.to(tl.float32) * weight_a + v_b.to(tl.float32) * weight_b) / tl.where(total == 0.0, 1.0, total)
    row = token * heads + head
    tl.store(v_ptr + row * dim + columns, merged.to(v_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row, safe + tl.log(total))
