"""Parity cases of the activation family: inputs, the layout tags they provide, a float64 oracle, tolerances.

See conformance/cases/__init__.py for what a case is; test_parity.py runs every row on every case.
"""

from __future__ import annotations

import torch

from conformance.cases.case import Case, randn as _randn
from rapid_llm.kernels.ops.activation.checks import check_silu_and_mul

# ---------------------------------------------------------------------------
# activation.silu_and_mul / activation.gelu_tanh_and_mul (x: [..., 2d] -> [..., d])
# ---------------------------------------------------------------------------


def _gated_case(shape, *, scale=1.0, row_pad=0, with_out=False, out_row_pad=8, start_offset=0):
    def make(dtype, device, generator):
        width = shape[-1]
        if row_pad:
            x = _randn((*shape[:-1], width + row_pad), dtype, device, generator, scale)[..., :width]
        elif start_offset:
            # contiguous, but starting `start_offset` elements into its buffer (off the 16-byte alignment)
            count = width
            for size in shape[:-1]:
                count *= size
            x = _randn((count + start_offset,), dtype, device, generator, scale)[start_offset:].view(shape)
        else:
            x = _randn(shape, dtype, device, generator, scale)
        out = None
        if with_out:
            # a caller's buffer: rows of a wider tensor (a row stride of its own), or contiguous (out_row_pad 0)
            out = torch.full((*shape[:-1], width // 2 + out_row_pad), float("nan"), dtype=dtype, device=device)[
                ..., : width // 2
            ]
        # The layout tags are the op's check's (both gated ops share it): x:rows, out:rows, and FlashInfer's
        # x:contiguous16 / out:contiguous16.
        layout = check_silu_and_mul(x, out)[1]
        return (x, out), {"num_tokens": x.numel() // width, "intermediate": width // 2}, layout

    return make


def _gated_large_offsets(dtype, device, generator):
    """More than 2**31 elements in x: int64 row offsets."""
    width = 2 * 4096
    rows = (1 << 31) // width + 5
    x = torch.empty((rows, width), dtype=dtype, device=device)
    x.normal_(generator=torch.Generator(device=device).manual_seed(int(generator.initial_seed())))
    return (x, None), {"num_tokens": rows, "intermediate": width // 2}, check_silu_and_mul(x, None)[1]


def _gated_oracle(activation):
    def oracle(x, out):
        d = x.shape[-1] // 2
        return (activation(x[..., :d].double()) * x[..., d:].double()).to(x.dtype)

    return oracle


def _silu64(gate):
    return gate * torch.sigmoid(gate)


def _gelu_tanh64(gate):
    return 0.5 * gate * (1.0 + torch.tanh(0.7978845608028654 * (gate + 0.044715 * gate.pow(3))))


GATED_CASES = (
    Case("one_token", _gated_case((1, 2 * 4096))),
    Case("odd_d_5", _gated_case((3, 2 * 5))),
    Case("d_1000_3d", _gated_case((2, 3, 2 * 1000))),
    Case("two_column_blocks_with_tail", _gated_case((2, 2 * 1500))),
    Case("empty_batch", _gated_case((0, 2 * 128))),
    Case("saturating_gates", _gated_case((4, 2 * 768), scale=30.0)),
    Case("strided_rows", _gated_case((5, 2 * 512), row_pad=32)),
    Case("caller_out_strided", _gated_case((6, 2 * 384), with_out=True)),
    Case("caller_out_contiguous", _gated_case((6, 2 * 384), with_out=True, out_row_pad=0)),
    # FlashInfer's boundaries: d = 12 passes FlashInfer's own check (2d * 2 bytes % 16 == 0) but its up-half
    # vectors would be misaligned (the row needs d % 8 == 0); x starting 1 element off the 16-byte alignment
    # (x:contiguous16). Its row must be skipped on both, as on strided_rows and caller_out_strided.
    Case("d_12_up_half_off_vector", _gated_case((3, 2 * 12))),
    Case("x_start_off_vector", _gated_case((4, 2 * 256), start_offset=1)),
    Case("int64_offsets_2pow31", _gated_large_offsets, gpu_only=True, dtypes=frozenset({"bf16"})),
)


CASES = {"activation.silu_and_mul": GATED_CASES, "activation.gelu_tanh_and_mul": GATED_CASES}
ORACLES = {
    "activation.silu_and_mul": _gated_oracle(_silu64),
    "activation.gelu_tanh_and_mul": _gated_oracle(_gelu_tanh64),
}
TOLERANCES = {
    # One fp32 activation (exp-based, implementations differ by a few fp32 ulp) times up, one
    # rounding: one step of the output dtype at most, as for rms_norm.
    ("activation.silu_and_mul", "fp32"): (1e-5, 1e-5),
    ("activation.silu_and_mul", "fp16"): (1e-3, 2e-3),
    ("activation.silu_and_mul", "bf16"): (1e-2, 8e-3),
    ("activation.gelu_tanh_and_mul", "fp32"): (1e-5, 1e-5),
    ("activation.gelu_tanh_and_mul", "fp16"): (1e-3, 2e-3),
    ("activation.gelu_tanh_and_mul", "bf16"): (1e-2, 8e-3),
}
