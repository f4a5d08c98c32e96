"""fp8 quantization: the scale layouts and the bad-input errors of every row eligible here.

Catches: column_major_scales returning a row-major (or unpadded) tensor, which DeepGEMM-style
consumers would read with the wrong strides; scales of the wrong shape; q that does not
dequantize back to x within one e4m3 step; and bad group sizes reaching a kernel.
"""

from __future__ import annotations

import pytest
import torch

from conformance.rows_here import loadable_rows, torch_device
from rapid_llm.kernels.ops.checks import OpInputError

GROUP_OP = "quantization.per_token_group_fp8"
TOKEN_OP = "quantization.per_token_fp8"


def _rows(op):
    return [pytest.param(fn, id=name) for name, fn in loadable_rows(op)]


def _device():
    return torch_device()


@pytest.mark.parametrize("fn", _rows(GROUP_OP))
@pytest.mark.parametrize("tokens", [1, 5, 8])
def test_column_major_scales_are_tma_aligned(fn, tokens):
    x = torch.randn(tokens, 256, device=_device())
    q, scale = fn(x, 128, True)
    aligned = (tokens + 3) // 4 * 4
    assert scale.shape == (tokens, 2) and scale.stride() == (1, aligned), (scale.shape, scale.stride())
    row_major_q, row_major_scale = fn(x, 128, False)
    assert row_major_scale.is_contiguous()
    assert torch.equal(scale, row_major_scale) and torch.equal(q.float(), row_major_q.float())


@pytest.mark.parametrize("fn", _rows(GROUP_OP))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_quantization_dequantizes_within_half_an_e4m3_step(fn, seed):
    """Round-to-nearest e4m3 is off by at most half a step of x / scale: 2**-4 relative for normal
    values, and 2**-10 absolute in the subnormal range below 2**-6 (in scaled units)."""
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(6, 512, generator=generator) * 5).to(_device())
    q, scale = fn(x, 128, False)
    group_scale = scale.view(6, 4, 1)
    back = (q.float().view(6, 4, 128) * group_scale).view(6, 512)
    bound = torch.maximum(x.abs() * 2.0**-4, (group_scale * 2.0**-10).expand(6, 4, 128).reshape(6, 512))
    excess = (back - x).abs() - bound * (1 + 1e-6)
    assert (excess <= 0).all(), f"worst excess {excess.max().item()} over the half-step bound"


@pytest.mark.parametrize("fn", _rows(TOKEN_OP))
def test_per_token_scale_shape_and_zero_rows(fn):
    x = torch.randn(4, 64, device=_device())
    x[2] = 0
    q, scale = fn(x)
    assert scale.shape == (4, 1) and scale.dtype == torch.float32 and q.dtype == torch.float8_e4m3fn
    assert torch.isfinite(scale).all() and torch.count_nonzero(q[2].float()) == 0


@pytest.mark.parametrize("fn", _rows(GROUP_OP))
@pytest.mark.parametrize("group_size, expected", [(96, "divisor"), (0, "positive"), (True, "positive")])
def test_bad_group_sizes_are_rejected(fn, group_size, expected):
    with pytest.raises(OpInputError) as info:
        fn(torch.randn(2, 256, device=_device()), group_size, False)
    assert info.value.argument == "group_size" and expected in str(info.value)


@pytest.mark.parametrize("fn", _rows(TOKEN_OP))
def test_three_dimensional_x_is_rejected(fn):
    with pytest.raises(OpInputError) as info:
        fn(torch.randn(2, 3, 64, device=_device()))
    assert info.value.argument == "x" and "[T, H]" in str(info.value)
