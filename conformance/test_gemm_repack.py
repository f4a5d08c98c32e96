"""awq_to_gptq_v2 (ops/gemm/repack.py): an AutoAWQ checkpoint's int4 words repacked at load time into the
"gptq_v2" layout of gemm.w4a16_mm must describe the same weight, bit for bit, and bad input must be named."""

from __future__ import annotations

import pytest
import torch

from conformance.cases.gemm import _int4_weights, _pack_along_n, w4a16_mm_oracle
from rapid_llm.kernels.ops.checks import OpInputError
from rapid_llm.kernels.ops.gemm.reference import w4a16_weight
from rapid_llm.kernels.ops.gemm.repack import awq_to_gptq_v2


@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("positive_groups", [False, True])
def test_repacked_weight_is_the_awq_weight(group, positive_groups):
    """Catches a nibble moved to the wrong k or column (AWQ's interleaved order read as if in order, a k
    packed at the wrong bits) or a zero shifted by the v1 convention: the dequantized weights must be equal,
    zeros of 0 (groups above zero) included."""
    generator = torch.Generator().manual_seed(group + positive_groups)
    qweight, scales, qzeros = _int4_weights(
        56, 4 * group, group, "awq", generator, torch.float16, False, positive_groups
    )
    repacked, zeros = awq_to_gptq_v2(qweight, qzeros)
    assert repacked.shape == (qweight.shape[0] // 8, 56) and zeros.shape == qzeros.shape
    assert repacked.dtype == zeros.dtype == torch.int32 and repacked.is_contiguous() and zeros.is_contiguous()
    want = w4a16_weight(qweight, scales, qzeros, group, "awq")
    assert torch.equal(w4a16_weight(repacked, scales, zeros, group, "gptq_v2"), want)
    if positive_groups:
        assert (zeros & 15).eq(0).any(), "no zero of 0 reached the repacked zeros: the case tests nothing"


def test_one_nibble_lands_at_its_k_and_column():
    """Catches an off-by-one in the packing direction: the single value 9 at (k = 11, column 13) of an AWQ
    word must be nibble 11 % 8 = 3 of word [11 // 8, 13] afterwards, and nowhere else."""
    q = torch.zeros((16, 16), dtype=torch.int64)
    q[11, 13] = 9
    qweight = _pack_along_n(q, (0, 2, 4, 6, 1, 3, 5, 7))
    zero = torch.zeros((2, 16), dtype=torch.int64)
    zero[1, 5] = 6
    qzeros = _pack_along_n(zero, (0, 2, 4, 6, 1, 3, 5, 7))
    repacked, zeros = awq_to_gptq_v2(qweight, qzeros)
    expected = torch.zeros((2, 16), dtype=torch.int32)
    expected[1, 13] = 9 << 12
    assert torch.equal(repacked, expected)
    expected_zeros = torch.zeros((2, 2), dtype=torch.int32)
    expected_zeros[1, 0] = 6 << 20
    assert torch.equal(zeros, expected_zeros)


def test_repack_reads_strided_words():
    """Catches a repack that assumes contiguous input: a column-sliced qweight gives the same words as its copy."""
    generator = torch.Generator().manual_seed(3)
    qweight, _, qzeros = _int4_weights(64, 256, 64, "awq", generator, torch.float16)
    wide = torch.zeros((qweight.shape[0], 3 * qweight.shape[1]), dtype=torch.int32)
    wide[:, ::3] = qweight
    strided = wide[:, ::3]
    assert not strided.is_contiguous()
    assert all(torch.equal(a, b) for a, b in zip(awq_to_gptq_v2(strided, qzeros), awq_to_gptq_v2(qweight, qzeros)))


@pytest.mark.parametrize("m", [1, 7, 16])
def test_public_op_gives_the_awq_result_on_repacked_weights(m):
    """Catches gemm.w4a16_mm reading "gptq_v2" zeros with the v1 offset (every output off by one zero times
    the scale) in whichever row dispatch picks here: the output on repacked weights equals the float64 oracle
    of the AWQ weights within the op's fp32 tolerance, and equals the AWQ call's output from the reference."""
    import rapid_llm.kernels as kernels
    from conformance.tolerances import assert_within_tolerance

    generator = torch.Generator().manual_seed(m)
    qweight, scales, qzeros = _int4_weights(48, 256, 128, "awq", generator, torch.float16, False, True)
    x = torch.randn((m, 256), generator=generator).half()
    repacked, zeros = awq_to_gptq_v2(qweight, qzeros)
    got = kernels.w4a16_mm(x, repacked, scales, zeros, 128, "gptq_v2")
    want = w4a16_mm_oracle(x, qweight, scales, qzeros, 128, "awq")
    assert_within_tolerance(
        "gemm.w4a16_mm", "fp16", 0, got, want, describe="public w4a16_mm on awq_to_gptq_v2 weights vs the AWQ oracle"
    )


@pytest.mark.parametrize(
    "qweight, qzeros, argument, expected",
    [
        (torch.zeros((8, 2), dtype=torch.int64), torch.zeros((1, 2), dtype=torch.int32), "qweight", "int32"),
        (torch.zeros(16, dtype=torch.int32), torch.zeros((1, 2), dtype=torch.int32), "qweight", "2-d"),
        (torch.zeros((12, 2), dtype=torch.int32), torch.zeros((1, 2), dtype=torch.int32), "qweight", "multiple of 8"),
        (torch.zeros((16, 2), dtype=torch.int32), torch.zeros((1, 3), dtype=torch.int32), "qzeros", "N/8 = 2"),
        (torch.zeros((16, 2), dtype=torch.int32), torch.zeros((3, 2), dtype=torch.int32), "qzeros", "dividing K"),
        (torch.zeros((16, 2), dtype=torch.int32), [[0, 0]], "qzeros", "torch.Tensor"),
    ],
    ids=["int64_words", "one_dim", "k_12", "zeros_columns", "zeros_rows", "zeros_list"],
)
def test_bad_awq_words_are_named(qweight, qzeros, argument, expected):
    """Catches a repack that silently reshapes wrong input (int64 words, K not a multiple of 8, zeros for
    another N or group count) into a wrong checkpoint: the error names the function, the argument and what
    was expected."""
    with pytest.raises(OpInputError) as error:
        awq_to_gptq_v2(qweight, qzeros)
    message = str(error.value)
    assert "gemm.awq_to_gptq_v2" in message and argument in message and expected in message, message
