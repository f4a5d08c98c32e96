"""FlashInfer rows of the norm, activation and embedding families: the layout tags that admit them, and
what each row says where it cannot run.

The tags (dispatcher/contract.py LAYOUT_TAGS) encode what FlashInfer 0.6.0's kernels read without
faulting or misreading: aligned vector loads, unit strides, 32-bit offsets, the weight in x's dtype, an fp32
contiguous cos/sin cache. A check that provides a tag on an input outside it sends that input to a
kernel that faults (misaligned address) or reads wrong values; one that withholds it on a good input only
costs speed. These tests build the boundary inputs on the CPU (meta tensors where the sizes are
GPU-sized) and ask the ops' checks. The rotary adapter's identity-row addressing is exercised against
an emulation of FlashInfer's cache indexing (pos_enc.cuh) reading real memory.
"""

from __future__ import annotations

import ctypes
import sys
import types

import pytest
import torch

from conformance.rows_here import TABLE, planner_forcing, skip_reason
from rapid_llm.kernels.dispatcher import NoEligibleKernel, probe_environment
from rapid_llm.kernels.ops.activation.checks import check_silu_and_mul
from rapid_llm.kernels.ops.embedding.checks import check_rotary
from rapid_llm.kernels.ops.norm.checks import check_fused_add_rms_norm, check_rms_norm

FLASHINFER_ROWS = [
    row
    for op in TABLE.ops
    for row in TABLE.rows(op)
    if row.backend == "flashinfer" and op.partition(".")[0] in ("norm", "activation", "embedding")
]


def _offset(values: torch.Tensor, elements: int) -> torch.Tensor:
    """`values` copied into a buffer starting `elements` elements in (same shape, contiguous, shifted start)."""
    flat = torch.empty(values.numel() + elements, dtype=values.dtype)
    view = flat[elements:].view(values.shape)
    view.copy_(values)
    return view


# ---------------------------------------------------------------------------
# norm: x:rows_vector, residual:rows_vector, weight:vector
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_aligned_rows_and_weight_in_x_dtype_provide_the_flashinfer_tags(dtype):
    x, weight = torch.randn(4, 1024, dtype=dtype), torch.randn(1024, dtype=dtype)
    assert {"x:rows_vector", "weight:vector"} <= check_rms_norm(x, weight)[1]


def test_fp32_weight_under_half_x_withholds_weight_vector():
    """FlashInfer reads the weight in x's dtype: fp32 bits read as bf16 would be a silent wrong answer."""
    tags = check_rms_norm(torch.randn(4, 256, dtype=torch.bfloat16), torch.randn(256))[1]
    assert "weight:vector" not in tags and "x:rows_vector" in tags


@pytest.mark.parametrize(
    "weight",
    [torch.randn(512, dtype=torch.float16)[::2], _offset(torch.randn(256, dtype=torch.float16), 1)],
    ids=["stride_2", "start_one_element_off"],
)
def test_strided_or_misaligned_weight_withholds_weight_vector(weight):
    assert "weight:vector" not in check_rms_norm(torch.randn(3, 256, dtype=torch.float16), weight)[1]


def test_row_stride_or_start_off_the_vector_withholds_x_rows_vector_but_keeps_x_rows():
    wide = torch.randn(4, 1027, dtype=torch.bfloat16)
    weight = torch.randn(1024, dtype=torch.bfloat16)
    for x in (wide[:, :1024], wide[:, 1:1025]):
        tags = check_rms_norm(x, weight)[1]
        assert "x:rows" in tags and "x:rows_vector" not in tags


def test_narrow_rows_need_only_their_own_vector_width():
    """hidden 5 in fp16: FlashInfer's vector is gcd(8, 5) = 1 element, so odd row strides are fine."""
    assert (
        "x:rows_vector"
        in check_rms_norm(torch.randn(3, 5, dtype=torch.float16), torch.randn(5, dtype=torch.float16))[1]
    )


def test_size_one_dims_with_odd_strides_do_not_hide_a_misaligned_row_step():
    """[4, 1, 1, 1024] whose size-1 dim next to hidden carries an aligned stride (8) while rows step by 1027
    elements: the row step is the stride of the innermost leading dim of size > 1."""
    x = torch.randn(4 * 1027, dtype=torch.bfloat16).as_strided((4, 1, 1, 1024), (1027, 1027, 8, 1))
    tags = check_rms_norm(x, torch.randn(1024, dtype=torch.bfloat16))[1]
    assert "x:rows" in tags and "x:rows_vector" not in tags


@pytest.mark.parametrize(
    "rows, row_stride, provided",
    [
        (2, 1 << 31, True),  # last element at 2**31 + 4095: fits FlashInfer's uint32 offsets
        (3, 1 << 31, False),  # row 2 starts at 2**32: wraps
        ((1 << 20) + 1, 4096, False),  # output rows * hidden > 2**32 elements
    ],
    ids=["last_offset_below_2pow32", "row_offset_wraps", "output_past_2pow32"],
)
def test_offsets_past_32_bits_withhold_x_rows_vector(rows, row_stride, provided):
    x = torch.empty_strided((rows, 4096), (row_stride, 1), dtype=torch.bfloat16, device="meta")
    weight = torch.empty(4096, dtype=torch.bfloat16, device="meta")
    assert ("x:rows_vector" in check_rms_norm(x, weight)[1]) is provided


def test_fused_tags_are_per_tensor():
    x = torch.randn(4, 1024, dtype=torch.float16)
    residual = torch.randn(4, 1027, dtype=torch.float16)[:, :1024]
    tags = check_fused_add_rms_norm(x, residual, torch.randn(1024, dtype=torch.float16))[1]
    assert {"x:rows_vector", "weight:vector", "residual:rows"} <= tags and "residual:rows_vector" not in tags


# ---------------------------------------------------------------------------
# activation: x:contiguous16, out:contiguous16
# ---------------------------------------------------------------------------


def test_contiguous_aligned_x_and_out_provide_the_flashinfer_tags():
    x = torch.randn(3, 2 * 64, dtype=torch.bfloat16)
    assert {"x:contiguous16", "out:contiguous16"} <= check_silu_and_mul(x, None)[1]
    assert {"x:contiguous16", "out:contiguous16"} <= check_silu_and_mul(x, torch.empty(3, 64, dtype=x.dtype))[1]


def test_strided_rows_or_shifted_start_withhold_x_contiguous16():
    """FlashInfer's activation kernel ignores strides (row r at r * 2d) and loads 16-byte vectors."""
    strided = torch.randn(3, 2 * 64 + 8, dtype=torch.bfloat16)[:, : 2 * 64]
    shifted = _offset(torch.randn(3, 2 * 64, dtype=torch.bfloat16), 1)
    assert "x:contiguous16" not in check_silu_and_mul(strided, None)[1]
    assert "x:contiguous16" not in check_silu_and_mul(shifted, None)[1]
    assert "x:rows" in check_silu_and_mul(shifted, None)[1]


def test_strided_or_shifted_out_withholds_out_contiguous16():
    x = torch.randn(3, 2 * 64, dtype=torch.float16)
    for out in (torch.empty(3, 72, dtype=x.dtype)[:, :64], _offset(torch.empty(3, 64, dtype=x.dtype), 1)):
        assert "out:contiguous16" not in check_silu_and_mul(x, out)[1]


# ---------------------------------------------------------------------------
# rotary: qk:rows16, cos_sin_cache:vector16
# ---------------------------------------------------------------------------


def _rotary_args(*, q=None, cache=None, is_neox=True, tokens=3, head_dim=64):
    q = torch.randn(tokens, 2 * head_dim, dtype=torch.bfloat16) if q is None else q
    k = torch.randn(tokens, head_dim, dtype=torch.bfloat16)
    cache = torch.randn(32, head_dim) if cache is None else cache
    return torch.arange(tokens), q, k, head_dim, cache, is_neox


def test_aligned_q_k_and_fp32_cache_provide_the_flashinfer_tags():
    assert {"qk:rows16", "cos_sin_cache:vector16"} <= check_rotary(*_rotary_args())[1]


def test_q_token_stride_off_16_bytes_withholds_qk_rows16():
    q = torch.randn(3, 2 * 64 + 3, dtype=torch.bfloat16)[:, : 2 * 64]
    tags = check_rotary(*_rotary_args(q=q))[1]
    assert "qk:rows" in tags and "qk:rows16" not in tags


@pytest.mark.parametrize(
    "cache",
    [
        torch.randn(32, 64, dtype=torch.bfloat16),
        torch.randn(32, 80)[:, :64],
        torch.randn(32, 24),
        _offset(torch.randn(32, 64), 1),
    ],
    ids=["cache_in_q_dtype", "cache_rows_strided", "rotary_dim_24", "cache_start_off_16_bytes"],
)
def test_cache_flashinfer_cannot_read_withholds_cos_sin_cache_vector16(cache):
    assert "cos_sin_cache:vector16" not in check_rotary(*_rotary_args(cache=cache))[1]


def test_gptj_needs_storage_past_the_last_cache_row():
    """FlashInfer's GPT-J path reads 4 floats past a cache row: only inside the cache's own storage."""
    alone = torch.randn(32, 64)
    with_tail = torch.randn(33, 64)[:32]
    assert "cos_sin_cache:vector16" in check_rotary(*_rotary_args(cache=alone, is_neox=True))[1]
    assert "cos_sin_cache:vector16" not in check_rotary(*_rotary_args(cache=alone, is_neox=False))[1]
    assert "cos_sin_cache:vector16" in check_rotary(*_rotary_args(cache=with_tail, is_neox=False))[1]


# ---------------------------------------------------------------------------
# Rows that cannot run here say which library they need
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("row", FLASHINFER_ROWS, ids=lambda row: row.name)
def test_flashinfer_row_names_its_library_when_rejected(row):
    env = probe_environment()
    if "flashinfer" in dict(env.libs):
        pytest.skip(
            "FlashInfer is installed here: the row is judged by its device and layout conditions, "
            "not by the library (test_absence_cell.py covers both)"
        )
    contract = TABLE.contracts[row.op]
    shape = {name: 128 for name in contract.dim_names}
    with pytest.raises(NoEligibleKernel) as info:
        planner_forcing(row.op, row.name, env).plan(row.op, dtype="bf16", shape=shape, layout=contract.layouts)
    reason = skip_reason(row.name, info.value)
    assert "flashinfer" in reason.partition(":")[2], reason


# ---------------------------------------------------------------------------
# The rotary adapter's identity row, against an emulation of FlashInfer's cache indexing
# ---------------------------------------------------------------------------


def _read_floats(address: int, count: int) -> list[float]:
    return list((ctypes.c_float * count).from_address(address))


def _emulated_apply_rope(positions, q, k, head_dim, cos_sin_cache, is_neox):
    """FlashInfer's indexing (pos_enc.cuh): the row of token t is read at cos_sin_cache + pos[t] * rotary_dim,
    unchecked, in int64 arithmetic; NeoX halves or GPT-J pairs, fp32 math."""
    assert positions.dtype == torch.int64 and positions.is_contiguous() and cos_sin_cache.dtype == torch.float32
    rotary_dim, half = cos_sin_cache.shape[1], cos_sin_cache.shape[1] // 2
    for token, position in enumerate(positions.tolist()):
        row = torch.tensor(_read_floats(cos_sin_cache.data_ptr() + 4 * position * rotary_dim, rotary_dim))
        cos, sin = row[:half], row[half:]
        for tensor in (q, k):
            heads = tensor[token].view(-1, head_dim)
            x = heads[:, :rotary_dim].float()
            x1, x2 = (x[:, :half], x[:, half:]) if is_neox else (x[:, 0::2], x[:, 1::2])
            out1, out2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
            if is_neox:
                heads[:, :rotary_dim] = torch.cat((out1, out2), -1).to(tensor.dtype)
            else:
                heads[:, :rotary_dim] = torch.stack((out1, out2), -1).flatten(-2).to(tensor.dtype)


@pytest.fixture
def rotary_adapter(monkeypatch):
    """backends/flashinfer/rotary.py imported with `flashinfer` replaced by the emulation above."""
    fake = types.ModuleType("flashinfer")
    fake.rope = types.SimpleNamespace(apply_rope_with_cos_sin_cache_inplace=_emulated_apply_rope)
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setitem(sys.modules, "tvm_ffi", types.ModuleType("tvm_ffi"))
    monkeypatch.setitem(sys.modules, "tvm_ffi.libinfo", types.ModuleType("tvm_ffi.libinfo"))
    monkeypatch.delitem(sys.modules, "rapid_llm.kernels.backends.flashinfer.rotary", raising=False)
    import importlib

    module = importlib.import_module("rapid_llm.kernels.backends.flashinfer.rotary")
    yield module
    sys.modules.pop("rapid_llm.kernels.backends.flashinfer.rotary", None)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32])
def test_padding_and_out_of_range_positions_read_the_identity_row(rotary_adapter, is_neox, positions_dtype):
    """Catches an identity row that is not where the kernel's pos * rotary_dim lands (tokens rotated by
    whatever memory is there) or that is not cos 1 / sin 0: tokens at -1, -7 and 40 (cache of 32 rows) must
    come back unchanged, tokens at 0, 5, 31 rotated like the reference rotates them."""
    from rapid_llm.kernels.ops.embedding import reference

    generator = torch.Generator().manual_seed(11)
    head_dim, tokens = 64, 6
    cache = torch.randn(33, head_dim, generator=generator)[:32]  # storage past the last row (GPT-J)
    positions = torch.tensor([-1, 0, 40, 5, -7, 31], dtype=positions_dtype)[::1]
    q = torch.randn(tokens, 2 * head_dim, generator=generator).to(torch.bfloat16)
    k = torch.randn(tokens, head_dim, generator=generator).to(torch.bfloat16)
    expected_q, expected_k = reference.rotary(positions, q.clone(), k.clone(), head_dim, cache, is_neox)
    rotary_adapter.rotary(positions, q, k, head_dim, cache, is_neox)
    for token in (0, 2, 4):
        assert torch.equal(q[token], expected_q[token]) and torch.equal(k[token], expected_k[token])
    torch.testing.assert_close(q.float(), expected_q.float(), atol=1e-2, rtol=8e-3)
    torch.testing.assert_close(k.float(), expected_k.float(), atol=1e-2, rtol=8e-3)


def test_identity_row_is_reused_per_cache_alignment(rotary_adapter):
    """One small buffer per (device, rotary_dim, cache address mod row size), not one per call."""
    cache = torch.randn(16, 64)
    first = rotary_adapter.identity_row_index(cache)
    before = len(rotary_adapter._IDENTITY_ROWS)
    assert rotary_adapter.identity_row_index(cache) == first
    assert len(rotary_adapter._IDENTITY_ROWS) == before
