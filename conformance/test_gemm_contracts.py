"""The gemm family's contracts: bad input, value preconditions, the layout tags that gate DeepGEMM.

Bad input runs against a PlannedOp of every row that runs here (the
reference on the CPU; DeepGEMM rows on an sm90 GPU with the library) and the
public functions: each must raise OpInputError naming the op, the argument
and the expectation before any kernel runs. Value preconditions (group ids,
the aligned-block rule, masked_m bounds) are checked for CPU tensors always
and on CUDA under RAPID_LLM_CHECK_BOUNDS=1; `value_checks` forces either
path. The layout tags are what keeps arguments DeepGEMM's TMA cannot read
away from it: dispatch is pure, so those tests need no GPU.
"""

from __future__ import annotations

import math

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import loadable_rows, torch_device
from rapid_llm.kernels.dispatcher import Device, Libraries, NoEligibleKernel, dispatch
from rapid_llm.kernels.ops.checks import OpInputError, value_checks
from rapid_llm.kernels.ops.gemm import FP8_BLOCK_MM, FP8_GROUPED_MM_CONTIGUOUS, FP8_GROUPED_MM_MASKED, FP8_MM
from rapid_llm.kernels.ops.gemm.checks import (
    check_fp8_block_mm,
    check_fp8_grouped_mm_contiguous,
    check_fp8_grouped_mm_masked,
    check_fp8_mm,
)

DEVICE = torch_device()
FP8 = torch.float8_e4m3fn
SM90_WITH_DEEP_GEMM = {"device": Device.parse("cuda:sm90"), "libs": Libraries({"deep_gemm": "2.5.0"})}


def _rows(op, public):
    return [pytest.param(fn, id=name) for name, fn in loadable_rows(op, "fp8_e4m3")] + [
        pytest.param(public, id="public")
    ]


def _fp8(*shape, generator=None):
    generator = generator or torch.Generator().manual_seed(sum(shape))
    return (torch.randn(shape, generator=generator) * 8).to(FP8).to(DEVICE)


def _scales(*shape):
    return (torch.rand(shape, generator=torch.Generator().manual_seed(3)) + 0.5).div(448).to(DEVICE)


def _block_mm_args(m=4, n=256, k=256):
    return _fp8(m, k), _scales(m, k // 128), _fp8(n, k), _scales(math.ceil(n / 128), k // 128)


def _contiguous_args(ids, groups=2, n=128, k=256):
    ids = torch.tensor(ids, dtype=torch.int32)
    m = ids.shape[0]
    return (
        _fp8(m, k),
        _scales(m, k // 128),
        _fp8(groups, n, k),
        _scales(groups, math.ceil(n / 128), k // 128),
        ids.to(DEVICE),
    )


def _blocks(*blocks):
    """Group ids of 128-row blocks, each (group, rows of it) followed by padding (-1)."""
    ids = []
    for group, used in blocks:
        ids += [group] * used + [-1] * (128 - used)
    return ids


def _masked_args(masked_m=(3, 0), max_m=128, n=128, k=256):
    groups = len(masked_m)
    return (
        _fp8(groups, max_m, k),
        _scales(groups, max_m, k // 128),
        _fp8(groups, n, k),
        _scales(groups, math.ceil(n / 128), k // 128),
        torch.tensor(masked_m, dtype=torch.int32).to(DEVICE),
        64,
    )


def _expect(info, op, argument, words):
    error = info.value
    assert error.op == op and error.argument == argument, f"{error.op}/{error.argument}: {error}"
    for word in words:
        assert word in str(error), f"{word!r} missing from: {error}"


# ---------------------------------------------------------------------------
# gemm.fp8_block_mm
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fn", _rows(FP8_BLOCK_MM, kernels.fp8_block_mm))
class TestBlockMmBadInput:
    def test_bf16_a_is_rejected_not_read_as_fp8(self, fn):
        """Catches bf16 activations reaching a kernel that reads fp8 bytes (a silent wrong answer)."""
        a, a_scale, b, b_scale = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a.float().bfloat16(), a_scale, b, b_scale)
        _expect(info, FP8_BLOCK_MM, "a", ["float8_e4m3fn", "bfloat16"])

    def test_k_not_a_multiple_of_128_is_rejected(self, fn):
        """Catches a K tail that no 1x128 scale covers (DeepGEMM would read scales past the end)."""
        with pytest.raises(OpInputError) as info:
            fn(_fp8(4, 192), _scales(4, 2), _fp8(128, 192), _scales(1, 2))
        _expect(info, FP8_BLOCK_MM, "a", ["multiple of 128", "[4, 192]"])

    def test_per_token_scales_are_rejected(self, fn):
        """Catches a per-token [M, 1] scale passed where per-group scales are read (one scale per 128 of K)."""
        a, _, b, b_scale = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, _scales(4, 1), b, b_scale)
        _expect(info, FP8_BLOCK_MM, "a_scale", ["[4, 2]", "[4, 1]"])

    def test_bf16_scales_are_rejected(self, fn):
        a, a_scale, b, b_scale = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale.bfloat16(), b, b_scale)
        _expect(info, FP8_BLOCK_MM, "a_scale", ["torch.float32", "bfloat16"])

    def test_b_scale_without_the_n_tail_block_is_rejected(self, fn):
        """Catches floor(N / 128) weight-scale rows: the last N % 128 rows of b would have no scale."""
        a, a_scale, _, _ = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, _fp8(200, 256), _scales(1, 2))
        _expect(info, FP8_BLOCK_MM, "b_scale", ["[2, 2]", "[1, 2]"])

    def test_b_of_another_k_is_rejected(self, fn):
        a, a_scale, _, _ = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, _fp8(128, 384), _scales(1, 3))
        _expect(info, FP8_BLOCK_MM, "b", ["K = 256", "[128, 384]"])

    def test_fp32_out_is_rejected(self, fn):
        """Catches an fp32 out= written with bf16 stores (half its bytes, the rest garbage)."""
        args = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(*args, torch.empty(4, 256, device=DEVICE))
        _expect(info, FP8_BLOCK_MM, "out", ["bfloat16", "float32"])

    def test_out_of_another_shape_is_rejected(self, fn):
        args = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(*args, torch.empty(4, 128, dtype=torch.bfloat16, device=DEVICE))
        _expect(info, FP8_BLOCK_MM, "out", ["[4, 256]", "[4, 128]"])

    def test_out_sharing_memory_with_a_is_rejected(self, fn):
        """Catches out= aliasing a: rows of a read after the output overwrote them."""
        out = torch.empty(4, 256, dtype=torch.bfloat16, device=DEVICE)
        a = out.view(FP8)[:, :256]  # the same bytes seen as fp8 [4, 512], K = 256 of them
        _, a_scale, b, b_scale = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, out)
        _expect(info, FP8_BLOCK_MM, "out", ["overlapping 'a'"])

    def test_out_sharing_memory_with_b_scale_is_rejected(self, fn):
        out = torch.empty(4, 256, dtype=torch.bfloat16, device=DEVICE)
        a, a_scale, b, _ = _block_mm_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, out.view(torch.float32)[:2, :2], out)
        _expect(info, FP8_BLOCK_MM, "out", ["overlapping 'b_scale'"])


def test_public_fp8_block_mm_is_the_dequantized_product():
    """Catches the public function routing to a row that computes another product (scales transposed,
    weight not transposed, the N tail block's scale skipped): N = 200 has a half-filled last block."""
    a, a_scale, b, b_scale = _block_mm_args(m=3, n=200)
    a64 = a.double() * a_scale.double().repeat_interleave(128, 1)
    b64 = b.double() * b_scale.double().repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)
    torch.testing.assert_close(
        kernels.fp8_block_mm(a, a_scale, b, b_scale).double(), a64 @ b64.T, atol=2**-7, rtol=2**-7
    )


# ---------------------------------------------------------------------------
# gemm.fp8_mm
# ---------------------------------------------------------------------------


def _fp8_mm_args(m=4, n=32, k=64):
    """a [m, k], per-token a_scale [m, 1], b [n, k], per-channel b_scale [n, 1]."""
    return _fp8(m, k), _scales(m, 1), _fp8(n, k), _scales(n, 1)


@pytest.mark.parametrize("fn", _rows(FP8_MM, kernels.fp8_mm))
class TestFp8MmBadInput:
    def _rejects(self, fn, args, argument, words):
        with pytest.raises(OpInputError) as info:
            fn(*args)
        _expect(info, FP8_MM, argument, words)

    def test_bf16_a_is_rejected_not_read_as_fp8(self, fn):
        """Catches bf16 activations reaching a kernel that reads fp8 bytes (a silent wrong answer)."""
        a, a_scale, b, b_scale = _fp8_mm_args()
        self._rejects(fn, (a.float().bfloat16(), a_scale, b, b_scale), "a", ["float8_e4m3fn", "bfloat16"])

    def test_e5m2_weights_are_rejected(self, fn):
        """Catches e5m2 weight bytes decoded as e4m3 (another exponent split: every value wrong)."""
        a, a_scale, b, b_scale = _fp8_mm_args()
        self._rejects(fn, (a, a_scale, b.float().to(torch.float8_e5m2), b_scale), "b", ["float8_e4m3fn", "e5m2"])

    def test_three_dimensional_a_is_rejected(self, fn):
        """Catches [B, T, K] activations read as [B, K] rows (the contract takes [M, K])."""
        _, _, b, b_scale = _fp8_mm_args()
        self._rejects(fn, (_fp8(2, 2, 64), _scales(4, 1), b, b_scale), "a", ["[M, K]", "[2, 2, 64]"])

    @pytest.mark.parametrize("shape", [(1, 4), (4,), (4, 2), (3, 1)])
    def test_a_scale_of_another_shape_is_rejected(self, fn, shape):
        """Catches [1, M] (transposed) per-token scales, a flat [M] scale (ambiguous with per-tensor at M = 1),
        per-group [M, 2] scales of fp8_block_mm, and another batch's [M', 1] scales."""
        a, _, b, b_scale = _fp8_mm_args()
        self._rejects(fn, (a, _scales(*shape), b, b_scale), "a_scale", ["[4, 1]", "per tensor", str(list(shape))])

    def test_b_scale_as_one_row_is_rejected(self, fn):
        """Catches per-channel scales [1, N] (one layout per meaning: the checkpoint's [N, 1])."""
        a, a_scale, b, _ = _fp8_mm_args()
        self._rejects(fn, (a, a_scale, b, _scales(1, 32)), "b_scale", ["[32, 1]", "[1, 32]"])

    def test_block_scales_are_rejected(self, fn):
        """Catches fp8_block_mm's [ceil(N/128), K/128] weight scales passed to the channel-scaled op."""
        a, a_scale, b, _ = _fp8_mm_args(n=256, k=256)
        self._rejects(fn, (a, a_scale, b, _scales(2, 2)), "b_scale", ["[256, 1]", "[2, 2]"])

    def test_bf16_scales_are_rejected(self, fn):
        """Catches bf16 scales read as fp32 (pairs of them as one value)."""
        a, a_scale, b, b_scale = _fp8_mm_args()
        self._rejects(fn, (a, a_scale, b, b_scale.bfloat16()), "b_scale", ["torch.float32", "bfloat16"])

    def test_b_of_another_k_is_rejected(self, fn):
        a, a_scale, _, b_scale = _fp8_mm_args()
        self._rejects(fn, (a, a_scale, _fp8(32, 80), b_scale), "b", ["[N, 64]", "[32, 80]"])

    def test_zero_rows_of_b_are_rejected(self, fn):
        """Catches N = 0 reaching a kernel whose clamped column index (N - 1) is -1: a read before b."""
        a, a_scale, _, _ = _fp8_mm_args()
        self._rejects(fn, (a, a_scale, _fp8(0, 64), _scales(1)), "b", ["N >= 1", "[0, 64]"])

    @pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
    def test_other_output_dtypes_are_rejected(self, fn, out_dtype):
        """Catches an fp16/fp32 out_dtype served by a row that writes bf16 only (torch's row-wise kernel)."""
        self._rejects(fn, (*_fp8_mm_args(), out_dtype), "out_dtype", ["torch.bfloat16", str(out_dtype)])

    def test_bias_of_another_dtype_is_rejected(self, fn):
        """Catches an fp32 bias read with bf16 loads (wrong values, no error)."""
        bias = torch.zeros(32, device=DEVICE)
        self._rejects(fn, (*_fp8_mm_args(), torch.bfloat16, bias), "bias", ["torch.bfloat16", "float32"])

    def test_bias_of_wrong_length_is_rejected(self, fn):
        bias = torch.zeros(33, dtype=torch.bfloat16, device=DEVICE)
        self._rejects(fn, (*_fp8_mm_args(), torch.bfloat16, bias), "bias", ["[32]", "[33]"])

    def test_zero_k_is_rejected(self, fn):
        """Catches K = 0 passing silently (an output of zeros or of the bias alone)."""
        self._rejects(fn, (_fp8(4, 0), _scales(4, 1), _fp8(32, 0), _scales(32, 1)), "a", ["K >= 1", "[4, 0]"])


def test_public_fp8_mm_is_the_scaled_product():
    """Catches the public function routing to a row that computes another product (scales of a applied to
    columns, b's scales to rows, the bias skipped) or mishandles a per-tensor scale of one side."""
    a, a_scale, b, b_scale = _fp8_mm_args(m=3, n=48, k=96)
    bias = torch.randn(48, generator=torch.Generator().manual_seed(5)).bfloat16().to(DEVICE)
    for scale_a in (a_scale, a_scale[:1, 0]):
        want = (a.double() * scale_a.double().reshape(-1, 1)) @ (b.double() * b_scale.double()).T + bias.double()
        got = kernels.fp8_mm(a, scale_a, b, b_scale, torch.bfloat16, bias).double()
        torch.testing.assert_close(got, want, atol=2**-7, rtol=2**-7)


def test_per_token_quantizer_output_reaches_every_fp8_mm_row():
    """Catches quantization.per_token_fp8's (q, scale [T, 1]) and a contiguous weight missing a tag a row
    needs (a:tma, b:tma, a:dense, b:dense, bias:unit): the engine's standard call would never reach cuBLAS or the natives."""
    q, scale = kernels.per_token_fp8(torch.randn(5, 256, device=DEVICE))
    _, _, b, b_scale = _fp8_mm_args(n=256, k=256)
    _, tags, _ = check_fp8_mm(
        q, scale, b, b_scale, torch.bfloat16, torch.zeros(256, dtype=torch.bfloat16, device=DEVICE)
    )
    assert {"a:tma", "b:tma", "a:dense", "b:dense", "bias:unit"} <= tags, tags


def test_strided_fp8_mm_operands_never_reach_scaled_mm():
    """Catches rows of a wider buffer (16-byte-aligned, so a:tma holds) handed to torch._scaled_mm, whose
    row-wise kernel assumes packed [M, K] / [N, K] strides: the rows past the first read from the wrong
    bytes. The native rows read any row stride and still get them."""
    a, a_scale, b, b_scale = _fp8_mm_args(k=64)
    wide = torch.zeros(4, 128, dtype=torch.uint8, device=DEVICE).view(FP8)
    wide[:, :64] = a
    _, tags, dims = check_fp8_mm(wide[:, :64], a_scale, b, b_scale)
    assert "a:tma" in tags and "a:dense" not in tags and "b:dense" in tags, tags
    with pytest.raises(NoEligibleKernel) as info:
        dispatch(
            FP8_MM,
            dtype="fp8_e4m3",
            shape=dict(dims),
            layout=tags,
            force="cublas/scaled_mm",
            device=Device.parse("cuda:sm90"),
            libs=Libraries({}),
        )
    assert "a:dense" in str(info.value)


# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_contiguous
# ---------------------------------------------------------------------------

CONTIGUOUS_ROWS = _rows(FP8_GROUPED_MM_CONTIGUOUS, kernels.fp8_grouped_mm_contiguous)


@pytest.mark.parametrize("fn", CONTIGUOUS_ROWS)
class TestContiguousBadInput:
    def test_rows_not_a_multiple_of_128_are_rejected(self, fn):
        """Catches an unpadded token count: DeepGEMM reads group ids of whole 128-row blocks past the end."""
        with pytest.raises(OpInputError) as info:
            fn(*_contiguous_args([0] * 100))
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "a", ["multiple of 128", "[100, 256]"])

    def test_int64_group_ids_are_rejected(self, fn):
        """Catches int64 ids read as int32 pairs by the kernel (every other id would be 0)."""
        a, a_scale, b, b_scale, ids = _contiguous_args(_blocks((0, 128)))
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, ids.long())
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "m_indices", ["torch.int32", "torch.int64"])

    def test_group_ids_of_another_length_are_rejected(self, fn):
        a, a_scale, b, b_scale, ids = _contiguous_args(_blocks((0, 128), (1, 3)))
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, ids[:128])
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "m_indices", ["[256]", "[128]"])

    def test_2d_weights_are_rejected(self, fn):
        a, a_scale, b, b_scale, ids = _contiguous_args(_blocks((0, 128)))
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b[0], b_scale[0], ids)
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "b", ["[G, N, K]"])

    def test_weight_scales_of_other_groups_are_rejected(self, fn):
        """Catches b_scale of another expert count than b (group g would read group g's scales of another layer)."""
        a, a_scale, b, b_scale, ids = _contiguous_args(_blocks((0, 128)))
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale[:1], ids)
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "b_scale", ["[2, 1, 2]", "[1, 1, 2]"])

    def test_out_sharing_memory_with_group_ids_is_rejected(self, fn):
        out = torch.empty(128, 128, dtype=torch.bfloat16, device=DEVICE)
        a, a_scale, b, b_scale, _ = _contiguous_args(_blocks((0, 128)))
        ids = out.view(torch.int32).reshape(-1)[:128]
        ids.zero_()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, ids, out)
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "out", ["overlapping 'm_indices'"])

    def test_group_id_past_the_last_group_raises_when_checked(self, fn):
        """Catches group id G reaching DeepGEMM, which reads that group's weight scales past the end."""
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(*_contiguous_args(_blocks((0, 128), (2, 5))))
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "m_indices", ["G = 2", "group id 2 at row 128"])

    def test_group_row_after_padding_in_a_block_raises_when_checked(self, fn):
        """Catches a block [g x 64, -1, g ...]: DeepGEMM decides per 64 rows from the first id whether to
        compute, so rows of g after padding may be skipped."""
        ids = _blocks((1, 128), (0, 70))
        ids[128 + 40] = -1
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(*_contiguous_args(ids))
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "m_indices", ["row 169 of group 0 after a padding row", "block 1"])

    def test_two_groups_in_one_block_raise_when_checked(self, fn):
        """Catches unaligned groups: DeepGEMM multiplies a whole 128-row block by its first row's group."""
        ids = _blocks((0, 128), (0, 128))
        ids[200:256] = [1] * 56
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(*_contiguous_args(ids))
        _expect(info, FP8_GROUPED_MM_CONTIGUOUS, "m_indices", ["row 200 of group 1", "first row is of group 0"])

    def test_padding_blocks_and_padded_groups_are_accepted(self, fn):
        """Catches a check stricter than the contract: the layout engines build (groups padded to 128 rows,
        whole blocks of padding, ids of any negative value as padding) must pass."""
        ids = _blocks((1, 3), (-1, 0), (0, 128), (1, 128))
        ids[3:128] = [-7] * 125
        fn(*_contiguous_args(ids))


@pytest.mark.parametrize("fn", CONTIGUOUS_ROWS)
def test_unchecked_bad_group_ids_leave_the_valid_rows_right(fn):
    """Catches a row that crashes (or corrupts other rows) on an out-of-range id when checks are off: the
    contract makes only that row's output unspecified."""
    good = _contiguous_args(_blocks((0, 5), (1, 128)))
    with value_checks(False):
        bad_ids = good[4].clone()
        bad_ids[:5] = 7  # the first block's group is past the end
        out = fn(*good[:4], bad_ids)
        expected = fn(*good)  # the same row on valid ids (the public op may pick a row that sums differently)
    torch.testing.assert_close(out[128:].float(), expected[128:].float(), atol=0, rtol=0)


# ---------------------------------------------------------------------------
# gemm.fp8_grouped_mm_masked
# ---------------------------------------------------------------------------

MASKED_ROWS = _rows(FP8_GROUPED_MM_MASKED, kernels.fp8_grouped_mm_masked)


@pytest.mark.parametrize("fn", MASKED_ROWS)
class TestMaskedBadInput:
    def test_masked_m_past_max_m_raises_when_checked(self, fn):
        """Catches a row count past the buffer: DeepGEMM would store into the next group's rows."""
        a, a_scale, b, b_scale, _, expected_m = _masked_args()
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, torch.tensor([3, 129], dtype=torch.int32, device=DEVICE), expected_m)
        _expect(info, FP8_GROUPED_MM_MASKED, "masked_m", ["[0, M_max = 128]", "129"])

    def test_negative_masked_m_raises_when_checked(self, fn):
        a, a_scale, b, b_scale, _, expected_m = _masked_args()
        with value_checks(True), pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, torch.tensor([-1, 2], dtype=torch.int32, device=DEVICE), expected_m)
        _expect(info, FP8_GROUPED_MM_MASKED, "masked_m", ["-1"])

    def test_masked_m_of_another_length_is_rejected(self, fn):
        a, a_scale, b, b_scale, masked_m, expected_m = _masked_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, masked_m[:1], expected_m)
        _expect(info, FP8_GROUPED_MM_MASKED, "masked_m", ["[2]", "[1]"])

    @pytest.mark.parametrize("expected_m", [0, True, 64.0])
    def test_expected_m_not_a_positive_int_is_rejected(self, fn, expected_m):
        """Catches expected_m 0 (DeepGEMM asserts > 0 inside the kernel's host code) or a non-int hint."""
        a, a_scale, b, b_scale, masked_m, _ = _masked_args()
        with pytest.raises(OpInputError) as info:
            fn(a, a_scale, b, b_scale, masked_m, expected_m)
        _expect(info, FP8_GROUPED_MM_MASKED, "expected_m", ["positive int"])

    def test_activations_of_another_group_count_are_rejected(self, fn):
        a, a_scale, b, b_scale, masked_m, expected_m = _masked_args()
        with pytest.raises(OpInputError) as info:
            fn(a[:1], a_scale[:1], b, b_scale, masked_m, expected_m)
        _expect(info, FP8_GROUPED_MM_MASKED, "a", ["G = 2"])

    def test_2d_out_is_rejected(self, fn):
        args = _masked_args()
        with pytest.raises(OpInputError) as info:
            fn(*args, torch.empty(256, 128, dtype=torch.bfloat16, device=DEVICE))
        _expect(info, FP8_GROUPED_MM_MASKED, "out", ["[2, 128, 128]", "[256, 128]"])

    def test_zero_and_full_row_counts_are_accepted(self, fn):
        """Catches a check rejecting the bounds themselves (an idle expert, a full buffer)."""
        a, a_scale, b, b_scale, _, expected_m = _masked_args()
        fn(a, a_scale, b, b_scale, torch.tensor([0, 128], dtype=torch.int32, device=DEVICE), expected_m)


# ---------------------------------------------------------------------------
# Layout tags: what reaches DeepGEMM
# ---------------------------------------------------------------------------


def _deep_gemm_verdict(op, row, args, check, shape=None):
    """dispatch forcing a DeepGEMM row on a described sm90 machine with the tags the check reports."""
    _, layout, dims = check(*args)
    return dispatch(
        op,
        dtype="fp8_e4m3",
        shape=dict(dims) if shape is None else shape,
        layout=layout,
        force=row,
        **SM90_WITH_DEEP_GEMM,
    )


def test_quantizer_scales_and_contiguous_weights_reach_deep_gemm():
    """Catches the engine's standard layout (activations and column-major TMA-aligned scales from
    quantization.per_token_group_fp8, contiguous weights) being routed away from DeepGEMM."""
    q, scale = kernels.per_token_group_fp8(torch.randn(5, 256, device=DEVICE), 128, True)
    _, _, b, b_scale = _block_mm_args(n=256)
    selection = _deep_gemm_verdict(FP8_BLOCK_MM, "deep_gemm/fp8_gemm_nt", (q, scale, b, b_scale), check_fp8_block_mm)
    assert selection.row.name == "deep_gemm/fp8_gemm_nt"


def test_rows_not_16_byte_aligned_never_reach_deep_gemm():
    """Catches a row stride TMA cannot describe (K + 8 bytes) handed to DeepGEMM: its host assert (or a
    wrong TMA view) instead of the reference."""
    a, a_scale, b, b_scale = _block_mm_args()
    wide = torch.zeros(4, 264, dtype=torch.uint8, device=DEVICE).view(FP8)
    wide[:, :256] = a
    with pytest.raises(NoEligibleKernel) as info:
        _deep_gemm_verdict(
            FP8_BLOCK_MM, "deep_gemm/fp8_gemm_nt", (wide[:, :256], a_scale, b, b_scale), check_fp8_block_mm
        )
    assert "a:tma" in str(info.value)


@pytest.mark.parametrize("layout, dense", [("column_major", True), ("gapped", False)])
def test_weight_scales_reach_deep_gemm_only_without_gaps(layout, dense):
    """Catches gapped weight scales handed to DeepGEMM, which reads them as a dense [N/128, K/128] block."""
    a, a_scale, b, b_scale = _block_mm_args(n=256, k=512)
    if layout == "column_major":
        b_scale = b_scale.t().contiguous().t()
    else:
        b_scale = torch.cat([b_scale, b_scale], dim=1)[:, :4]
    _, tags, _ = check_fp8_block_mm(a, a_scale, b, b_scale)
    assert ("b_scale:dense" in tags) == dense


def test_strided_group_ids_never_reach_deep_gemm():
    """Catches every-other-element group ids read by DeepGEMM as if contiguous (ids of the wrong rows)."""
    a, a_scale, b, b_scale, ids = _contiguous_args(_blocks((0, 128)))
    strided = torch.full((256,), -1, dtype=torch.int32, device=DEVICE)
    strided[::2] = ids
    with pytest.raises(NoEligibleKernel) as info:
        _deep_gemm_verdict(
            FP8_GROUPED_MM_CONTIGUOUS,
            "deep_gemm/m_grouped_contiguous",
            (a, a_scale, b, b_scale, strided[::2]),
            check_fp8_grouped_mm_contiguous,
        )
    assert "m_indices:contiguous" in str(info.value)


def test_masked_buffers_not_a_multiple_of_128_rows_never_reach_deep_gemm():
    """Catches M_max = 64: DeepGEMM's 128-row output tiles of one group would spill into the next one."""
    args = _masked_args(masked_m=(64, 64), max_m=64)
    with pytest.raises(NoEligibleKernel) as info:
        _deep_gemm_verdict(FP8_GROUPED_MM_MASKED, "deep_gemm/m_grouped_masked", args, check_fp8_grouped_mm_masked)
    assert "max_m" in str(info.value)


def test_masked_activations_with_padded_rows_never_reach_deep_gemm():
    """Catches [G, M_max, K] activations whose groups are not packed: DeepGEMM views them as one
    [G * M_max, K] matrix (group g would start at the wrong row)."""
    a, a_scale, b, b_scale, masked_m, expected_m = _masked_args()
    wide = torch.zeros(2, 128, 384, dtype=torch.uint8, device=DEVICE).view(FP8)
    wide[..., :256] = a
    _, tags, _ = check_fp8_grouped_mm_masked(wide[..., :256], a_scale, b, b_scale, masked_m, expected_m)
    assert "a:tma" not in tags


# ---------------------------------------------------------------------------
# The accuracy the contract promises: one bf16 rounding + the fp8 MMA truncation term
# ---------------------------------------------------------------------------


def _emulated_fp8_mma(a, a_scale, b, b_scale, fraction_bits):
    """out [M, N] as a Hopper-like fp8 MMA computes it: per 32-wide k step, the products aligned to the
    step's largest and truncated (toward zero) to `fraction_bits` bits below it, summed exactly; the steps
    of a 128-block then scaled and added in float64 (DeepGEMM's promotion), rounded once to bf16."""
    from conformance.cases.gemm import _rows64, _weight64

    products = _rows64(a, a_scale).unsqueeze(1) * _weight64(b, b_scale).unsqueeze(0)  # [M, N, K]
    steps = products.unflatten(-1, (-1, 32))
    largest = steps.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    grid = torch.exp2(torch.floor(torch.log2(largest)) - fraction_bits)
    return (torch.trunc(steps / grid) * grid).sum((-1, -2)).to(torch.bfloat16)


def _outlier_inputs():
    from conformance.cases.gemm import _activations, _weights

    generator = torch.Generator().manual_seed(7)
    qa, sa = _activations((9, 256), generator, outlier=1e3)
    qb, sb = _weights((192, 256), generator)
    return qa, sa, qb, sb


def test_accuracy_bound_admits_fp8_tensor_core_truncation():
    # Catches a bound too tight for what the contract allows: an emulated 13-bit truncating MMA (one bit
    # below the ~14 DeepSeek-V3 reports for Hopper) on outlier-dominated groups must pass, although it
    # misses the bf16-step tolerance alone (the failure DeepGEMM showed on the H200).
    from conformance.cases.gemm import fp8_block_mm_oracle
    from conformance.tolerances import assert_within_tolerance

    args = _outlier_inputs()
    exact = fp8_block_mm_oracle(*args)
    emulated = _emulated_fp8_mma(*args, fraction_bits=13)
    assert_within_tolerance(FP8_BLOCK_MM, "fp8_e4m3", 0, emulated, exact, args=args, describe="13-bit MMA")
    with pytest.raises(AssertionError):
        torch.testing.assert_close(emulated.float(), exact.float(), atol=2.0**-7, rtol=2.0**-7)


@pytest.mark.parametrize("fault", ["one_group_scale_doubled", "one_weight_block_scale_halved", "last_k_group_dropped"])
def test_accuracy_bound_still_catches_wrong_scales_and_groups(fault):
    # Catches a bound so loose that a row applying a wrong scale or skipping a K group would pass.
    from conformance.cases.gemm import _activations, _weights, fp8_block_mm_oracle
    from conformance.tolerances import assert_within_tolerance

    generator = torch.Generator().manual_seed(11)
    qa, sa = _activations((16, 384), generator)
    qb, sb = _weights((256, 384), generator)
    args = (qa, sa, qb, sb)
    exact = fp8_block_mm_oracle(*args)
    wrong_sa, wrong_sb, wrong_qa = sa.clone(), sb.clone(), qa.clone()
    if fault == "one_group_scale_doubled":
        wrong_sa[:, 1] *= 2
    elif fault == "one_weight_block_scale_halved":
        wrong_sb[1, 2] /= 2
    else:
        wrong_qa[:, 256:] = 0
    wrong = fp8_block_mm_oracle(wrong_qa, wrong_sa, qb, wrong_sb)
    with pytest.raises(AssertionError, match="accumulation bound"):
        assert_within_tolerance(FP8_BLOCK_MM, "fp8_e4m3", 0, wrong, exact, args=args, describe=fault)


def test_the_grouped_tolerance_bound_is_each_rows_own_groups_product():
    """Catches the contiguous grouped GEMM's accumulation bound charging a row another group's weights (it is
    computed one group at a time, so a 16384-row benchmark case no longer gathers 123 GiB of per-row weights)."""
    from conformance.cases.gemm import _rows64, _step_max, _weight64, fp8_grouped_mm_contiguous_bound

    generator = torch.Generator().manual_seed(5)
    m, n, k, groups = 6, 256, 256, 3
    a = torch.randn(m, k, generator=generator).to(torch.float8_e4m3fn)
    a_scale = torch.rand(m, k // 128, generator=generator) + 0.5
    b = torch.randn(groups, n, k, generator=generator).to(torch.float8_e4m3fn)
    b_scale = torch.rand(groups, n // 128, k // 128, generator=generator) + 0.5
    m_indices = torch.tensor([2, 2, 0, -1, 1, 0], dtype=torch.int32)
    bound = fp8_grouped_mm_contiguous_bound(a, a_scale, b, b_scale, m_indices)
    rows, weights = _step_max(_rows64(a, a_scale)), _step_max(_weight64(b, b_scale))
    for row, group in enumerate(m_indices.tolist()):
        expected = 2.0**-7 * (weights[group] @ rows[row]) if group >= 0 else torch.zeros(n, dtype=torch.float64)
        torch.testing.assert_close(bound[row], expected, rtol=1e-12, atol=0)
